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
