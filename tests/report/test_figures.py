"""The report's figures (toolkit/report/figures.py): axes, top-20 kernels, and figure JSON built without
plotly.py equal to plotly's own Figure.to_json()."""

from __future__ import annotations

import base64
import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from tests.report.helpers import EVIL, EVIL_ESCAPED, synthetic_diagnosis
from toolkit.report import context, figures


def test_layer_figure_log_axes_floor_and_hover():
    diag = synthetic_diagnosis()
    fig = figures.layer_error_figure(diag.table, origin=context.origin_mask(diag))
    assert isinstance(fig, go.Figure)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type == "log"
    main = [t for t in fig.data if t.name == "1 − cosine"][0]
    y = np.asarray(main.y, dtype=float)
    assert np.isfinite(y).sum() == 9 and np.isnan(y).sum() == 1  # the fused-away row: a gap, not a point
    assert np.nanmin(y) == pytest.approx(figures.LOG_FLOOR)  # exact cosine 1 → 1 − cos = 0 → floor
    hover = np.asarray(main.customdata)
    assert hover.shape[0] == len(y) and EVIL_ESCAPED in hover[:, 0] and EVIL not in hover[:, 0]
    assert {t.name for t in fig.data} >= {"Abnormal", "origin", "abnormal line"}
    origin = [t for t in fig.data if t.name == "origin"][0]
    assert list(origin.x) == [5]


def test_kernel_figure_top_20_and_precision_figure():
    diag = synthetic_diagnosis()
    fig = figures.kernel_time_figure(diag.kernel_times, top=20)
    names = [n for t in fig.data for n in t.y]
    assert len(names) == 20 and EVIL_ESCAPED in names and "k0" not in names
    assert list(fig.layout.yaxis.categoryarray)[0] == EVIL_ESCAPED  # slowest first
    pfig = figures.precision_figure(diag.precision)
    assert [t.name for t in pfig.data] == ["FP16", "FP32"] and pfig.layout.barmode == "stack"


def _table() -> pd.DataFrame:
    cos = [1.0, 0.99999994, np.nan, 0.5, 0.999]
    return pd.DataFrame({
        "Index": [0, 1, 2, 3, 300],
        "OpType": ["Input", "Conv", "Mul", "Pow", "Add"],
        "NodeName": ["x", "c", "m", EVIL, "a"],
        "TensorName": ["x", "t1", "t2", "t3", "t4"],
        "Kernel": ["", "c", "c", EVIL, "a"],
        "Precision": ["fp32", "fp16", "fp16", "fp16", "fp32"],
        "CosineSimilarity": cos,
        "RelativeEuclideanDistance": [0.0, 1e-4, np.nan, 0.6, 0.01],
        "Abnormal": [False, False, False, True, False],
    })


def _parsed(text: str) -> dict:
    return json.loads(text)


def test_layer_figure_json_equals_plotly_figure_json():
    table = _table()
    origin = pd.Series([False, False, False, True, False])
    spec = figures.layer_error_spec(table, origin=origin, lines={"CosineSimilarity": 0.98})
    assert _parsed(spec.to_json()) == _parsed(go.Figure(spec).to_json())


@pytest.mark.parametrize("build", [
    lambda: figures.precision_spec(pd.DataFrame({"OpType": ["Conv", EVIL], "FP16": [3, 0], "FP32": [1, 2]})),
    lambda: figures.kernel_time_spec(pd.DataFrame({"Kernel": ["k1", EVIL, "k3"], "OpType": ["Conv", "Pow", "Add"],
                                                   "Precision": ["fp16", "fp32", "int8"], "Nodes": [2, 1, 1],
                                                   "HostMs": [0.5, 2.0, np.nan]})),
    lambda: figures.empty_spec("Kernel time", "no kernel times"),
    lambda: figures.layer_error_spec(pd.DataFrame({"CosineSimilarity": [np.nan]})),
])
def test_other_figure_json_equals_plotly_figure_json(build):
    spec = build()
    assert _parsed(spec.to_json()) == _parsed(go.Figure(spec).to_json())


def test_two_row_layout_is_make_subplots_layout():
    ref = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("1 − CosineSimilarity", "RelativeEuclideanDistance"))
    ref_layout = ref.to_plotly_json()["layout"]
    ours = go.Figure(layout=figures._two_row_layout(("1 − CosineSimilarity", "RelativeEuclideanDistance")))
    ours_layout = ours.to_plotly_json()["layout"]
    for key in ("xaxis", "yaxis", "xaxis2", "yaxis2", "annotations"):
        assert ours_layout[key] == ref_layout[key], key


def test_typed_arrays_decode_to_the_same_numbers():
    floats = np.array([0.25, np.nan, -3.5, np.inf])
    spec = figures._typed_array(floats)
    assert spec["dtype"] == "f8"
    back = np.frombuffer(base64.b64decode(spec["bdata"]), dtype="<f8")
    np.testing.assert_array_equal(back, floats)
    small = figures._typed_array(np.array([0, 300, -2], dtype=np.int64))  # needs int16
    assert small["dtype"] == "i2"
    assert np.frombuffer(base64.b64decode(small["bdata"]), dtype="<i2").tolist() == [0, 300, -2]
    assert figures._typed_array(np.array([2**40], dtype=np.int64)) == [2**40]  # no 64-bit ints in plotly.js
    assert figures._typed_array(np.array(["a", "b"], dtype=object)) == ["a", "b"]


@pytest.mark.parametrize("emr", [[1.0, 0.92], [0.5, 0.0], [0.999, 1.0]])
def test_integer_tensors_are_on_the_chart_and_skipped_tensors_leave_gaps(emr):
    table = pd.DataFrame({"Index": [0, 1, 2, 3, 4, 5], "NodeName": ["a", "b", "c", "topk", "sq", "d"],
                          "OpType": ["Conv", "Relu", "Constant", "TopK", "Squeeze", "Add"],
                          "CosineSimilarity": [1.0, 0.999, np.nan, np.nan, np.nan, 0.99],
                          "RelativeEuclideanDistance": [0.0, 1e-3, np.nan, np.nan, np.nan, 0.02],
                          "ExactMatchRate": [np.nan, np.nan, np.nan, emr[0], emr[1], np.nan],
                          "Abnormal": [False, False, False, emr[0] < 1, emr[1] < 1, False]})
    spec = figures.layer_error_spec(table)
    ints = [t for t in spec["data"] if t["name"] == "1 − ExactMatchRate"][0]
    assert list(ints["x"]) == [3, 4]
    expected = np.maximum(1.0 - np.array(emr), figures.LOG_FLOOR)
    assert np.allclose(np.asarray(ints["y"], dtype=float), expected)
    main = [t for t in spec["data"] if t["name"] == "1 − cosine"][0]
    y = np.asarray(main["y"], dtype=float)
    assert np.isnan(y).sum() == 1 and list(np.asarray(main["x"])[np.isfinite(y)]) == [0, 1, 5]  # a gap at 2..4
    crosses = [t for t in spec["data"] if t["name"] == "Abnormal"]
    assert (sorted(crosses[0]["x"]) == [i for i, e in zip((3, 4), emr) if e < 1]) if crosses else all(e == 1 for e in emr)
