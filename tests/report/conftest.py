"""The ``browser`` fixture of the report tests: headless Chromium driven through chromedriver's W3C WebDriver
HTTP API.

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

CHROMIUM = Path(os.environ.get("NPUSCOPE_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("NPUSCOPE_CHROMEDRIVER", "/usr/bin/chromedriver"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,900"]
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

