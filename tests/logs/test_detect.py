"""Format detection (toolkit/logs/detect.py) of empty, binary and unknown files, and of heads with a BOM or GBK
bytes."""

from __future__ import annotations

import json

import numpy as np

from toolkit.logs.detect import detect_format


# ------------------------------------------------------------------------------------------ detection faults
def test_detection_of_empty_binary_and_unknown_files(tmp_path):
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "blank.log").write_text("\n \n")
    (tmp_path / "blob.bin").write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)))
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    (tmp_path / "other.json").write_text(json.dumps({"a": 1}))
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    reasons = {p.name: detect_format(p).reason for p in tmp_path.iterdir()}
    assert reasons == {"empty.log": "empty", "blank.log": "empty", "blob.bin": "binary", "notes.txt": "unknown format",
                       "other.json": "unknown format", "other.csv": "unknown format"}
    assert detect_format(tmp_path / "missing.log").reason == "not found"
    assert detect_format(tmp_path).reason == "not a file"


def test_nul_padding_after_the_last_line_is_not_binary_and_utf16_is_named(tmp_path):
    """A plog a crash left with 4 KiB of NUL bytes after its last line is a plog (the NUL run becomes a
    malformed line, the lines before it are read); a UTF-16 export says so instead of "binary"; NUL bytes inside
    the text (no padding) are still binary."""
    from tests.logs.helpers import plog_line
    from toolkit.logs.registry import parsers

    lines = [plog_line("ERROR", "GE", 100 + i, "python", 1.7e9 + i, "graph_builder.cc", 10 + i, f"build failed {i}")
             for i in range(9)]
    text = "\n".join(lines) + "\n"
    (tmp_path / "padded.log").write_bytes(text.encode() + b"\x00" * 4096)
    (tmp_path / "plain.log").write_text(text)
    (tmp_path / "utf16.csv").write_bytes("Op Name,OP Type\nconv,Conv2D\n".encode("utf-16"))
    (tmp_path / "inner.log").write_bytes(text.encode()[:200] + b"\x00\x01\x02" * 20 + text.encode()[200:])
    padded, plain = detect_format(tmp_path / "padded.log"), detect_format(tmp_path / "plain.log")
    assert padded.parser is not None and padded.parser is plain.parser and padded.reason == ""
    assert "UTF-16" in detect_format(tmp_path / "utf16.csv").reason
    assert detect_format(tmp_path / "inner.log").reason == "binary"
    assert padded.parser in parsers()


def test_a_semicolon_or_tab_separated_table_gets_a_hint():
    """A profiler CSV re-saved with ';' or tabs (some locales' spreadsheets) is unknown, with the fix named;
    other unknown text gets no such hint."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        for name, text, hint in (("semi.csv", "Op Name;OP Type;Task Duration(us)\nconv;Conv2D;5\n", "';'"),
                                 ("tabs.csv", "Op Name\tOP Type\tTask Duration(us)\nconv\tConv2D\t5\n", "tabs"),
                                 ("notes.txt", "hello; world, and more, text\n", None)):
            path = Path(d) / name
            path.write_text(text)
            reason = detect_format(path).reason
            assert reason.startswith("unknown format")
            assert (f"separated by {hint}" in reason) if hint else ("separated" not in reason)


def test_detection_reads_through_a_bom_and_gbk_bytes(tmp_path):
    """Kind: the head a parser's detect sees is decoded as the parser reads the file: a BOM is not part of the
    first line, a GBK CSV's header is read as GB18030, and a file holding only a BOM is empty."""
    from tests.logs.helpers import plog_line

    (tmp_path / "bom.log").write_bytes(b"\xef\xbb\xbf" + plog_line("ERROR", "GE", 1, "atc", 1.7e9, "g.cc", 1, "x").encode()
                                       + b"\n")
    (tmp_path / "gbk.csv").write_bytes("Op Name,OP Type,Task Duration(us),备注\n卷积,Conv2D,5,无\n".encode("gbk"))
    (tmp_path / "bom_only.csv").write_bytes(b"\xef\xbb\xbf")
    assert detect_format(tmp_path / "bom.log").parser.name == "plog"
    assert detect_format(tmp_path / "gbk.csv").parser.name == "op_summary_csv"
    assert detect_format(tmp_path / "bom_only.csv").reason == "empty"


def test_detect_format_alone_finds_the_built_in_parsers(tmp_path):
    """docs/parse-log.md, "Programmatic use": in a fresh interpreter, importing toolkit.logs.detect alone is enough
    (it registers the built-in parsers)."""
    import subprocess
    import sys

    path = tmp_path / "op_summary_0_1.csv"
    path.write_text("Op Name,OP Type,Task Type,Task Duration(us)\nconv1,Conv2D,AI_CORE,2.5\nrelu1,Relu,AI_VECTOR_CORE,1\n")
    script = ("import sys; from toolkit.logs.detect import detect_format; d = detect_format(sys.argv[1]); "
              "r = d.parser.parse(sys.argv[1]); print(d.parser.name, r.records, r.op_summary['Task Duration(us)'].sum())")
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["op_summary_csv", "2", str(2.5 + 1.0)]
