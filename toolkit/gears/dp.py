"""Choosing K gears from observed lengths: exact dynamic programming, and power-of-two gears to compare with.

Objective (documented choice): every input of length ``l`` runs on the smallest gear ``g >= l`` and costs
``cost(g)``; the K gears minimise the **expected padded work** ``sum_l count(l) * cost(g(l)) / N``.
``cost = "linear"`` (default): ``cost(g) = g``, the work of per-token ops (MatMul, elementwise), so padded
work = padded tokens; ``"quadratic"``: ``cost(g) = g**2``, attention-score work. Padding waste is padded
work minus valid work ``sum_l count(l) * cost(l)``; ``waste_share`` = waste / padded work.

Exactness: for any increasing cost an optimal gear set uses observed lengths only and must contain the largest
(lowering a gear to the largest length it serves never costs more). Over the m distinct lengths v_0 < ... <
v_{m-1} with counts c and prefix sums C (C_0 = 0), ``best[k][j]`` = least cost of serving v_0..v_j with k gears
the largest of which is v_j:
``best[1][j] = cost(v_j) * C_{j+1}``, ``best[k][j] = min_{i<j} best[k-1][i] + cost(v_j) * (C_{j+1} - C_{i+1})``;
the answer is ``best[min(K, m)][m-1]``, traced back through the argmins (ties: the smallest i). O(K m^2) time,
vectorised over i in numpy (m = 4096 distinct lengths, K = 8: about a second). Sums are int64 when they fit
(2^62), else float64.

Power-of-two gears (the usual bucketing, to compare with): every 2^p from the smallest power of two >= min
length while below the max length, then the max length itself (buckets capped at the longest input, so no
gear exceeds an observed length or :data:`MAX_LENGTH`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from toolkit.core.errors import UsageError

COSTS = {"linear": lambda g: g, "quadratic": lambda g: g * g}
#: Largest length taken (a gear dim beyond this does not fit a compiled tensor).
MAX_LENGTH = 2**31 - 1
#: Columns of :func:`compare_gears` (one row per strategy).
STRATEGY_COLUMNS = ["Strategy", "Gears", "Plans", "Samples", "MeanLength", "MeanGear", "PaddedWork", "ValidWork",
                    "Waste", "WasteShare", "ExpectedPaddedWork"]


@dataclass(frozen=True)
class LengthHistogram:
    """Distinct lengths ``values`` (int64, ascending) with their ``counts`` (int64)."""

    values: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, lengths) -> "LengthHistogram":
        """From raw lengths (positive integers, at most :data:`MAX_LENGTH`). Raises UsageError for an empty
        list, a value that is not a whole number, a length < 1 or > MAX_LENGTH."""
        try:
            arr = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths)
        except (OverflowError, ValueError):
            raise UsageError(f"lengths must be positive integers (at most {MAX_LENGTH}); got a value numpy cannot hold") from None
        if arr.size == 0:
            raise UsageError("no lengths given; the lengths file must hold at least one positive integer")
        if arr.dtype.kind not in "iuf":
            raise UsageError(f"lengths must be positive integers (at most {MAX_LENGTH}); got {arr.dtype} values")
        if arr.dtype.kind == "f" and (not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr))):
            raise UsageError("lengths must be whole numbers; got a non-integer value")
        if arr.min() < 1 or arr.max() > MAX_LENGTH:
            raise UsageError(f"lengths must be positive integers (at most {MAX_LENGTH}); got {arr.min()} .. {arr.max()}")
        arr = arr.astype(np.int64)
        values, counts = np.unique(arr.astype(np.int64), return_counts=True)
        return cls(values, counts.astype(np.int64))

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def _cost_fn(cost):
    if callable(cost):
        return cost
    try:
        return COSTS[cost]
    except KeyError:
        raise UsageError(f"cost '{cost}' is not one of {', '.join(COSTS)}") from None


def _cost_array(hist: LengthHistogram, cost) -> np.ndarray:
    f = _cost_fn(cost)
    vals = [f(int(v)) for v in hist.values]
    big = max(vals) * hist.total
    if all(isinstance(v, int) for v in vals) and big < 2**62:
        return np.asarray(vals, dtype=np.int64)
    return np.asarray(vals, dtype=np.float64)


def optimal_gears(lengths, k: int, cost="linear") -> list[int]:
    """The ``k`` gears (ascending) minimising expected padded work (module docstring); fewer when there are
    fewer distinct lengths (then every distinct length is a gear and nothing is wasted).

    Args:
        lengths: raw lengths (iterable of positive ints) or a :class:`LengthHistogram`.
        k: number of gears (plans), >= 1.
        cost: "linear" | "quadratic" | callable(int) -> number, increasing.

    Raises:
        UsageError: k < 1, bad lengths or cost.
    """
    return optimal_gears_all(lengths, k, cost)[min(k, _hist(lengths).values.size)]


def optimal_gears_all(lengths, k: int, cost="linear") -> dict[int, list[int]]:
    """{j: optimal gears with j plans} for j = 1..min(k, distinct lengths), from one DP pass."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise UsageError(f"-k {k!r}: the number of gears must be an integer >= 1")
    hist = _hist(lengths)
    f = _cost_array(hist, cost)
    m = hist.values.size
    kk = min(int(k), m)
    pref = np.concatenate([[0], np.cumsum(hist.counts)]).astype(f.dtype)
    best = f * pref[1:]
    back = []
    result = {1: [int(hist.values[-1])]}
    for level in range(2, kk + 1):
        new = np.full(m, np.inf if f.dtype.kind == "f" else np.iinfo(np.int64).max, dtype=f.dtype)
        arg = np.full(m, -1, dtype=np.int64)
        for j in range(level - 1, m):
            i = np.arange(level - 2, j)
            cand = best[i] + f[j] * (pref[j + 1] - pref[i + 1])
            t = int(np.argmin(cand))
            new[j], arg[j] = cand[t], i[t]
        back.append(arg)
        best = new
        result[level] = _trace(hist.values, back, m - 1)
    return result


def _trace(values, back, j) -> list[int]:
    gears = [int(values[j])]
    for arg in reversed(back):
        j = int(arg[j])
        gears.append(int(values[j]))
    return sorted(gears)


def _hist(lengths) -> LengthHistogram:
    return lengths if isinstance(lengths, LengthHistogram) else LengthHistogram.of(lengths)


def power_of_two_gears(lengths) -> list[int]:
    """Power-of-two gears capped at the longest length (ascending): every power of two from the smallest one
    >= the shortest length that is below the longest length, then the longest length itself (which may be a
    power of two). No gear exceeds an observed length, so none exceeds :data:`MAX_LENGTH`.
    ``[3, 5, 17]`` -> ``[4, 8, 16, 17]``; ``[64, 65]`` -> ``[64, 65]``; ``[5, 6]`` -> ``[6]``."""
    hist = _hist(lengths)
    shortest, longest = int(hist.values[0]), int(hist.values[-1])
    p = (shortest - 1).bit_length()  # 2**p: the smallest power of two >= shortest
    gears = []
    while (1 << p) < longest:
        gears.append(1 << p)
        p += 1
    return gears + [longest]


def assign(lengths, gears) -> np.ndarray:
    """The gear each distinct length (of the histogram) runs on (int64). Raises UsageError when a length
    exceeds the largest gear."""
    hist = _hist(lengths)
    g = np.asarray(sorted(gears), dtype=np.int64)
    pos = np.searchsorted(g, hist.values, side="left")
    if np.any(pos >= g.size):
        raise UsageError(f"length {int(hist.values[pos >= g.size][0])} is larger than the largest gear {int(g[-1])}")
    return g[pos]


def padded_work(lengths, gears, cost="linear") -> float:
    """``sum count(l) * cost(g(l))`` (the DP objective)."""
    hist = _hist(lengths)
    f = _cost_fn(cost)
    return float(sum(int(c) * f(int(g)) for c, g in zip(hist.counts, assign(hist, gears))))


def gear_metrics(lengths, gears, cost="linear") -> dict:
    """Plans, samples, mean length and gear, padded/valid work, waste, waste share and expected (per-input)
    padded work of one gear set (keys as :data:`STRATEGY_COLUMNS` minus Strategy)."""
    hist = _hist(lengths)
    f = _cost_fn(cost)
    used = assign(hist, gears)
    padded = float(sum(int(c) * f(int(g)) for c, g in zip(hist.counts, used)))
    valid = float(sum(int(c) * f(int(v)) for c, v in zip(hist.counts, hist.values)))
    n = hist.total
    return {"Gears": [int(g) for g in sorted(gears)], "Plans": len(gears), "Samples": n,
            "MeanLength": float((hist.values * hist.counts).sum() / n),
            "MeanGear": float((used * hist.counts).sum() / n), "PaddedWork": padded, "ValidWork": valid,
            "Waste": padded - valid, "WasteShare": (padded - valid) / padded if padded else 0.0,
            "ExpectedPaddedWork": padded / n}


def compare_gears(lengths, k: int, cost="linear") -> pd.DataFrame:
    """One row per strategy (:data:`STRATEGY_COLUMNS`): ``optimal`` (K gears), ``power_of_two`` and, when the
    power-of-two set has a different size P, ``optimal_at_P`` (the DP with as many plans; its ``Plans`` is
    min(P, distinct lengths): with fewer distinct lengths every one is a gear and nothing is wasted)."""
    hist = _hist(lengths)
    pow2 = power_of_two_gears(hist)
    rows = [{"Strategy": "optimal", **gear_metrics(hist, optimal_gears(hist, k, cost), cost)},
            {"Strategy": "power_of_two", **gear_metrics(hist, pow2, cost)}]
    if len(pow2) != k:
        rows.append({"Strategy": f"optimal_at_{len(pow2)}", **gear_metrics(hist, optimal_gears(hist, len(pow2), cost),
                                                                             cost)})
    return pd.DataFrame(rows, columns=STRATEGY_COLUMNS)


def waste_curve(lengths, k_max: int, cost="linear") -> pd.DataFrame:
    """Optimal waste per number of plans: columns Plans, Gears, WasteShare, ExpectedPaddedWork (k = 1..k_max,
    capped at the number of distinct lengths)."""
    hist = _hist(lengths)
    rows = []
    for k, gears in optimal_gears_all(hist, k_max, cost).items():
        m = gear_metrics(hist, gears, cost)
        rows.append({"Plans": k, "Gears": m["Gears"], "WasteShare": m["WasteShare"],
                     "ExpectedPaddedWork": m["ExpectedPaddedWork"]})
    return pd.DataFrame(rows, columns=["Plans", "Gears", "WasteShare", "ExpectedPaddedWork"])

