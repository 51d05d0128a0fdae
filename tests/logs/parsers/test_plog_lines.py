"""The plog line parser (toolkit/logs/parsers/plog_lines.py): malformed lines, records across blocks, and a
30 MB message truncated with its length."""

from __future__ import annotations

from tests.logs.helpers import plog_line
from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import plog_lines


# ------------------------------------------------------------------------------------------------ plog parser
def test_plog_parser_counts_and_skips_malformed_lines(tmp_path):
    t0 = 1700000000.5
    good = [plog_line("INFO", "GE", 11, "atc.bin", t0, "graph.cc", 12, "build graph"),
            plog_line("ERROR", "RUNTIME", 11, "python3", t0 + 1, "engine.cc", 1170, "ReportExceptProc: aicore error"),
            plog_line("EVENT", "GE", 11, "atc.bin", t0 + 2, "graph.cc", 13, "done"),
            plog_line("WARNING", "FE", 12, "python3", t0 + 3, "fe.cc", 7, "op fallback to AI_CPU")]
    bad = ["garbage line", "[INFO] GE(12", "[INFO] GE(1,p):2024-01-01 [f.cc:1]bad time", "Traceback (most recent"]
    text = "\r\n".join([good[0], bad[0], "", good[1], bad[1], good[2], "   ", bad[2], good[3], bad[3][:-3]])
    path = tmp_path / "plog-11.log"
    path.write_bytes(text.encode())
    assert detect_format(path).parser.name == "plog"
    res = plog_lines.parse(path)
    assert res.records == 4 and res.malformed == 4
    lv = res.tables["log_levels"]
    assert dict(zip(zip(lv["Level"], lv["Module"]), lv["Count"])) == {("INFO", "GE"): 1, ("ERROR", "RUNTIME"): 1,
                                                                     ("EVENT", "GE"): 1, ("WARNING", "FE"): 1}
    msgs = res.tables["log_messages"]
    assert msgs["Message"].tolist() == ["ReportExceptProc: aicore error", "op fallback to AI_CPU"]
    assert msgs["Line"].tolist() == ["1170", "7"]
    kinds = {(f.kind, f.subject) for f in res.findings}
    assert kinds == {("log_errors", "RUNTIME"), ("log_warnings", "FE")}


def test_plog_parser_reads_across_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(plog_lines, "BLOCK_CHARS", 100)   # many blocks, lines cut at block edges
    lines = [plog_line("INFO" if i % 3 else "ERROR", f"M{i % 4}", 7, "p", 1.7e9 + i, "a.py", i, f"message {i}")
             for i in range(200)]
    lines[50] = "not a record"
    path = tmp_path / "x.log"
    path.write_text("\n".join(lines))                       # no final newline
    res = plog_lines.parse(path)
    assert res.records == 199 and res.malformed == 1
    assert int(res.tables["log_levels"]["Count"].sum()) == 199
    assert len(res.tables["log_messages"]) == sum(1 for i in range(200) if i % 3 == 0 and i != 50)


# ------------------------------------------------------------------------------------------ over-long text
def test_plog_message_of_30_mb_is_truncated_with_its_length(tmp_path):
    from toolkit.logs.textcap import MAX_TEXT_CHARS

    n = 30 * 1024 * 1024
    path = tmp_path / "big.log"
    with open(path, "w") as fh:
        fh.write(plog_line("INFO", "GE", 1, "p", 1.7e9, "a.cc", 1, "fine") + "\n")
        fh.write(plog_line("ERROR", "GE", 1, "p", 1.7e9, "a.cc", 2, "x" * n) + "\n")
        fh.write(plog_line("WARNING", "M" * 5000, 1, "p", 1.7e9, "a.cc", 3, "short") + "\n")
    res = plog_lines.parse(path)
    msgs = res.tables["log_messages"]
    big = msgs["Message"].iloc[0]
    assert big == "x" * MAX_TEXT_CHARS + f" … [truncated: {n:,} characters]"
    assert msgs["Module"].iloc[1] == "M" * MAX_TEXT_CHARS + " … [truncated: 5,000 characters]"
    assert msgs["Message"].iloc[1] == "short" and res.malformed == 0
    assert all(len(str(v)) < 3000 for v in res.tables["log_levels"]["Module"])
