"""`npuscope parse-log` end to end: a real onnxruntime profile, merged outputs, skipped and unparseable files,
the CLI's exit codes, and the shared profile.html renderer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
import test_report_browser
from onnx import TensorProto, helper, numpy_helper
from test_logs import (
    COMPILE_LOG,
    chrome_events,
    ort_events,
    plog_line,
    write_csv,
    write_events_per_line,
)

from toolkit.core.records import Finding
from toolkit.core.errors import InputError
from toolkit.logs.parsers import ort_profile
from toolkit.commands.parse_log import parse_log_command
from toolkit.profile.optable import (
    OP_STATISTIC_COLUMNS,
    OP_SUMMARY_COLUMNS,
    PROFILER_STATISTIC_COLUMNS,
    op_summary_frame,
)
from toolkit.report import profile_html

ROOT = Path(__file__).resolve().parents[1]
browser = test_report_browser.browser   # the headless Chromium fixture (skipped without the browser, unless CI)


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((8 * 30 * 30, 16)).astype(np.float32), "m")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "m"], ["y0"], name="fc"),
             helper.make_node("Softmax", ["y0"], ["y"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [w, m, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ort_profile(tmp_path: Path, runs: int = 5) -> Path:
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "ortprof")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.use_per_session_threads = True
    sess = ort.InferenceSession(_model().SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.ones((1, 3, 32, 32), np.float32)
    for _ in range(runs):
        sess.run(None, {"x": x})
    return Path(sess.end_profiling())


def test_real_onnxruntime_profile_per_node_times_sum_to_the_event_total(tmp_path):
    path = _ort_profile(tmp_path, runs=5)
    events = json.loads(path.read_text())
    nodes = [e for e in events if e.get("cat") == "Node"]
    total = sum(e["dur"] for e in nodes)                               # the events' total, read independently
    per_node: dict[str, float] = {}
    for e in nodes:
        if e["name"].endswith("_kernel_time"):
            per_node[e["name"][:-len("_kernel_time")]] = per_node.get(e["name"][:-len("_kernel_time")], 0) + e["dur"]
    res = ort_profile.parse(path)
    got = res.op_summary.groupby("Op Name")["Task Duration(us)"].sum()
    assert set(got.index) == {"conv", "relu", "flatten", "fc", "softmax"} == set(per_node)
    assert got.sum() == pytest.approx(total, rel=0.05)
    for name, us in per_node.items():
        assert got[name] == pytest.approx(us)
    assert (res.op_summary["OP Type"].value_counts() == 5).all() and res.malformed == 0
    runs = res.tables["ort_sessions"].set_index("Name").loc["model_run"]
    assert runs["Count"] == 5 and got.sum() <= runs["Total(us)"]


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


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, cwd=ROOT, check=False,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_cli_parse_log_exit_codes_and_log_lines(tmp_path):
    files = [str(p) for p in _inputs(tmp_path)]
    ok = _cli("parse-log", *files, "--out", str(tmp_path / "ok"),
              env={"NPUSCOPE_LOG_LEVEL": "1", "NPUSCOPE_LOG_TO_STDOUT": "1"})
    assert ok.returncode == 0, ok.stderr
    logged = [ln for ln in ok.stdout.splitlines() if ln.startswith("[INFO] LOGS(")]
    assert len(logged) == 4 and (tmp_path / "ok" / "profile.html").is_file()
    assert "unknown.txt: skipped (unknown format)" in ok.stdout
    quiet = _cli("parse-log", files[0], "--out", str(tmp_path / "q"), "--no-html")
    assert quiet.returncode == 0 and "[INFO]" not in quiet.stdout + quiet.stderr
    assert not (tmp_path / "q" / "profile.html").exists()
    bad = _cli("parse-log", str(tmp_path / "in" / "unknown.txt"), "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "unknown format" in bad.stderr
    missing = _cli("parse-log", str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    env_bad = _cli("parse-log", files[0], env={"NPUSCOPE_LOG_LEVEL": "verbose"})
    assert env_bad.returncode == 2 and "NPUSCOPE_LOG_LEVEL" in env_bad.stderr
    no_args = _cli("parse-log")
    assert no_args.returncode == 2


@pytest.mark.parametrize("layout, says", [
    ({}, "it has nothing"),
    ({"sub/a.log": "x"}, "it has 1 subfolder(s)"),
    ({".hidden.log": "x", "d1/x": "", "d2/y": ""}, "it has 2 subfolder(s), 1 hidden file(s)"),
])
def test_folder_without_files_is_a_clear_error(tmp_path, layout, says):
    folder = tmp_path / "emptydir"
    folder.mkdir()
    for rel, text in layout.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    res = _cli("parse-log", str(folder), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert f"folder '{folder}' holds no files to read ({says})" in res.stderr
    assert "directly inside a folder, not its subfolders" in res.stderr and not (tmp_path / "o").exists()


def test_cli_non_finite_numbers_are_malformed_without_warnings(tmp_path):
    path = tmp_path / "op_summary.csv"
    write_csv(path, ["Op Name", "OP Type", "Task Type", "Task Duration(us)"],
              [["a", "Conv", "AI_CORE", "1e309"], ["b", "Add", "AI_CORE", "3"], ["c", "Add", "AI_CORE", "-inf"]])
    res = _cli("parse-log", str(path), "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    assert "Warning" not in res.stderr and res.stderr.strip() == ""
    assert "1 record(s), 2 malformed" in res.stdout
    stat = pd.read_csv(tmp_path / "o" / "op_statistic.csv")
    assert stat["OP Type"].tolist() == ["Add"] and stat["Total Time(us)"].tolist() == [3.0]
    assert stat["Ratio(%)"].tolist() == [100.0]


def test_cli_caps_stored_text_of_every_parser(tmp_path):
    n = 30 * 1024 * 1024
    inp = tmp_path / "in"
    inp.mkdir()
    with open(inp / "big.log", "w") as fh:
        fh.write(plog_line("ERROR", "GE", 1, "p", 1.7e9, "a.cc", 2, "x" * n) + "\n")
    write_csv(inp / "op_summary.csv", ["Op Name", "OP Type", "Task Duration(us)"], [["n" * 10000, "Add", "2"]])
    res = _cli("parse-log", str(inp), "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    out = tmp_path / "o"
    msgs = pd.read_csv(out / "log_messages.csv")
    assert msgs["Message"].iloc[0] == "x" * 2000 + f" … [truncated: {n:,} characters]"
    ops = pd.read_csv(out / "op_summary.csv")
    assert ops["Op Name"].iloc[0] == "n" * 2000 + " … [truncated: 10,000 characters]"
    for name in ("log_messages.csv", "profile.html", "findings.json", "parse_summary.json", "op_summary.csv"):
        assert (out / name).stat().st_size < 5_000_000, name
    assert "2 text value(s) longer than 2,000 characters were truncated" in res.stdout  # the message, the name
    assert json.loads((out / "parse_summary.json").read_text())["truncated_texts"] == 2


# ---------------------------------------------------------------------------------------------- the renderer
EVIL = '<script>alert("x")</script>'


def _ops(n: int = 6, kind: str = "simulated") -> pd.DataFrame:
    return op_summary_frame([{"Op Name": EVIL if i == 0 else f"op{i}", "OP Type": ["Conv", "Cast", EVIL][i % 3],
                              "Task Type": ["AI_CORE", "AI_VECTOR_CORE", "MEMCPY"][i % 3], "Stream ID": i % 2,
                              "Task Start Time(us)": 10.0 * i, "Task Duration(us)": 1.0 + i, "Time Kind": kind,
                              "Source": "t"} for i in range(n)])


def test_render_profile_sections_and_escaping(tmp_path):
    breakdown = pd.DataFrame({"Stage": ["pre", "device", "post"], "Ms": [1.0, 2.0, 0.5],
                              "TimeKind": ["measured", "simulated", "measured"]})
    latency = pd.DataFrame({"Schedule": ["serial", "pipelined"], "p50(ms)": [3, 2], "p90(ms)": [3.5, 2.2],
                            "p99(ms)": [4, 2.5], "Throughput(req/s)": [300, 450]})
    placement = pd.DataFrame({"Step": [1, 2], "Moved": [EVIL, "b"], "Kind": ["to_cpu", "to_cpu"],
                              "LatencyBefore(ms)": [3, 2.8], "LatencyAfter(ms)": [2.8, 2.9], "Kept": [True, False]})
    findings = [Finding("warning", "cast_overhead", EVIL, {"share_pct": 12.5}, "merge the FP32 islands")]
    path = profile_html.render_profile(tmp_path, title="t", op_summary=_ops(), findings=findings,
                                       meta={"model": EVIL, "malformed lines": 3}, breakdown=breakdown,
                                       latency=latency, placement=placement)
    html = path.read_text()
    assert EVIL not in html and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    for sid in ("breakdown", "latency", "placement", "timeline", "top-ops", "op-types", "findings"):
        assert f'<section id="{sid}">' in html
    assert "Times: SIMULATED" in html and "malformed lines" in html
    bare = profile_html.render_profile(tmp_path, title="t", op_summary=_ops(kind="measured"), findings=[], meta={},
                                       filename="bare.html").read_text()
    assert '<section id="breakdown">' not in bare and '<section id="placement">' not in bare
    assert "Times: MEASURED ON THIS HOST" in bare
    with pytest.raises(ValueError, match="latency"):
        profile_html.render_profile(tmp_path, title="t", op_summary=_ops(), findings=[], meta={},
                                    latency=latency.drop(columns=["p99(ms)"]), filename="x.html")


def test_render_profile_caps_the_timeline_and_flags_mixed_time_kinds(tmp_path, monkeypatch):
    monkeypatch.setattr(profile_html, "MAX_TIMELINE_BARS", 10)
    ops = pd.concat([_ops(20, "simulated"), _ops(5, "measured")], ignore_index=True)
    html = profile_html.render_profile(tmp_path, title="t", op_summary=ops, findings=[], meta={}).read_text()
    assert "Showing the first 10 of 25 timed tasks" in html and "Times: MIXED" in html
    rows, timed = profile_html.timeline_rows(ops, 10)
    assert timed == 25 and rows["Task Start Time(us)"].tolist() == sorted(ops["Task Start Time(us)"])[:10]
    top = profile_html.top_ops(ops)
    for kind in ("simulated", "measured"):
        assert top[top["Time Kind"] == kind]["Ratio(%)"].sum() == pytest.approx(100.0)


def test_profile_html_in_headless_chromium(browser, tmp_path):
    """Every figure of profile.html draws offline, names from files stay text, no console errors."""
    from test_report import EVIL as IMG
    from test_report import SCRIPT_BREAK

    ops = _ops(12).assign(**{"Op Name": [IMG, SCRIPT_BREAK] + [f"op{i}" for i in range(10)]})
    breakdown = pd.DataFrame({"Stage": ["pre", "device", "post"], "Ms": [1.0, 2.0, 0.5],
                              "TimeKind": ["measured", "simulated", "measured"]})
    latency = pd.DataFrame({"Schedule": ["serial"], "p50(ms)": [3], "p90(ms)": [3.5], "p99(ms)": [4],
                            "Throughput(req/s)": [300]})
    placement = pd.DataFrame({"Step": [1], "Moved": [IMG], "Kind": ["to_cpu"], "LatencyBefore(ms)": [3],
                              "LatencyAfter(ms)": [2.8], "Kept": [True]})
    page = profile_html.render_profile(tmp_path, title="t", op_summary=ops, meta={"model": IMG},
                                       findings=[Finding("info", "hotspot", IMG, {}, "r")], breakdown=breakdown,
                                       latency=latency, placement=placement)
    browser.cmd("POST", "/url", {"url": page.as_uri()})
    n_figures = browser.js("return document.querySelectorAll('div.figure').length;")
    assert n_figures == 5
    assert browser.wait_for(f"return document.querySelectorAll('.js-plotly-plot .main-svg').length >= {n_figures};"), \
        "not every figure was drawn"
    assert browser.js("return Array.from(document.images).filter("
                      "function (i) { return i.getAttribute('src') === 'x'; }).length;") == 0
    assert browser.js("return window.__pwned === undefined;")
    hits = browser.js("var name = arguments[0]; return Array.from(document.querySelectorAll('body *'))"
                      ".filter(function (e) { return e.children.length === 0 && e.textContent === name; }).length;",
                      IMG)
    assert hits >= 3                                            # meta, finding subject, top ops / placement cells
    severe = [e for e in browser.browser_log() if e.get("level") == "SEVERE"]
    assert not severe, f"console errors: {severe}"


# ---------------------------------------------------------------- nothing counted twice
def _profile(tmp_path: Path, name: str = "pf") -> Path:
    out = tmp_path / name
    r = _cli("profile", "transformer_block", "--requests", "3", "--no-advise", "--no-html", "--out", str(out))
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
