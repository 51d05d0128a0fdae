"""Judging and advising over compare results (toolkit/logs/compare_results.py): rows written by hand in the compare
tool's columns (GUIDE §4), expectations computed with numpy from the same metric values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from toolkit.logs import compare_results as cr

COS_LINE = 0.99  # the compare tool's default cosine line (GUIDE §4)


def table(tensor_index, cosine) -> pd.DataFrame:
    """A judged compare_results table: one row per TensorIndex, op name = its first field, cosine as given."""
    names = [t.rsplit(":", 2)[0] for t in tensor_index]
    rows = pd.DataFrame({"Index": [str(i) for i in range(len(names))], "OpType": "MatMulV2", "NPUDump": names,
                         "GroundTruth": names, "TensorIndex": tensor_index, "OverFlow": "NO",
                         "CosineSimilarity": [str(c) for c in cosine]})
    return cr.frame(rows, "msaccucmp")


@pytest.mark.parametrize("tensor_index,expected", [
    ("conv1:input:0", True), ("input_layernorm:input:1", True), ("input:0", True), ("模型/层2:conv2:INPUT:0", True),
    ("input_proj:output:0", False), ("input_layernorm:output:0", False), ("input:output:0", False),
    ("inputs:output:0", False), ("", False), ("nan", False)])
def test_is_input_is_the_input_field_of_tensor_index_not_the_op_name(tensor_index, expected):
    assert cr.is_input(pd.Series([tensor_index])).tolist() == [expected]


def test_an_op_named_input_something_is_an_output_row_and_the_first_divergence():
    index = ["conv1:output:0", "input_proj:output:0", "input_layernorm:output:0", "relu2:output:0"]
    cosine = np.array([0.9999, 0.90, 0.95, 0.93])
    t = table(index, cosine)
    first = int(np.flatnonzero(cosine < COS_LINE)[0])  # no row is an input row: the first one over the line
    findings = cr.advise(t)
    assert [f.kind for f in findings] == ["first_divergence"]
    assert findings[0].subject == index[first].split(":")[0] == "input_proj"


def test_an_input_row_of_an_op_named_input_something_is_an_inconsistent_input():
    index = ["input_layernorm:input:0", "input_layernorm:output:0", "relu2:output:0"]
    cosine = np.array([0.5, 0.6, 0.999])
    findings = cr.advise(table(index, cosine))
    assert [(f.kind, f.evidence["TensorIndex"]) for f in findings] == [
        ("inconsistent_input", "input_layernorm:input:0"), ("first_divergence", "input_layernorm:output:0")]


def test_judge_flags_each_metric_over_its_default_line_in_column_order():
    """Random metrics with NaN and ±inf; the expectation from the compare tool's default lines (GUIDE §4) with
    numpy, metric by metric."""
    rng = np.random.default_rng(7)
    n = 2_000
    cols = {"CosineSimilarity": (0.99, "below"), "RelativeEuclideanDistance": (0.05, "above"),
            "KullbackLeiblerDivergence": (0.005, "above"), "RootMeanSquareError": (1.0, "above"),
            "MeanRelativeError": (1.0, "above")}
    df = pd.DataFrame({m: rng.choice([line * 0.5, line, line * 1.5, np.nan, np.inf, -np.inf], n)
                       for m, (line, _) in cols.items()})
    df["MaxAbsoluteError"] = rng.uniform(0, 100, n)  # no default line: never abnormal
    df["Accuracy"] = rng.choice(["", "Yes", "No", " warning "], n)
    got = cr.judge(df.copy())
    over = {m: (df[m].to_numpy() < line) if side == "below" else (df[m].to_numpy() > line)
            for m, (line, side) in cols.items()}  # NaN compares False: never over
    want = [";".join(m for m in cols if over[m][i]) for i in range(n)]
    assert got["AbnormalMetrics"].tolist() == want
    bad_accuracy = df["Accuracy"].str.strip().str.lower().isin(["no", "warning", "different"]).to_numpy()
    assert got["Abnormal"].tolist() == [bool(w) or b for w, b in zip(want, bad_accuracy)]
    assert (got["Advice"] == "").all()


def test_judge_reads_a_text_metric_cell_as_no_value():
    df = pd.DataFrame({"CosineSimilarity": pd.Series([0.5, "N/A", 0.999], dtype=object), "Accuracy": ""})
    got = cr.judge(df)
    assert got["AbnormalMetrics"].tolist() == ["CosineSimilarity", "", ""]
    assert got["Abnormal"].tolist() == [True, False, False]
