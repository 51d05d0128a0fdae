"""Gear recommendation: the exact DP against brute force, the baselines and metrics by hand, the lengths file."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

import numpy as np
import pytest

from toolkit.errors import InputError, UsageError
from toolkit.gears import dp
from toolkit.gears.workflow import read_lengths


def _brute_force(lengths, k, cost):
    """Least Σ cost(smallest gear >= l) over every set of k gears drawn from 1..max(lengths) (any integers, not
    only observed lengths: this does not rely on the DP's lemma)."""
    top = max(lengths)
    best = np.inf
    for gears in itertools.combinations(range(1, top + 1), k):
        if gears[-1] < top:
            continue
        work = sum(cost(min(g for g in gears if g >= v)) for v in lengths)
        best = min(best, work)
    return best


def test_gears_cli(tmp_path):
    rs = np.random.RandomState(3)
    lengths = np.clip(rs.lognormal(3, 0.5, 300).astype(int), 1, 60)
    f = tmp_path / "lengths.txt"
    f.write_text("\n".join(map(str, lengths)))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "toolkit", "gears", "--lengths", str(f), "-k", "3", "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import json

    import pandas as pd
    data = json.loads((out / "gears.json").read_text())
    opt = data["optimal"]["Gears"]
    work = sum(min(g for g in opt if g >= v) for v in lengths)
    assert work == _brute_force(list(lengths), 3, lambda g: g)
    assert data["config_snippet"] == {"dynamic_dims": ";".join(map(str, opt))}
    table = pd.read_csv(out / "gears.csv")
    assert set(table["Strategy"]) >= {"optimal", "power_of_two"}
    html = (out / "gears.html").read_text()
    assert "Padding waste vs plans compiled" in html
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I), "opens offline: no script files"
    bad = subprocess.run([sys.executable, "-m", "toolkit", "gears", "--lengths", str(tmp_path / "nope.txt"), "-k", "2"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "does not exist" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    usage = subprocess.run([sys.executable, "-m", "toolkit", "gears", "--lengths", str(f), "-k", "0"],
                           capture_output=True, text=True)
    assert usage.returncode == 2
