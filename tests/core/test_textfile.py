"""User text files (toolkit/core/textfile.py): BOMs, non-UTF-8 bytes, and files that are not regular refused
without reading them; device text files (TextReader, decode_text): BOM dropped, GB18030 files decoded,
undecodable bytes counted."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError
from tests.core.special_files import TIMEOUT, SAID, make_special, run, py

BOM = b"\xef\xbb\xbf"


def _write(path, text, bom=True):
    path.write_bytes((BOM if bom else b"") + text.encode("utf-8"))
    return path


def test_policy_and_lengths_files_with_bom(tmp_path):
    from toolkit.commands.gears import read_lengths
    from toolkit.signoff.policy import load_policy

    text = '[outputs."*"]\nCosineSimilarity = 0.9\n'
    assert load_policy(_write(tmp_path / "p1.toml", text)).data == load_policy(_write(tmp_path / "p2.toml", text, False)).data
    assert read_lengths(_write(tmp_path / "l.txt", "10\n20\n7\n")).tolist() == [10, 20, 7]
    assert read_lengths(_write(tmp_path / "l.csv", "len,x\n5,1\n9,2\n"), column="len").tolist() == [5, 9]


def test_non_utf8_user_files_are_one_line_errors(tmp_path):
    from toolkit.commands.gears import read_lengths
    from toolkit.signoff.policy import load_policy

    bad = "precision_mode = 'caf\xe9'\n".encode("latin-1")
    (tmp_path / "c.toml").write_bytes(bad)
    (tmp_path / "p.toml").write_bytes(bad)
    (tmp_path / "l.txt").write_bytes(b"10\n\xff\n")
    for call, error in ((lambda: Config.load(tmp_path / "c.toml"), ConfigError),
                        (lambda: load_policy(tmp_path / "p.toml"), ConfigError),
                        (lambda: read_lengths(tmp_path / "l.txt"), InputError)):
        with pytest.raises(error, match=r"is not UTF-8 text \(byte 0x[0-9a-f]{2} at offset \d+\)") as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("kind", ["fifo", "devzero", "broken"])
@pytest.mark.parametrize("reader", ["lengths", "policy", "plan", "mapping"])
def test_user_files_that_are_not_regular_are_refused_without_reading(tmp_path, kind, reader):
    make_special(tmp_path / "f", kind)
    call = {"lengths": "from toolkit.commands.gears import read_lengths as f",
            "policy": "from toolkit.signoff.policy import load_policy as f",
            "plan": "from toolkit.memcheck.planio import load_plan as f",
            "mapping": "from toolkit.dumps.mapping import load_mapping as f"}[reader]
    proc = py(f"{call}\nfrom toolkit.core.errors import UserError\ntry:\n    f('f')\nexcept UserError as exc:\n"
              "    print('ERR', exc)\n", tmp_path)
    out = proc.stdout
    assert out.startswith("ERR ") and len(out.strip().splitlines()) == 1, out + proc.stderr
    if kind == "broken":
        assert "does not exist" in out or "broken symbolic link" in out
    else:
        assert SAID[kind] in out


# ------------------------------------------------------------------------------- device text files (TextReader)
GBK_TEXT = "Op Name,OP Type\n卷积,Conv2D\n池化层,MaxPool\n"


def test_reader_drops_a_utf8_bom_and_keeps_line_ends_as_open_newline_empty(tmp_path):
    """Kind: a UTF-8 BOM (Windows editors, Excel's CSV UTF-8) is not part of the first line; lines end as
    ``open(newline="")`` ends them, whatever the block size cuts (a \\r\\n cut between two blocks stays one end)."""
    from toolkit.core.textfile import TextReader

    body = "first\r\nsecond\rthird\nfourth\r\n\r\nlast without end"
    path = tmp_path / "bom.log"
    path.write_bytes(BOM + body.encode("utf-8"))
    with open(tmp_path / "bom.log", encoding="utf-8-sig", newline="") as fh:
        expected = list(fh)
    assert expected[0] == "first\r\n"
    for size in (1, 2, 3, 5, 7, 1 << 20):
        with TextReader(path) as text:
            assert list(text.lines(size)) == expected, size
            assert text.bom and text.encoding == "utf-8" and text.notes() == []
    with TextReader(path) as text:
        assert "".join(text.chunks(4)) == body


def test_reader_decodes_a_gbk_file_as_gb18030_with_a_note(tmp_path):
    """Kind: a file saved on Chinese-locale Windows (GBK, a subset of GB18030) is not UTF-8: read as GB18030 and
    said so; nothing is replaced."""
    from toolkit.core.textfile import TextReader

    path = tmp_path / "g.csv"
    path.write_bytes(GBK_TEXT.encode("gbk"))
    with pytest.raises(UnicodeDecodeError):
        path.read_bytes().decode("utf-8")
    with TextReader(path) as text:
        assert "".join(text.lines(3)) == GBK_TEXT
        assert text.encoding == "gb18030" and text.notes() == ["decoded as GB18030 (not UTF-8)"]


def test_reader_counts_the_bytes_neither_encoding_decodes(tmp_path):
    """Kind: Latin-1 text is neither UTF-8 nor GB18030 (é before ',' or a line end): the bytes become U+FFFD and
    the note counts them and says to re-save as UTF-8."""
    from toolkit.core.textfile import TextReader

    text_in = "name,value\ncafé,1\nnaïve é,2\n"
    data = text_in.encode("latin-1")
    path = tmp_path / "l.csv"
    path.write_bytes(data)
    bad = sum(1 for b in data if b >= 0x80)  # each Latin-1 letter is one byte UTF-8 cannot start a character with
    with TextReader(path) as text:
        got = "".join(text.lines())
        notes = text.notes()
    assert text.encoding == "utf-8" and got.count("\ufffd") == bad == 3
    assert got.replace("\ufffd", "?") == text_in.replace("é", "?").replace("ï", "?")
    assert len(notes) == 1 and notes[0].startswith(f"{bad} byte(s) that are not UTF-8 text were replaced by {bad} ")
    assert "re-save it as UTF-8" in notes[0]


def test_reader_decides_from_its_head_and_counts_bad_bytes_past_it(tmp_path):
    """Streaming: the encoding is chosen from the first bytes only (here 64), bytes past them that do not decode
    are counted rather than read again."""
    from toolkit.core.textfile import TextReader

    head = "ok line\n" * 20
    path = tmp_path / "late.log"
    path.write_bytes(head.encode() + "卷积\n".encode("gbk"))  # 4 GBK bytes after 160 ASCII ones
    with TextReader(path, sniff=64) as text:
        lines = list(text.lines(16))
        assert text.encoding == "utf-8" and len(lines) == 21
        assert text.decoder.replaced_bytes == len("卷积".encode("gbk")) and "re-save it as UTF-8" in text.notes()[0]
    with TextReader(path) as text:  # the whole file fits the default head: GB18030, nothing replaced
        assert list(text.lines())[-1] == "卷积\n" and text.notes() == ["decoded as GB18030 (not UTF-8)"]


def test_decode_text_and_open_regular_text_drop_the_bom(tmp_path):
    from toolkit.core.textfile import decode_text, open_regular_text

    assert decode_text(BOM + b'{"a": 1}') == ('{"a": 1}', [])
    assert decode_text("卷积".encode("gb18030")) == ("卷积", ["decoded as GB18030 (not UTF-8)"])
    path = _write(tmp_path / "b.log", "line one\n")
    for encoding in ("utf-8", "UTF8", "utf-8-sig"):
        with open_regular_text(path, encoding=encoding) as fh:
            assert fh.read() == "line one\n", encoding


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_reader_refuses_a_fifo_without_blocking(tmp_path):
    from toolkit.core.textfile import NotRegularFile, TextReader

    os.mkfifo(tmp_path / "f")
    with pytest.raises(NotRegularFile, match="FIFO"):
        TextReader(tmp_path / "f")
