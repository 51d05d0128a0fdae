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


# ------------------------------------------------------------------------------------ trailing commas, chunks
def test_rows_ending_in_a_trailing_comma_are_read_as_the_header_columns(tmp_path):
    """Kind: a trailing empty field (``a,b,``) on the rows and not on the header, or on the header and not on the
    rows: every row is read under the header's names (a note says so), never counted as malformed."""
    import pandas as pd

    from toolkit.logs.csvread import read_counted

    rows = [["conv", "Conv", "5.5"], ["relu", "Relu", "1.25"]]
    want = pd.DataFrame(rows, columns=["Op Name", "OP Type", "Task Duration(us)"])
    for name, head, tail in (("rows", "Op Name,OP Type,Task Duration(us)\n", ","),
                             ("header", "Op Name,OP Type,Task Duration(us),\n", ""),
                             ("both", "Op Name,OP Type,Task Duration(us),\n", ",")):
        p = tmp_path / f"{name}.csv"
        p.write_text(head + "".join(",".join(r) + tail + "\n" for r in rows))
        got = read_counted(p)
        assert got.malformed == 0, name
        pd.testing.assert_frame_equal(got.frame, want, check_dtype=False)
    got = read_counted(tmp_path / "rows.csv")
    assert any("trailing comma" in n for n in got.notes), got.notes
    p = tmp_path / "extra.csv"
    p.write_text("a,b\n1,2,3\n1,2,\n")  # a field with data past the header is still malformed
    got = read_counted(p)
    assert got.malformed == 1 and got.frame.values.tolist() == [["1", "2"]]


def test_op_summary_rows_with_a_trailing_comma_are_parsed(tmp_path):
    import pandas as pd

    from toolkit.logs.parsers import op_summary_csv

    p = tmp_path / "trail.csv"
    p.write_text("Op Name,OP Type,Task Type,Task Duration(us)\nconv,Conv,AI_CORE,5.5,\nrelu,Relu,AI_VECTOR_CORE,1.25,\n")
    res = op_summary_csv.parse(p)
    want = pd.read_csv(p, index_col=False, usecols=range(4))  # pandas: the trailing field dropped
    assert (res.records, res.malformed) == (2, 0)
    assert res.op_summary["Task Duration(us)"].tolist() == want["Task Duration(us)"].tolist()
    assert res.op_summary["Op Name"].tolist() == want["Op Name"].tolist()


@pytest.mark.parametrize("chunk_rows", [1, 7, 10_000])
def test_a_csv_read_in_chunks_gives_the_rows_of_one_read(tmp_path, chunk_rows):
    """Kind: bounded-memory reading (rows typed chunk by chunk through ``convert``): any chunk size gives the
    rows pandas reads from the whole file, in order, malformed rows counted wherever they fall."""
    import pandas as pd

    from toolkit.logs.csvread import read_counted

    p = tmp_path / "t.csv"
    lines = ["Op Name,OP Type,Task Duration(us)"]
    for i in range(50):
        lines.append(f"op{i},{'Conv' if i % 3 else 'Relu'},{i * 0.5}")
        if i % 11 == 5:
            lines.append("bad,row")
    p.write_text("\n".join(lines) + "\n")
    want = pd.read_csv(p, dtype=str, on_bad_lines="skip", keep_default_na=False)
    want = want[want["Task Duration(us)"] != ""].reset_index(drop=True)  # pandas pads the short rows

    def typed(chunk):
        return chunk.assign(**{"Task Duration(us)": pd.to_numeric(chunk["Task Duration(us)"])})

    got = read_counted(p, convert=typed, chunk_rows=chunk_rows)
    assert got.malformed == 5 and got.columns == ["Op Name", "OP Type", "Task Duration(us)"]
    assert got.frame["Op Name"].tolist() == want["Op Name"].tolist()
    assert got.frame["OP Type"].tolist() == want["OP Type"].tolist()
    assert got.frame["Task Duration(us)"].tolist() == pd.to_numeric(want["Task Duration(us)"]).tolist()
    assert list(got.frame.index) == list(range(50))


def test_repeated_texts_of_a_long_csv_share_one_string(tmp_path):
    """Kind: memory of a profiler CSV: a value repeated on every row (OP Type, shapes) is one string object,
    not one per row; the values are unchanged."""
    import pandas as pd

    from toolkit.logs import csvread

    p = tmp_path / "t.csv"
    n = csvread.SHARED_MIN_ROWS * 3
    p.write_text("Op Name,OP Type\n" + "".join(f"op{i},Conv\n" for i in range(n)))
    got = csvread.read_counted(p, chunk_rows=csvread.SHARED_MIN_ROWS)
    assert got.frame["OP Type"].tolist() == pd.read_csv(p)["OP Type"].tolist()
    assert len({id(v) for v in got.frame["OP Type"]}) == 1


def test_malformed_mask_with_no_check_passes_every_row():
    import pandas as pd

    from toolkit.logs.csvread import malformed_mask

    ok, notes = malformed_mask({}, index=pd.RangeIndex(3))
    assert ok.tolist() == [True, True, True] and notes == []
    ok, notes = malformed_mask({})
    assert len(ok) == 0 and ok.dtype == bool and notes == []


def test_formula_prefixes_are_undone_in_whichever_chunk_holds_them(tmp_path):
    """Our own CSVs write '=x as ''=x'' (toolkit.core.csvjson.formula_safe): undone in every chunk that has one,
    other chunks read as they are; the header's prefix is undone either way."""
    from toolkit.logs.csvread import read_counted

    path = tmp_path / "t.csv"
    path.write_text("'=name,b\nplain,1\nit's,2\n'-neg,3\n'@at,4\nlast,'5\n")
    for chunk_rows in (1, 2, 100):
        read = read_counted(path, chunk_rows=chunk_rows)
        assert list(read.frame.columns) == ["=name", "b"]
        assert read.frame["=name"].tolist() == ["plain", "it's", "-neg", "@at", "last"]
        assert read.frame["b"].tolist() == ["1", "2", "3", "4", "'5"]


def test_map_distinct_is_map_called_once_per_distinct_value():
    import pandas as pd

    from toolkit.logs.csvread import map_distinct

    calls = []

    def fn(v):
        calls.append(v)
        return f"<{v}>"

    s = pd.Series(["a", "b", "a", None, "b", "a"], index=[5, 4, 3, 2, 1, 0], dtype=object)
    got = map_distinct(s, fn)
    want = s.map(lambda v: f"<{v}>")
    pd.testing.assert_series_equal(got, want)
    assert sorted(calls, key=str) == sorted(["a", "b", None], key=str)
