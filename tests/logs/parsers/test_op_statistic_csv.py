"""The op_statistic CSV parser (toolkit/logs/parsers/op_statistic_csv.py): the documented format and impossible
values."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.logs.helpers import write_csv
from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import op_statistic_csv
from toolkit.profile.optable import OP_STATISTIC_COLUMNS, PROFILER_STATISTIC_COLUMNS


def _parse(path: Path, module: str):
    import importlib

    return importlib.import_module(f"toolkit.logs.parsers.{module}").parse(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_impossible_op_statistic_values_are_malformed_with_a_note(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("OP Type,Count,Total Time(us),Avg Time(us),Min Time(us),Max Time(us)\n"
                 "Conv,0,5,,,\nAdd,2.5,4,,,\nMul,3,6,-2,1,3\nSub,2,6,3,4,2\nOk,0,0,0,0,0\nRelu,2,6,3,2,4\n")
    res = _parse(p, "op_statistic_csv")
    table = res.tables["op_statistic"]
    assert table["OP Type"].tolist() == ["Ok", "Relu"] and res.malformed == 4
    notes = " | ".join(res.notes)
    for why in ("Count 0 with a time above 0", "Count not a whole number", "negative Avg Time(us)",
                "Min Time(us) above Max Time(us)"):
        assert f"1 row(s) malformed: {why}" in notes, notes


def test_op_statistic_csv_parser(tmp_path):
    rows = [["Conv2D", "AI_CORE", 4, 50.0, 12.5, 10, 15, 62.5], ["Cast", "AI_VECTOR_CORE", 2, "30.0\t", 15, 14, 16, 37.5],
            ["", "AI_CORE", 1, 1, 1, 1, 1, 0], ["Bad", "AI_CORE", "x", 1, 1, 1, 1, 0]]
    path = tmp_path / "op_statistic_0_1.csv"
    write_csv(path, PROFILER_STATISTIC_COLUMNS, rows)  # a real device's file: no Time Kind column
    assert detect_format(path).parser.name == "op_statistic_csv"
    res = op_statistic_csv.parse(path)
    t = res.tables["op_statistic"]
    assert t["OP Type"].tolist() == ["Conv2D", "Cast"] and t["Total Time(us)"].tolist() == [50.0, 30.0]
    assert res.malformed == 2 and len(res.op_summary) == 0
    assert list(t.columns) == OP_STATISTIC_COLUMNS and t["Time Kind"].tolist() == ["device", "device"]
    ours = tmp_path / "op_statistic.csv"  # npuscope's own file keeps its Time Kind
    write_csv(ours, OP_STATISTIC_COLUMNS[:9], [["Conv", "AI_CORE", 1, 2, 2, 2, 2, 100, "simulated"],
                                           ["Conv", "HOST_CPU", 1, 9, 9, 9, 9, 100, "measured"]])
    assert op_statistic_csv.parse(ours).tables["op_statistic"]["Time Kind"].tolist() == ["simulated", "measured"]


def test_a_model_name_of_n_a_is_read_as_no_model(tmp_path):
    p = tmp_path / "op_statistic_0_1.csv"
    p.write_text("Device_id,Model Name,OP Type,Core Type,Count,Total Time(us),Avg Time(us),Min Time(us),Max Time(us),"
                 "Ratio(%)\n0,N/A,Add,AI_VECTOR_CORE,2,10,5,4,6,20\n0,resnet,Conv2D,AI_CORE,1,40,40,40,40,80\n")
    t = op_statistic_csv.parse(p).tables["op_statistic"]
    assert t["Model Name"].tolist() == ["", "resnet"]
