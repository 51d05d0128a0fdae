"""Formula-safe CSV cells (toolkit.core.csvjson): values on ordinary frames (written out by hand), the
inverse, list cells and CR quoting in csv_text, and frames 200,000 columns wide (built once, not per column)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from toolkit.core.csvjson import csv_text, formula_safe, map_text_cells, to_csv_safe, undo_formula_safe


def ordinary() -> pd.DataFrame:
    df = pd.DataFrame({
        "name": ["=1+2", "ok", "'x", "-3-A1", None],
        "n": [-1, 2, 3, 4, 5],
        "f": [-1.5, 0.0, np.nan, 2.5, 1e9],
        "cat": pd.Categorical(["@a", "b", "@a", "c", "b"]),
        "s": pd.array(["\tt", "u", None, "+v", "w"], dtype="string"),
        "mixed": [1, "+x", -2, "y", np.nan],
        "=col": ["a", "b", "c", "d", "e"],
    })
    df.insert(2, "dup", ["=d", "e", "f", "g", "h"], allow_duplicates=True)
    df.insert(3, "dup", [1, 2, 3, 4, 5], allow_duplicates=True)
    return df


def test_formula_safe_values_on_an_ordinary_frame():
    df = ordinary()
    before = df.copy()
    out = formula_safe(df)
    assert list(out.columns) == ["name", "n", "dup", "dup", "f", "cat", "s", "mixed", "'=col"]
    assert out.iloc[:4, 0].tolist() == ["'=1+2", "ok", "''x", "'-3-A1"] and pd.isna(out.iloc[4, 0])  # None: NaN
    assert out.iloc[:, 1].tolist() == [-1, 2, 3, 4, 5] and out.iloc[:, 1].dtype == np.int64
    assert out.iloc[:, 2].tolist() == ["'=d", "e", "f", "g", "h"]
    assert out.iloc[:, 3].tolist() == [1, 2, 3, 4, 5] and out.iloc[:, 3].dtype == np.int64
    np.testing.assert_array_equal(out.iloc[:, 4].to_numpy(), [-1.5, 0.0, np.nan, 2.5, 1e9])
    assert out.iloc[:, 5].tolist() == ["'@a", "b", "'@a", "c", "b"] and out.iloc[:, 5].dtype == object
    assert out.iloc[:, 6].tolist()[:2] == ["'\tt", "u"] and out.iloc[:, 6].tolist()[3:] == ["'+v", "w"]
    assert out.iloc[:, 7].tolist()[:4] == [1, "'+x", -2, "y"] and np.isnan(out.iloc[4, 7])
    pd.testing.assert_frame_equal(df, before)  # the input is never modified


@pytest.mark.parametrize("text,defused", [("-1", False), ("+3.5", False), ("-2e-3", False), ("-.5", False),
                                          ("-1-1", True), ("-A1", True), ("+", True), ("-", True), ("=1", True),
                                          ("-1e", True), ("@2", True), ("\t1", True)])
def test_a_plain_number_in_a_text_column_is_not_defused(text, defused):
    """A text cell that is a plain decimal number ("-1": a log's process id) is what a spreadsheet reads as that
    number, never a formula: it is written as it is (it had become "'-1"); anything else starting with a formula
    character still gets the quote, and undo_formula_safe gives every cell back."""
    df = pd.DataFrame({"PID": [text, "7"]})
    out = formula_safe(df)
    assert out.iloc[0, 0] == ("'" + text if defused else text)
    assert undo_formula_safe(out).iloc[:, 0].tolist() == [text, "7"]


def test_undo_formula_safe_inverts_it_and_keeps_string_dtype():
    df = ordinary().drop(columns=["cat"])
    back = undo_formula_safe(formula_safe(df))
    assert list(back.columns) == list(df.columns)
    for i in range(df.shape[1]):
        want, got = df.iloc[:, i], back.iloc[:, i]
        assert [str(v) for v in got] == [str(v) for v in want], df.columns[i]
    s = pd.DataFrame({"s": pd.array(["'=a", "b", "''q"], dtype="string")})
    undone = undo_formula_safe(s)
    assert isinstance(undone["s"].dtype, pd.StringDtype) and undone["s"].tolist() == ["=a", "b", "'q"]


def test_csv_text_joins_lists_and_defuses_formulas():
    df = pd.DataFrame({"AbnormalMetrics": [["cos", "red"], []], "x": [1.5, np.nan], "=n": ["=a", "b"]})
    assert csv_text(df) == "AbnormalMetrics,x,'=n\ncos;red,1.5,'=a\n,,b\n"
    assert csv_text(None) == "\n"


def test_cr_in_a_cell_quotes_every_cell():
    df = pd.DataFrame({"a": ["x\ry"], "b": [1]})
    assert to_csv_safe(df, index=False, lineterminator="\n") == '"a","b"\n"x\ry","1"\n'
    plain = pd.DataFrame({"a": ["xy"], "b": [1]})
    assert to_csv_safe(plain, index=False, lineterminator="\n") == "a,b\nxy,1\n"


def test_map_text_cells_on_an_empty_and_a_numeric_frame():
    empty = pd.DataFrame()
    assert map_text_cells(empty, str.upper).shape == (0, 0)
    no_rows = pd.DataFrame({"a": pd.Series([], dtype=object), "b": pd.Series([], dtype=float)})
    out = map_text_cells(no_rows, str.upper)
    assert list(out.columns) == ["a", "b"] and len(out) == 0
    nums = pd.DataFrame({"a": [1, 2], "b": [0.5, -1.0]})
    pd.testing.assert_frame_equal(map_text_cells(nums, str.upper), nums)


@pytest.mark.parametrize("mixed", [False, True])
def test_200000_column_frames_round_trip(mixed):
    n = 200_000
    values = np.array([["=v", "w"] * (n // 2), ["x", "'-y"] * (n // 2)], dtype=object)
    # object columns, as the CSV readers build them (toolkit.logs.csvread)
    df = pd.DataFrame(values, columns=[f"c{i}" if i % 7 else f"-c{i}" for i in range(n)], dtype=object)
    if mixed:  # numeric columns between text ones keep their place and dtype
        df.insert(5, "num", [-1.0, 2.0])
        df.insert(n - 3, "int", [7, 8])
    safe = formula_safe(df)
    assert safe.shape == df.shape
    assert safe.iloc[0, 0] == "'=v" and safe.iloc[0, 1] == "w" and safe.iloc[1, 3] == "''-y"
    assert safe.columns[0] == "'-c0" and safe.columns[1] == "c1" and safe.columns[7 + mixed] == "'-c7"
    back = undo_formula_safe(safe)
    assert back.columns.tolist() == df.columns.tolist()
    text = [c for c in back.columns if c not in ("num", "int")]
    assert back[text].to_numpy().tolist() == values.tolist()
    if mixed:
        assert list(back.columns).index("num") == 5 and list(back.columns).index("int") == n - 3
        assert back["num"].tolist() == [-1.0, 2.0] and back["num"].dtype == np.float64
        assert back["int"].tolist() == [7, 8] and back["int"].dtype == np.int64


def test_names_with_bytes_that_are_not_utf8_are_written_escaped(tmp_path):
    """Kind: a path or file name whose bytes are not UTF-8 (os.fsdecode's lone surrogates) in any JSON, CSV or
    text file we write: escaped as \\xNN (what os.fsencode(name).decode("utf-8", "backslashreplace") shows), the
    file is UTF-8 and strict JSON, never a UnicodeEncodeError."""
    import json
    import os
    from pathlib import Path

    from toolkit.core.csvjson import atomic_write_text, json_safe, json_text

    name = os.fsdecode(b"nu/\xff\xfe.npz")
    shown = r"nu/\xff\xfe.npz"
    data = {"model": Path(name), name: [name, (name,)], "n": 1}
    assert json_safe(data) == {"model": shown, shown: [shown, [shown]], "n": 1}
    assert json.loads(json_text(data)) == {"model": shown, shown: [shown, [shown]], "n": 1}
    atomic_write_text(tmp_path / "t.json", json_text(data))
    assert json.loads((tmp_path / "t.json").read_bytes().decode("utf-8"))["model"] == shown
    atomic_write_text(tmp_path / "t.csv", csv_text(pd.DataFrame({"Input": [name, "good.npz"]})))
    assert (tmp_path / "t.csv").read_bytes().decode("utf-8") == "Input\n" + shown + "\ngood.npz\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.json"]  # no temporary file left
