"""The shared profile.html renderer (toolkit/report/profile_html.py): sections, escaping, the capped timeline,
and the page in headless Chromium."""

from __future__ import annotations

import pandas as pd
import pytest

from toolkit.core.records import Finding
from toolkit.profile.optable import op_summary_frame
from toolkit.report import profile_html

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



@pytest.mark.parametrize("blank", ["", None])
def test_timeline_labels_tasks_without_a_task_type_or_kind(tmp_path, blank):
    """Rows read from a trace with no Task Type (a host span, a plain Chrome trace), of several sources and time
    kinds, in the summary's categorical columns: the label shows '?' for the missing parts and the page renders."""
    rows = [{"Op Name": f"op{i}", "OP Type": "Conv", "Task Type": blank if i % 2 else "AI_CORE",
             "Stream ID": None if i == 3 else 1, "Task Start Time(us)": float(i), "Task Duration(us)": 1.0,
             "Time Kind": ["measured", blank][i % 2], "Source": ["a.json", "b.json"][i % 2]} for i in range(4)]
    ops = op_summary_frame(rows)
    got, timed = profile_html.timeline_rows(ops, 10)
    assert timed == 4
    kinds = ["measured · ", "? · "] if blank == "" else ["", ""]  # a missing Time Kind is no second kind
    assert got["Row"].tolist() == [f"a.json · {kinds[0]}stream 1 · AI_CORE", f"b.json · {kinds[1]}stream 1 · ?",
                                   f"a.json · {kinds[0]}stream 1 · AI_CORE", f"b.json · {kinds[1]}stream ? · ?"]
    html = profile_html.render_profile(tmp_path, title="t", op_summary=ops, findings=[], meta={}).read_text()
    assert '<section id="timeline">' in html

def test_profile_html_in_headless_chromium(browser, tmp_path):
    """Every figure of profile.html draws offline, names from files stay text, no console errors."""
    from tests.report.helpers import EVIL as IMG
    from tests.report.helpers import SCRIPT_BREAK

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
