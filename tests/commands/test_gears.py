"""The gears command's lengths files and config snippets (toolkit/commands/gears.py): numbers, lines and CSV
rows, and every snippet it emits is a valid config."""

from __future__ import annotations

import os

import numpy as np
import pytest

from toolkit import samples
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError
from toolkit.gears.session import GearSession
from toolkit.gears.spec import MAX_GEARS, MIN_GEARS, parse_gears
from toolkit.commands.gears import config_snippet, read_lengths, recommend


@pytest.mark.parametrize("name, content", [("/dev/null", None), ("empty.txt", b""), ("blank.txt", b"\n  \n")])
def test_empty_lengths_file_is_not_called_missing(tmp_path, name, content):
    from toolkit.commands.gears import read_lengths

    path = name if content is None else tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as info:
        read_lengths(path)
    msg = str(info.value)
    assert "does not exist" not in msg and ("is empty" in msg or "holds no lengths" in msg)
    if name == "/dev/null":
        assert "not a regular file" in msg


def test_csv_blank_lines_keep_line_numbers(tmp_path):
    f = tmp_path / "b.csv"
    f.write_text("\n\nid,len\n1,10\n\n2,20\n3,x\n")  # 'x' sits on line 7
    with pytest.raises(InputError, match=r"line 7 column 'len': 'x' is not a length"):
        read_lengths(f, "len")
    f.write_text("\n\nid,len\n1,10\n\n2,20\n")
    assert read_lengths(f, "len").tolist() == [10, 20]


@pytest.mark.parametrize("text", ["１２", "١٢", "1２"])
def test_non_ascii_digits_are_refused(tmp_path, text):
    f = tmp_path / "l.txt"
    f.write_text(f"5\n{text}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line 2: .* is not a length .*ASCII"):
        read_lengths(f)
    c = tmp_path / "l.csv"
    c.write_text(f"len\n5\n{text}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line 3 column 'len'"):
        read_lengths(c, "len")
    f.write_text("5\n12\n")
    assert read_lengths(f).tolist() == [5, 12]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("text, line", [
    ("5\n6\f7\nabc\n", 2), ("6\f7\n9\n", 1), ("5\n6\v7\n", 2), ("5\r\n6\r7\n", 2), ("5\n6\u20287\n", 2),
    ("5\n# c\n\n5.000000000000000001\n", 4), ("5\n4.5\n", 2), ("1\n2\n3\n0.999999999999999999999\n", 4),
])
def test_lengths_lines_split_only_at_newline_and_errors_name_the_line(tmp_path, text, line):
    from toolkit.core.errors import InputError
    from toolkit.commands.gears import read_lengths

    p = tmp_path / "l.txt"
    p.write_bytes(text.encode())
    with pytest.raises(InputError, match=f"line {line}: "):
        read_lengths(p)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_lengths_crlf_and_documented_whole_forms(tmp_path):
    from toolkit.commands.gears import read_lengths

    p = tmp_path / "l.txt"
    p.write_bytes(b"5\r\n12.0\r\n1e3\r\n+7\r\n")
    assert read_lengths(p).tolist() == [5, 12, 1000, 7]  # docs/gears.md: `12`, `12.0`, `1e3` are whole numbers


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("text, line", [
    ('len,note\n5,"two\nlines"\nx,c\n', 4), ("len\n5\n6\f7\n", 3), ("len,n\n5,a\r6,b\n", 2), ("len,n\n5,a\n6\n", 3),
    ("len\n5\n5.000000000000000001\n", 3),
])
def test_lengths_csv_errors_name_the_line_where_the_row_starts(tmp_path, text, line):
    from toolkit.core.errors import InputError
    from toolkit.commands.gears import read_lengths

    p = tmp_path / "l.csv"
    p.write_bytes(text.encode())
    with pytest.raises(InputError, match=f"line {line}"):
        read_lengths(p, "len")


def test_read_lengths_lines_and_csv(tmp_path):
    p = tmp_path / "l.txt"
    p.write_text("# lengths\n12\n\n7\n  30 \n")
    assert read_lengths(p).tolist() == [12, 7, 30]
    c = tmp_path / "l.csv"
    c.write_text("id,len\na,4\nb,\nc,9\n")
    with pytest.raises(InputError, match="line 3 column 'len'"):  # an empty cell is refused, not dropped
        read_lengths(c, "len")
    c.write_text("id,len\na,4\nc,9\n")
    assert read_lengths(c, "len").tolist() == [4, 9]


@pytest.mark.parametrize("text,column,msg", [
    ("12\nabc\n", None, r"line 2: 'abc' is not a length"),
    ("id,len\n1,2\n", None, r"line 1: 'id,len' is not a length \(for a CSV give --column NAME\)"),
    ("5\n-3\n", None, "line 2: '-3' is not a positive integer"),
    ("4.5\n", None, "not a positive integer"),
    ("# nothing\n", None, "holds no lengths"),
    ("id,len\n1,2\n", "length", "no column 'length' \\(did you mean 'len'\\?\\)"),
    ("id,len\n1,x\n", "len", "line 2 column 'len': 'x' is not a length"),
])
def test_read_lengths_errors(tmp_path, text, column, msg):
    p = tmp_path / "l.txt"
    p.write_text(text)
    with pytest.raises(InputError, match=msg) as exc:
        read_lengths(p, column)
    assert "\n" not in str(exc.value)


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------------------ lengths file numbers (kind)
BAD_LENGTHS = ["99999999999999999999999", "1" * 5000, "2147483648", "1e400", "-1e400", "inf", "-inf", "nan", "NaN",
               "-3", "0", "0.0", "4.5", "1e-3", "abc", "0x10", "1_000", "12abc", "--5", "1e", "."]
GOOD_LENGTHS = {"7": 7, "+7": 7, "007": 7, "12.0": 12, "1e3": 1000, "2147483647": 2147483647}


@pytest.mark.parametrize("form", ["lines", "csv"])
@pytest.mark.parametrize("value", BAD_LENGTHS)
def test_every_bad_number_in_a_lengths_file_is_one_line_naming_the_line(tmp_path, form, value):
    p = tmp_path / "l.txt"
    if form == "lines":
        p.write_text(f"5\n# c\n{value}\n")
        where = "line 3"
    else:
        p.write_text(f"id,len\na,5\nb,{value}\n")
        where = "line 3 column 'len'"
    with pytest.raises(InputError, match=f"lengths file '.*l.txt' {where}: ") as exc:
        read_lengths(p, "len" if form == "csv" else None)
    assert len(_one_line(exc)) < 400


@pytest.mark.parametrize("form", ["lines", "csv"])
def test_good_numbers_in_a_lengths_file(tmp_path, form):
    p = tmp_path / "l.txt"
    texts = list(GOOD_LENGTHS)
    p.write_text("\n".join(texts) if form == "lines" else "len\n" + "\n".join(texts))
    assert read_lengths(p, "len" if form == "csv" else None).tolist() == list(GOOD_LENGTHS.values())


# ------------------------------------------------------------------------------ config snippets of `gears` (kind)
def _random_lengths(rs):
    kind = rs.randint(4)
    if kind == 0:
        return [int(rs.randint(1, 300))] * int(rs.randint(1, 6))  # one distinct length
    if kind == 1:
        return list(rs.randint(1, 400, size=rs.randint(1, 400)))
    if kind == 2:
        return list(range(1, int(rs.randint(2, 220))))  # many distinct lengths
    return list(np.clip(rs.lognormal(3, 0.7, 300).astype(int), 1, 500))


@pytest.mark.parametrize("seed", range(40))
def test_every_snippet_gears_emits_is_a_valid_config(seed):
    rs = np.random.RandomState(seed)
    lengths = _random_lengths(rs)
    k = int(rs.choice([1, 2, 3, 8, 100, 101, 200, 1000]))
    batch = bool(rs.rand() < 0.3)
    dim = "batch" if batch else "seq"
    tmpl = rs.choice(["x:-1,3,8,8"] if batch else ["x:1,-1,64;mask:1,-1", "x:1,-1,64", "x:1,3,48,-1"])
    for input_shape in (None, str(tmpl)):
        s = recommend(lengths, k, dim=dim, input_shape=input_shape)["summary"]
        snip, gears = s["config_snippet"], s["optimal"]["Gears"]
        assert s["k_used"] == min(k, MAX_GEARS) and len(gears) == min(k, MAX_GEARS, len(set(lengths)))
        assert gears[-1] == max(lengths)
        full = snip if input_shape else ({**snip, "input_shape": "x:-1" if batch else "x:1,-1"} if len(gears) > 1
                                         else snip)
        cfg = Config.from_dict(full)  # accepted by validation
        spec = parse_gears(cfg)
        if len(gears) == 1:  # the converter takes 2..100 gears: a static shape instead
            assert spec is None and any("no gears needed" in n for n in s["notes"])
            if input_shape:
                assert all(d != -1 for v in cfg.input_shapes().values() for d in v)
                assert gears[0] in [d for v in cfg.input_shapes().values() for d in v]
        else:
            assert MIN_GEARS <= len(spec.gears) <= MAX_GEARS
            assert sorted({v for g in spec.gears for v in g}) == gears
        assert any("above the 100 gears" in n for n in s["notes"]) == (k > MAX_GEARS)


def test_dims_snippet_fits_the_masked_sample():
    s = recommend([5, 9, 9, 30, 31], 3, input_shape="x:1,-1,64;mask:1,-1")["summary"]
    assert s["config_snippet"] == {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "5,5;9,9;31,31"}
    GearSession(samples.build_transformer_seq_masked(), Config.from_dict(s["config_snippet"]))  # checked vs model
    with pytest.raises(ConfigError, match="has no -1"):
        config_snippet([4, 8], "seq", "x:1,8,64")
