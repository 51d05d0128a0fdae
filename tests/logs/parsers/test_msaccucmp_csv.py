"""The compare tool's result CSV (toolkit/logs/parsers/msaccucmp_csv.py), written here from the documented column
list (CANN "Parameters in a Complete Model Comparison Result"): repeated DataType / Address read by side, optional
columns, NaN cells, the advisor's rows on top, malformed rows counted."""

from __future__ import annotations

import csv
import math

import pytest

from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import msaccucmp_csv

METRICS = ["CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance",
           "KullbackLeiblerDivergence", "StandardDeviation", "MeanAbsoluteError", "RootMeanSquareError",
           "MaxRelativeError", "MeanRelativeError"]


def header(overflow=True, sequence=False, golden_address=True):
    return (["Index"] + (["OpSequence"] if sequence else []) + ["OpType", "NPUDump", "DataType", "Address",
            "GroundTruth", "DataType"] + (["Address"] if golden_address else []) + ["TensorIndex", "Shape"]
            + (["OverFlow"] if overflow else []) + METRICS + ["CompareFailReason"])


def row(head, i, op, npu, golden, cos, red=0.0, overflow="NO", reason="", tensor="output:0", dtypes=("DT_FLOAT16",
                                                                                                        "float32")):
    """One row by column name; the two DataType cells by position (NPU first, then golden)."""
    values = {"Index": str(i), "OpSequence": str(i), "OpType": op, "NPUDump": npu, "GroundTruth": golden,
              "TensorIndex": f"{npu}:{tensor}", "Shape": "[1,8]", "OverFlow": overflow,
              "CosineSimilarity": cos, "MaxAbsoluteError": "0.5", "AccumulatedRelativeError": "0.1",
              "RelativeEuclideanDistance": str(red), "KullbackLeiblerDivergence": "0", "StandardDeviation":
              "(0.1;0.2),(0.1;0.2)", "MeanAbsoluteError": "0.01", "RootMeanSquareError": "0.01",
              "MaxRelativeError": "0.1", "MeanRelativeError": "0.01", "CompareFailReason": reason}
    out, golden = [], False
    for name in head:
        golden = golden or name == "GroundTruth"
        if name == "DataType":
            out.append(dtypes[golden])
        elif name == "Address":
            out.append("NaN" if golden else "0x10")
        else:
            out.append(values[name])
    return out


def write(path, head, rows, extra_lines=()):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        w.writerows(rows)
        for line in extra_lines:
            fh.write(line + "\n")
    return path


@pytest.mark.parametrize("overflow,sequence,golden_address", [(True, False, True), (False, True, False),
                                                              (True, True, False)])
def test_columns_by_side_and_the_advisor_order(tmp_path, overflow, sequence, golden_address):
    head = header(overflow, sequence, golden_address)
    rows = [row(head, 0, "Data", "x", "x", "1", tensor="input:0"),
            row(head, 1, "Conv2D", "conv1relu1", "conv1;relu1", "0.9995"),
            row(head, 2, "MatMul", "mm", "mm", "0.95", red=0.3),          # first op over the lines
            row(head, 3, "Exp", "exp", "exp", "NaN", overflow="YES"),     # overflow (when detected)
            row(head, 4, "TransData", "trans", "*", "NaN", reason="No golden data", dtypes=("DT_FLOAT16", "NaN"))]
    path = write(tmp_path / "result_1.csv", head, rows)
    assert detect_format(path).parser.name == "msaccucmp_csv"
    res = msaccucmp_csv.parse(path)
    t = res.tables["compare_results"]
    assert res.records == 5 and res.malformed == 0
    kinds = [f.kind for f in res.findings]
    assert kinds == (["fp16_overflow", "first_divergence"] if overflow else ["first_divergence"])
    top = ["exp", "mm"] if overflow else ["mm"]
    assert t["NPUDump"].tolist()[:len(top)] == top
    assert t["NPUDump"].tolist()[len(top):] == [n for n in ["x", "conv1relu1", "mm", "exp", "trans"] if n not in top]
    by = t.set_index("NPUDump")
    assert by.loc["mm", "DataType"] == "DT_FLOAT16" and by.loc["mm", "GroundTruthDataType"] == "float32"
    assert by.loc["mm", "Address"] == "0x10" and by.loc["mm", "GroundTruth"] == "mm"
    assert by.loc["mm", "AbnormalMetrics"] == "CosineSimilarity;RelativeEuclideanDistance"
    assert by.loc["conv1relu1", "CosineSimilarity"] == pytest.approx(0.9995) and not by.loc["conv1relu1", "Abnormal"]
    assert math.isnan(by.loc["exp", "CosineSimilarity"]) and by.loc["trans", "CompareFailReason"] == "No golden data"
    assert by.loc["mm", "StandardDeviation"] == "(0.1;0.2),(0.1;0.2)"
    if overflow:
        assert by.loc["exp", "OverFlow"] == True and by.loc["mm", "OverFlow"] == False  # noqa: E712 (numpy bools)
    else:
        assert t["OverFlow"].isna().all()


def test_inconsistent_inputs_come_before_the_first_divergence(tmp_path):
    head = header()
    rows = [row(head, 0, "Conv2D", "conv1", "conv1", "0.5", tensor="input:0"),
            row(head, 1, "Conv2D", "conv1", "conv1", "0.6"), row(head, 2, "Relu", "relu", "relu", "0.6")]
    res = msaccucmp_csv.parse(write(tmp_path / "r.csv", head, rows))
    assert [f.kind for f in res.findings] == ["inconsistent_input", "first_divergence"]
    assert res.tables["compare_results"]["Advice"].tolist()[:2] == ["inconsistent_input", "first_divergence"]


def test_malformed_rows_are_counted(tmp_path):
    head = header()
    rows = [row(head, 0, "Relu", "r", "r", "1"), row(head, 1, "Relu", "", "", "1")]
    path = write(tmp_path / "r.csv", head, rows, extra_lines=["7,Relu,short,row"])
    res = msaccucmp_csv.parse(path)
    assert res.records == 1 and res.malformed == 2
    assert any("no NPUDump and no GroundTruth" in n for n in res.notes)
    assert res.findings == []


def test_our_result_csv_is_read_with_the_same_meanings(tmp_path):
    """npuscope's result.csv uses the compare tool's columns (NPUDump = the op name, DataType = its dtype)."""
    import numpy as np

    from toolkit import samples
    from toolkit.commands.diagnose import diagnose_command
    from toolkit.config.schema import Config

    res = diagnose_command(str(samples.sample_path("resnet_small")), Config(), out=str(tmp_path / "rep"), html=False)
    table = res["diagnosis"].table
    stored = table[table["DataType"] != ""]
    assert (stored["NPUDump"] == stored["Kernel"]).all() and set(stored["DataType"]) <= {"float16", "float32"}
    assert (table.loc[table["OpType"] != "Input", "GroundTruth"] == table.loc[table["OpType"] != "Input",
                                                                               "NodeName"]).all()
    back = msaccucmp_csv.parse(tmp_path / "rep" / "result.csv").tables["compare_results"].set_index("GroundTruth")
    row = table.set_index("NodeName").loc["block2_a_relu"]
    assert back.loc["block2_a_relu", "NPUDump"] == row["Kernel"] == "block2_a_conv"
    assert back.loc["block2_a_relu", "DataType"] == "float16" and back.loc["block2_a_relu",
                                                                          "GroundTruthDataType"] == "float32"
    assert np.isclose(back.loc["block2_a_relu", "CosineSimilarity"], row["CosineSimilarity"])


@pytest.mark.parametrize("dtype,kind", [("DT_FLOAT16", "fp16_overflow"), ("DT_BF16", "fp16_overflow"),
                                        ("DT_FLOAT", "fp32_overflow"), ("DT_DOUBLE", "fp32_overflow")])
def test_an_overflow_on_an_fp32_dump_is_not_advised_keep_dtype(tmp_path, dtype, kind):
    """The compare tool's OverFlow on a row whose NPU dump is already FP32 (DT_FLOAT) is no FP16 overflow:
    keeping the op in FP32 cannot help, and the finding says so instead of advising keep_dtype."""
    head = header()
    rows = [row(head, 0, "Exp", "exp", "exp", "NaN", overflow="YES", dtypes=(dtype, "float32"))]
    res = msaccucmp_csv.parse(write(tmp_path / "result_1.csv", head, rows))
    f = next(f for f in res.findings if f.kind.endswith("_overflow"))
    assert f.kind == kind and f.subject == "exp"
    assert ("keep_dtype cannot help" in f.recommendation) is (kind == "fp32_overflow")
    assert ("keep it in FP32" in f.recommendation) is (kind == "fp16_overflow")


def test_a_compare_result_with_only_a_header_is_a_file_with_no_record(tmp_path):
    """Read like the other parsers' header-only files: no record, so parse-log says 'no record in it' (exit 2)."""
    from toolkit.commands.parse_log import read_file

    path = write(tmp_path / "result_1.csv", header(), [])
    res = msaccucmp_csv.parse(path)
    assert res.records == 0 and res.malformed == 0 and res.findings == []
    assert len(res.tables["compare_results"]) == 0 and "only a header" in res.notes[0]
    assert read_file(path)[1].startswith("msaccucmp_csv: no record in it (only a header")
