"""msprobe's compare result CSV (toolkit/logs/parsers/msprobe_compare_csv.py), written here from msprobe's
CompareConst headers (real-data, statistics and md5 modes; the older NPU Tensor Dtype name)."""

from __future__ import annotations

import csv

import pytest

from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import msprobe_compare_csv

REAL = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape", "Cosine",
        "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "NPU max", "NPU min",
        "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Accuracy Reached or Not",
        "Err_message"]
SUMMARY = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape", "Max diff",
           "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr",
           "NormRelativeErr", "NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean",
           "Bench l2norm", "Result", "Err_message"]
MD5 = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape", "NPU MD5",
       "BENCH MD5", "Result"]


def write(path, head, rows, extra=()):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        for r in rows:
            w.writerow([r.get(h, "") for h in head])
        for line in extra:
            fh.write(line + "\n")
    return path


def api(name, io="output", i=0):
    return f"Functional.{name}.0.forward.{io}.{i}"


@pytest.mark.parametrize("dtype_col", ["NPU Dtype", "NPU Tensor Dtype"])
def test_real_data_mode(tmp_path, dtype_col):
    head = [dtype_col if h == "NPU Dtype" else h for h in REAL]
    rows = [{"NPU Name": api("conv2d", "input"), "Bench Name": api("conv2d", "input"), dtype_col: "torch.float16",
             "Bench Dtype": "torch.float32", "Cosine": "1.0", "MaxAbsErr": "0", "Accuracy Reached or Not": "Yes"},
            {"NPU Name": api("conv2d"), "Bench Name": api("conv2d"), dtype_col: "torch.float16",
             "Bench Dtype": "torch.float32", "Cosine": "0.9999", "MaxAbsErr": "0.0001", "Accuracy Reached or Not": "Yes"},
            {"NPU Name": api("gelu"), "Bench Name": api("gelu"), "Cosine": "0.98", "MaxAbsErr": "2.5",
             "Accuracy Reached or Not": "No"},
            {"NPU Name": api("softmax"), "Bench Name": "N/A", "Cosine": "N/A", "MaxAbsErr": "N/A",
             "Accuracy Reached or Not": "N/A", "Err_message": "No bench data matched."}]
    path = write(tmp_path / "compare_result_1.csv", head, rows)
    assert detect_format(path).parser.name == "msprobe_compare_csv"
    res = msprobe_compare_csv.parse(path)
    t = res.tables["compare_results"]
    assert [f.kind for f in res.findings] == ["first_divergence"]
    assert t["NPUDump"].iloc[0] == api("gelu") and t["Advice"].iloc[0] == "first_divergence"
    by = t.set_index("NPUDump")
    assert by.loc[api("conv2d"), "DataType"] == "torch.float16" and by.loc[api("conv2d"), "OpType"] == "conv2d"
    assert by.loc[api("conv2d", "input"), "TensorIndex"] == "input:0"
    assert by.loc[api("gelu"), "CosineSimilarity"] == pytest.approx(0.98) and by.loc[api("gelu"), "Accuracy"] == "No"
    assert by.loc[api("softmax"), "CompareFailReason"] == "No bench data matched."
    assert not by.loc[api("softmax"), "Abnormal"]


@pytest.mark.parametrize("head,result", [(SUMMARY, "Warning"), (MD5, "Different")])
def test_statistics_and_md5_modes_judge_by_result(tmp_path, head, result):
    rows = [{"NPU Name": api("add"), "Bench Name": api("add"), "Result": "Pass" if head is MD5 else ""},
            {"NPU Name": api("mul"), "Bench Name": api("mul"), "Result": result}]
    res = msprobe_compare_csv.parse(write(tmp_path / "c.csv", head, rows))
    t = res.tables["compare_results"]
    assert t["Abnormal"].tolist() == [True, False] and t["NPUDump"].iloc[0] == api("mul")


def test_malformed_rows_are_counted(tmp_path):
    rows = [{"NPU Name": api("add"), "Bench Name": api("add"), "Cosine": "1"}, {"NPU Name": "", "Bench Name": "x"}]
    res = msprobe_compare_csv.parse(write(tmp_path / "c.csv", REAL, rows, extra=["a,b"]))
    assert res.records == 1 and res.malformed == 2


@pytest.mark.parametrize("head", [REAL, SUMMARY, MD5])
def test_a_compare_result_with_only_a_header_is_a_file_with_no_record(tmp_path, head):
    from toolkit.commands.parse_log import read_file

    path = write(tmp_path / "compare_result_1.csv", head, [])
    res = msprobe_compare_csv.parse(path)
    assert res.records == 0 and res.malformed == 0 and res.findings == []
    assert len(res.tables["compare_results"]) == 0 and "only a header" in res.notes[0]
    assert read_file(path)[1].startswith("msprobe_compare_csv: no record in it (only a header")
