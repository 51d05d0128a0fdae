"""CSV reading shared by the parsers (toolkit/logs/csvread.py): rows wider or narrower than the header, columns
named twice, a BOM, and files that are not UTF-8 (GBK decoded as GB18030, other bytes counted)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _parse(path: Path, module: str):
    import importlib

    return importlib.import_module(f"toolkit.logs.parsers.{module}").parse(path)


WIDTH_CASES = {
    "op_summary_csv": ("Op Name,OP Type,Task Duration(us)\n", "good,Conv,5\n", ["x,Relu,7,2\n", "y,Relu\n"]),
    "op_statistic_csv": ("OP Type,Count,Total Time(us)\n", "Conv,2,10\n", ["Relu,1,3,4\n", "Add,1\n"]),
    "kernel_times_csv": ("Kernel,OpType,Precision,Nodes,HostMs\n", "k1,Conv,fp16,c,0.5\n",
                         ["k2,Relu,fp16,r,0.25,9\n", "k3,Relu,fp16,0.25\n"]),
}


pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")


@pytest.mark.parametrize("module", list(WIDTH_CASES))
def test_rows_wider_or_narrower_than_the_header_are_malformed_never_shifted(tmp_path, module):
    head, good, bad = WIDTH_CASES[module]
    p = tmp_path / "t.csv"
    p.write_text(head + bad[0] + good + bad[1] + "\n" + bad[0])
    res = _parse(p, module)
    assert (res.records, res.malformed) == (1, 3)
    assert any("3 row(s) with a number of fields other than the header's" in n for n in res.notes), res.notes
    if module == "op_statistic_csv":
        row = res.tables["op_statistic"].iloc[0]
        assert (row["OP Type"], row["Count"], row["Total Time(us)"]) == ("Conv", 2.0, 10.0)
    elif module == "op_summary_csv":
        row = res.op_summary.iloc[0]
        assert (row["Op Name"], row["OP Type"], row["Task Duration(us)"]) == ("good", "Conv", 5.0)
    else:
        row = res.op_summary.iloc[0]
        assert (row["Op Name"], row["OP Type"], row["Task Duration(us)"]) == ("k1", "Conv", 500.0)


@pytest.mark.parametrize("module, head, row", [
    ("op_summary_csv", "Op Name,OP Type,Task Duration(us),Task Duration(us)", "conv,Conv,5,7"),
    ("op_statistic_csv", "OP Type,Count,Count,Total Time(us)", "Conv,1,2,5"),
    ("kernel_times_csv", "Kernel,OpType,HostMs,HostMs", "k,Conv,1,2"),
])
def test_a_read_column_named_twice_is_refused(tmp_path, module, head, row):
    p = tmp_path / "d.csv"
    p.write_text(f"{head}\n{row}\n")
    with pytest.raises(ValueError, match="names column .* 2 times .*ambiguous"):
        _parse(p, module)


def test_an_unread_column_named_twice_is_noted(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("Op Name,OP Type,Task Duration(us),extra,extra\nconv,Conv,5,1,2\n")
    res = _parse(p, "op_summary_csv")
    assert res.records == 1 and res.op_summary["Task Duration(us)"].tolist() == [5.0]
    assert any("'extra' 2 times" in n for n in res.notes)


# ------------------------------------------------------------------------------------------- bytes of the file
def test_a_gbk_csv_is_decoded_as_gb18030_and_said_so(tmp_path):
    """Kind: a profiler CSV re-saved by Excel on Chinese-locale Windows (GBK): the op names come back as written
    and a note says how the file was decoded; no byte is replaced."""
    names = ["卷积", "池化层"]
    p = tmp_path / "g.csv"
    p.write_bytes(("Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us)\n"
                   + "".join(f"{n},Conv2D,AI_CORE,{i * 100},100\n" for i, n in enumerate(names))).encode("gbk"))
    res = _parse(p, "op_summary_csv")
    assert res.op_summary["Op Name"].tolist() == names and res.malformed == 0
    assert "decoded as GB18030 (not UTF-8)" in res.notes and not any("U+FFFD" in n for n in res.notes)


@pytest.mark.parametrize("module, head, row", [
    ("op_summary_csv", "Op Name,OP Type,Task Duration(us)", "café,Conv,5"),
    ("op_statistic_csv", "OP Type,Count,Total Time(us)", "Convé,2,10"),
    ("kernel_times_csv", "Kernel,OpType,Precision,Nodes,HostMs", "k1,Conv,fp16,nœud é,0.5"),
])
def test_bytes_no_encoding_decodes_are_counted_in_a_note(tmp_path, module, head, row):
    """Kind: Latin-1 / cp1252 text (neither UTF-8 nor GB18030): read with U+FFFD, and every CSV parser's notes
    count the replaced bytes and give the fix."""
    data = f"{head}\n{row}\n".encode("cp1252")
    p = tmp_path / "l.csv"
    p.write_bytes(data)
    res = _parse(p, module)
    n_bad = sum(b >= 0x80 for b in data)
    assert res.records == 1
    assert any(n.startswith(f"{n_bad} byte(s) that are not UTF-8 text were replaced by {n_bad} U+FFFD")
               and n.endswith("re-save it as UTF-8") for n in res.notes), res.notes


def test_a_csv_with_a_utf8_bom_reads_its_first_column(tmp_path):
    p = tmp_path / "b.csv"
    p.write_bytes(b"\xef\xbb\xbfOp Name,OP Type,Task Duration(us)\nconv,Conv,5\n")
    res = _parse(p, "op_summary_csv")
    assert res.op_summary["Op Name"].tolist() == ["conv"]
    assert not any("U+FFFD" in n or "GB18030" in n for n in res.notes), res.notes


@pytest.mark.parametrize("text, want", [("1,234.5", 1234.5), ("-12,000", -12000.0), ("1,234,567.25e3", 1234567250.0),
                                        ("\t7 ", 7.0), ("999", 999.0), ("1,5", None), ("12,34", None),
                                        ("1,23,456", None), ("N/A", None), ("", None)])
def test_numbers_with_thousands_separators_are_read(text, want):
    """A spreadsheet saves large numbers with thousands separators: a number grouped by threes is read without
    them; anything else with a comma (a decimal comma, other groupings) stays unparseable (NaN), never guessed."""
    import math

    import pandas as pd

    from toolkit.logs.csvread import numeric

    got = numeric(pd.Series([text]))[0]
    assert (math.isnan(got) if want is None else got == want), got


@pytest.mark.parametrize("module", ["op_summary_csv", "op_statistic_csv"])
def test_a_profiler_csv_saved_with_thousands_separators_loses_no_row(tmp_path, module):
    head, rows = {"op_summary_csv": ("Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us)\n",
                                     ['conv,Conv2D,AI_CORE,"1,000","12,345.5"\n', "relu,Relu,AI_CORE,2,10\n"]),
                  "op_statistic_csv": ("OP Type,Core Type,Count,Total Time(us)\n",
                                       ['Conv2D,AI_CORE,"1,200","12,345.5"\n', "Relu,AI_CORE,3,10\n"])}[module]
    p = tmp_path / "t.csv"
    p.write_text(head + "".join(rows))
    res = _parse(p, module)
    frame = res.op_summary if module == "op_summary_csv" else res.tables["op_statistic"]
    col = "Task Duration(us)" if module == "op_summary_csv" else "Total Time(us)"
    assert sorted(frame[col].tolist()) == [10.0, 12345.5] and res.malformed == 0
