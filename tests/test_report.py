"""The HTML report and its CSV/JSON tables, from a small hand-made Diagnosis (no model run)."""

from __future__ import annotations

import csv
import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from toolkit.compare.diagnosis import Diagnosis
from toolkit.core.records import Finding
from toolkit.report import context, figures
from toolkit.core.csvjson import json_safe
from toolkit.report.tables import write_tables
from toolkit.report.html import render_report, script_json, templates_dir

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.fixture()
def report(tmp_path):
    diag = synthetic_diagnosis()
    written = write_tables(diag, tmp_path)
    path = render_report(diag, tmp_path)
    return diag, tmp_path, written, path, path.read_text(encoding="utf-8")


def test_report_file_is_written_and_offline(report):
    _, out, _, path, html = report
    assert path == out / "index.html" and path.is_file()
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I), "no external or relative script files"
    assert not re.search(r"<link[^>]*\bhref\s*=\s*[\"']?(https?:)?//", html, re.I), "no remote stylesheets"
    from plotly.offline import get_plotlyjs
    assert html.count(get_plotlyjs()[:200]) == 1, "plotly.js is inlined exactly once"
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))


def test_model_names_are_escaped(report):
    _, _, _, _, html = report
    assert EVIL not in html
    assert EVIL_ESCAPED in html
    assert SCRIPT_BREAK not in html and "</script><script>" not in html
    # the figure JSON carries names with '<' escaped, so no '</' can close the <script> element early
    for block in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', html, re.S):
        assert "<" not in block
        json.loads(block)


def test_artifact_links_are_relative_only(report):
    _, _, _, _, html = report
    assert 'href="result.csv"' in html and 'href="dumps%20dir/index.json"' in html
    assert "href=\"javascript:" not in html and 'href="../secret.txt"' not in html


def test_sections_in_order(report):
    _, _, _, _, html = report
    ids = ["verdict", "divergence", "findings", "tasks", "chart", "table", "fusion", "precision", "memory",
           "kernels", "environment", "artifacts"]
    positions = [html.index(f'<section id="{i}">') for i in ids]
    assert positions == sorted(positions)
    assert 'class="verdict fail"' in html
    assert "3.00 MiB" in html and "1.500x" in html  # memory in human units, arena / lower bound
    assert "0.99999994" in html  # a cosine just below 1 is not rounded to 1


def test_table_rows_marked(report):
    diag, _, _, _, html = report
    body = html[html.index('id="layer-table"'):]
    body = body[:body.index("</table>")]
    assert body.count("<tr") == len(diag.table) + 1
    assert body.count('class="abnormal origin"') == 1 and body.count('class="abnormal"') == 1
    assert 'data-v="0.91"' in body  # numeric sort keys


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


def test_script_json_keeps_json_equal():
    text = json.dumps({"n": SCRIPT_BREAK + " & <!-- \u2028"})
    safe = str(script_json(text))
    assert "<" not in safe and ">" not in safe and "&" not in safe
    assert json.loads(safe) == json.loads(text)


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


def test_empty_diagnosis_renders(tmp_path):
    diag = Diagnosis(summary={"verdict": "PASS", "reasons": []}, table=pd.DataFrame({"Index": [], "NodeName": []}))
    html = render_report(diag, tmp_path, filename="r.html").read_text(encoding="utf-8")
    assert "no findings" in html and "no artifacts listed" in html
    assert write_tables(diag, tmp_path)["result"] == "result.csv"


def test_templates_found():
    assert (templates_dir() / "report.html.j2").is_file()


def test_pyproject_lists_every_toolkit_package():
    """pyproject lists packages explicitly (to map templates/ into toolkit.templates): every folder of
    toolkit/ holding Python files or package data must be in that list, or a non-editable install misses it."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(d.relative_to(ROOT).parts) for d in (ROOT / "toolkit").rglob("*")
             if d.is_dir() and d.name != "__pycache__" and any(f.suffix == ".py" for f in d.iterdir())}
    found.add("toolkit")
    missing = sorted(found - listed)
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"
    assert "toolkit.templates" in listed
