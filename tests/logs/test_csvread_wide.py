"""parse-log's CSV reading (toolkit.logs.csvread.read_counted): the frame of an ordinary CSV (written out by
hand: malformed rows, blank rows, a repeated header name, our own formula prefixes undone), and CSVs 200,000
columns wide, read by read_counted and parsed end to end as an op_summary (linear: the frame is built once)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from toolkit.logs.csvread import read_counted
from toolkit.profile.optable import OP_SUMMARY_COLUMNS

ORDINARY = (
    "Op Name,OP Type,Task Duration(us),Op Name,extra\n"
    "'=conv,Conv,1.5,dup,e1\n"
    "relu,Relu,2.0,dup,\"e,2\"\n"
    "bad,row\n"
    ",,,,\n"
    "too,many,1,2,3,4\n"
    "last,Add,3,d,'-e3\n"
)


def test_ordinary_csv_frame(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(ORDINARY)
    read = read_counted(path)
    assert list(read.frame.columns) == ["Op Name", "OP Type", "Task Duration(us)", "extra"]
    assert read.frame.to_numpy().tolist() == [["=conv", "Conv", "1.5", "e1"], ["relu", "Relu", "2.0", "e,2"],
                                              ["last", "Add", "3", "-e3"]]
    assert all(read.frame[c].dtype == object for c in read.frame.columns)
    assert read.malformed == 2
    assert read.notes == ["the header names column 'Op Name' 2 times (columns 1, 4); not read, ignored",
                          "2 row(s) with a number of fields other than the header's 5 skipped (malformed)"]


def test_repeated_column_that_is_used_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(ORDINARY)
    with pytest.raises(ValueError, match=r"'Op Name' 2 times \(columns 1, 4\)"):
        read_counted(path, used=("Op Name",))


def test_header_only_gives_an_empty_frame_with_the_columns(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,'=c\n")
    read = read_counted(path)
    assert list(read.frame.columns) == ["a", "b", "=c"] and len(read.frame) == 0 and read.malformed == 0


WIDE = 200_000


def write_wide(path: Path, extra: int) -> None:
    """An op_summary CSV with the profiler's columns, ``extra`` more, and 3 rows."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(OP_SUMMARY_COLUMNS) + [f"x{i}" for i in range(extra)])
        for k in range(3):
            base = {"Op Name": f"conv{k}", "OP Type": "Conv2D", "Task Type": "AI_CORE",
                    "Task Duration(us)": str(10 + k), "Task Start Time(us)": str(100 * k), "Task Wait Time(us)": "0"}
            w.writerow([base.get(c, "1") for c in OP_SUMMARY_COLUMNS] + [f"'={k}" if i % 2 else str(i)
                                                                          for i in range(extra)])


def test_200000_column_csv_reads(tmp_path):
    path = tmp_path / "wide.csv"
    write_wide(path, WIDE)
    read = read_counted(path)
    n0 = len(OP_SUMMARY_COLUMNS)
    assert read.frame.shape == (3, n0 + WIDE) and read.malformed == 0
    assert read.frame.columns[n0] == "x0" and read.frame.columns[-1] == f"x{WIDE - 1}"
    assert read.frame.iloc[2, n0 + 1] == "=2" and read.frame.iloc[1, n0 + 123_456] == "123456"
    assert read.frame["Op Name"].tolist() == ["conv0", "conv1", "conv2"]


def test_200000_column_op_summary_parses_end_to_end(tmp_path):
    from toolkit.commands.parse_log import parse_log_command

    path = tmp_path / "op_summary_0_1.csv"
    write_wide(path, WIDE)
    res = parse_log_command([str(path)], out=str(tmp_path / "out"), html=False)
    assert res["parsed"] == 1 and res["malformed"] == 0
    from toolkit.logs.parsers import op_summary_csv

    table = op_summary_csv.parse(path).op_summary
    assert table["Op Name"].tolist() == ["conv0", "conv1", "conv2"]
    assert table["Task Duration(us)"].tolist() == [10.0, 11.0, 12.0]
