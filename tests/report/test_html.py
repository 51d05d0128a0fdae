"""The HTML report (toolkit/report/html.py), from a small hand-made Diagnosis (no model run): offline, escaped,
sections in order, compiled templates following source changes, and the report in headless Chromium."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from tests.report.helpers import EVIL, EVIL_ESCAPED, SCRIPT_BREAK, synthetic_diagnosis
from toolkit.compare.diagnosis import Diagnosis
from toolkit.report.tables import write_tables
from toolkit.report.html import render_report, script_json, templates_dir


@pytest.fixture()
def report(tmp_path):
    diag = synthetic_diagnosis()
    written = write_tables(diag, tmp_path)
    path = render_report(diag, tmp_path)
    return diag, tmp_path, written, path, path.read_text(encoding="utf-8")


def test_report_file_is_written_and_offline(report):
    _, out, _, path, html = report
    assert path == out / "index.html" and path.is_file()
    # the one script file is the plotly.js bundle beside the page, byte for byte plotly's own
    assert re.findall(r"<script[^>]*\bsrc\s*=\s*\"([^\"]*)\"", html, re.I) == ["plotly.min.js"]
    assert not re.search(r"<link[^>]*\bhref\s*=\s*[\"']?(https?:)?//", html, re.I), "no remote stylesheets"
    from plotly.offline import get_plotlyjs
    assert get_plotlyjs()[:200] not in html, "plotly.js is not inlined"
    assert (out / "plotly.min.js").read_text(encoding="utf-8") == get_plotlyjs()
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))


def test_model_names_are_escaped(report):
    _, _, _, _, html = report
    assert EVIL not in html
    assert EVIL_ESCAPED in html
    assert SCRIPT_BREAK not in html and "</script><script>" not in html
    # the figure JSON carries names with '<' escaped, so no '</' can close the <script> element early
    for block in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', html, re.S):
        assert "<" not in block
        json.loads(block)


def test_artifact_links_are_relative_only(report):
    _, _, _, _, html = report
    assert 'href="result.csv"' in html and 'href="dumps%20dir/index.json"' in html
    assert "href=\"javascript:" not in html and 'href="../secret.txt"' not in html


def test_sections_in_order(report):
    _, _, _, _, html = report
    ids = ["verdict", "findings", "graph", "divergence", "tasks", "chart", "table", "fusion", "precision", "memory",
           "kernels", "environment", "artifacts"]
    positions = [html.index(f'<section id="{i}">') for i in ids]
    assert positions == sorted(positions)
    assert 'class="verdict fail"' in html
    assert "3.00 MiB" in html and "1.500x" in html  # memory in human units, arena / lower bound
    assert "<td>0.9999999<" in html  # a cosine just below 1 (0.99999994) is not rounded to 1


def test_table_rows_marked(report):
    diag, _, _, _, html = report
    body = html[html.index('id="layer-table"'):]
    body = body[:body.index("</table>")]
    assert body.count("<tr") == len(diag.table) + 1
    assert body.count('class="abnormal origin"') == 1 and body.count('class="abnormal"') == 1
    assert '<th scope="col" data-num="1">CosineSimilarity</th>' in body  # sorted as numbers, by the cell text


def test_script_json_keeps_json_equal():
    text = json.dumps({"n": SCRIPT_BREAK + " & <!-- \u2028"})
    safe = str(script_json(text))
    assert "<" not in safe and ">" not in safe and "&" not in safe
    assert json.loads(safe) == json.loads(text)


def test_empty_diagnosis_renders(tmp_path):
    diag = Diagnosis(summary={"verdict": "PASS", "reasons": []}, table=pd.DataFrame({"Index": [], "NodeName": []}))
    html = render_report(diag, tmp_path, filename="r.html").read_text(encoding="utf-8")
    assert "no findings" in html and "no artifacts listed" in html
    assert write_tables(diag, tmp_path)["result"] == "result.csv"


def test_templates_found():
    assert (templates_dir() / "report.html.j2").is_file()


def test_report_in_headless_chromium(browser, tmp_path):
    diag = synthetic_diagnosis()
    out = tmp_path / "report"
    diag.artifacts = write_tables(diag, out)
    page = render_report(diag, out)
    browser.cmd("POST", "/url", {"url": page.as_uri()})

    drawn = browser.wait_for(
        "var d = document.getElementById('fig-layers');"
        "return !!(d && d.classList.contains('js-plotly-plot') && d.querySelector('.main-svg'));")
    assert drawn, "the per-layer chart was not drawn"
    assert browser.wait_for("return document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3;", 10), \
        "not every figure was drawn"

    # the malicious node name is text, and no <img src=x> element was created (so no onerror ran)
    hits = browser.js("var name = arguments[0]; return Array.from(document.querySelectorAll('body *'))"
                      ".filter(function (e) { return e.children.length === 0 && e.textContent === name; })"
                      ".map(function (e) { return e.tagName; });", EVIL)
    assert "TD" in hits, f"'{EVIL}' not shown as table text (found in {hits})"
    assert browser.js("return Array.from(document.images).filter("
                      "function (i) { return i.getAttribute('src') === 'x'; }).length;") == 0
    assert browser.js("return window.__pwned === undefined;"), "a model name broke out of the figure JSON"

    # the table filter and the click-to-sort headers work
    shown = browser.js(
        "var box = document.getElementById('table-filter'); box.value = 'onerror';"
        "box.dispatchEvent(new Event('input'));"
        "return Array.from(document.querySelectorAll('#layer-table tbody tr'))"
        ".filter(function (r) { return r.style.display !== 'none'; }).length;")
    assert shown == 1
    order = browser.js(
        "var box = document.getElementById('table-filter'); box.value = '';"
        "box.dispatchEvent(new Event('input'));"
        "var ths = document.querySelectorAll('#layer-table thead th'); var col = -1;"
        "for (var i = 0; i < ths.length; i++) { if (ths[i].textContent === 'CosineSimilarity') { col = i; } }"
        "ths[col].click();"
        "return Array.from(document.querySelectorAll('#layer-table tbody tr'))"
        ".map(function (r) { return r.cells[col].textContent; });")
    assert order[0] == "0.91" and order[-1] == "", f"ascending numeric sort, empty last: {order}"

    severe = [e for e in browser.browser_log() if e.get("level") == "SEVERE"]
    assert not severe, f"console errors: {severe}"


def test_compiled_templates_follow_source_changes(tmp_path):
    """The bytecode cache of toolkit.report.html reuses compiled code only while the template source is
    unchanged, and a cache folder that cannot be written does not break rendering."""
    import jinja2

    from toolkit.report import html

    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    cache.mkdir()
    (src / "t.j2").write_text("a {{ x }}", encoding="utf-8")

    def render() -> str:
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(src)),
                                 bytecode_cache=html._BytecodeCache(str(cache)), **html._ENV_OPTIONS)
        return env.get_template("t.j2").render(x="<1>")

    assert render() == "a &lt;1&gt;"
    assert len(list(cache.iterdir())) == 1  # compiled once, stored
    assert render() == "a &lt;1&gt;"  # loaded from the cache
    (src / "t.j2").write_text("b {{ x }}", encoding="utf-8")
    assert render() == "b &lt;1&gt;"
    env = jinja2.Environment(loader=jinja2.DictLoader({"t": "{{ 1 + 1 }}"}),
                             bytecode_cache=html._BytecodeCache(str(tmp_path / "missing")))
    assert env.get_template("t").render() == "2"
