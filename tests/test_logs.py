"""npuscope's plog logger and the parse-log parsers, on fixtures written here from the documented formats
(GUIDE §4; toolkit.core.artifacts / toolkit.diagnose for our own files), malformed ones included."""

from __future__ import annotations

import csv
import json
import logging
import time

import numpy as np
import pandas as pd
import pytest

from toolkit.core.errors import ConfigError
from toolkit.logs import plog
from toolkit.logs.detect import detect_format
from toolkit.logs.findings import breakdown_findings, idle_share, op_summary_findings
from toolkit.logs.parsers import (
    chrome_trace,
    compile_log,
    fusion_result,
    kernel_times_csv,
    op_statistic_csv,
    op_summary_csv,
    ort_profile,
    plog_lines,
)
from toolkit.profile.optable import (
    OP_STATISTIC_COLUMNS,
    OP_SUMMARY_COLUMNS,
    PROFILER_STATISTIC_COLUMNS,
    op_summary_frame,
)


@pytest.fixture(autouse=True)
def _restore_logger():
    logger = logging.getLogger("npuscope")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    for h in list(logger.handlers):
        if getattr(h, "_npuscope", False):
            logger.removeHandler(h)
            h.close()
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def plog_line(level, module, pid, proc, ts, file, line, msg) -> str:
    """A plog line built by hand from GUIDE §4 (ts: POSIX seconds; local time; ms and µs fields)."""
    micros = round(ts * 1e6) % 1_000_000
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(int(ts)))
    return f"[{level}] {module}({pid},{proc}):{stamp}.{micros // 1000:03d}.{micros % 1000:03d} [{file}:{line}]{msg}"


# ------------------------------------------------------------------------------------------------- the logger
def test_formatter_writes_the_guide_format():
    rec = logging.LogRecord("npuscope.compiler", logging.WARNING, "/x/pipeline.py", 177, "pass %s failed", ("bn",),
                            None)
    rec.created, rec.process = 1700000000.123456, 4321
    expected = plog_line("WARNING", "COMPILER", 4321, "npuscope", 1700000000.123456, "pipeline.py", 177,
                         "pass bn failed")
    assert plog.PlogFormatter().format(rec) == expected
    m = plog.LINE_RE.match(expected)
    assert (m["level"], m["module"], m["pid"], m["file"], m["line"], m["message"]) == \
        ("WARNING", "COMPILER", "4321", "pipeline.py", "177", "pass bn failed")


def test_formatter_keeps_one_record_on_one_line():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys
        rec = logging.LogRecord("npuscope.runtime", logging.CRITICAL, "k.py", 3, "a\nb", None, sys.exc_info())
    out = plog.PlogFormatter().format(rec)
    assert "\n" not in out and out.startswith("[ERROR] RUNTIME(") and "a\\nb\\nTraceback" in out
    assert plog.LINE_RE.match(out)


@pytest.mark.parametrize("value,shown", [("0", {"DEBUG", "INFO", "WARNING", "ERROR"}), ("1", {"INFO", "WARNING", "ERROR"}),
                                         ("2", {"WARNING", "ERROR"}), ("3", {"ERROR"}), ("", {"ERROR"}), ("4", set())])
def test_level_variable_selects_levels_and_stdout(capsys, value, shown):
    plog.setup_logging({"NPUSCOPE_LOG_LEVEL": value, "NPUSCOPE_LOG_TO_STDOUT": "1"})
    log = plog.get_logger("compiler")
    for name in ("debug", "info", "warning", "error"):
        getattr(log, name)(f"msg-{name}")
    out, err = capsys.readouterr()
    levels = {plog.LINE_RE.match(ln)["level"] for ln in out.splitlines()}
    assert levels == shown and err == ""
    assert all(plog.LINE_RE.match(ln)["module"] == "COMPILER" for ln in out.splitlines())


def test_default_destination_is_stderr(capsys):
    plog.setup_logging({})
    plog.get_logger("logs").error("to stderr")
    out, err = capsys.readouterr()
    assert out == "" and plog.LINE_RE.match(err.strip())["message"] == "to stderr"


@pytest.mark.parametrize("bad", ["5", "-1", "debug", "1.0"])
def test_invalid_level_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="NPUSCOPE_LOG_LEVEL"):
        plog.setup_logging({"NPUSCOPE_LOG_LEVEL": bad})


def test_log_file_round_trips_through_the_plog_parser(tmp_path):
    path = tmp_path / "run.log"
    plog.setup_logging({"NPUSCOPE_LOG_LEVEL": "0", "NPUSCOPE_LOG_FILE": str(path)})
    expected = {("DEBUG", "RUNTIME"): 3, ("INFO", "COMPILER"): 2, ("ERROR", "COMPILER"): 1}
    for (level, module), n in expected.items():
        for i in range(n):
            plog.get_logger(module.lower()).log(getattr(logging, level), "%s number %d", module, i)
    for h in logging.getLogger("npuscope").handlers:
        h.flush()
    assert detect_format(path).parser.name == "plog"
    res = plog_lines.parse(path)
    got = {(r.Level, r.Module): r.Count for r in res.tables["log_levels"].itertuples()}
    assert got == expected and res.malformed == 0 and res.records == 6
    assert res.tables["log_messages"]["Message"].tolist() == ["COMPILER number 0"]
    assert [f.kind for f in res.findings] == ["log_errors"]


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


# ----------------------------------------------------------------------------------------------- compile.log
COMPILE_LOG = """[fold_batchnorm] ran, 2 change(s); ops 29 -> 27; kernels 0; 0.9 ms
    folded bn_1 into conv_1
    folded bn_2 into conv_2
[graph_fusion] ran, 1 change(s); ops 27 -> 27; kernels 0; 4.0 ms
    LayerNormFusionPass: LayerNorm <- ln_mean, ln_sub, ln_pow
    SwishFusionPass refused at sig_1: region does not compute Swish [sig_1]
    unrecognised detail stays a detail
garbage between passes
[buffer_fusion] ran, 1 change(s); ops 27 -> 27; kernels 0; 0.4 ms
    TbeCubeElemwiseFusionPass: conv_1, relu_1
[optional_pass] skipped (fusion level 0); ops 27 -> 27; kernels 0; 0.0 ms
[plan_memory] ran, 15 change(s); ops 27 -> 27; kernels 14; 0.4 ms
    policy aggressive: arena 98304 bytes for 15 tensors; lower bound 65536 bytes (1.500x)
    FAILED (ValueError: x); state restored, compiling without this pass
[truncated] ran, 1 chan"""


def test_compile_log_parser_on_the_documented_format(tmp_path):
    path = tmp_path / "compile.log"
    path.write_text(COMPILE_LOG)
    assert detect_format(path).parser.name == "compile_log"
    res = compile_log.parse(path)
    assert res.malformed == 2
    p = res.tables["compile_passes"]
    assert p["Pass"].tolist() == ["fold_batchnorm", "graph_fusion", "buffer_fusion", "optional_pass", "plan_memory"]
    assert p["OpsBefore"].tolist() == [29, 27, 27, 27, 27] and p["OpsAfter"].tolist() == [27] * 5
    assert p["Ran"].tolist() == [True, True, True, False, True] and p["Reason"].iloc[3] == "fusion level 0"
    assert p["Ms"].tolist() == [0.9, 4.0, 0.4, 0.0, 0.4]
    f = res.tables["fusion_decisions"]
    assert f["Kind"].tolist() == ["fold", "fold", "match", "refused", "match"]
    assert f["Op"].iloc[2] == "LayerNorm" and f["Nodes"].iloc[2] == "ln_mean, ln_sub, ln_pow"
    assert f["Nodes"].iloc[3] == "sig_1" and f["Rule"].iloc[4] == "TbeCubeElemwiseFusionPass"
    mem = res.tables["compile_memory"].iloc[0]
    assert (mem["Policy"], mem["ArenaBytes"], mem["Tensors"], mem["LowerBoundBytes"]) == ("aggressive", 98304, 15, 65536)
    assert {(x.kind, x.subject) for x in res.findings} == {("fusion_refused", "SwishFusionPass"),
                                                             ("compile_pass_failed", "plan_memory")}


def test_compile_log_parser_reads_a_real_compile_log(tmp_path):
    from toolkit import samples
    from toolkit.core.artifacts import write_compile_artifacts
    from toolkit.engine import compile_model

    compiled = compile_model(samples.sample("transformer_block").build())
    files = write_compile_artifacts(compiled, tmp_path)
    res = compile_log.parse(files["compile_log"])
    p = res.tables["compile_passes"]
    assert res.malformed == 0
    assert p["Pass"].tolist() == [x.name for x in compiled.passes]
    assert p["OpsBefore"].tolist() == [x.ops_before for x in compiled.passes]
    assert p["KernelsAfter"].tolist() == [x.kernels_after for x in compiled.passes]
    matches = res.tables["fusion_decisions"]
    n_fused = sum(v["effect_times"] for lvl in compiled.fusion_stats.values() for k, v in lvl.items()
                  if k != "ConvBatchnormFusionPass")
    assert int((matches["Kind"] == "match").sum()) == n_fused
    assert res.tables["compile_memory"]["ArenaBytes"].iloc[0] == compiled.plan.arena_bytes
    fr = fusion_result.parse(files["fusion_result"]).tables["fusion_counts"]
    assert sorted(fr["Pass"]) == sorted(k for lvl in compiled.fusion_stats.values() for k in lvl)


# ----------------------------------------------------------------------------------------- fusion_result.json
def test_fusion_result_parser_counts_bad_entries(tmp_path):
    data = {"session_and_graph_id_0_0": {
        "graph_fusion": {"AConv2dMulFusion": {"match_times": "3", "effect_times": "1"},
                         "BadCount": {"match_times": "x", "effect_times": "1"}},
        "ub_fusion": {"TbeCubeElemwiseFusionPass": {"match_times": 7, "effect_times": 7}, "NotADict": 5}}}
    path = tmp_path / "fusion_result.json"
    path.write_text(json.dumps(data, indent=4))
    assert detect_format(path).parser.name == "fusion_result"
    res = fusion_result.parse(path)
    t = res.tables["fusion_counts"]
    assert res.malformed == 2 and t["Pass"].tolist() == ["AConv2dMulFusion", "TbeCubeElemwiseFusionPass"]
    assert t["MatchTimes"].tolist() == [3, 7] and t["EffectTimes"].tolist() == [1, 7]
    assert [(f.kind, f.subject) for f in res.findings] == [("fusion_not_applied", "AConv2dMulFusion")]
    path.write_text(json.dumps(data)[:60])                   # truncated
    res = fusion_result.parse(path)
    assert res.malformed == 1 and res.records == 0


# ------------------------------------------------------------------------------------------- profiler CSVs
REAL_EXTRA = ["Device_id", "aicore_time(us)"]


def write_csv(path, header, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


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


def test_op_statistic_csv_parser(tmp_path):
    rows = [["Conv2D", "AI_CORE", 4, 50.0, 12.5, 10, 15, 62.5], ["Cast", "AI_VECTOR_CORE", 2, "30.0\t", 15, 14, 16, 37.5],
            ["", "AI_CORE", 1, 1, 1, 1, 1, 0], ["Bad", "AI_CORE", "x", 1, 1, 1, 1, 0]]
    path = tmp_path / "op_statistic_0_1.csv"
    write_csv(path, PROFILER_STATISTIC_COLUMNS, rows)  # a real device's file: no Time Kind column
    assert detect_format(path).parser.name == "op_statistic_csv"
    res = op_statistic_csv.parse(path)
    t = res.tables["op_statistic"]
    assert t["OP Type"].tolist() == ["Conv2D", "Cast"] and t["Total Time(us)"].tolist() == [50.0, 30.0]
    assert res.malformed == 2 and len(res.op_summary) == 0
    assert list(t.columns) == OP_STATISTIC_COLUMNS and t["Time Kind"].tolist() == ["device", "device"]
    ours = tmp_path / "op_statistic.csv"  # npuscope's own file keeps its Time Kind
    write_csv(ours, OP_STATISTIC_COLUMNS, [["Conv", "AI_CORE", 1, 2, 2, 2, 2, 100, "simulated"],
                                           ["Conv", "HOST_CPU", 1, 9, 9, 9, 9, 100, "measured"]])
    assert op_statistic_csv.parse(ours).tables["op_statistic"]["Time Kind"].tolist() == ["simulated", "measured"]


def test_kernel_times_csv_parser(tmp_path):
    df = pd.DataFrame({"Kernel": ["k_conv", "k_cast", "k_bad"], "OpType": ["Conv", "Cast", "Relu"],
                       "Precision": ["fp16", "fp32", "fp16"], "Nodes": [2, 1, 1], "HostMs": [1.25, 0.5, "nan?"]})
    path = tmp_path / "kernel_times.csv"
    df.to_csv(path, index=False)
    assert detect_format(path).parser.name == "kernel_times_csv"
    res = kernel_times_csv.parse(path)
    s = res.op_summary
    assert s["Task Duration(us)"].tolist() == [1250.0, 500.0] and res.malformed == 1
    assert s["Output Data Types"].tolist() == ["DT_FLOAT16", "DT_FLOAT"] and set(s["Time Kind"]) == {"measured"}


# ------------------------------------------------------------------------------------ onnxruntime / Chrome
def ort_events():
    """onnxruntime-profile-shaped events (GUIDE §4), written one per line as onnxruntime does."""
    node = lambda name, op, ts, dur, tid=5: {
        "cat": "Node", "pid": 5, "tid": tid, "dur": dur, "ts": ts, "ph": "X", "name": f"{name}_kernel_time",
        "args": {"op_name": op, "provider": "CPUExecutionProvider", "input_type_shape": [{"float": [1, 3, 8, 8]},
                                                                                         {"float": [4, 3, 3, 3]}],
                 "output_type_shape": [{"float": [1, 4, 6, 6]}]}}
    return [{"cat": "Session", "pid": 5, "tid": 5, "dur": 100, "ts": 1, "ph": "X", "name": "session_initialization",
             "args": {}},
            node("conv", "Conv", 200, 30), node("relu", "Relu", 231, 4),
            {"cat": "Node", "pid": 5, "tid": 5, "dur": 1, "ts": 199, "ph": "X", "name": "conv_fence_before", "args": {}},
            node("copy", "MemcpyToHost", 236, 6, tid=6),
            {"cat": "Node", "pid": 5, "tid": 5, "dur": "abc", "ts": 240, "ph": "X", "name": "bad_kernel_time"},
            "not an event",
            {"cat": "Session", "pid": 5, "tid": 5, "dur": 50, "ts": 195, "ph": "X", "name": "model_run", "args": {}}]


def write_events_per_line(path, events, close=True):
    body = ",\n".join(json.dumps(e) for e in events)
    path.write_text("[\n" + body + ("\n]\n" if close else ""))


def test_ort_profile_parser(tmp_path):
    path = tmp_path / "onnxruntime_profile__2024.json"
    write_events_per_line(path, ort_events())
    assert detect_format(path).parser.name == "ort_profile"
    res = ort_profile.parse(path)
    s = res.op_summary
    assert s["Op Name"].tolist() == ["conv", "relu", "copy"] and s["OP Type"].tolist() == ["Conv", "Relu", "MemcpyToHost"]
    assert s["Task Type"].tolist() == ["HOST_CPU", "HOST_CPU", "MEMCPY"] and s["Stream ID"].tolist() == [5, 5, 6]
    assert s["Task Duration(us)"].tolist() == [30, 4, 6] and s["Task Start Time(us)"].tolist() == [200, 231, 236]
    assert s["Input Shapes"].iloc[0] == "1,3,8,8;4,3,3,3" and s["Input Data Types"].iloc[0] == "FLOAT;FLOAT"
    assert res.malformed == 2
    sess = res.tables["ort_sessions"].set_index("Name")
    assert sess.loc["model_run", "Total(us)"] == 50
    assert [f.kind for f in res.findings] == []                  # kernels 40 us of a 50 us run: >= half


def test_pretty_printed_ort_profile_is_still_detected(tmp_path):
    path = tmp_path / "prof.json"
    path.write_text(json.dumps(ort_events(), indent=2))
    assert detect_format(path).parser.name == "ort_profile"
    assert ort_profile.parse(path).op_summary["Op Name"].tolist() == ["conv", "relu", "copy"]


def test_truncated_ort_profile_is_recovered_event_by_event(tmp_path):
    path = tmp_path / "prof.json"
    write_events_per_line(path, ort_events(), close=False)
    text = path.read_text()
    path.write_text(text[:-25])                                 # cut inside the last event
    res = ort_profile.parse(path)
    assert res.op_summary["Op Name"].tolist() == ["conv", "relu", "copy"]
    assert res.malformed == 3 and any("truncated" in n for n in res.notes)


def chrome_events():
    return [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "resnet"}},
            {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "stream 2"}},
            {"ph": "X", "pid": 1, "tid": 2, "name": "conv1", "cat": "AI_CORE", "ts": 10.0, "dur": 5.0,
             "args": {"OP Type": "Conv2D", "Time Kind": "simulated", "Block Dim": 8}},
            {"ph": "B", "pid": 1, "tid": "copy", "name": "h2d", "cat": "MEMCPY", "ts": 20.0},
            {"ph": "s", "pid": 1, "tid": "copy", "name": "flow", "id": 1, "ts": 20.0},
            {"ph": "E", "pid": 1, "tid": "copy", "ts": 27.5},
            {"ph": "f", "pid": 1, "tid": 2, "name": "flow", "id": 1, "ts": 30.0, "bp": "e"},
            {"ph": "X", "pid": 1, "tid": 2, "name": "relu", "cat": "Relu", "ts": 30.0, "dur": 2.0},
            {"ph": "X", "pid": 1, "tid": 2, "name": "bad", "ts": "soon", "dur": 1},
            {"ph": "E", "pid": 1, "tid": 9, "ts": 40.0},
            {"ph": "B", "pid": 1, "tid": 9, "name": "never closed", "ts": 41.0},
            {"ph": "i", "pid": 1, "tid": 2, "name": "mark", "ts": 1.0}, 7]


@pytest.mark.parametrize("form", ["array", "object", "truncated"])
def test_chrome_trace_parser(tmp_path, form):
    path = tmp_path / "trace.json"
    if form == "array":
        path.write_text(json.dumps(chrome_events()))
    elif form == "object":
        path.write_text(json.dumps({"traceEvents": chrome_events(), "displayTimeUnit": "ms"}))
    else:
        write_events_per_line(path, chrome_events(), close=False)   # the format allows a missing ']'
    assert detect_format(path).parser.name == "chrome_trace"
    res = chrome_trace.parse(path)
    s = res.op_summary
    assert s["Op Name"].tolist() == ["conv1", "h2d", "relu"]
    assert s["Task Duration(us)"].tolist() == [5.0, 7.5, 2.0] and s["Task Start Time(us)"].tolist() == [10, 20, 30]
    assert s["OP Type"].tolist() == ["Conv2D", "", "Relu"] and s["Task Type"].tolist() == ["AI_CORE", "MEMCPY", ""]
    assert s["Time Kind"].tolist() == ["simulated", "measured", "measured"] and s["Block Dim"].iloc[0] == 8
    assert set(s["Model Name"]) == {"resnet"} and s["Stream ID"].iloc[0] == 2
    assert res.malformed == 4                                    # bad ts, lone E, unclosed B, non-object


# ------------------------------------------------------------------------------- numbers that are not data
BIG = "9" * 400  # a 400-digit number: a float overflows to inf


def _node_text(name, ts, dur, op="Conv"):
    """One onnxruntime kernel event as JSON text, ts/dur written verbatim (1e309, NaN, Infinity are legal
    for Python's json and become inf/nan)."""
    return (f'{{"cat": "Node", "pid": 1, "tid": 1, "ph": "X", "name": "{name}_kernel_time", "ts": {ts}, '
            f'"dur": {dur}, "args": {{"op_name": "{op}", "provider": "CPUExecutionProvider"}}}}')


def _x_text(name, ts, dur, args="{}"):
    return f'{{"ph": "X", "pid": 1, "tid": 1, "name": "{name}", "cat": "AI_CORE", "ts": {ts}, "dur": {dur}, "args": {args}}}'


# (parser, file name, file text, malformed expected); every file has exactly one good record, named/typed "ok"
NON_FINITE_CASES = {
    "op_summary_csv": ("op_summary.csv",
                       ("Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us),Stream ID\n"
                        "ok,Add,AI_CORE,0,3,1\n"
                        "a,Conv,AI_CORE,0,1e309\nb,Conv,AI_CORE,0,-1e309,1\nc,Conv,AI_CORE,0,inf,1\n"
                        "d,Conv,AI_CORE,1e400,1,1\ne,Conv,AI_CORE,0,1,Infinity\nf,Conv,AI_CORE,0,1e19,1\n"
                        f"g,Conv,AI_CORE,0,{BIG},1\n"), 7),
    "op_statistic_csv": ("op_statistic.csv",
                         ("OP Type,Core Type,Count,Total Time(us),Avg Time(us),Min Time(us),Max Time(us),Ratio(%)\n"
                          "Add,AI_CORE,1,3,3,3,3,100\n"
                          "a,AI_CORE,1,1e309,1,1,1,1\nb,AI_CORE,inf,1,1,1,1,1\nc,AI_CORE,1,1,NaN1,1,-inf,1\n"
                          f"d,AI_CORE,{BIG},1,1,1,1,1\n"), 4),
    "kernel_times_csv": ("kernel_times.csv",
                         ("Kernel,OpType,Precision,Nodes,HostMs\nok,Add,fp16,1,0.003\n"
                          "a,Conv,fp16,1,1e309\nb,Conv,fp16,1,1e300\nc,Conv,fp16,1,-inf\n"), 3),
    "ort_profile": ("prof.json", "[\n" + ",\n".join([
        _node_text("ok", 0, 3, "Add"), _node_text("a", 0, "1e309"), _node_text("b", "NaN", 1),
        _node_text("c", 0, "Infinity"), _node_text("d", "1e400", 1), _node_text("e", 0, '"1e309"'),
        _node_text("f", 0, BIG)]) + "\n]\n", 6),
    "chrome_trace": ("trace.json", "[\n" + ",\n".join([
        _x_text("ok", 0, 3, '{"OP Type": "Add"}'), _x_text("a", 0, "1e309"), _x_text("b", "NaN", 1),
        _x_text("c", 0, 1, '{"Task Duration(us)": 1e309}'), _x_text("d", 0, 1, '{"Stream ID": "-inf"}'),
        _x_text("e", 0, 1, '{"Task Start Time(us)": Infinity}'),
        '{"ph": "B", "pid": 1, "tid": 3, "name": "f", "ts": 0}', '{"ph": "E", "pid": 1, "tid": 3, "ts": 1e309}',
        _x_text("g", BIG, 1)]) + "\n]\n", 7),
    "compile_log": ("compile.log",
                    ("[ok] ran, 1 change(s); ops 2 -> 2; kernels 1; 3 ms\n"
                     f"[big] ran, 1 change(s); ops 2 -> 2; kernels 1; {BIG} ms\n    detail of a dropped pass\n"
                     "[dots] ran, 1 change(s); ops 2 -> 2; kernels 1; 1.2.3 ms\n"), 3),
}


@pytest.mark.parametrize("fmt", sorted(NON_FINITE_CASES))
def test_non_finite_and_absurd_numbers_are_malformed_in_every_parser(tmp_path, fmt):
    import warnings

    from toolkit.profile.optable import op_statistic

    name, text, bad = NON_FINITE_CASES[fmt]
    path = tmp_path / name
    path.write_text(text)
    det = detect_format(path)
    assert det.parser is not None and det.parser.name == fmt
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy/pandas RuntimeWarning fails the test
        res = det.parser.parse(path)
        stat = op_statistic(res.op_summary)
        op_summary_findings(res.op_summary)
    assert res.malformed == bad
    if fmt == "compile_log":
        assert res.tables["compile_passes"]["Pass"].tolist() == ["ok"] and res.tables["compile_passes"]["Ms"].tolist() == [3.0]
        return
    table = res.tables["op_statistic"] if fmt == "op_statistic_csv" else res.op_summary
    assert table["OP Type"].tolist() == ["Add"]
    nums = table.select_dtypes("number").to_numpy(float)
    assert not np.isinf(nums).any()
    want_us = 3.0
    if fmt == "op_statistic_csv":
        assert table["Total Time(us)"].tolist() == [want_us]
    else:
        assert res.op_summary["Task Duration(us)"].tolist() == [pytest.approx(want_us)]
        assert stat["Total Time(us)"].tolist() == [pytest.approx(want_us)]


def test_number_helper_rejects_non_finite_and_huge_values():
    from toolkit.logs.jsonio import number
    from toolkit.logs.numbers import MAX_ABS

    assert number(3) == 3.0 and number("2.5") == 2.5 and number(-MAX_ABS) == -MAX_ABS
    for v in (float("inf"), float("-inf"), float("nan"), "1e309", "NaN", "Infinity", 10 ** 400, 1e19, True, None):
        assert number(v) is None, v


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


def test_clip_frame_caps_every_text_cell():
    from toolkit.logs.textcap import clip_frame

    df = pd.DataFrame({"a": ["y" * 2001, "ok", None], "n": [1.5, 2.0, 3.0],
                       "o": pd.Series([7, "z" * 2000, "w" * 5000], dtype=object)})
    out, n = clip_frame(df)
    assert n == 2 and out["a"].iloc[0] == "y" * 2000 + " … [truncated: 2,001 characters]"
    assert out["o"].iloc[1] == "z" * 2000 and out["o"].iloc[2].endswith("[truncated: 5,000 characters]")
    assert out["o"].iloc[0] == 7 and out["n"].tolist() == [1.5, 2.0, 3.0] and len(df["a"].iloc[0]) == 2001
    assert clip_frame(df.iloc[1:2][["n"]])[1] == 0


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


def _fixtures(tmp_path):
    (tmp_path / "compile.log").write_text(COMPILE_LOG)
    write_events_per_line(tmp_path / "ort.json", ort_events())
    (tmp_path / "trace.json").write_text(json.dumps(chrome_events()))
    (tmp_path / "plog.log").write_text("\n".join(plog_line("INFO", "GE", 1, "p", 1.7e9 + i, "a.cc", i, "m")
                                                 for i in range(20)))
    write_csv(tmp_path / "op_statistic.csv", PROFILER_STATISTIC_COLUMNS, [["Conv", "AI_CORE", 1, 2, 2, 2, 2, 100]])
    return sorted(tmp_path.iterdir())


def test_parsers_never_raise_on_cut_or_corrupted_files(tmp_path):
    """Every fixture cut at several points or with bytes flipped: parse returns, it never raises."""
    rng = np.random.default_rng(1)
    (tmp_path / "src").mkdir()
    for src in _fixtures(tmp_path / "src"):
        data = src.read_bytes()
        parser = detect_format(src).parser
        for cut in (1, len(data) // 3, len(data) // 2, len(data) - 1):
            for variant in (data[:cut], bytes(b ^ 0x5A if rng.random() < 0.05 else b for b in data[:cut])):
                path = tmp_path / f"cut_{src.name}"
                path.write_bytes(variant)
                res = parser.parse(path)
                assert res.malformed >= 0 and list(res.op_summary.columns) == OP_SUMMARY_COLUMNS


# --------------------------------------------------------------------------------------------------- findings
def _summary(rows):
    return op_summary_frame([{"Source": "p", "Time Kind": "device", **r} for r in rows])


def test_findings_cpu_fallback_casts_transfers():
    s = _summary([{"Op Name": "conv", "OP Type": "Conv2D", "Task Type": "AI_CORE", "Task Duration(us)": 60},
                  {"Op Name": "topk", "OP Type": "TopK", "Task Type": "AI_CPU", "Task Duration(us)": 10},
                  {"Op Name": "c1", "OP Type": "Cast", "Task Type": "AI_VECTOR_CORE", "Task Duration(us)": 10},
                  {"Op Name": "h2d", "OP Type": "MemcpyAsync", "Task Type": "MEMCPY", "Task Duration(us)": 20}])
    found = {f.kind: f for f in op_summary_findings(s)}
    assert set(found) == {"cpu_fallback", "cast_overhead", "transfer_overhead", "hotspot"}
    assert found["cpu_fallback"].evidence["share_pct"] == 10.0
    assert found["cast_overhead"].evidence["share_pct"] == 10.0 and found["transfer_overhead"].evidence["tasks"] == 1
    assert found["hotspot"].evidence["op_type"] == "Conv2D"
    only_cpu = _summary([{"Op Name": "a", "OP Type": "Conv", "Task Type": "HOST_CPU", "Task Duration(us)": 5}])
    assert op_summary_findings(only_cpu)[0].kind == "hotspot"          # all-CPU run: no fallback


def test_findings_never_mix_time_kinds_of_one_source():
    # a profile's trace: simulated device kernels next to the same kernels measured on the host (HOST_CPU)
    sim = [{"Op Name": f"k{i}", "OP Type": "Conv", "Task Type": "AI_CORE", "Task Duration(us)": 10,
            "Time Kind": "simulated", "Source": "trace.json"} for i in range(3)]
    host = [{**r, "Task Type": "HOST_CPU", "Task Duration(us)": 500, "Time Kind": "measured"} for r in sim]
    found = op_summary_findings(_summary(sim + host))
    assert "cpu_fallback" not in {f.kind for f in found}
    assert {f.subject for f in found} == {"trace.json [simulated]", "trace.json [measured]"}
    one_kind = op_summary_findings(_summary(sim))
    assert {f.subject for f in one_kind} == {"trace.json"}


def test_launch_overhead_needs_small_kernels_and_gaps():
    gaps = _summary([{"Op Name": f"k{i}", "OP Type": f"T{i % 5}", "Task Type": "AI_CORE", "Stream ID": 0,
                      "Task Start Time(us)": 25.0 * i, "Task Duration(us)": 5.0} for i in range(40)])
    idle, span = idle_share(gaps)
    assert span == 25.0 * 39 + 5 and idle == 20.0 * 39
    assert "launch_overhead" in {f.kind for f in op_summary_findings(gaps)}
    dense = _summary([{"Op Name": f"k{i}", "OP Type": f"T{i % 5}", "Task Type": "AI_CORE", "Stream ID": 0,
                       "Task Start Time(us)": 5.0 * i, "Task Duration(us)": 5.0} for i in range(40)])
    assert "launch_overhead" not in {f.kind for f in op_summary_findings(dense)}


def test_breakdown_finding_pre_post_bottleneck():
    b = pd.DataFrame({"Stage": ["pre", "host-to-device", "device", "device-to-host", "post"],
                      "Ms": [3.0, 0.5, 2.0, 0.5, 1.0], "TimeKind": ["measured", "simulated", "simulated", "simulated",
                                                                    "measured"]})
    (f,) = breakdown_findings(b)
    assert f.kind == "pre_post_bottleneck" and f.evidence == {"pre_post_ms": 4.0, "device_ms": 2.0}
    assert breakdown_findings(b.assign(Ms=[1.0, 0.5, 2.0, 0.5, 0.5])) == []


def test_compile_progress_reaches_the_log_at_info_and_details_at_debug(tmp_path):
    """NPUSCOPE_LOG_LEVEL=1 shows one plog line per compiler pass with its op counts; level 0 adds each pass's
    detail lines (fusion matches, placement decisions); level 3 (default) shows none of them."""
    import subprocess
    import sys

    def lines(level):
        env = {**__import__("os").environ, "NPUSCOPE_LOG_LEVEL": str(level), "NPUSCOPE_LOG_TO_STDOUT": "0"}
        out = subprocess.run([sys.executable, "-m", "toolkit", "compile", "resnet_small", "--out",
                              str(tmp_path / f"c{level}")], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return [plog.LINE_RE.match(ln) for ln in out.stderr.splitlines() if "COMPILER(" in ln]

    info = lines(1)
    assert info and all(m is not None for m in info)
    passes = [m["message"].split("]")[0].lstrip("[") for m in info if m["level"] == "INFO"]
    from toolkit.compiler.stages import PASS_ORDER
    assert passes == list(PASS_ORDER)
    assert any("buffer_fusion" in m["message"] and "ops " in m["message"] for m in info)
    debug = lines(0)
    assert any(m["level"] == "DEBUG" and m["message"].startswith("[buffer_fusion]") for m in debug)
    assert lines(3) == []
