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

from tests.report.helpers import EVIL, synthetic_diagnosis
from toolkit.core.csvjson import csv_text, formula_safe, json_safe
from toolkit.report.tables import write_tables
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

    from toolkit.core.csvjson import formula_safe, to_csv_safe, undo_formula_safe

    names = ["=HYPERLINK(\"x\")", "+cmd", "-n", "@at", "\tt", "'quoted", "''two", "'=q", "plain", "a=b"]
    df = pd.DataFrame({"TensorName": names, "Value": np.arange(len(names)) - 3.5})
    safe = formula_safe(df)
    assert all(not v.startswith(("=", "+", "-", "@", "\t")) for v in safe["TensorName"])
    back = undo_formula_safe(pd.read_csv(io.StringIO(to_csv_safe(df, index=False)), keep_default_na=False))
    assert back["TensorName"].tolist() == names
    np.testing.assert_array_equal(back["Value"].to_numpy(), df["Value"].to_numpy())


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
