"""The report context's fast paths (toolkit/report/context.py) give what the slow, obvious way gives:
column-at-a-time cell formatting equals fmt/sort_key value by value; the joined escape equals
markupsafe.escape per string."""

from __future__ import annotations

import html
import re
import tomllib

import numpy as np
import pandas as pd
import pytest
from markupsafe import escape

from tests.report.helpers import EVIL, synthetic_diagnosis
from toolkit.core.records import Finding
from toolkit.report import context


@pytest.mark.parametrize("series", [
    pd.Series([1.0, 0.99999994, -0.99999999999, np.nan, np.inf, -0.0, 1e-300, 123456789.0]),
    pd.Series(np.array([0.1, 1 / 3, np.nan], dtype=np.float32)),
    pd.Series([0, -5, 2**60]),
    pd.Series(np.arange(3, dtype=np.uint8)),
    pd.Series([True, False]),
    pd.Series(["a", None, EVIL], dtype="str"),
    pd.Series([1, 2.5, None, True, "<b>", ["a", 1.0], {"k": np.nan}, (1, 2), np.nan], dtype=object),
    pd.array([1, None, 3], dtype="Int64"),
    pd.array([True, None], dtype="boolean"),
    pd.Categorical(["a", "<c>", "a"]),
    pd.Series(pd.to_datetime(["2024-01-02", None])),
])
def test_column_cells_equal_fmt_and_sort_key_per_value(series):
    series = pd.Series(series)
    texts, sorts = context.column_cells(series)
    assert texts == [context.fmt(v) for v in series]
    assert sorts == [context.sort_key(v) for v in series]


def test_column_cells_by_hand():
    texts, sorts = context.column_cells(pd.Series([0.99999994, 1.0, np.nan, 1234567.0]))
    assert texts == ["0.9999999", "1", "", "1.23457e+06"]  # console.show: reads below 1
    assert sorts == ["0.99999994", "1.0", "", "1234567.0"]
    assert context.column_cells(pd.Series([7])) == (["7"], ["7.0"])
    assert context.column_cells(pd.Series([True, False])) == (["yes", "no"], ["", ""])


@pytest.mark.parametrize("texts", [[EVIL, "a'b\"c", "&amp;", ""], ["a\x00<b>", "x&y"], []])
def test_escape_all_equals_markupsafe_escape(texts):
    assert context.escape_all(texts) == [str(escape(t)) for t in texts]


def test_rows_html_marks_escapes_and_keeps_sort_keys():
    df = pd.DataFrame({"NodeName": [EVIL, "ok"], "CosineSimilarity": [0.5, np.nan]})
    rows = context.rows_html(df, ["abnormal origin", ""], ["origin", ""])
    # cell end tags are left out (HTML closes a cell at the next one); a finite number sorts by its text
    assert str(rows[0]) == ('<tr class="abnormal origin"><td>origin'
                            '<td>&lt;img src=x onerror=alert(1)&gt;<td>0.5</tr>')
    assert str(rows[1]) == "<tr><td><td>ok<td></tr>"
    inf = context.rows_html(pd.DataFrame({"MaxAbsoluteError": [np.inf, 2.0]}), ["", ""], ["", ""])
    assert [str(r) for r in inf] == ['<tr><td><td data-v="inf">inf</tr>', "<tr><td><td>2</tr>"]


# ---------------------------------------------------------------------------------------- the first screen
def _storage_diag(verdict: str, reasons: list[str]):
    keep = ["conv_1", 'we"ird\\name']
    sr = {"consumer_node": "topk", "consumer_op_type": "TopK", "metric": "ExactMatchRate", "exact_value": 1.0,
          "stored_value": 0.92}
    first = {"node": "relu_1", "op_type": "Relu", "tensor": "t2", "kernel": "conv_1", "precision": "fp16",
             "kind": "abnormal", "evidence": {"abnormal_metrics": ["FP16StorageRounding"], "storage_rounding": sr}}
    diag = synthetic_diagnosis()
    diag.summary.update(verdict=verdict, reasons=reasons, first_divergence=first)
    diag.findings = [Finding("warning", "cpu_fallback", "nms", {}, "keep it on the CPU"),
                     Finding("error", "first_divergence", "relu_1", {"keep_dtype": keep}, "keep conv_1 in FP32")]
    return diag, keep


@pytest.mark.parametrize("verdict, words", [("PASS", "Can ship"), ("WARN", "Can ship with care"),
                                            ("FAIL", "Do not ship")])
def test_the_answer_says_whether_to_ship_where_why_and_the_fix(verdict, words):
    diag, keep = _storage_diag(verdict, ["2 intermediate tensor(s) abnormal"])
    assert context.answer_section(diag)["fix"] is None  # a finding's keep_dtype alone is advice nobody re-ran
    diag.summary["fix"] = {"met": True, "keep_dtype": keep, "files": {"config": "fixed_config.json",
                                                                      "keep_dtype": "keep_dtype.txt"},
                           "sentence": "verified fix: keeping conv_1 in FP32: output cosine 0.3 -> 0.99999"}
    a = context.answer_section(diag)
    assert a["label"] == verdict and a["ship"].startswith(words)
    assert verdict == "PASS" or "2 intermediate tensor(s) abnormal" in a["ship"]
    assert {w["key"]: w["value"] for w in a["where"]} == {"node": "relu_1", "op_type": "Relu", "kernel": "conv_1",
                                                          "precision": "fp16", "tensor": "t2"}
    assert "ExactMatchRate 1" in a["why"] and "0.92" in a["why"] and "topk" in a["why"]
    assert tomllib.loads(a["fix"]["text"]) == {"keep_dtype": keep}  # the fix is a config line that parses
    assert "--config fixed_config.json" in a["fix"]["how"] and a["restores"].startswith("verified fix")
    diag.summary["fix"]["met"] = False  # a set that did not meet the target is no fix
    assert context.answer_section(diag)["fix"] is None
    assert a["recommendation"] == "keep conv_1 in FP32"  # the first-divergence finding, not the first one listed


def test_the_answer_without_an_origin_has_no_fix():
    diag = synthetic_diagnosis()
    diag.summary.update(verdict="PASS", reasons=[], first_divergence=None, stage="none")
    diag.triage = {"stage": "none", "fp32_first_divergence": None}
    diag.findings = []
    a = context.answer_section(diag)
    assert not a["found"] and a["fix"] is None and a["ship"].startswith("Can ship")



@pytest.mark.parametrize("verified", [False, True])
def test_the_answer_leads_with_a_device_kernel_deviation(verified):
    """Device dumps: when the device op computes something else than the simulated kernel on the device's own
    inputs, the first screen's advice and 'restores' are that finding's, never the simulated plan's force_fp32
    match or its keep_dtype advice."""
    diag, keep = _storage_diag("FAIL", ["output 'y' is abnormal"])
    diag.summary["first_divergence"]["evidence"] = {"abnormal_metrics": ["CosineSimilarity"]}
    diag.summary["stage"] = "precision"
    diag.findings.append(Finding("error", "device_kernel_deviation", "backbone/conv2", {"tensor": "t2"},
                                 "the device op itself computes something else; run it alone on the device"))
    if verified:
        diag.summary["fix"] = {"met": True, "keep_dtype": keep, "sentence": "verified fix: keeping conv_1 in FP32"}
    a = context.answer_section(diag)
    assert a["recommendation"].startswith("the device op itself computes something else")
    assert "device_kernel_deviation" in a["restores"] and "force_fp32" not in a["restores"]
    assert "backbone/conv2" in a["restores"]

def test_findings_errors_first_in_the_advisors_order_otherwise():
    diag, _ = _storage_diag("WARN", ["x"])
    diag.findings.append(Finding("error", "later_error", "s", {}, "r"))
    assert [r["kind"] for r in context.findings_section(diag)["rows"]] == ["first_divergence", "later_error",
                                                                          "cpu_fallback"]


def test_the_tensor_table_starts_with_the_compared_tensors():
    diag = synthetic_diagnosis()
    diag.table["CompareFailReason"] = ["folded into a constant", ""] * 5
    diag.table.loc[::2, ["Abnormal", "OverFlow"]] = False  # a folded constant has no verdict
    sec = context.table_section(diag)
    compared = [i for i in range(10) if i % 2]
    order = compared + [i for i in range(10) if not i % 2]
    shown = [re.search(r'data-node="([^"]*)"', str(r)) for r in sec["rows_html"]]
    names = [html.unescape(m.group(1)) if m else "" for m in shown]
    assert names == [diag.table["NodeName"][i] for i in order]
    assert sec["n_compared"] == 5 and sec["n_uncompared"] == 5
    assert all("uncompared" in str(r).split(">")[0] for r in sec["rows_html"][5:])
    assert not any("uncompared" in str(r).split(">")[0] for r in sec["rows_html"][:5])


def test_an_abnormal_tensor_without_metrics_is_shown_with_the_compared_ones():
    """NaN/Inf at every position: no metrics (a CompareFailReason), but judged abnormal: never behind the
    toggle, and counted as compared (toolkit.compare.counts)."""
    diag = synthetic_diagnosis()
    diag.table["CompareFailReason"] = ""
    diag.table.loc[:, ["Abnormal", "OverFlow"]] = False
    diag.table.loc[9, ["CompareFailReason", "OverFlow", "Abnormal"]] = ["no position where both tensors are finite",
                                                                       True, True]
    sec = context.table_section(diag)
    assert sec["n_compared"] == 10 and sec["n_uncompared"] == 0
    assert not any("uncompared" in str(r).split(">")[0] for r in sec["rows_html"])


def test_the_answer_does_not_claim_force_fp32_matches_when_a_user_line_is_tighter_than_fp32():
    """A precision-stage diagnosis whose force_fp32 re-run crosses a user line within FP32 rounding
    (triage["fp32_tight_lines"], toolkit.diagnose.triage): 'restores' says the reference is met within FP32
    rounding only, naming the tensor, not that the re-run matches the reference."""
    diag = synthetic_diagnosis()
    assert "matches the FP32 reference at all 12 tensors" in context._restores(diag, {}, "precision")
    diag.triage["fp32_tight_lines"] = [{"tensor": "y", "node": "sub", "lines": {"MaxAbsoluteError": 1e-3}}]
    text = context._restores(diag, {}, "precision")
    assert "within FP32 rounding only" in text and "'y'" in text and "line_tighter_than_fp32" in text
    assert "matches the FP32 reference" not in text
