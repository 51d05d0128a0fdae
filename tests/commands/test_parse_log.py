"""The parse-log command (toolkit/commands/parse_log.py), in process: merged outputs, skipped and unparseable
files, profile folders and files read once, and op statistics kept apart per time kind."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from toolkit.errors import InputError
from toolkit.logs.parsers import ort_profile
from toolkit.logs.workflow import parse_log_command
from toolkit.profile.optable import OP_STATISTIC_COLUMNS, OP_SUMMARY_COLUMNS, PROFILER_STATISTIC_COLUMNS

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


def plog_line(level, module, pid, proc, ts, file, line, msg) -> str:
    """A plog line built by hand from GUIDE §4 (ts: POSIX seconds; local time; ms and µs fields)."""
    micros = round(ts * 1e6) % 1_000_000
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(int(ts)))
    return f"[{level}] {module}({pid},{proc}):{stamp}.{micros // 1000:03d}.{micros % 1000:03d} [{file}:{line}]{msg}"


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


ROOT = Path(__file__).resolve().parents[2]


def _inputs(tmp_path: Path) -> list[Path]:
    d = tmp_path / "in"
    d.mkdir()
    (d / "compile.log").write_text(COMPILE_LOG)
    write_events_per_line(d / "ort.json", ort_events())
    (d / "trace.json").write_text(json.dumps(chrome_events()))
    lines = [plog_line("ERROR" if i == 3 else "INFO", "GE", 1, "p", 1.7e9 + i, "a.cc", i, f"m{i}") for i in range(10)]
    (d / "plog.log").write_text("\n".join(lines[:5] + ["garbage", "more garbage"] + lines[5:]) + "\n")
    (d / "unknown.txt").write_text("hello\n")
    (d / "empty.csv").write_text("")
    return sorted(d.iterdir())


def test_workflow_merges_files_and_reports_skipped_and_malformed(tmp_path):
    _inputs(tmp_path)
    res = parse_log_command([str(tmp_path / "in")], out=str(tmp_path / "out"))   # a folder: its files
    out = res["out"]
    assert res["parsed"] == 4 and res["skipped"] == 2
    summary = json.loads((out / "parse_summary.json").read_text())
    by_name = {Path(f["path"]).name: f for f in summary["files"]}
    assert by_name["unknown.txt"]["status"] == "skipped" and by_name["empty.csv"]["reason"] == "empty"
    assert by_name["plog.log"]["malformed"] == 2 and by_name["plog.log"]["records"] == 10
    assert by_name["ort.json"]["malformed"] == 2 and by_name["trace.json"]["malformed"] == 4
    assert by_name["compile.log"]["malformed"] == 2
    assert summary["malformed"] == 10 and summary["rows"] == 3 + 3
    assert sorted(summary["formats"]) == ["chrome_trace", "compile_log", "ort_profile", "plog"]
    ops = pd.read_csv(out / "op_summary.csv", keep_default_na=False)
    assert list(ops.columns) == OP_SUMMARY_COLUMNS
    assert sorted(ops["Op Name"]) == sorted(["conv", "relu", "copy", "conv1", "h2d", "relu"])
    stat = pd.read_csv(out / "op_statistic.csv")
    assert list(stat.columns) == OP_STATISTIC_COLUMNS
    assert stat["Total Time(us)"].sum() == pytest.approx(30 + 4 + 6 + 5 + 7.5 + 2)
    levels = pd.read_csv(out / "log_levels.csv")
    assert list(levels.columns[:1]) == ["File"] and levels["Count"].sum() == 10
    html = (out / "profile.html").read_text()
    assert "unknown.txt: unknown format" in html and "plog.log: 2" in html
    kinds = {f["kind"] for f in json.loads((out / "findings.json").read_text())}
    assert {"malformed_input", "file_skipped", "log_errors", "compile_pass_failed"} <= kinds


def test_op_summary_csv_round_trips(tmp_path):
    first = parse_log_command([str(p) for p in _inputs(tmp_path) if p.name in ("ort.json", "trace.json")],
                              out=str(tmp_path / "a"), html=False)
    assert not (first["out"] / "profile.html").exists()
    again = parse_log_command([str(first["out"] / "op_summary.csv")], out=str(tmp_path / "b"), html=False)
    a = pd.read_csv(first["out"] / "op_summary.csv", keep_default_na=False)
    b = pd.read_csv(again["out"] / "op_summary.csv", keep_default_na=False)
    pd.testing.assert_frame_equal(a, b)
    assert set(b["Time Kind"]) == {"measured", "simulated"}


def test_op_statistic_only_input_is_kept(tmp_path):
    path = tmp_path / "op_statistic_0_1.csv"
    write_csv(path, PROFILER_STATISTIC_COLUMNS, [["Conv2D", "AI_CORE", 4, 40, 10, 9, 11, 80], ["Cast", "AI_CORE", 2, 10, 5, 5, 5, 20]])
    res = parse_log_command([str(path)], out=str(tmp_path / "o"))
    stat = pd.read_csv(res["out"] / "op_statistic.csv")
    assert stat["OP Type"].tolist() == ["Conv2D", "Cast"] and stat["Ratio(%)"].tolist() == [80.0, 20.0]


@pytest.mark.parametrize("content,reason", [(b"", "empty"), (b"\x00\x01\x02binary", "binary"), (b"just text\n", "unknown format")])
def test_nothing_parsed_is_a_one_line_input_error(tmp_path, content, reason):
    path = tmp_path / "f.dat"
    path.write_bytes(content)
    with pytest.raises(InputError) as exc:
        parse_log_command([str(path)], out=str(tmp_path / "o"))
    msg = str(exc.value)
    assert "\n" not in msg and f"'{path}': {reason}" in msg and "ort_profile" in msg and "plog" in msg
    assert not (tmp_path / "o").exists()


def test_recognised_file_with_no_readable_record_counts_as_not_parsed(tmp_path):
    path = tmp_path / "op_summary.csv"
    write_csv(path, ["Op Name", "Task Duration(us)"], [["a", "x"], ["", "1"]])
    with pytest.raises(InputError, match="no readable record, 2 malformed"):
        parse_log_command([str(path)], out=str(tmp_path / "o"))


def _cli_in_repo(*args, env=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, cwd=ROOT, check=False,
                          env={**os.environ, **(env or {})}, timeout=300)


# ---------------------------------------------------------------- nothing counted twice
def _profile(tmp_path: Path, name: str = "pf") -> Path:
    out = tmp_path / name
    r = _cli_in_repo("profile", "transformer_block", "--requests", "3", "--no-advise", "--no-html", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


def _statistic_by_hand(summary: pd.DataFrame) -> dict:
    """{(Time Kind, OP Type, Core Type): (count, total, ratio within the kind)} with plain Python."""
    totals, cells = {}, {}
    for r in summary.to_dict("records"):
        kind = r["Time Kind"] or "device"
        key = (kind, r["OP Type"], r["Task Type"])
        n, t = cells.get(key, (0, 0.0))
        cells[key] = (n + 1, t + r["Task Duration(us)"])
        totals[kind] = totals.get(kind, 0.0) + r["Task Duration(us)"]
    return {k: (n, t, 100.0 * t / totals[k[0]]) for k, (n, t) in cells.items()}


def _stat_dict(stat: pd.DataFrame) -> dict:
    return {(r["Time Kind"], r["OP Type"], r["Core Type"]): (r["Count"], r["Total Time(us)"], r["Ratio(%)"])
            for r in stat.to_dict("records")}


def test_profile_folder_is_counted_once_and_its_statistic_is_per_time_kind(tmp_path):
    """The defect: parse-log on profile's folder read op_summary.csv *and* trace.json (each task twice or more),
    and op_statistic.csv mixed measured and simulated time in one Ratio(%)."""
    pf = _profile(tmp_path)
    own = pd.read_csv(pf / "op_summary.csv", keep_default_na=False)
    assert set(own["Time Kind"]) == {"simulated", "measured"}
    res = parse_log_command([str(pf)], out=str(tmp_path / "p"))
    summary = json.loads((res["out"] / "parse_summary.json").read_text())
    assert summary["rows"] == len(own)
    skipped = {Path(s["path"]).name: s["reason"] for s in summary["skipped"]}
    assert "same tasks as op_summary.csv" in skipped["trace.json"]
    assert "same tasks as op_summary.csv" in (res["out"] / "profile.html").read_text()
    # op_statistic per Time Kind, by hand, equals both profile's file and parse-log's
    want = _statistic_by_hand(own)
    for stat in (pd.read_csv(pf / "op_statistic.csv", keep_default_na=False),
                 pd.read_csv(res["out"] / "op_statistic.csv", keep_default_na=False)):
        assert list(stat.columns) == PROFILER_STATISTIC_COLUMNS + ["Time Kind"]
        got = _stat_dict(stat)
        assert got.keys() == want.keys()
        for k, (n, t, ratio) in want.items():
            assert got[k][0] == n and got[k][1] == pytest.approx(t) and got[k][2] == pytest.approx(ratio), k
        for kind, rows in stat.groupby("Time Kind"):
            assert rows["Ratio(%)"].sum() == pytest.approx(100.0)


def test_profile_trace_and_summary_given_as_files_are_not_both_read(tmp_path):
    pf = _profile(tmp_path)
    res = parse_log_command([str(pf / "trace.json"), str(pf / "op_summary.csv")], out=str(tmp_path / "p"), html=False)
    s = json.loads((res["out"] / "parse_summary.json").read_text())
    assert s["rows"] == len(pd.read_csv(pf / "op_summary.csv")) and res["skipped"] == 1
    # trace.json alone (or outside its profile folder) is still read
    alone = parse_log_command([str(pf / "trace.json")], out=str(tmp_path / "t"), html=False)
    assert alone["parsed"] == 1 and alone["skipped"] == 0


@pytest.mark.parametrize("how", ["file_twice", "folder_and_file", "other_spelling"])
def test_the_same_file_given_twice_is_read_once(tmp_path, how, monkeypatch):
    path = tmp_path / "in" / "op_summary_0_1.csv"
    path.parent.mkdir()
    write_csv(path, ["Op Name", "OP Type", "Task Type", "Task Duration(us)"],
              [["conv", "Conv2D", "AI_CORE", 10.0], ["relu", "Relu", "AI_VECTOR_CORE", 5.0]])
    monkeypatch.chdir(tmp_path)
    args = {"file_twice": [str(path), str(path)], "folder_and_file": [str(path.parent), str(path)],
            "other_spelling": [str(path), "in/../in/op_summary_0_1.csv"]}[how]
    res = parse_log_command(args, out=str(tmp_path / "o"))
    s = json.loads((res["out"] / "parse_summary.json").read_text())
    assert s["rows"] == 2 and len(s["duplicates"]) == 1 and res["parsed"] == 1
    stat = pd.read_csv(res["out"] / "op_statistic.csv")
    assert stat["Total Time(us)"].sum() == pytest.approx(15.0) and stat["Count"].sum() == 2
    assert any("given twice, read once" in line for line in res["summary"])
    assert "read once" in (res["out"] / "profile.html").read_text()


def test_merged_op_statistic_files_keep_time_kinds_apart(tmp_path):
    dev = tmp_path / "op_statistic_0_1.csv"
    write_csv(dev, PROFILER_STATISTIC_COLUMNS, [["Conv2D", "AI_CORE", 4, 40, 10, 9, 11, 80],
                                                ["Cast", "AI_CORE", 2, 10, 5, 5, 5, 20]])
    ours = tmp_path / "op_statistic.csv"
    write_csv(ours, OP_STATISTIC_COLUMNS, [["Conv2D", "AI_CORE", 1, 30, 30, 30, 30, 100, "simulated"],
                                           ["Conv2D", "HOST_CPU", 1, 900, 900, 900, 900, 100, "measured"]])
    res = parse_log_command([str(dev), str(ours)], out=str(tmp_path / "o"), html=False)
    got = _stat_dict(pd.read_csv(res["out"] / "op_statistic.csv", keep_default_na=False))
    assert got == {("device", "Conv2D", "AI_CORE"): (4, 40.0, 80.0), ("device", "Cast", "AI_CORE"): (2, 10.0, 20.0),
                   ("simulated", "Conv2D", "AI_CORE"): (1, 30.0, 100.0),
                   ("measured", "Conv2D", "HOST_CPU"): (1, 900.0, 100.0)}
