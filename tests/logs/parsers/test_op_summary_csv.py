"""The op_summary CSV parser (toolkit/logs/parsers/op_summary_csv.py): the documented format and impossible
values."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.logs.helpers import write_csv
from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import op_summary_csv
from toolkit.profile.optable import OP_SUMMARY_COLUMNS


def _parse(path: Path, module: str):
    import importlib

    return importlib.import_module(f"toolkit.logs.parsers.{module}").parse(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_impossible_op_summary_values_are_malformed_with_a_note(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("Op Name,OP Type,Task ID,Task Start Time(us),Task Duration(us),Task Wait Time(us)\n"
                 "a,Conv,1.5,0,5,0\nb,Conv,2,0,-1,0\nc,Conv,3,0,5,-4\nd,Conv,4,-7,5,0\ne,Conv,5,10,5,0\n")
    res = _parse(p, "op_summary_csv")
    assert res.op_summary["Op Name"].tolist() == ["e"] and res.malformed == 4
    notes = " | ".join(res.notes)
    for why in ("Task ID negative or not a whole number", "negative Task Duration(us)", "negative Task Wait Time(us)",
                "negative Task Start Time(us)"):
        assert f"1 row(s) malformed: {why}" in notes, notes


def test_op_summary_csv_parser(tmp_path):
    cols = ["Device_id", "Model Name", "Task ID", "Stream ID", "Op Name", "OP Type", "Task Type",
            "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes",
            "aicore_time(us)"]
    rows = [[0, "m", 1, 3, "conv1", "Conv2D", "AI_CORE", "1690000000000.5\t", "12.5\t", "0", 8, '"1,3,8,8"', 11.0],
            [0, "m", 2, 3, "cast1", "Cast", "AI_VECTOR_CORE", "1690000000020.0\t", "3.25", "1.5", 1, "", 2.0],
            [0, "m", 3, 4, "topk", "TopKV2", "AI_CPU", "1690000000030.0", "40", "N/A", 1, "", "N/A"],
            [0, "m", 4, 3, "", "Add", "AI_CORE", "1", "2", "0", 1, "", 1],             # no Op Name
            [0, "m", 5, 3, "bad_dur", "Add", "AI_CORE", "1", "N/A", "0", 1, "", 1],    # duration not a number
            [0, "m", 6, 3, "neg", "Add", "AI_CORE", "1", "-2", "0", 1, "", 1]]         # negative
    path = tmp_path / "op_summary_0_1.csv"
    write_csv(path, cols, rows)
    with open(path, "a") as fh:
        fh.write("0,m,7,3,too,many,fields,1,2,3,4,5,6,7,8\n0,m,8,3,trunc")      # too many fields; truncated
    assert detect_format(path).parser.name == "op_summary_csv"
    res = op_summary_csv.parse(path)
    s = res.op_summary
    assert list(s.columns) == OP_SUMMARY_COLUMNS
    assert s["Op Name"].tolist() == ["conv1", "cast1", "topk"] and res.malformed == 5
    assert s["Task Duration(us)"].tolist() == [12.5, 3.25, 40.0]
    assert s["Task Start Time(us)"].iloc[0] == 1690000000000.5 and np.isnan(s["Task Wait Time(us)"].iloc[2])
    assert set(s["Time Kind"]) == {"device"} and set(s["Source"]) == {path.name}


# ------------------------------------------------------------- op_summary across toolchain versions (issue 19)
NEW_HEAD = ["Device_id", "Model Name", "Task ID", "Stream ID", "Op Name", "OP Type", "Task Type",
            "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Num", "Mix Block Num",
            "Input Shapes", "Input Data Types", "Output Shapes"]
OLD_HEAD = ["Model Name", "Task ID", "Stream ID", "Op Name", "OP Type", "Task Type", "Task Start Time",
            "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes"]


def _write(path, head, rows):
    import csv

    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        w.writerows(rows)
    return path


def test_a_newer_op_summary_keeps_every_column_under_one_name(tmp_path):
    rows = [["0", "resnet", "1", "3", "conv1", "Conv2D", "AI_CORE", "1700000000000000.123\t", "12.5", "0", "8", "0",
             '"""1,3,224,224"""', "FLOAT16", '"1,64,112,112"'],
            ["1", "resnet", "1", "3", "conv1", "Conv2D", "AI_CORE", "1700000000000000.375", "10.5", "0", "8", "0",
             '"1,3,224,224"', "FLOAT16", "1,64,112,112"],
            ["0", "bert", "2", "3", "mm", "MatMulV2", "MIX_AIC", "1700000000000001.000", "4", "0", "20", "40", "", "", ""],
            ["0", "resnet", "9", "5", "hcom_allReduce__7", "hcom_allReduce_", "HCCL", "1700000000000002", "30", "0",
             "0", "0", "", "", ""],
            ["0", "resnet", "10", "3", "bad", "Relu", "AI_CORE", "-5", "1", "0", "1", "0", "", "", ""]]
    path = _write(tmp_path / "op_summary_0_1_1.csv", NEW_HEAD, rows)
    res = op_summary_csv.parse(path)
    s = res.op_summary
    assert list(s.columns) == OP_SUMMARY_COLUMNS and res.malformed == 1
    assert s["Device_id"].tolist() == ["0", "1", "0", "0"]
    assert s["Block Dim"].tolist() == [8, 8, 20, 0] and s["Mix Block Dim"].tolist() == [0, 0, 40, 0]
    assert s["Task Start Time(ns)"].tolist() == ["1700000000000000123", "1700000000000000375", "1700000000000001000",
                                                 "1700000000000002000"]
    # the float column cannot tell .123 from .125 at this clock value; the ns text can
    assert int(s["Task Start Time(ns)"][1]) - int(s["Task Start Time(ns)"][0]) == 252
    assert s["Input Shapes"].tolist()[:2] == ["1,3,224,224", "1,3,224,224"] and s["Output Shapes"][0] == "1,64,112,112"
    assert s["Task Type"].tolist() == ["AI_CORE", "AI_CORE", "MIX_AIC", "COMMUNICATION"]
    from toolkit.profile.optable import op_statistic

    stat = op_statistic(s)
    conv = stat[stat["OP Type"] == "Conv2D"]
    assert sorted(zip(conv["Device_id"], conv["Model Name"], conv["Count"])) == [("0", "resnet", 1), ("1", "resnet", 1)]
    assert set(stat.loc[stat["Model Name"] == "bert", "OP Type"]) == {"MatMulV2"}
    comm = stat[stat["Core Type"] == "COMMUNICATION"]
    assert comm["Total Time(us)"].tolist() == [30.0]


def test_an_older_op_summary_with_the_unit_less_start_in_ns(tmp_path):
    rows = [["m", "1", "3", "conv1", "Conv2D", "AI_CORE", "1700000000000000123", "12.5", "0", "8", '"1,3"'],
            ["m", "2", "3", "relu", "Relu", "AI_VECTOR_CORE", "1700000000000020500", "2", "0", "4", "1,3"],
            ["m", "3", "3", "bad", "Relu", "AI_VECTOR_CORE", "12.5.7", "x", "0", "4", ""]]
    res = op_summary_csv.parse(_write(tmp_path / "op_summary.csv", OLD_HEAD, rows))
    s = res.op_summary
    assert res.malformed == 1 and s["Op Name"].tolist() == ["conv1", "relu"]
    assert s["Task Start Time(ns)"].tolist() == ["1700000000000000123", "1700000000000020500"]
    assert s["Task Start Time(us)"].tolist() == pytest.approx([1700000000000000.123, 1700000000000020.5])
    assert s["Input Shapes"].tolist() == ["1,3", "1,3"]


def test_a_model_name_of_n_a_is_empty_in_op_summary_and_op_statistic_alike(tmp_path):
    """msprof writes Model Name N/A for a run with no model (aclnn single ops): no name, in both outputs; the
    statistic's counts and totals from pandas over the rows written here."""
    import io
    import json

    import pandas as pd

    from toolkit.commands.parse_log import parse_log_command

    text = ("Device_id,Model Name,Task ID,Stream ID,Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us)\n"
            "0,N/A,10,2,aclnnAdd_1,Add,AI_VECTOR_CORE,100.5,4.5\n0,N/A,11,2,aclnnMatmul_1,MatMulV3,MIX_AIC,110,40\n"
            "0, n/a ,12,2,aclnnAdd_2,Add,AI_VECTOR_CORE,160,5.5\n1,bert,13,2,bert_mm,MatMulV3,MIX_AIC,200,10\n")
    path = tmp_path / "op_summary_0_1.csv"
    path.write_text(text)
    assert set(op_summary_csv.parse(path).op_summary["Model Name"]) == {"", "bert"}
    res = parse_log_command([str(path)], out=str(tmp_path / "rep"), html=False)
    summary = pd.read_csv(res["out"] / "op_summary.csv", keep_default_na=False, dtype={"Model Name": str})
    stat = pd.read_csv(res["out"] / "op_statistic.csv", keep_default_na=False, dtype={"Model Name": str})
    assert summary["Model Name"].tolist() == ["", "", "", "bert"]
    src = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    src["Model Name"] = src["Model Name"].str.strip().replace({"N/A": "", "n/a": ""})
    src["Task Duration(us)"] = src["Task Duration(us)"].astype(float)
    want = src.groupby(["Model Name", "OP Type"])["Task Duration(us)"].agg(["count", "sum"]).sort_index()
    got = stat.set_index(["Model Name", "OP Type"])[["Count", "Total Time(us)"]].sort_index()
    assert got.index.tolist() == want.index.tolist()
    assert got["Count"].tolist() == want["count"].tolist()
    assert got["Total Time(us)"].tolist() == pytest.approx(want["sum"].tolist())
    assert json.loads((res["out"] / "parse_summary.json").read_text())["rows"] == 4
