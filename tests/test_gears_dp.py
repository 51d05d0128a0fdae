"""Gear recommendation: the exact DP against brute force, the baselines and metrics by hand, the lengths file."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

import numpy as np
import pytest

from toolkit.core.errors import InputError, UsageError
from toolkit.gears import dp
from toolkit.commands.gears import read_lengths


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


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("cost,fn", [("linear", lambda g: g), ("quadratic", lambda g: g * g)])
def test_dp_matches_brute_force(seed, cost, fn):
    rs = np.random.RandomState(seed)
    lengths = list(rs.randint(1, 19, size=rs.randint(1, 30)))
    for k in range(1, 5):
        gears = dp.optimal_gears(lengths, k, cost)
        assert len(gears) == min(k, len(set(lengths))) and gears == sorted(gears) and gears[-1] == max(lengths)
        got = sum(fn(min(g for g in gears if g >= v)) for v in lengths)
        assert got == _brute_force(lengths, min(k, len(set(lengths))), fn), (lengths, k, gears)


def test_dp_all_levels_agree_with_single_calls():
    lengths = np.random.RandomState(7).randint(1, 60, 200)
    table = dp.optimal_gears_all(lengths, 5)
    for k, gears in table.items():
        assert dp.padded_work(lengths, gears) == dp.padded_work(lengths, dp.optimal_gears(lengths, k))


def test_power_of_two_gears_by_hand():
    # powers of two below the longest length, then the longest length itself (no gear above any input)
    assert dp.power_of_two_gears([3, 5, 17]) == [4, 8, 16, 17]
    assert dp.power_of_two_gears([1]) == [1]
    assert dp.power_of_two_gears([64, 65]) == [64, 65]
    assert dp.power_of_two_gears([3, 64]) == [4, 8, 16, 32, 64]


def test_metrics_by_hand():
    m = dp.gear_metrics([1, 2, 3, 4], [2, 4])
    # 1,2 -> 2 ; 3,4 -> 4: padded 2+2+4+4 = 12, valid 10
    assert (m["PaddedWork"], m["ValidWork"], m["Waste"], m["Plans"], m["Samples"]) == (12, 10, 2, 2, 4)
    assert m["WasteShare"] == pytest.approx(2 / 12) and m["ExpectedPaddedWork"] == 3.0
    q = dp.gear_metrics([1, 3], [3], cost="quadratic")
    assert (q["PaddedWork"], q["ValidWork"]) == (18, 10)


def test_enough_gears_waste_nothing():
    lengths = [5, 5, 9, 12]
    assert dp.optimal_gears(lengths, 10) == [5, 9, 12]
    assert dp.gear_metrics(lengths, dp.optimal_gears(lengths, 3))["Waste"] == 0


def test_compare_gears_rows():
    lengths = [3, 3, 3, 100]
    t = dp.compare_gears(lengths, 2)
    assert list(t["Strategy"]) == ["optimal", "power_of_two", "optimal_at_6"]
    assert t.iloc[0]["Gears"] == [3, 100]
    assert t.iloc[1]["Gears"] == [4, 8, 16, 32, 64, 100]
    # power of two capped at the longest length: 3 -> 4 (x3), 100 -> 100: padded 112, valid 109
    assert t.iloc[1]["PaddedWork"] == 112 and t.iloc[1]["Waste"] == 3


@pytest.mark.parametrize("bad,msg", [([], "no lengths"), ([0, 3], "positive"), ([1.5], "whole numbers")])
def test_bad_lengths(bad, msg):
    with pytest.raises(UsageError, match=msg):
        dp.optimal_gears(bad, 2)


def test_bad_k():
    with pytest.raises(UsageError, match="integer >= 1"):
        dp.optimal_gears([1, 2], 0)


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
    assert bad.returncode == 2 and "does not exist" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    usage = subprocess.run([sys.executable, "-m", "toolkit", "gears", "--lengths", str(f), "-k", "0"],
                           capture_output=True, text=True)
    assert usage.returncode == 2
