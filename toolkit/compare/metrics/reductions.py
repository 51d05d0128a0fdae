"""Shared reductions: every float metric is a tiny formula over the sums computed here once.

Memory budget (n elements): besides the float64 views/copies of x and y, :func:`reduce_pair` allocates
at most two float64 scratch buffers of n elements (``a`` and ``b``) and reuses them for every family:

1. ``a = |x − y|``                         → Σ|d|, max|d|, Σd², Σxy, Σx², Σy² (products into ``b``, numpy
   pairwise sums: the same bits whatever the BLAS thread count)
2. ``b = |y|``; expected-noise check in chunks (no extra full-size temporary)
3. ``b = |x − y| / |y|`` where |y| > rel_eps, else 0  → max, Σ, count of qualifying elements
4. ``a = x − mean(x)`` then ``a = y − mean(y)``        → population std of each side
5. ``a = p`` (golden), ``b = q`` (device), then ``b = log(p / q)`` → KL(p‖q) = p·b
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np

#: |y| must exceed this for an element to enter the relative errors (MaxRelativeError, MeanRelativeError,
#: AccumulatedRelativeError). The Ascend tool uses float64 machine epsilon (2.2e-16); we use 1e-6 because
#: golden values that small sit at FP16 resolution (FP16 subnormals start at 6e-8) and their relative
#: error says nothing about the kernel.
DEFAULT_REL_EPS = 1e-6
#: Floor applied to min-max-normalised values before the KL sum-normalisation, as the Ascend tool does
#: (float32 machine epsilon, 1.19e-7): keeps log(p/q) finite.
KL_EPS = float(np.finfo(np.float32).eps)
#: Largest finite FP16 value.
FP16_MAX = 65504.0

FAMILIES = ("error", "relative", "std", "kl")
_NOISE_CHUNK = 1 << 20


@dataclass
class PairSums:
    """Reductions of one (device x, golden y) pair over n finite positions; NaN = not computed."""

    n: int
    sum_xy: float = math.nan
    sum_xx: float = math.nan
    sum_yy: float = math.nan
    sum_sq_diff: float = math.nan
    sum_abs_diff: float = math.nan
    max_abs_diff: float = math.nan
    rel_max: float = math.nan
    rel_sum: float = math.nan
    rel_count: int = 0
    std_x: float = math.nan
    std_y: float = math.nan
    kl: float = math.nan
    within_noise: bool | None = None


def as_flat64(v) -> np.ndarray:
    """``v`` as a flat float64 array; no copy when it already is one (never written to)."""
    return np.asarray(v, dtype=np.float64).reshape(-1)


def reduce_pair(x, y, *, families: Iterable[str] = FAMILIES, rel_eps: float = DEFAULT_REL_EPS,
                noise: tuple[float, float] | None = None) -> PairSums:
    """Compute the shared sums of x (device) and y (golden).

    Args:
        x, y: equal-length arrays (any float dtype; reduced in float64), finite values expected.
        families: which of ``"error"``, ``"relative"``, ``"std"``, ``"kl"`` to compute.
        rel_eps: relative-error floor on |y| (see :data:`DEFAULT_REL_EPS`).
        noise: ``(rtol, atol)``; when given, ``within_noise`` says whether the error is within the expected
            noise of the values (:func:`within_noise`).

    Raises:
        ValueError: the arrays differ in length or are empty.
    """
    x, y = as_flat64(x), as_flat64(y)
    if x.size != y.size or x.size == 0:
        raise ValueError(f"reduce_pair needs two non-empty arrays of equal length, got {x.size} and {y.size}")
    fams = set(families)
    s = PairSums(n=int(x.size))
    a = np.empty_like(x)
    b = np.empty_like(x) if (fams & {"error", "relative", "kl", "std"} or noise is not None) else None
    if fams & {"error", "relative"} or noise is not None:
        np.subtract(x, y, out=a)
        np.abs(a, out=a)
        if "error" in fams:
            _error_sums(x, y, a, s, b)
        if noise is not None or "relative" in fams:
            np.abs(y, out=b)
        if noise is not None:
            s.within_noise = within_noise(a, b, *noise)
        if "relative" in fams:
            _relative_sums(a, b, rel_eps, s)
    if "std" in fams:
        s.std_x, s.std_y = _std(x, a, b), _std(y, a, b)
    if "kl" in fams:
        s.kl = _kl(y, x, a, b)
    return s


def _dot(u: np.ndarray, v: np.ndarray, scratch: np.ndarray) -> float:
    """Σ u·v by numpy's pairwise summation into ``scratch``: the same bits whatever the BLAS thread count (a
    BLAS dot splits the sum by threads, so a dataset worker with one thread and the parent with two disagreed
    in the last digits)."""
    np.multiply(u, v, out=scratch)
    return float(scratch.sum())


def _error_sums(x: np.ndarray, y: np.ndarray, absd: np.ndarray, s: PairSums, scratch: np.ndarray) -> None:
    s.sum_xy, s.sum_xx, s.sum_yy = _dot(x, y, scratch), _dot(x, x, scratch), _dot(y, y, scratch)
    s.sum_sq_diff = _dot(absd, absd, scratch)
    s.sum_abs_diff = float(absd.sum())
    s.max_abs_diff = float(absd.max())


def noise_scale(absy: np.ndarray, rtol: float, atol: float, rms: float) -> np.ndarray:
    """The expected noise of each value: atol + rtol·max(|y_i|, rms(y)) (float64, same shape as ``absy``)."""
    return atol + rtol * np.maximum(absy, rms)


def within_noise(absd: np.ndarray, absy: np.ndarray, rtol: float, atol: float) -> bool:
    """Whether the error |x − y| (``absd``) is within the FP16 noise expected for the golden values |y|
    (``absy``), both flat float64 arrays of one length.

    The expected noise of value i is n_i = atol + rtol·max(|y_i|, rms(y)) (:func:`noise_scale`): relative to
    the value, floored at the tensor's RMS magnitude, because the rounding behind a value comes from the
    operands that produced it, and a value that cancels to near zero (a sum of large terms, a normalised
    feature near its mean) carries the rounding of those operands, whose magnitude the tensor's RMS stands
    for. The tensor is within noise when its error, in root mean square, is no larger than that noise:
    sqrt(mean(|x − y|²)) <= sqrt(mean(n²)). The RMS and not the maximum, because rounding accumulated over
    many FP16 layers spreads like random noise, with tails that a per-element bound would flag on any large
    tensor. Computed in chunks of 2**20 elements (no full-size temporary)."""
    if absd.size == 0:
        return True
    rms = math.sqrt(float(np.square(absy).sum()) / absy.size)  # pairwise sums: no BLAS thread dependence
    err = noise = 0.0
    for start in range(0, absd.size, _NOISE_CHUNK):
        stop = start + _NOISE_CHUNK
        d = absd[start:stop]
        n = noise_scale(absy[start:stop], rtol, atol, rms)
        err += float(np.square(d).sum())
        noise += float(np.square(n).sum())
    return err <= noise


def _relative_sums(absd: np.ndarray, absy_then_rel: np.ndarray, rel_eps: float, s: PairSums) -> None:
    """Overwrites the |y| buffer with |x − y|/|y| (0 where |y| <= rel_eps); |x/y − 1| == |x − y|/|y|."""
    qualifies = absy_then_rel > rel_eps
    np.divide(absd, absy_then_rel, out=absy_then_rel, where=qualifies)
    np.copyto(absy_then_rel, 0.0, where=~qualifies)
    s.rel_count = int(np.count_nonzero(qualifies))
    s.rel_sum = float(absy_then_rel.sum())
    s.rel_max = float(absy_then_rel.max())


def _std(v: np.ndarray, scratch: np.ndarray, scratch2: np.ndarray) -> float:
    """Population standard deviation (ddof=0, as np.std and the Ascend tool), two-pass for accuracy."""
    np.subtract(v, v.mean(), out=scratch)
    return math.sqrt(_dot(scratch, scratch, scratch2) / v.size)


def _distribution(v: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Min-max normalise to [0, 1] (constant tensor → all ones), floor at KL_EPS, then divide by the sum."""
    lo, hi = float(v.min()), float(v.max())
    if hi > lo:
        np.subtract(v, lo, out=out)
        out /= hi - lo
    else:
        out.fill(1.0)
    np.maximum(out, KL_EPS, out=out)
    out /= out.sum()
    return out


def _kl(golden: np.ndarray, device: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    p = _distribution(golden, a)
    q = _distribution(device, b)
    np.divide(p, q, out=q)
    np.log(q, out=q)
    np.multiply(p, q, out=q)
    return max(float(q.sum()), 0.0)
