"""Issue 4 follow-up: the peer's FP32 set checked on the simulated NPU (bench/bench_tune.py), and the work tune
no longer repeats (one reference run per input, exact windowed percentile, metric subsets in comparisons).

Values are re-computed here with numpy / onnxruntime, never copied from our own output.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.faultkinds import builders as fk
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.compare.metrics import compare_tensors
from toolkit.config import Config
from toolkit.engine import Session, shapes_of
from toolkit.precision.ranges import RangeStats, percentile_linear
from toolkit.precision.sensitivity import compare_metrics
from toolkit.precision.tune import keep_config, tune

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

TARGET = "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2"
BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_tune.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_tune_under_test", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _ort(model, feed) -> dict:
    from toolkit.runtime.ort_env import session_options

    s = ort.InferenceSession(model.SerializeToString(), session_options(optimize=False),
                             providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


def _cos_mae(x, y) -> tuple[float, float]:
    """Cosine (zero-norm convention of the metric's docs: both zero → 1, one zero → 0) and max |x − y|."""
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    cos = float(x @ y / (nx * ny)) if nx and ny else float(nx == ny == 0)
    return cos, float(np.abs(x - y).max())


# ------------------------------------------------------------------ the peer's set on the simulated NPU
def test_keep_config_adds_each_name_once_after_the_configs_own():
    cfg = Config(precision_mode="force_fp16", keep_dtype=["a"])
    got = keep_config(cfg, ["b", "a", "c"])
    assert got.keep_dtype == ["a", "b", "c"] and cfg.keep_dtype == ["a"]
    assert got.precision_mode == "force_fp16"


def test_peer_set_checked_on_device_fails_where_the_npu_shows_the_fault():
    """RMSNorm whose square overflows FP16: keeping nothing (what CPU onnxruntime lets the peer get away with)
    fails on the simulated NPU; keeping the culprit chain passes. The bench's verdict and numbers agree with
    numpy over our NPU outputs vs plain onnxruntime."""
    b = fk.rmsnorm(hidden=64, rows=2, peak=500.0, seed=1)
    bench = _bench()
    cond = {"fusion_level": 0}
    ref = _ort(b.model, b.feeds)
    for keep, want in (([], False), (tune(b.model, [("x", b.feeds)], bench.start_config(cond), TARGET).chosen, True)):
        got = bench.check_on_device(b.model, b.feeds, cond, list(keep))
        cfg = Config(precision_mode="force_fp16", fusion_level=0, keep_dtype=list(keep))
        with np.errstate(all="ignore"):
            npu = Session(b.model, cfg, input_shapes=shapes_of(b.feeds)).run(b.feeds).outputs
        name = b.model.graph.output[0].name
        finite = bool(np.isfinite(npu[name]).all())
        cos, mae = _cos_mae(npu[name], ref[name]) if finite else (float("nan"), float("nan"))
        assert got["met"] is want, (keep, got)
        assert got["met"] == (finite and cos >= 0.9999 and mae <= 1e-2)
        if finite:
            assert got["cos"] == pytest.approx(cos, abs=1e-9) and got["mae"] == pytest.approx(mae, rel=1e-6)
        else:
            assert "finite outputs" in "; ".join(got["failed"])


# ------------------------------------------------------------------ one reference run per input
def test_reference_runs_once_per_input_even_when_searching(monkeypatch):
    from toolkit.runtime import reference

    calls = []
    real = reference.ReferenceRunner.run
    monkeypatch.setattr(reference.ReferenceRunner, "run", lambda self, f: calls.append(1) or real(self, f))
    calm = fk.rmsnorm(hidden=64, rows=2, peak=2.0, seed=1)
    hot = fk.rmsnorm(hidden=64, rows=2, peak=500.0, seed=1)
    res = tune(calm.model, [("calm", calm.feeds), ("hot", hot.feeds)],
               Config(precision_mode="force_fp16", fusion_level=0), TARGET)
    assert res.met and res.chosen and len(calls) == 2
    # the sensitivity table was measured on the worst input ("hot"): its overflow shows in the ranking
    assert res.ranking["LocalOverflow"].any() or res.ranking["RangeOverflow"].any()


def test_coverage_flops_come_from_the_reference_shapes():
    """MatMul (2, 3, 8) x (8, 5): 2·|Y|·K = 2·(2·3·5)·8 FLOPs, all FP16 under force_fp16."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"], name="mm")], "m", [a], [y], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feed = {"a": np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32)}
    res = tune(model, [("x", feed)], Config(precision_mode="force_fp16"), "CosineSimilarity>=0.99")
    assert res.coverage_before["flops_total"] == 2 * (2 * 3 * 5) * 8


# ------------------------------------------------------------------ exact percentile through the window
def _arrays(n: int):
    rng = np.random.default_rng(n)
    x = np.abs(rng.standard_normal(n)).astype(np.float32)
    spikes = x.copy()
    spikes[: n // 100] = 1e6  # the top values all sit where a strided sample sees few of them
    yield "random", x
    yield "sorted", np.sort(x)
    yield "reversed", np.sort(x)[::-1].copy()
    yield "ties", np.round(x * 2).astype(np.float32)
    yield "spikes", spikes
    yield "constant", np.full(n, 3.0, np.float32)


# ------------------------------------------------------------------ comparisons with only the metrics needed
def test_compare_metrics_equals_compare_tensors_and_numpy():
    rng = np.random.default_rng(5)
    y = rng.standard_normal((4, 1000)).astype(np.float32)
    x = (y + rng.standard_normal((4, 1000)) * 1e-3).astype(np.float16)
    names = ["CosineSimilarity", "RelativeEuclideanDistance", "MaxAbsoluteError", "MeanRelativeError"]
    got, full = compare_metrics(x, y, names), compare_tensors(x, y, thresholds={})
    assert all(got[m] == full[m] for m in names)
    cos, mae = _cos_mae(x, y)
    assert got["CosineSimilarity"] == pytest.approx(cos, abs=1e-12) and got["MaxAbsoluteError"] == pytest.approx(mae)
    red = np.linalg.norm(x.astype(np.float64) - y) / np.linalg.norm(y.astype(np.float64))
    assert got["RelativeEuclideanDistance"] == pytest.approx(red, rel=1e-9)
    assert not got["OverFlow"] and got["DeviceNaN"] == 0


def test_compare_metrics_with_overflow_reports_it_like_compare_tensors():
    y = np.ones(100, np.float32)
    x = y.copy()
    x[3] = np.inf
    got = compare_metrics(x, y, ["CosineSimilarity"])
    assert got["OverFlow"] and got["DeviceInf"] == 1 and got["GoldenInf"] == 0
    shape = compare_metrics(np.ones(3, np.float32), np.ones(4, np.float32), ["CosineSimilarity"])
    assert shape["CompareFailReason"] and np.isnan(shape["CosineSimilarity"])
