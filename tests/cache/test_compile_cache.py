"""The compile cache (toolkit.cache) seen from compile_model: a hit gives what a fresh compile gives (and what
onnxruntime computes), a hit's stage serves recompile_precision, a corrupted entry is warned about, rebuilt and
rewritten, two processes share one folder, and the force / disable modes."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.cache.helpers import WORKER, X, _entry, build, cfg, fresh, make_model, n_sessions, plan_dict, run
from toolkit.cache import store
from toolkit.cache.store import unpack
from toolkit.compiler.pipeline import recompile_precision
from toolkit.engine import npu_runtime


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
    np.testing.assert_array_equal(run(npu_runtime(again)), run(npu_runtime(ref)))


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
