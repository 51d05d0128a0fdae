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

from toolkit.compare.diagnosis import Diagnosis
from toolkit.compiler.pipeline import Finding
from toolkit.report import context, figures

EVIL = "<img src=x onerror=alert(1)>"
EVIL_ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"
SCRIPT_BREAK = "</script><script>window.__pwned=1</script>"


def synthetic_diagnosis() -> Diagnosis:
    """Ten tensors in execution order; row 5 is the origin (named EVIL), row 6 propagates its error."""
    n = 10
    cos = [1.0, 1.0, 0.999999, 0.9999, 1.0, 0.91, 0.95, np.nan, 0.9995, 0.99999994]
    red = [0.0, 0.0, 1e-4, 5e-3, 0.0, 0.4, 0.2, np.nan, 0.01, 3e-4]
    names = ["x", "conv_1", "relu_1", "conv_2", "add_1", EVIL, "ln_var", "fused_mul", "softmax", SCRIPT_BREAK]
    table = pd.DataFrame({
        "Index": range(n),
        "OpType": ["Input", "Conv", "Relu", "Conv", "Add", "Pow", "ReduceMean", "Mul", "Softmax", "MatMul"],
        "NodeName": names,
        "TensorName": [f"t{i}" for i in range(n - 1)] + ["out\nwith newline, and comma"],
        "TensorIndex": [0] * n,
        "Kernel": ["", "conv_1", "conv_1", "conv_2", "conv_2", EVIL, "ln", "ln", "softmax", "mm"],
        "Precision": ["fp32", "fp16", "fp16", "fp16", "fp16", "fp16", "fp32", "fp32", "fp32", "fp16"],
        "CosineSimilarity": cos,
        "RelativeEuclideanDistance": red,
        "MaxAbsoluteError": [0.0, 1e-3, 1e-3, 2e-2, 0.0, 7e4, 3.0, np.nan, 1e-3, 1e-3],
        "Abnormal": [False, False, False, False, False, True, True, False, False, False],
        "AbnormalMetrics": [[], [], [], [], [], ["CosineSimilarity", "RelativeEuclideanDistance"],
                            ["CosineSimilarity"], [], [], []],
        "OverFlow": [False] * 5 + [True] + [False] * 4,
        "CompareFailReason": [""] * 7 + ["fused into kernel ln"] + [""] * 2,
        "Role": [""] * 5 + ["origin", "propagated"] + [""] * 3,
        "GoldenAbsMax": [1.0, 2.0, 2.0, 5.0, 6.0, 7.2e4, 3e3, np.nan, 1.0, 9.0],
    })
    first = {"node": EVIL, "op_type": "Pow", "tensor": "t5", "kernel": EVIL, "precision": "fp16",
             "kind": "fp16_overflow", "evidence": {"GoldenAbsMax": 7.2e4, "CosineSimilarity": 0.91}}
    findings = [
        Finding("error", "fp16_overflow", EVIL, {"absmax": 7.2e4, "ratio": float("nan"), "tensor": "t5"},
                f"keep '{EVIL}' in FP32 (keep_dtype)"),
        Finding("warning", "fp16_constant", "w_big", {"values": [70000.0, float("inf")]}, "scale the weights"),
    ]
    return Diagnosis(
        summary={"verdict": "FAIL", "reasons": [f"output 'out' is abnormal after {EVIL}"], "model": "m.onnx",
                 "model_name": "synthetic", "model_sha256": "ab" * 32, "inputs": "random seed=0", "seed": 0,
                 "config": {"precision_mode": "allow_mix_precision", "keep_dtype": []}, "stage": "precision",
                 "first_divergence": first, "origin_nodes": [EVIL],
                 "timings_ms": {"compile_ms": 12.5, "triage_ms": float("nan")},
                 "counts": {"tensors": n, "abnormal": 2}},
        table=table,
        findings=findings,
        passes=pd.DataFrame({"Pass": ["fold_batchnorm", "graph_fusion"], "Ran": [True, True], "Reason": ["", ""],
                             "OpsBefore": [12, 11], "OpsAfter": [11, 11], "KernelsAfter": [0, 0],
                             "Changes": [1, 2], "Ms": [0.1, 0.5]}),
        fusion_result={"0_0": {"graph_fusion": {"LayerNormFusionPass": {"match_times": "1", "effect_times": "1"}},
                               "ub_fusion": {"TbeCubeElemwiseFusionPass": {"match_times": "2", "effect_times": "1"}}}},
        precision=pd.DataFrame({"OpType": ["Conv", "Pow", EVIL], "FP16": [2, 1, 0], "FP32": [0, 0, 1]}),
        memory={"arena_bytes": 3 * 1024 * 1024, "lower_bound_bytes": 2 * 1024 * 1024, "tensors_in_arena": 8,
                "tensors_outside": 1},
        kernel_times=pd.DataFrame({"Kernel": [f"k{i}" for i in range(24)] + [EVIL],
                                   "OpType": ["Conv"] * 25, "Precision": ["fp16", "fp32"] * 12 + ["fp16"],
                                   "Nodes": [1] * 25, "HostMs": [float(i) for i in range(24)] + [99.0]}),
        tasks=[{"name": "cls_argmax", "passed": False, "value": [1, 0], "detail": f"FP32 argmax [1], NPU {EVIL}"}],
        triage={"stage": "precision", "fp32_first_divergence": None, "fp32_tensors_checked": 12,
                "npu_first_divergence": first},
        environment={"packages": {"numpy": "2.0"}, "python": "3.11", "cpu": "test cpu", "cpu_count": 2,
                     "env": {"OMP_NUM_THREADS": "1"}},
        artifacts={"result": "result.csv", "summary": "summary.json", "evil": "javascript:alert(1)",
                   "outside": "../secret.txt", "dumps": "dumps dir/index.json"},
    )


def test_layer_figure_log_axes_floor_and_hover():
    diag = synthetic_diagnosis()
    fig = figures.layer_error_figure(diag.table, origin=context.origin_mask(diag))
    assert isinstance(fig, go.Figure)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type == "log"
    main = [t for t in fig.data if t.name == "1 − cosine"][0]
    y = np.asarray(main.y, dtype=float)
    assert len(y) == 9  # the fused-away row has no metrics
    assert y.min() == pytest.approx(figures.LOG_FLOOR)  # exact cosine 1 → 1 − cos = 0 → floor
    hover = np.asarray(main.customdata)
    assert EVIL_ESCAPED in hover[:, 0] and EVIL not in hover[:, 0]
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
