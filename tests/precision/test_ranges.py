"""Range analysis (toolkit/precision/ranges.py) against numpy: over all inputs, the exact windowed percentile,
NaN fallback, and RangeStats on a large tensor."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.precision.ranges import RangeStats, analyse_ranges, percentile_linear, range_findings


def ort_outputs(model: onnx.ModelProto, feed: dict) -> dict:
    """Plain onnxruntime, no graph optimisation (options compatible with a process-wide global thread pool,
    which an in-process CLI test of the same worker may have switched on)."""
    from toolkit.ort.ort_env import session_options

    sess = ort.InferenceSession(model.SerializeToString(), session_options(optimize=False),
                                providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


def _ranges_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])
    nodes = [helper.make_node("Mul", ["x", "big"], ["scaled"], name="scale_up"),
             helper.make_node("Mul", ["x", "tiny"], ["small"], name="scale_down"),
             helper.make_node("Floor", ["scaled"], ["counts"], name="floor"),
             helper.make_node("Add", ["counts", "small"], ["y"], name="join")]
    inits = [numpy_helper.from_array(np.array(1000.0, np.float32), "big"),
             numpy_helper.from_array(np.array(1e-9, np.float32), "tiny")]
    g = helper.make_graph(nodes, "r", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_range_analysis_against_numpy_over_all_inputs():
    model = _ranges_model()
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.uniform(-100, 100, (4, 256)).astype(np.float32)} for _ in range(2)]
    feeds[1]["x"][0, 0] = 90.0  # scaled = 90000 > 65504
    runs = []
    for f in feeds:
        vals = dict(ort_outputs(_expose(model), f))
        vals.update(f)
        runs.append(vals)
    df = analyse_ranges(model, runs).set_index("Tensor")
    scaled = np.concatenate([np.abs(r["scaled"]).ravel() for r in runs])
    assert df.at["scaled", "OverflowShare"] == pytest.approx(np.mean(scaled > 65504))
    assert df.at["scaled", "AbsMax"] == pytest.approx(scaled.max())
    worst_p999 = max(np.percentile(np.abs(r["scaled"]).ravel(), 99.9) for r in runs)
    assert df.at["scaled", "P999Abs"] == pytest.approx(worst_p999, rel=1e-6)
    small = np.concatenate([np.abs(r["small"]).ravel() for r in runs])
    nz = small[small > 0]
    assert df.at["small", "SubnormalShare"] == pytest.approx(np.mean(nz < 6.1e-5))
    assert df.at["small", "FlushShare"] == pytest.approx(np.mean(nz < 6e-8))
    assert df.at["counts", "IntegerValued"] and df.at["counts", "IntegerInexact"]
    assert not df.at["x", "IntegerValued"]
    kinds = {(f.kind, f.subject) for f in range_findings(df.reset_index())}
    assert ("fp16_range_overflow", "scale_up") in kinds and ("fp16_integer_inexact", "floor") in kinds
    assert ("fp16_flush_to_zero", "scale_down") in kinds


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 4099])
@pytest.mark.parametrize("q", [0.0, 50.0, 99.9, 100.0])
def test_percentile_linear_equals_numpy(n, q):
    from toolkit.precision.ranges import percentile_linear

    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    assert percentile_linear(x, q) == pytest.approx(float(np.percentile(x.astype(np.float64), q)), rel=1e-6, abs=1e-7)


def _expose(model):
    m = onnx.shape_inference.infer_shapes(model)
    for n in m.graph.node:
        for o in n.output:
            if o not in {x.name for x in m.graph.output}:
                m.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
    return m


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


@pytest.mark.parametrize("n", [16385, 70001, 300000])
@pytest.mark.parametrize("q", [0.0, 0.1, 50.0, 99.0, 99.9, 100.0])
def test_windowed_percentile_equals_numpy(n, q):
    for label, x in _arrays(n):
        want = float(np.percentile(x.astype(np.float64), q))
        assert percentile_linear(x, q) == pytest.approx(want, rel=1e-6, abs=1e-7), label


def test_percentile_with_nan_falls_back_to_the_whole_array():
    x = np.abs(np.random.default_rng(3).standard_normal(50000)).astype(np.float32)
    x[::7] = np.nan  # documented input is finite; NaN must not make the window trust wrong counts
    pos = 0.5 * (x.size - 1)
    lo = int(np.floor(pos))
    part = np.partition(x, [lo, lo + 1])  # NaN sort last: the whole-array order statistics
    want = float(part[lo]) + (float(part[lo + 1]) - float(part[lo])) * (pos - lo)
    assert percentile_linear(x.copy(), 50.0) == pytest.approx(want, rel=1e-7)


def test_range_stats_on_a_large_tensor_match_numpy():
    rng = np.random.default_rng(7)
    n = 40000
    v = (rng.standard_normal(n) * 10).astype(np.float32)
    v[:50] = 0.0
    v[50:90] = 3e-6   # subnormal in FP16
    v[90:100] = 1e-8  # flushes to zero in FP16
    v[100:105] = 7e4  # beyond FP16
    v[105] = np.inf
    v[106] = np.nan
    ints = np.round(rng.standard_normal(n) * 5000).astype(np.float32)
    ints[-1] = 0.5    # one non-integer after the first 4096 values
    stats = RangeStats(helper.make_model(helper.make_graph([], "g", [], [])))
    stats.add({"v": v, "ints": ints, "whole": np.round(ints)})
    df = stats.frame().set_index("Tensor")
    fin = v[np.isfinite(v)]
    a = np.abs(fin)
    nz = a[a > 0]
    assert df.at["v", "OverflowShare"] == pytest.approx((np.count_nonzero(a > 65504) + 1) / n)
    assert df.at["v", "SubnormalShare"] == pytest.approx(np.mean(nz < 6.1e-5))
    assert df.at["v", "FlushShare"] == pytest.approx(np.mean(nz < 6e-8))
    assert df.at["v", "AbsMax"] == pytest.approx(float(a.max()))
    assert (df.at["v", "Min"], df.at["v", "Max"]) == (pytest.approx(float(fin.min())), pytest.approx(float(fin.max())))
    assert df.at["v", "P999Abs"] == pytest.approx(float(np.percentile(a.astype(np.float64), 99.9)), rel=1e-6)
    assert not df.at["ints", "IntegerValued"]
    assert df.at["whole", "IntegerValued"] and df.at["whole", "IntegerInexact"] == bool(np.abs(ints).max() > 2048)
