"""The plog line parser (toolkit/logs/parsers/plog_lines.py): malformed lines, records across blocks, a
30 MB message truncated with its length, a BOM and logs that are not UTF-8."""

from __future__ import annotations

import pytest

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


# ------------------------------------------------------------ the toolchain's line variants (issue 19)
TOOLCHAIN = [
    # (line, (Level, Module, PID, Process, TID, File, Line, Message)) — written from the CANN log reference forms
    ("[ERROR] GE(26183,python3):2024-03-01-10:58:09.744.826 [graph_builder.cc:275]26184 BuildGraph failed",
     ("ERROR", "GE", "26183", "python3", "26184", "graph_builder.cc", "275", "BuildGraph failed")),
    ("[WARNING] TEFUSION(3100,atc.bin):2024-03-01-10:58:10.000.001 fusion pass skipped: no match",
     ("WARNING", "TEFUSION", "3100", "atc.bin", "", "", "", " fusion pass skipped: no match")),
    ("[ERROR] TSCH(-1,null):2024-03-01-10:58:11.000.002 task exception, stream_id=3, task_id=17",
     ("ERROR", "TSCH", "-1", "null", "", "", "", " task exception, stream_id=3, task_id=17")),
    ("[ERROR] AICPU(8812,aicpu_scheduler):2024-03-01-10:58:12.000.003 [ExecuteKernel][tid:8813]kernel failed",
     ("ERROR", "AICPU", "8812", "aicpu_scheduler", "8813", "", "", "kernel failed")),
    ("[WARNING] COMPILER(77,npuscope):2024-03-01-10:58:13.000.004 [pipeline.py:12]3 kernels kept in FP32",
     ("WARNING", "COMPILER", "77", "npuscope", "", "pipeline.py", "12", "3 kernels kept in FP32")),
]


def test_toolchain_line_forms_keep_tid_and_source_columns(tmp_path):
    from toolkit.logs.parsers import plog_lines

    path = tmp_path / "plog-1.log"
    path.write_text("\n".join(line for line, _ in TOOLCHAIN) + "\nnot a record\n[INFO] X(1,p):2024-03-01 bad time\n")
    assert detect_format(path).parser.name == "plog"
    res = plog_lines.parse(path)
    assert res.records == len(TOOLCHAIN) and res.malformed == 2
    msgs = res.tables["log_messages"]
    got = [tuple(r[c] for c in ("Level", "Module", "PID", "Process", "TID", "File", "Line", "Message"))
           for _, r in msgs.iterrows()]
    assert got == [want for _, want in TOOLCHAIN]
    levels = res.tables["log_levels"].set_index("Module")["Count"]
    assert levels["TSCH"] == 1 and levels["TEFUSION"] == 1


# ------------------------------------------------------------------------------------------- bytes of the file
BOM = b"\xef\xbb\xbf"


def test_a_plog_starting_with_a_utf8_bom_keeps_its_first_line(tmp_path):
    """Kind: a BOM before the first record (a log saved by a Windows editor): the first line is a record like
    the others, not malformed, and its ERROR is a finding."""
    lines = [plog_line("ERROR", "GE", 1, "atc", 1.7e9, "g.cc", 1, "1 op failed"),
             plog_line("WARNING", "FE", 1, "atc", 1.7e9 + 1, "f.cc", 1, "1 x")]
    path = tmp_path / "b.log"
    path.write_bytes(BOM + ("\n".join(lines) + "\n").encode())
    assert detect_format(path).parser.name == "plog"
    res = plog_lines.parse(path)
    assert (res.records, res.malformed) == (len(lines), 0)
    msgs = res.tables["log_messages"]
    assert msgs["Level"].tolist() == ["ERROR", "WARNING"] and msgs["Message"].tolist() == ["op failed", "x"]
    assert ("log_errors", "GE") in {(f.kind, f.subject) for f in res.findings}


def test_a_gbk_plog_is_read_as_gb18030_and_a_latin1_one_is_counted(tmp_path):
    """Kind: a log that is not UTF-8. GBK (Chinese-locale Windows) decodes whole as GB18030: its text is kept and
    a note says so; Latin-1 does not: its non-ASCII bytes become U+FFFD and a note counts them."""
    message = "算子编译失败"
    lines = [plog_line("ERROR", "GE", 1, "atc", 1.7e9, "g.cc", 1, message),
             plog_line("INFO", "GE", 1, "atc", 1.7e9 + 1, "g.cc", 2, "done")]
    path = tmp_path / "gbk.log"
    path.write_bytes(("\n".join(lines) + "\n").encode("gbk"))
    res = plog_lines.parse(path)
    assert res.tables["log_messages"]["Message"].tolist() == [message]
    assert "decoded as GB18030 (not UTF-8)" in res.notes
    latin = "échec à l'étape\n"
    path = tmp_path / "latin1.log"
    data = ("\n".join(lines[1:] + [lines[1].replace("done", latin)])).encode("latin-1", "replace")
    path.write_bytes(data)
    res = plog_lines.parse(path)
    n_bad = sum(b >= 0x80 for b in data)
    assert res.records == 2 and res.tables["log_levels"]["Count"].sum() == 2
    assert any(n.startswith(f"{n_bad} byte(s) that are not UTF-8 text") and "re-save it as UTF-8" in n
               for n in res.notes), res.notes


@pytest.mark.parametrize("order", [("GE", "RUNTIME", "FE"), ("RUNTIME", "GE", "FE"), ("FE", "GE", "RUNTIME")])
def test_error_findings_follow_the_first_error_of_each_module(tmp_path, order):
    """The module that logged an error first is listed first, whatever the counts (the first error is where to
    start reading); a module with more errors later on comes after it."""
    from tests.logs.helpers import plog_line
    from toolkit.logs.parsers import plog_lines

    counts = {order[0]: 1, order[1]: 5, order[2]: 2}
    lines, t = [], 1.7e9
    for mod in order:  # each module's errors in one block, in this order of time
        for k in range(counts[mod]):
            t += 1
            lines.append(plog_line("ERROR", mod, 1, "p", t, "a.cc", k, f"{mod} failed {k}"))
    (tmp_path / "plog.log").write_text("\n".join(lines) + "\n")
    res = plog_lines.parse(tmp_path / "plog.log")
    errs = [f.subject for f in res.findings if f.kind == "log_errors"]
    assert errs == list(order)
    assert [f.evidence["count"] for f in res.findings if f.kind == "log_errors"] == [counts[m] for m in order]


AICPU_FORMS = [
    # (the text after the time, (TID, File, Line, Function, Message)) — every way AICPU / host lines place a
    # source position, a function and a thread id before the message
    ("[ae_kernel_lib_aicpu.cc:258][TransformKernelErrorCode][tid:26041][AICPU_PROCESSER] Call failed, ret:-1.",
     ("26041", "ae_kernel_lib_aicpu.cc", "258", "TransformKernelErrorCode", "[AICPU_PROCESSER] Call failed, ret:-1.")),
    ("[aicpu_sd.cc:71] [Run][tid:8813]kernel failed", ("8813", "aicpu_sd.cc", "71", "Run", "kernel failed")),
    ("[ExecuteKernel][tid:8813]kernel failed", ("8813", "", "", "ExecuteKernel", "kernel failed")),
    ("[aicpu_sd.cc:71][tid:8813]kernel failed", ("8813", "aicpu_sd.cc", "71", "", "kernel failed")),
    ("[aicpu_sd.cc][Run][tid:9]kernel failed", ("9", "aicpu_sd.cc", "", "Run", "kernel failed")),
]


def test_aicpu_function_and_thread_fields_leave_the_message_in_every_form(tmp_path):
    from toolkit.logs.parsers import plog_lines

    path = tmp_path / "plog-aicpu.log"
    path.write_text("".join(f"[ERROR] AICPU(26021,aicpu_scheduler):2022-08-09-06:03:29.457.393 {text}\n"
                            for text, _ in AICPU_FORMS))
    res = plog_lines.parse(path)
    assert (res.records, res.malformed) == (len(AICPU_FORMS), 0)
    msgs = res.tables["log_messages"]
    got = [tuple(r[c] for c in ("TID", "File", "Line", "Function", "Message")) for _, r in msgs.iterrows()]
    assert got == [want for _, want in AICPU_FORMS]
    assert not msgs["Message"].str.contains(r"\[tid:").any()


# ------------------------------------------------------------------------------------------ console captures
ATC_ERROR_BLOCK = ["E19999: Inner Error!",
                   "        Op[Resize_3] infershape failed[FUNC:InferShapeAndType][FILE:infershape_pass.cc][LINE:115]",
                   "        TraceBack (most recent call last):",
                   "        Call InferShapeAndType for node:Resize_3(Resize) failed[FUNC:Infer][FILE:infer.cc][LINE:117]"]


@pytest.mark.parametrize("block_chars", [None, 64])
def test_a_console_capture_reads_plog_lines_and_error_code_blocks(tmp_path, monkeypatch, block_chars):
    """An atc run's output saved to a file (CANN console text, plog lines, an E-code block with its indented
    lines): read, not 'unknown format'; the tool's own lines are ignored (counted in a note), never malformed."""
    if block_chars:
        monkeypatch.setattr(plog_lines, "BLOCK_CHARS", block_chars)  # blocks cut inside the E-code block
    t0 = 1704463407.5
    lines = ["ATC start working now, please wait for a moment.",
             plog_line("WARNING", "TBE", 12345, "atc.bin", t0, "tbe_op_info.cc", 120, "op[Conv_12] fallback"),
             plog_line("ERROR", "GE", 12345, "atc.bin", t0 + 1, "graph_builder.cc", 231, "OP[Resize_3] failed"),
             "ATC run failed, Please check the detail log, Try 'atc --help' for more information",
             *ATC_ERROR_BLOCK,
             "EZ3002: Optype [Resize] of Ops kernel [AIcoreEngine] is unsupported.",
             "        Possible Cause: the op is not supported on this device."]
    path = tmp_path / "atc_stdout.log"
    path.write_text("\n".join(lines) + "\n")
    assert detect_format(path).parser.name == "plog"
    res = plog_lines.parse(path)
    plog_records = sum(1 for ln in lines if ln.startswith("["))
    code_lines = [ln for ln in lines if ln[:1] == "E" and ln[6:8] == ": "]
    console = [ln for ln in lines if not ln.startswith(("[", "E", " "))]
    assert res.records == plog_records + len(code_lines) == 4 and res.malformed == 0
    assert any(f"{len(console)} console line(s)" in n for n in res.notes)
    codes = res.tables["log_error_codes"]
    assert codes["Code"].tolist() == [ln[:6] for ln in code_lines] == ["E19999", "EZ3002"]
    assert codes["Op"].tolist() == ["Resize_3", ""]
    assert codes["Message"].tolist() == [ln[8:] for ln in code_lines]
    assert codes["Detail"].iloc[0] == " | ".join(ln.strip() for ln in ATC_ERROR_BLOCK[1:])
    first = res.findings[0]
    assert (first.kind, first.subject, first.evidence["op"]) == ("log_errors", "E19999", "Resize_3")
    assert {(f.kind, f.subject) for f in res.findings} >= {("log_errors", "GE"), ("log_warnings", "TBE")}


def test_tool_text_with_no_log_line_is_still_unknown(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("ATC start working now, please wait for a moment.\nATC run success\n")
    det = detect_format(path)
    assert det.parser is None and det.reason == "unknown format"


def test_in_a_plog_file_other_lines_stay_malformed_and_code_blocks_are_records(tmp_path):
    t0 = 1700000000.5
    lines = [plog_line("INFO", "GE", 1, "p", t0 + i, "a.cc", i, f"m{i}") for i in range(4)]
    lines[3:3] = ["garbage line", *ATC_ERROR_BLOCK[:2]]  # the first 5 lines: 3 records of 5, a plog file
    path = tmp_path / "plog-1.log"
    path.write_text("\n".join(lines) + "\n")
    res = plog_lines.parse(path)
    assert res.records == 4 + 1 and res.malformed == 1
    assert res.tables["log_error_codes"]["Op"].tolist() == ["Resize_3"]
