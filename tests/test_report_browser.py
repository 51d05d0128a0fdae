"""The HTML report in a real browser: headless Chromium driven through chromedriver's W3C WebDriver HTTP API.

Needs Debian's ``chromium`` and ``chromium-driver`` packages (/usr/bin/chromium, /usr/bin/chromedriver); the
WebDriver client is a few urllib calls, so no Python package is added. Skipped when the browser is missing,
unless ``NPUSCOPE_REQUIRE_BROWSER=1`` (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.test_report import EVIL, synthetic_diagnosis
from toolkit.report.csvjson import write_tables
from toolkit.report.html import render_report

CHROMIUM = Path(os.environ.get("NPUSCOPE_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("NPUSCOPE_CHROMEDRIVER", "/usr/bin/chromedriver"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000"]
STARTUP_S, DRAW_S, CALL_S = 30, 60, 60


def _require_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if not missing:
        return
    reason = (f"{' and '.join(missing)} not found; install Debian's browser and driver with "
              "`apt-get install -y chromium chromium-driver`")
    if os.environ.get("NPUSCOPE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"NPUSCOPE_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


class WebDriver:
    """The handful of W3C WebDriver commands the test needs, over chromedriver's HTTP API."""

    def __init__(self, port: int, profile: Path):
        self.base = f"http://127.0.0.1:{port}"
        caps = {"browserName": "chrome", "goog:loggingPrefs": {"browser": "ALL"},
                "goog:chromeOptions": {"binary": str(CHROMIUM), "args": FLAGS + [f"--user-data-dir={profile}"]}}
        self.session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body if body is not None else {}).encode() if method == "POST" else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=CALL_S) as resp:
                return json.loads(resp.read())["value"]
        except urllib.error.HTTPError as exc:  # WebDriver errors come as 4xx/5xx with a JSON body
            value = json.loads(exc.read() or b"{}").get("value", {})
            raise RuntimeError(f"WebDriver {method} {path}: {value.get('error')}: {value.get('message')}") from None

    def cmd(self, method: str, path: str, body: dict | None = None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def js(self, script: str, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait_for(self, script: str, timeout: float = DRAW_S, *args):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.js(script, *args):
                return True
            time.sleep(0.2)
        return False

    def browser_log(self) -> list[dict]:
        return self.cmd("POST", "/se/log", {"type": "browser"})

    def quit(self) -> None:
        try:
            self._call("DELETE", f"/session/{self.session}")
        except (RuntimeError, OSError):
            pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def browser(tmp_path):
    _require_browser()
    port = _free_port()
    proc = subprocess.Popen([str(CHROMEDRIVER), f"--port={port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    driver = None
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as resp:
                    if json.loads(resp.read())["value"].get("ready"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"chromedriver did not start on port {port} (exit code {proc.poll()})")
            time.sleep(0.1)
        driver = WebDriver(port, tmp_path / "chromium-profile")
        yield driver
    finally:
        if driver is not None:
            driver.quit()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
