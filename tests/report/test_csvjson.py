"""The report's CSV/JSON tables (toolkit/report/csvjson.py): formula-safe cells that read back exactly, JSON
with NaN as null, row counts."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toolkit.compare.diagnosis import Diagnosis
from toolkit.compiler.pipeline import Finding
from toolkit.report.csvjson import csv_text, formula_safe, json_safe, write_tables
from toolkit.report.html import render_report


def test_formula_safe_prefixes_text_cells_and_leaves_numbers():
    df = pd.DataFrame({
        "Name": ['=HYPERLINK("http://evil","x")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\t=1", "\r=1",
                 "ok", None],
        "Value": [-1.5, -2.0, 3.0, -0.0, 5.0, -6e-9, 7.0, np.nan],
        "Count": [-1, 2, -3, 4, 5, 6, 7, 8],
        "Mixed": [-1, "-x", "=a", True, 2.5, None, "", "x"],
    })
    df["Cat"] = pd.Categorical(["=a", "b", "+c", "d", "@e", "f", "-g", "h"])
    before = df.copy()
    rows = list(csv.reader(io.StringIO(csv_text(df))))
    assert rows[0] == ["Name", "Value", "Count", "Mixed", "Cat"]
    names = [r[0] for r in rows[1:]]
    assert names == ["'" + v for v in before["Name"][:6]] + ["ok", ""]
    assert [float(r[1]) for r in rows[1:8]] == [-1.5, -2.0, 3.0, -0.0, 5.0, -6e-9, 7.0]  # numbers stay numbers
    assert [int(r[2]) for r in rows[1:]] == [-1, 2, -3, 4, 5, 6, 7, 8]
    assert [r[3] for r in rows[1:]] == ["-1", "'-x", "'=a", "True", "2.5", "", "", "x"]
    assert [r[4] for r in rows[1:]] == ["'=a", "b", "'+c", "d", "'@e", "f", "'-g", "h"]
    pd.testing.assert_frame_equal(df, before)  # the caller's frame is not modified
    # a header from a model name, duplicate column names, list cells joined first
    dup = pd.DataFrame([["=x", 1, ["=a", "b"]]], columns=["=evil", "a", "a"])
    rows = list(csv.reader(io.StringIO(csv_text(dup))))
    assert rows == [["'=evil", "a", "a"], ["'=x", "1", "'=a;b"]]
    assert list(formula_safe(pd.DataFrame({"s": pd.Series(["=1"], dtype="string")}))["s"]) == ["'=1"]


def test_a_carriage_return_inside_a_cell_cannot_start_a_new_row():
    """A CR mid-cell, unquoted, starts a new row in a spreadsheet, whose first cell would be a formula."""
    df = pd.DataFrame({"Name": ["ok\r=HYPERLINK(\"http://evil\")", "plain"], "Value": [-1.5, 2.0], "Id": [-3, 4]})
    text = csv_text(df)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows == [["Name", "Value", "Id"], ["ok\r=HYPERLINK(\"http://evil\")", "-1.5", "-3"], ["plain", "2.0", "4"]]
    back = pd.read_csv(io.StringIO(text, newline=""))
    assert list(back["Name"]) == list(df["Name"])
    assert back["Value"].tolist() == [-1.5, 2.0] and back["Id"].tolist() == [-3, 4]  # numbers stay numbers
    assert str(back["Id"].dtype) == "int64"
    assert "\r" not in csv_text(pd.DataFrame({"Name": ["plain"], "Value": [1.0]}))


def test_formula_safe_csv_reads_back_exactly():
    """Our readers (regress, parse-log) undo the spreadsheet-safety prefix: every name reads back as the model
    spells it, a name's own leading quote included; numbers stay numbers."""
    import io

    import pandas as pd

    from toolkit.report.csvjson import formula_safe, to_csv_safe, undo_formula_safe

    names = ["=HYPERLINK(\"x\")", "+cmd", "-n", "@at", "\tt", "'quoted", "''two", "'=q", "plain", "a=b"]
    df = pd.DataFrame({"TensorName": names, "Value": np.arange(len(names)) - 3.5})
    safe = formula_safe(df)
    assert all(not v.startswith(("=", "+", "-", "@", "\t")) for v in safe["TensorName"])
    back = undo_formula_safe(pd.read_csv(io.StringIO(to_csv_safe(df, index=False)), keep_default_na=False))
    assert back["TensorName"].tolist() == names
    np.testing.assert_array_equal(back["Value"].to_numpy(), df["Value"].to_numpy())


EVIL = "<img src=x onerror=alert(1)>"


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


@pytest.fixture()
def report(tmp_path):
    diag = synthetic_diagnosis()
    written = write_tables(diag, tmp_path)
    path = render_report(diag, tmp_path)
    return diag, tmp_path, written, path, path.read_text(encoding="utf-8")


def test_json_outputs_parse_and_nan_is_null(report):
    diag, out, written, _, _ = report
    assert written == {"result": "result.csv", "summary": "summary.json", "findings": "findings.json",
                       "kernel_times": "kernel_times.csv"}

    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))

    summary = strict((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["verdict"] == "FAIL"
    assert summary["timings_ms"]["triage_ms"] is None
    assert summary["findings"][0]["evidence"]["ratio"] is None
    assert summary["findings"][1]["evidence"]["values"] == [70000.0, None]
    assert summary["triage"]["stage"] == "precision" and summary["environment"]["cpu"] == "test cpu"
    assert summary["tasks"][0]["value"] == [1, 0]
    findings = strict((out / "findings.json").read_text(encoding="utf-8"))
    assert [f["kind"] for f in findings] == ["fp16_overflow", "fp16_constant"]
    assert findings[0]["subject"] == EVIL


def test_csv_row_counts(report):
    diag, out, _, _, _ = report
    with open(out / "result.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(diag.table)
    assert rows[5]["NodeName"] == EVIL and rows[5]["AbnormalMetrics"] == "CosineSimilarity;RelativeEuclideanDistance"
    assert rows[9]["TensorName"] == "out\nwith newline, and comma"
    assert rows[7]["CosineSimilarity"] == ""
    assert len(pd.read_csv(out / "kernel_times.csv")) == len(diag.kernel_times)


def test_json_safe():
    data = {"a": float("nan"), "b": np.float32(1.5), "c": (np.int64(2), float("-inf")), "d": np.array([1.0, np.nan]),
            "e": pd.DataFrame({"x": [1.0, np.nan]}), "f": Path("p"), 3: np.bool_(True)}
    assert json_safe(data) == {"a": None, "b": 1.5, "c": [2, None], "d": [1.0, None], "e": [{"x": 1.0}, {"x": None}],
                               "f": "p", "3": True}
