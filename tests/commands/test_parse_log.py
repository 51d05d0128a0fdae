"""The parse-log command (toolkit/commands/parse_log.py), in process: merged outputs, skipped and unparseable
files, profile folders and files read once, op statistics kept apart per time kind, and files with a BOM, in
GBK or with no fusion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.logs.helpers import COMPILE_LOG, chrome_events, ort_events, plog_line, write_csv, write_events_per_line
from toolkit.core.errors import InputError
from toolkit.commands.parse_log import parse_log_command
from toolkit.profile.optable import OP_STATISTIC_COLUMNS, OP_SUMMARY_COLUMNS, PROFILER_STATISTIC_COLUMNS

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
    assert list(levels.columns[:1]) == ["LogFile"] and levels["Count"].sum() == 10
    messages = pd.read_csv(out / "log_messages.csv", keep_default_na=False)
    # the file each row came from, and a plog line's own source file: both kept (File had been overwritten)
    assert set(messages["LogFile"]) == {"plog.log"} and "File" in messages.columns
    assert (messages["File"] != "plog.log").all() and (messages["File"] != "").any()
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


def test_bom_gbk_and_fusionless_files_are_parsed_with_their_notes(tmp_path):
    """The fresh tester's files, each of a kind parse-log had misread: a plog starting with a UTF-8 BOM (its first
    line had been malformed), a GBK CSV (its op names had become U+FFFD without a note) and a fusion_result.json
    with one graph and no fusion (it had been 'nothing parsed', exit 2)."""
    lines = [plog_line("ERROR", "GE", 1, "atc", 1.7e9, "g.cc", 1, "1 op failed"),
             plog_line("WARNING", "FE", 1, "atc", 1.7e9 + 1, "f.cc", 1, "1 x")]
    (tmp_path / "b.log").write_bytes(b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode())
    (tmp_path / "g.csv").write_bytes("Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us)\n"
                                     "卷积,Conv2D,AI_CORE,0,100\n".encode("gbk"))
    (tmp_path / "fusion_result.json").write_text(json.dumps({"session_and_graph_id_0_0": {"graph_fusion": {},
                                                                                        "ub_fusion": {}}}))
    names = ["b.log", "g.csv", "fusion_result.json"]
    res = parse_log_command([str(tmp_path / n) for n in names], out=str(tmp_path / "o"), html=False)
    assert res["parsed"] == len(names) and res["skipped"] == 0 and res["malformed"] == 0
    summary = json.loads((res["out"] / "parse_summary.json").read_text())
    files = {Path(f["path"]).name: f for f in summary["files"]}
    assert files["b.log"]["records"] == len(lines)
    assert "decoded as GB18030 (not UTF-8)" in files["g.csv"]["notes"]
    assert files["fusion_result.json"]["records"] == 1 and files["fusion_result.json"]["status"] == "parsed"
    messages = pd.read_csv(res["out"] / "log_messages.csv")
    assert messages["Level"].tolist() == ["ERROR", "WARNING"]
    assert pd.read_csv(res["out"] / "op_summary.csv")["Op Name"].tolist() == ["卷积"]
    found = json.loads((res["out"] / "findings.json").read_text())
    assert {"kind": "log_errors", "subject": "GE"}.items() <= next(f for f in found if f["kind"] == "log_errors").items()


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
        assert list(stat.columns) == PROFILER_STATISTIC_COLUMNS + ["Time Kind", "Device_id", "Model Name"]
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
    write_csv(ours, OP_STATISTIC_COLUMNS[:9], [["Conv2D", "AI_CORE", 1, 30, 30, 30, 30, 100, "simulated"],
                                           ["Conv2D", "HOST_CPU", 1, 900, 900, 900, 900, 100, "measured"]])
    res = parse_log_command([str(dev), str(ours)], out=str(tmp_path / "o"), html=False)
    got = _stat_dict(pd.read_csv(res["out"] / "op_statistic.csv", keep_default_na=False))
    assert got == {("device", "Conv2D", "AI_CORE"): (4, 40.0, 80.0), ("device", "Cast", "AI_CORE"): (2, 10.0, 20.0),
                   ("simulated", "Conv2D", "AI_CORE"): (1, 30.0, 100.0),
                   ("measured", "Conv2D", "HOST_CPU"): (1, 900.0, 100.0)}


@pytest.mark.parametrize("events", [
    [{"name": "a", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1},
     {"name": "b", "ph": "X", "ts": 6, "dur": 5, "pid": 1, "tid": 1}],
    [{"name": "aclmdlExecute", "ph": "X", "ts": "100.5", "dur": 40, "pid": "CANN", "tid": 3},
     {"name": "conv1", "ph": "X", "ts": "110.0", "dur": 12.5, "pid": 2, "tid": 7, "args": {"Task Type": "AI_CORE"}}],
], ids=["plain-chrome", "host-span-and-device-task"])
def test_a_trace_whose_slices_lack_a_task_type_writes_its_report(tmp_path, events):
    """Chrome-trace slices without a Task Type (a plain trace, a host span next to device tasks, string
    timestamps) are read and drawn: the report is written and every slice's duration is summed."""
    (tmp_path / "t.json").write_text(json.dumps(events))
    res = parse_log_command([str(tmp_path / "t.json")], out=str(tmp_path / "out"))
    assert (res["out"] / "profile.html").is_file()
    ops = pd.read_csv(res["out"] / "op_summary.csv")
    assert ops["Task Duration(us)"].sum() == pytest.approx(sum(float(e["dur"]) for e in events))


@pytest.mark.parametrize("key", ["Device_id", "Model Name"])
def test_op_statistic_files_keep_one_hundred_percent_per_device_and_model(tmp_path, key):
    """op_statistic CSVs of two devices (or two models), one file or two: each group's Ratio(%) sums to 100 and
    equals its op type's share of that group's total, computed here from the file's numbers."""
    rows = [("0", "resnet", "Conv2D", "AI_CORE", 53, 1234.56), ("0", "resnet", "Cast", "AI_VECTOR_CORE", 10, 500.0),
            ("0", "resnet", "NonZero", "AI_CPU", 2, 265.44), ("1", "resnet", "Conv2D", "AI_CORE", 53, 1300.0)]
    if key == "Model Name":
        rows = [("0", "resnet" if r[0] == "0" else "bert", *r[2:]) for r in rows]
    head = "Device_id,Model Name,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
    (tmp_path / "a.csv").write_text(head + "".join(f"{d},{m},{o},{c},{n},{t},1,1,1,0\n" for d, m, o, c, n, t in rows[:3]))
    (tmp_path / "b.csv").write_text(head + "".join(f"{d},{m},{o},{c},{n},{t},1,1,1,0\n" for d, m, o, c, n, t in rows[3:]))
    res = parse_log_command([str(tmp_path / "a.csv"), str(tmp_path / "b.csv")], out=str(tmp_path / "out"))
    stat = pd.read_csv(res["out"] / "op_statistic.csv", dtype={"Device_id": str})
    for group, want in stat.groupby(key):
        mine = [r for r in rows if (r[0] if key == "Device_id" else r[1]) == str(group)]
        total = sum(r[5] for r in mine)
        assert want["Ratio(%)"].sum() == pytest.approx(100.0)
        for r in mine:
            got = want.loc[want["OP Type"] == r[2], "Ratio(%)"].item()
            assert got == pytest.approx(r[5] / total * 100.0)


def test_summary_line_counts_only_the_time_kinds_rows_hold(tmp_path):
    """Kind: a timeline whose Time Kind column is a Categorical (kinds resolved as events arrive): the terminal
    line counts each kind that rows hold, e.g. "(device 2, host 1)", never a kind of 0 rows or an empty one."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Ascend Hardware"}},
              {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "CANN"}},
              {"ph": "X", "name": "Add", "pid": 1, "tid": 2, "ts": 10, "dur": 1.5, "args": {"Task Id": 1}},
              {"ph": "X", "name": "hcom_allReduce_1", "pid": 1, "tid": 3, "ts": 20, "dur": 9.0,
               "args": {"Task Type": "HCCL", "Task Id": 2}},
              {"ph": "X", "name": "aclnnAdd", "pid": 2, "tid": 7, "ts": 5, "dur": 30.0, "args": {}}]
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events))
    res = parse_log_command([str(path)], out=str(tmp_path / "out"), html=False)
    ops = pd.read_csv(res["out"] / "op_summary.csv", keep_default_na=False)
    want = ", ".join(f"{k} {v}" for k, v in ops["Time Kind"].value_counts().items())
    line = next(ln for ln in res["summary"] if ln.startswith("op summary:"))
    assert line == f"op summary: {len(ops)} row(s) ({want})" and want == "device 2, host 1"
