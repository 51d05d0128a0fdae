"""Patched cache hits (toolkit/cache/patch.py): a value edit of a patchable op rebuilds one kernel; an edit
outside the patchable ops recompiles and reuses the kernels."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.cache import keys, store
from toolkit.compiler.pipeline import compile_model
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


# ---------------------------------------------------------------------------------------------- one-node edits
#: a value edit that makes a weight overflow FP16 (and one that flushes every weight to zero) must give the
#: findings a fresh compile gives (only check_constants reads values after a value-only patch)
_OVER = W1.copy()
_OVER[0, 0, 0, 0] = 7e4


@pytest.mark.parametrize("edit", ["initializer", "constant_node", "conv_attribute", "fp16_overflow",
                                  "fp16_underflow", "overflow_fixed"])
def test_value_edit_is_patched_and_rebuilds_one_kernel(tmp_path, edit):
    c = cfg(tmp_path)
    build(make_model(w1=_OVER) if edit == "overflow_fixed" else make_model(), c)
    model = {"initializer": lambda: make_model(w1=W1 * 1.01), "constant_node": lambda: make_model(w2=W2 * 1.01),
             "conv_attribute": lambda: make_model(dil2=(2, 2)),  # 1x1 kernel: dilation keeps shapes
             "fp16_overflow": lambda: make_model(w1=_OVER), "fp16_underflow": lambda: make_model(w2=W2 * 1e-9),
             "overflow_fixed": lambda: make_model()}[edit]()
    got, rt = build(model, c)
    assert got.cache["status"] == "patched"
    assert (got.cache["kernel_hits"], got.cache["kernel_misses"]) == (n_sessions(rt) - 1, 1)
    ref, rt_ref = fresh(model, c)
    assert plan_dict(got) == plan_dict(ref)
    assert [f.to_dict() for f in got.findings] == [f.to_dict() for f in ref.findings]
    weights = {"w1": {"fp16_overflow": _OVER}.get(edit, W1 * 1.01 if edit == "initializer" else W1),
               "w2": {"fp16_underflow": W2 * 1e-9}.get(edit, W2 * 1.01 if edit == "constant_node" else W2)}
    with np.errstate(over="ignore"):  # expected from numpy: a value overflows or a non-zero value flushes to 0
        expected = {n for n, w in weights.items()
                    if np.isinf(w.astype(np.float16)).any() or ((w != 0) & (w.astype(np.float16) == 0)).any()}
    assert expected == {"fp16_overflow": {"w1"}, "fp16_underflow": {"w2"}}.get(edit, set())
    assert {f.subject for f in got.findings if f.kind == "fp16_constant"} == expected
    log = {p.name: p.log for p in got.passes}["check_constants"]
    assert log == {p.name: p.log for p in ref.passes}["check_constants"]
    assert onnx.load_from_string(got.model.SerializeToString()) == onnx.load_from_string(ref.model.SerializeToString())
    np.testing.assert_array_equal(run(rt), run(rt_ref))
    again, _ = build(model, c)  # the patched compile is an entry of its own
    assert again.cache["status"] == "hit"


def test_edit_outside_patchable_ops_recompiles_and_reuses_kernels(tmp_path):
    c = cfg(tmp_path)
    build(make_model(), c)
    got, rt = build(make_model(alpha=0.3), c)
    assert got.cache["status"] == "miss"
    assert got.cache["kernel_hits"] == n_sessions(rt) - 1 and got.cache["kernel_misses"] == 1
    np.testing.assert_array_equal(run(rt), run(fresh(make_model(alpha=0.3), c)[1]))
