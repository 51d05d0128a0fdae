"""Gear recommendation (toolkit/gears/dp.py): the exact DP against brute force, the baselines and metrics by
hand, power-of-two gears, and bad lengths."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from toolkit.core.errors import UsageError
from toolkit.gears import dp

MAX_LENGTH_DOC = 2147483647  # docs/gears.md: "Lengths are whole numbers from 1 to 2147483647"


@pytest.mark.parametrize("lengths", [[3, 5, 17], [64, 65], [5, 6], [64], [1], [3, 3, 3, 100],
                                     [1, 5, MAX_LENGTH_DOC], [1000, 1500, 70000]])
def test_power_of_two_gears_capped_at_longest(lengths):
    lo, hi = min(lengths), max(lengths)
    want = [2 ** p for p in range(0, 40) if 2 ** p >= lo and 2 ** p < hi] + [hi]  # by hand
    assert dp.power_of_two_gears(lengths) == want
    assert max(want) <= MAX_LENGTH_DOC


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


@pytest.mark.parametrize("bad", [[10**30], [float("inf")], [float("nan")], [2**31], ["a"], [0], [1.5]])
def test_lengths_given_in_python_are_usage_errors(bad):
    with pytest.raises(UsageError):
        dp.LengthHistogram.of(bad)
