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


def test_read_lengths_lines_and_csv(tmp_path):
    p = tmp_path / "l.txt"
    p.write_text("# lengths\n12\n\n7\n  30 \n")
    assert read_lengths(p).tolist() == [12, 7, 30]
    c = tmp_path / "l.csv"
    c.write_text("id,len\na,4\nb,\nc,9\n")
    with pytest.raises(InputError, match="line 3 column 'len'"):  # an empty cell is refused, not dropped
        read_lengths(c, "len")
    c.write_text("id,len\na,4\nc,9\n")
    assert read_lengths(c, "len").tolist() == [4, 9]


@pytest.mark.parametrize("text,column,msg", [
    ("12\nabc\n", None, r"line 2: 'abc' is not a length"),
    ("id,len\n1,2\n", None, r"line 1: 'id,len' is not a length \(for a CSV give --column NAME\)"),
    ("5\n-3\n", None, "line 2: '-3' is not a positive integer"),
    ("4.5\n", None, "not a positive integer"),
    ("# nothing\n", None, "holds no lengths"),
    ("id,len\n1,2\n", "length", "no column 'length' \\(did you mean 'len'\\?\\)"),
    ("id,len\n1,x\n", "len", "line 2 column 'len': 'x' is not a length"),
])
def test_read_lengths_errors(tmp_path, text, column, msg):
    p = tmp_path / "l.txt"
    p.write_text(text)
    with pytest.raises(InputError, match=msg) as exc:
        read_lengths(p, column)
    assert "\n" not in str(exc.value)


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
