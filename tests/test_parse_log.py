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
from tests import test_report_browser
from onnx import TensorProto, helper, numpy_helper
from tests.test_logs import (
    COMPILE_LOG,
    chrome_events,
    ort_events,
    plog_line,
    write_csv,
    write_events_per_line,
)

from toolkit.compiler.pipeline import Finding
from toolkit.errors import InputError
from toolkit.logs.parsers import ort_profile
from toolkit.logs.workflow import parse_log_command
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
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "unknown format" in bad.stderr
    missing = _cli("parse-log", str(tmp_path / "nope.log"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr
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
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1
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
    from tests.test_report import EVIL as IMG
    from tests.test_report import SCRIPT_BREAK

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


