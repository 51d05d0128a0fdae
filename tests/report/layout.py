"""What the layout checks of the browser tests measure on a page (not a test module): the page's width, the
tables wider than the window and whether each sits in a scrolling box, where the recommendations are, and the
console errors. Used by tests/report/test_pages_layout.py."""

from __future__ import annotations

import base64
from pathlib import Path

WIDTH, HEIGHT = 1400, 900

#: In the page: {"scrollWidth", "innerWidth", "unboxed": [table descriptions], "recs": [{"top", "right"}]}.
MEASURE = """
function box(el) {
  for (var p = el.parentElement; p && p !== document.body; p = p.parentElement) {
    var s = getComputedStyle(p);
    if ((s.overflowX === 'auto' || s.overflowX === 'scroll') && p.getBoundingClientRect().right <= window.innerWidth + 0.5) {
      return true;
    }
  }
  return false;
}
var unboxed = [];
document.querySelectorAll('table').forEach(function (t) {
  if (t.getBoundingClientRect().width > window.innerWidth && !box(t)) {
    unboxed.push((t.id || t.className || 'table') + ' ' + Math.round(t.getBoundingClientRect().width) + 'px');
  }
});
var recs = Array.from(document.querySelectorAll('.finding .rec')).map(function (r) {
  var b = r.getBoundingClientRect();
  return {top: b.top + window.scrollY, right: b.right, left: b.left};
});
return {scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth, unboxed: unboxed,
        recs: recs, findings: document.querySelectorAll('.finding').length};
"""


def open_page(browser, page: Path) -> None:
    """Open ``page`` at WIDTH x HEIGHT and wait until its plotly figures are drawn (or none exist)."""
    browser.cmd("POST", "/window/rect", {"width": WIDTH, "height": HEIGHT})
    browser.cmd("POST", "/url", {"url": Path(page).as_uri()})
    browser.wait_for("var f = document.querySelectorAll('div.figure'); return f.length === 0 || "
                     "document.querySelectorAll('div.figure .main-svg').length >= f.length;")


def measure(browser) -> dict:
    """:data:`MEASURE` on the open page, plus its SEVERE console entries as "console"."""
    out = browser.js(MEASURE)
    out["console"] = [e for e in browser.browser_log() if e.get("level") == "SEVERE"]
    return out


def screenshot(browser, path: Path) -> Path:
    """The window (WIDTH x HEIGHT: the first screen) as a PNG at ``path``."""
    Path(path).write_bytes(base64.b64decode(browser.cmd("GET", "/screenshot")))
    return Path(path)
