"""The compile cache (toolkit.cache) seen from compile_model: a hit gives what a fresh compile gives (and what
onnxruntime computes), a hit's stage serves recompile_precision, a corrupted entry is warned about, rebuilt and
rewritten, two processes share one folder, and the force / disable modes."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.cache import keys, store
from toolkit.cache.store import LAYOUT, unpack
from toolkit.compiler.pipeline import compile_model, recompile_precision
from toolkit.config import Config
from toolkit.runtime import kernels
from toolkit.runtime.npu import NpuRuntime

RNG = np.random.default_rng(7)
W1 = RNG.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
B1 = RNG.normal(0, 0.1, (4,)).astype(np.float32)
W2 = RNG.normal(0, 0.3, (4, 4, 1, 1)).astype(np.float32)
X = RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)


def make_model(w1=W1, w2=W2, alpha=0.2, dil2=(1, 1)) -> onnx.ModelProto:
    """x -> Conv(w1 initializer, pads 1) -> Relu -> Conv(w2 from a Constant node, 1x1) -> HardSigmoid -> y."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Constant", [], ["w2"], name="w2_const", value=numpy_helper.from_array(w2, "w2")),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", dilations=list(dil2)),
             helper.make_node("HardSigmoid", ["c2"], ["y"], name="hsig", alpha=alpha)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(B1, "b1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cfg(folder, **kw) -> Config:
    base = {"precision_mode": "force_fp16", "op_compiler_cache_mode": "enable", "op_compiler_cache_dir": str(folder)}
    base.update(kw)
    return Config(**base)


def build(model, config, shape=(1, 3, 8, 8)):
    """(CompileResult, NpuRuntime) as a new process would get them (in-memory kernel sessions dropped)."""
    kernels._SESSIONS.clear()
    cr = compile_model(model, config, input_shapes={"x": shape})
    rt = NpuRuntime(cr)
    store.flush()
    return cr, rt


def n_sessions(rt) -> int:
    return sum(1 for ek in rt.kernels if ek.session is not None)


def plan_dict(cr) -> dict:
    d = cr.plan.to_dict()
    d["config"] = {k: v for k, v in d["config"].items() if k not in keys.NON_CODE_FIELDS}
    return d


def run(rt, shape=(1, 3, 8, 8)):
    x = np.resize(X, shape).astype(np.float32)
    return rt.run({"x": x}).outputs["y"]


def fresh(model, config, shape=(1, 3, 8, 8)):
    """A compile with the cache disabled (what every cached result must equal)."""
    return build(model, dataclasses.replace(config, op_compiler_cache_mode="disable"), shape)


# ---------------------------------------------------------------------------------------------- hits
def test_warm_compile_hits_and_equals_a_fresh_compile(tmp_path):
    c = cfg(tmp_path)
    cold, rt_cold = build(make_model(), c)
    assert cold.cache["status"] == "miss"
    assert cold.cache["kernel_misses"] == n_sessions(rt_cold) > 0
    warm, rt_warm = build(make_model(), c)
    assert warm.cache["status"] == "hit" and warm.cache["key"] == cold.cache["key"]
    assert (warm.cache["kernel_hits"], warm.cache["kernel_misses"]) == (n_sessions(rt_warm), 0)
    ref, rt_ref = fresh(make_model(), c)
    assert plan_dict(warm) == plan_dict(ref)
    assert onnx.load_from_string(warm.model.SerializeToString()) == onnx.load_from_string(ref.model.SerializeToString())
    np.testing.assert_array_equal(run(rt_warm), run(rt_ref))
    assert any("compile entry hit" in ln for ln in warm.log_lines())
    assert any(f"kernels: {n_sessions(rt_warm)} hits, 0 misses" in ln for ln in warm.log_lines())


def test_fp32_hit_matches_onnxruntime(tmp_path):
    """The numbers of a cached compile, against onnxruntime on the original model (independent)."""
    c = cfg(tmp_path, precision_mode="force_fp32")
    build(make_model(), c)
    warm, rt = build(make_model(), c)
    assert warm.cache["status"] == "hit"
    want = ort.InferenceSession(make_model().SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": X})[0]
    np.testing.assert_allclose(run(rt), want, rtol=1e-5, atol=1e-6)


def test_stage_of_a_hit_serves_recompile_precision(tmp_path):
    c = cfg(tmp_path)
    build(make_model(), c)
    warm, _ = build(make_model(), c)
    fp32 = dataclasses.replace(c, precision_mode="force_fp32")
    again = recompile_precision(warm, fp32)
    ref = recompile_precision(fresh(make_model(), c)[0], fp32)
    assert [k.precision for k in again.plan.kernels] == [k.precision for k in ref.plan.kernels] == \
        ["fp32"] * len(ref.plan.kernels)
    np.testing.assert_array_equal(run(NpuRuntime(again)), run(NpuRuntime(ref)))


# ---------------------------------------------------------------------------------------------- corruption
def _entry(tmp_path, ns) -> list:
    return sorted((tmp_path / LAYOUT / ns).iterdir())


@pytest.mark.parametrize("damage", ["truncate", "flip"])
@pytest.mark.parametrize("ns", ["compile", "bundle"])
def test_corrupted_entry_is_warned_rebuilt_and_rewritten(tmp_path, caplog, damage, ns):
    c = cfg(tmp_path)
    _, rt_cold = build(make_model(), c)
    path = _entry(tmp_path, ns)[0]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate"
                     else data[:-7] + bytes([data[-7] ^ 0x40]) + data[-6:])
    with pytest.raises(store.CorruptEntry):
        unpack(path.read_bytes())
    with caplog.at_level(logging.WARNING, logger="npuscope.cache"):
        got, rt = build(make_model(), c)
    assert any("corrupted" in r.getMessage() and path.name in r.getMessage() for r in caplog.records)
    assert got.cache["status"] == ("miss" if ns == "compile" else "hit")
    np.testing.assert_array_equal(run(rt), run(rt_cold))
    meta, _ = unpack(path.read_bytes())  # rebuilt and written again, whole
    assert meta


# ---------------------------------------------------------------------------------------------- concurrency
WORKER = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np, onnx
    from toolkit.compiler.pipeline import compile_model
    from toolkit.config import Config
    from toolkit.runtime.npu import NpuRuntime
    model = onnx.load(sys.argv[1])
    c = Config(precision_mode="force_fp16", op_compiler_cache_mode="enable", op_compiler_cache_dir=sys.argv[2])
    x = np.load(sys.argv[3])
    outs = []
    for _ in range(3):
        cr = compile_model(model, c, input_shapes={"x": x.shape})
        y = NpuRuntime(cr).run({"x": x}).outputs["y"]
        outs.append(hashlib.sha256(y.tobytes()).hexdigest())
    print(json.dumps({"status": cr.cache["status"], "out": outs}))
""")


def test_two_processes_compile_into_one_cache(tmp_path):
    folder = tmp_path / "cache"
    onnx.save(make_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", X)
    cmd = [sys.executable, "-c", WORKER, str(tmp_path / "m.onnx"), str(folder), str(tmp_path / "x.npy")]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    for ns in ("compile", "bundle", "kernel", "family"):
        for f in _entry(folder, ns):
            assert not f.name.startswith(".tmp-")
            unpack(f.read_bytes())  # every entry whole and valid
    c = cfg(folder)
    got, rt = build(make_model(), c)
    assert got.cache["status"] == "hit"
    import hashlib

    want = hashlib.sha256(run(fresh(make_model(), c)[1]).tobytes()).hexdigest()
    assert hashlib.sha256(run(rt).tobytes()).hexdigest() == want
    assert all(o == want for r in results for o in r["out"])


def test_force_rebuilds_and_disable_touches_nothing(tmp_path):
    c = cfg(tmp_path)
    build(make_model(), c)
    forced, rt = build(make_model(), dataclasses.replace(c, op_compiler_cache_mode="force"))
    assert forced.cache["status"] == "miss" and forced.cache["kernel_misses"] == n_sessions(rt)
    empty = tmp_path / "off"
    off, _ = build(make_model(), cfg(empty, op_compiler_cache_mode="disable"))
    assert off.cache is None and not empty.exists()
    assert "compile_cache" not in [p.name for p in off.passes]
