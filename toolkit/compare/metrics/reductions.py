"""Shared reductions: every float metric is a tiny formula over the sums computed here once.

The sums are taken chunk by chunk (:data:`CHUNK` elements at a time, converted to float64 into fixed scratch
buffers that stay in the CPU cache), in at most two passes over the tensors, instead of one full-size float64
pass per step: the inputs are never copied whole. Partial sums of the chunks are added with ``math.fsum``
(correctly rounded), each chunk's own sum is numpy's pairwise sum (the same bits whatever the BLAS thread
count). Memory besides the inputs: four float64 buffers of :data:`CHUNK` elements (2 MiB) and a chunk's boolean
mask (64 KiB).

Pass 1 (per chunk ``X``, ``Y``; ``A = |X − Y|``):

- error: Σxy, Σx², Σy², Σd², Σ|d|, max|d|;
- relative: ``|X − Y| / |Y|`` where |Y| > rel_eps, else 0 → max, Σ, count of qualifying elements;
- std: Σx, Σy (the means); kl: min and max of each side.

Pass 2 (only for std, kl or the expected-noise test), with the pass-1 results:

- noise: Σ n_i² with n_i = a + rtol·max(|y_i|, rms(y)), a = min(atol, rtol·rms(y)) (:func:`noise_scale`),
  against Σd² from pass 1;
- std: Σ(x − x̄)², Σ(y − ȳ)² (two-pass population std);
- kl: q′ = max(minmax(x), KL_EPS) (device), p′ likewise of y (golden): Σq′, Σp′ and T = Σ q′·ln(q′/p′);
  KL(q‖p) = T/Σq′ + ln(Σp′/Σq′), which equals Σ q·ln(q/p) for q = q′/Σq′, p = p′/Σp′ (the sum-normalised
  distributions; device first, as the compare tool computes it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Iterator

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
#: Elements per chunk of :func:`reduce_pair` (four float64 buffers of this many elements: 2 MiB).
CHUNK = 1 << 16

FAMILIES = ("error", "relative", "std", "kl")


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


def _flat_float(v) -> np.ndarray:
    """``v`` as a flat float16/32/64 array (other dtypes converted to float64); no copy when it already is one."""
    a = np.asarray(v)
    if a.dtype not in (np.float16, np.float32, np.float64):
        a = a.astype(np.float64)
    return a.reshape(-1)


class _Chunks:
    """Float64 chunks of two flat float arrays, :data:`CHUNK` elements at a time, in scratch buffers kept for
    every pass (a float64 input is read in place); each step yields ``(X, Y, A, B)`` with ``A``, ``B`` two free
    scratch buffers of the chunk's length."""

    def __init__(self, x: np.ndarray, y: np.ndarray, chunk: int = CHUNK):
        self.x, self.y, self.n = x, y, x.size
        m = min(chunk, self.n)
        self.chunk = chunk
        self.buf = [np.empty(m) for _ in range(4)]

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        bx, by, ba, bb = self.buf
        for start in range(0, self.n, self.chunk):
            stop = min(start + self.chunk, self.n)
            m = stop - start
            yield (_as64(self.x[start:stop], bx[:m]), _as64(self.y[start:stop], by[:m]), ba[:m], bb[:m])


def _as64(part: np.ndarray, buf: np.ndarray) -> np.ndarray:
    if part.dtype == np.float64:
        return part
    np.copyto(buf, part)
    return buf


def reduce_pair(x, y, *, families: Iterable[str] = FAMILIES, rel_eps: float = DEFAULT_REL_EPS,
                noise: tuple[float, float] | None = None) -> PairSums:
    """Compute the shared sums of x (device) and y (golden), chunk by chunk (module docstring).

    Args:
        x, y: equal-length arrays (any float dtype, any shape: read flat; reduced in float64), finite values
            expected. Not modified, never copied whole.
        families: which of ``"error"``, ``"relative"``, ``"std"``, ``"kl"`` to compute.
        rel_eps: relative-error floor on |y| (see :data:`DEFAULT_REL_EPS`).
        noise: ``(rtol, atol)``; when given, ``within_noise`` says whether the error is within the expected
            noise of the values (:func:`within_noise`; the error family is computed too).

    Raises:
        ValueError: the arrays differ in length or are empty.
    """
    x, y = _flat_float(x), _flat_float(y)
    if x.size != y.size or x.size == 0:
        raise ValueError(f"reduce_pair needs two non-empty arrays of equal length, got {x.size} and {y.size}")
    fams = set(families)
    s = PairSums(n=int(x.size))
    err, rel, std, kl = "error" in fams or noise is not None, "relative" in fams, "std" in fams, "kl" in fams
    chunks = _Chunks(x, y)
    parts: dict[str, list[float]] = {k: [] for k in ("xy", "xx", "yy", "dd", "ad", "rel", "x", "y")}
    max_ad = max_rel = -math.inf
    lo_x = lo_y = math.inf
    hi_x = hi_y = -math.inf
    count = 0
    for X, Y, A, B in chunks:  # pass 1
        if err or rel:
            np.subtract(X, Y, out=A)
            np.abs(A, out=A)
        if err:
            for key, u, v in (("xy", X, Y), ("xx", X, X), ("yy", Y, Y), ("dd", A, A)):
                np.multiply(u, v, out=B)
                parts[key].append(float(B.sum()))
            parts["ad"].append(float(A.sum()))
            max_ad = max(max_ad, float(A.max()))
        if rel:
            np.abs(Y, out=B)
            qualifies = B > rel_eps
            np.divide(A, B, out=B, where=qualifies)
            np.copyto(B, 0.0, where=~qualifies)
            count += int(np.count_nonzero(qualifies))
            parts["rel"].append(float(B.sum()))
            max_rel = max(max_rel, float(B.max()))
        if std:
            parts["x"].append(float(X.sum()))
            parts["y"].append(float(Y.sum()))
        if kl:
            lo_x, hi_x = min(lo_x, float(X.min())), max(hi_x, float(X.max()))
            lo_y, hi_y = min(lo_y, float(Y.min())), max(hi_y, float(Y.max()))
    if err:
        s.sum_xy, s.sum_xx, s.sum_yy, s.sum_sq_diff, s.sum_abs_diff = \
            (math.fsum(parts[k]) for k in ("xy", "xx", "yy", "dd", "ad"))
        s.max_abs_diff = max_ad
    if rel:
        s.rel_count, s.rel_sum, s.rel_max = count, math.fsum(parts["rel"]), max_rel
    if noise is not None or std or kl:
        _second_pass(chunks, s, noise, std, kl, math.fsum(parts["x"]) / s.n, math.fsum(parts["y"]) / s.n,
                     (lo_x, hi_x), (lo_y, hi_y))
    return s


def _second_pass(chunks: _Chunks, s: PairSums, noise, std: bool, kl: bool, mean_x: float, mean_y: float,
                 range_x: tuple[float, float], range_y: tuple[float, float]) -> None:
    """Pass 2 of :func:`reduce_pair` (module docstring): ``within_noise``, ``std_x`` / ``std_y``, ``kl``."""
    parts: dict[str, list[float]] = {k: [] for k in ("noise", "vx", "vy", "p", "q", "t")}
    rms = math.sqrt(s.sum_yy / s.n) if noise is not None else 0.0
    for X, Y, A, B in chunks:
        if noise is not None:
            np.abs(Y, out=B)
            parts["noise"].append(_noise_sq_sum(B, noise[0], noise[1], rms))
        if std:
            for key, v, mean in (("vx", X, mean_x), ("vy", Y, mean_y)):
                np.subtract(v, mean, out=A)
                np.multiply(A, A, out=B)
                parts[key].append(float(B.sum()))
        if kl:
            _distribution(Y, range_y, A)
            _distribution(X, range_x, B)
            parts["p"].append(float(A.sum()))
            parts["q"].append(float(B.sum()))
            np.divide(B, A, out=A)  # q'/p' (device over golden)
            np.log(A, out=A)
            np.multiply(B, A, out=A)
            parts["t"].append(float(A.sum()))
    if noise is not None:
        s.within_noise = s.sum_sq_diff <= math.fsum(parts["noise"])
    if std:
        s.std_x, s.std_y = (math.sqrt(math.fsum(parts[k]) / s.n) for k in ("vx", "vy"))
    if kl:
        sp, sq = math.fsum(parts["p"]), math.fsum(parts["q"])
        s.kl = max(math.fsum(parts["t"]) / sq + math.log(sp / sq), 0.0)


def scaled_atol(rtol: float, atol: float, rms: float) -> float:
    """The absolute part of the expected noise of a tensor of RMS magnitude ``rms``: ``atol``, capped at
    ``rtol·rms`` when ``rtol`` > 0. FP16 rounds relative to the value, so rounding never leaves a tensor an
    absolute error larger than its own scale allows; an op class' atol (1e-3 for cube ops) taken as is would
    excuse any error on a tensor of small values (|y| ~ 1e-6, where FP16 flushes inputs to zero)."""
    return min(atol, rtol * rms) if rtol > 0 else atol


def noise_scale(absy: np.ndarray, rtol: float, atol: float, rms: float) -> np.ndarray:
    """The expected noise of each value: a + rtol·max(|y_i|, rms(y)) with a = :func:`scaled_atol` (float64, same
    shape as ``absy``)."""
    return scaled_atol(rtol, atol, rms) + rtol * np.maximum(absy, rms)


def _noise_sq_sum(absy: np.ndarray, rtol: float, atol: float, rms: float) -> float:
    """Σ :func:`noise_scale`² of a chunk of |y| (overwrites ``absy``, a float64 scratch buffer)."""
    np.maximum(absy, rms, out=absy)
    absy *= rtol
    absy += scaled_atol(rtol, atol, rms)
    np.multiply(absy, absy, out=absy)
    return float(absy.sum())


def within_noise(absd: np.ndarray, absy: np.ndarray, rtol: float, atol: float) -> bool:
    """Whether the error |x − y| (``absd``) is within the FP16 noise expected for the golden values |y|
    (``absy``), both flat float arrays of one length.

    The expected noise of value i is n_i = a + rtol·max(|y_i|, rms(y)), a = min(atol, rtol·rms(y))
    (:func:`noise_scale`, :func:`scaled_atol`): relative to
    the value, floored at the tensor's RMS magnitude, because the rounding behind a value comes from the
    operands that produced it, and a value that cancels to near zero (a sum of large terms, a normalised
    feature near its mean) carries the rounding of those operands, whose magnitude the tensor's RMS stands
    for. The tensor is within noise when its error, in root mean square, is no larger than that noise:
    sqrt(mean(|x − y|²)) <= sqrt(mean(n²)). The RMS and not the maximum, because rounding accumulated over
    many FP16 layers spreads like random noise, with tails that a per-element bound would flag on any large
    tensor. :func:`reduce_pair` with ``noise`` computes the same test in its passes."""
    if absd.size == 0:
        return True
    absd, absy = _flat_float(absd), _flat_float(absy)
    sq_y, sq_d, noise = [], [], []
    for D, Y, _A, B in _Chunks(absd, absy):
        np.multiply(Y, Y, out=B)
        sq_y.append(float(B.sum()))
        np.multiply(D, D, out=B)
        sq_d.append(float(B.sum()))
    rms = math.sqrt(math.fsum(sq_y) / absy.size)
    for _D, Y, _A, B in _Chunks(absd, absy):
        np.copyto(B, Y)
        noise.append(_noise_sq_sum(B, rtol, atol, rms))
    return math.fsum(sq_d) <= math.fsum(noise)


def _distribution(v: np.ndarray, value_range: tuple[float, float], out: np.ndarray) -> np.ndarray:
    """``out`` = max(minmax(v), KL_EPS) over the whole tensor's (min, max) ``value_range`` (a constant tensor:
    all ones), not yet divided by its sum."""
    lo, hi = value_range
    if hi > lo:
        np.subtract(v, lo, out=out)
        out /= hi - lo
    else:
        out.fill(1.0)
    np.maximum(out, KL_EPS, out=out)
    return out
