"""Helpers of the log parser tests (not a test module): fixtures written from the documented formats (GUIDE §4)."""

from __future__ import annotations

import csv
import json
import time

from toolkit.profile.optable import PROFILER_STATISTIC_COLUMNS, op_summary_frame


def plog_line(level, module, pid, proc, ts, file, line, msg) -> str:
    """A plog line built by hand from GUIDE §4 (ts: POSIX seconds; local time; ms and µs fields)."""
    micros = round(ts * 1e6) % 1_000_000
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(int(ts)))
    return f"[{level}] {module}({pid},{proc}):{stamp}.{micros // 1000:03d}.{micros % 1000:03d} [{file}:{line}]{msg}"


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


def write_csv(path, header, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


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


def _fixtures(tmp_path):
    (tmp_path / "compile.log").write_text(COMPILE_LOG)
    write_events_per_line(tmp_path / "ort.json", ort_events())
    (tmp_path / "trace.json").write_text(json.dumps(chrome_events()))
    (tmp_path / "plog.log").write_text("\n".join(plog_line("INFO", "GE", 1, "p", 1.7e9 + i, "a.cc", i, "m")
                                                 for i in range(20)))
    write_csv(tmp_path / "op_statistic.csv", PROFILER_STATISTIC_COLUMNS, [["Conv", "AI_CORE", 1, 2, 2, 2, 2, 100]])
    return sorted(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------------- findings
def _summary(rows):
    return op_summary_frame([{"Source": "p", "Time Kind": "device", **r} for r in rows])
