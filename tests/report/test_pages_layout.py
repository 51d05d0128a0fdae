"""Every page type, written by the real commands, fits a 1400x900 window in headless Chromium: the page is no
wider than the window, every table wider than the window sits in its own scrolling box, the first
recommendation of a diagnose page with findings lies inside the first 1200 px and the window width, and the
console stays clean. PP-OCRv4 rec (the zoo model) runs with ``-m slow`` when it is cached."""

from __future__ import annotations

import json

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.report.layout import WIDTH, measure, open_page
from toolkit import zoo

ROOT = Path(__file__).resolve().parents[2]
POLICY = '[outputs]\n"*" = "CosineSimilarity>=0.99"\n[layers]\nmax_abnormal = 0\n'
#: page type -> (command line, page) run in the pages folder; exit codes 0 or 1 (a FAIL is a page too)
COMMANDS = {
    "diagnose": (["diagnose", "detector_head", "--out", "d1"], "d1/index.html"),
    "diagnose_fp32": (["diagnose", "detector_head", "--precision-mode", "force_fp32", "--out", "d0"], "d0/index.html"),
    "dataset": (["diagnose", "detector_head", "--inputs", "ds", "--out", "dsr"], "dsr/index.html"),
    "signoff": (["signoff", "detector_head", "--policy", "policy.toml", "--out", "s"], "s/signoff.html"),
    "profile": (["profile", "detector_head", "--out", "p"], "p/profile.html"),
    "memcheck": (["memcheck", "detector_head", "--out", "m"], "m/memory.html"),
    "gears": (["gears", "--lengths", "lengths.txt", "-k", "3", "--out", "g"], "g/gears.html"),
    "regress": (["regress", "d1", "d0", "--out", "r"], "r/regress.html"),
    "tune": (["tune", "detector_head", "--out", "t"], "t/tune.html"),
}


def _npuscope(args, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pages")
    (folder / "policy.toml").write_text(POLICY)
    (folder / "lengths.txt").write_text("\n".join(str(5 + i % 60) for i in range(300)))
    (folder / "ds").mkdir()
    for i in range(2):  # detector_head's input, two seeded sets: a dataset run
        np.savez(folder / "ds" / f"in{i}.npz",
                 feat=np.random.default_rng(i).standard_normal((1, 16, 20, 20)).astype(np.float32))
    for kind, (args, page) in COMMANDS.items():
        proc = _npuscope(args, folder)
        assert proc.returncode in (0, 1) and (folder / page).is_file(), (kind, proc.stderr[-2000:])
    return folder


def check_page(browser, page: Path, diagnose: bool) -> dict:
    open_page(browser, page)
    got = measure(browser)
    assert got["innerWidth"] == WIDTH, got
    assert got["scrollWidth"] <= got["innerWidth"], f"{page.name} is {got['scrollWidth']} px wide"
    assert not got["unboxed"], f"tables wider than the window outside a scrolling box: {got['unboxed']}"
    assert not got["console"], f"console errors: {got['console']}"
    if diagnose and got["findings"]:
        first = got["recs"][0]
        assert first["top"] < 1200 and first["right"] <= WIDTH and first["left"] >= 0, first
    return got


@pytest.mark.parametrize("kind", list(COMMANDS))
def test_page_fits_the_window(browser, pages, kind):
    got = check_page(browser, pages / COMMANDS[kind][1], kind.startswith("diagnose") or kind == "dataset")
    if kind == "diagnose":
        assert got["findings"] >= 1  # detector_head has findings: the recommendation check ran
        # a click on the origin's table row rings its node in the graph view
        ringed = browser.js(
            "document.querySelector('#layer-table tr[data-node=\"head_relu\"]').click();"
            "var h = document.getElementById('fig-graph').data.filter(function (t) { return t.meta === 'highlight'; });"
            "return h[0].x.length;")
        assert ringed == 1
    # the report folder holds the plotly bundle its pages load, once
    folder = (pages / COMMANDS[kind][1]).parent
    assert len(list(folder.glob("plotly*.js"))) <= 1


@pytest.mark.slow
def test_ppocr_rec_report_fits_and_is_small(browser, tmp_path):
    if not zoo.is_cached("ppocr_rec"):
        pytest.skip("PP-OCRv4 rec is not in the zoo cache (npuscope diagnose ppocr_rec downloads it)")
    proc = _npuscope(["diagnose", "ppocr_rec", "--out", "rec"], tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    got = check_page(browser, tmp_path / "rec" / "index.html", True)
    # the page shows as many findings as findings.json holds (none: rec passes in default precision)
    assert got["findings"] == len(json.loads((tmp_path / "rec" / "findings.json").read_text()))
    sizes = {str(p.relative_to(tmp_path / "rec")): p.stat().st_size for p in (tmp_path / "rec").rglob("*")
             if p.is_file() and p.name != "plotly.min.js"}
    assert sizes["index.html"] <= 0.5 * 2**20, sizes["index.html"]
    total = sum(sizes.values())
    assert total <= 1.5 * 2**20, f"folder {total / 2**20:.2f} MiB besides plotly.min.js: {sizes}"
