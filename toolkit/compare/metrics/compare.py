"""Compare one device tensor with its golden tensor: every metric, flags, and the abnormal verdict.

The row returned by :func:`compare_tensors` always has the keys :data:`ROW_KEYS` (so rows stack into a
DataFrame with stable columns); a metric that was not computed is NaN.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from toolkit.core.dtypes import dtype_class, standard, value_kind
from toolkit.core.errors import UsageError

from .exact import exact_match_rate
from .reductions import DEFAULT_REL_EPS, FP16_MAX, PairSums, as_flat64, reduce_pair
from .registry import METRICS, THRESHOLDABLE
from .spec import HIGHER_IS_BETTER, INFORMATIONAL
from .thresholds import noise_covers, resolve_thresholds

STATUS_KEYS = ("CompareFailReason", "OverFlow", "DeviceNaN", "DeviceInf", "GoldenNaN", "GoldenInf",
               "NonFiniteMasked", "ComparedCount", "GoldenFP16OverflowRatio")
VERDICT_KEYS = ("WithinExpectedNoise", "Abnormal", "AbnormalMetrics")
#: Every key of a :func:`compare_tensors` row, in column order.
ROW_KEYS = STATUS_KEYS + tuple(METRICS) + VERDICT_KEYS


def compare_tensors(x, y, *, thresholds: Mapping[str, float] | str | None = None,
                    expected_noise: Mapping[str, float] | None = None,
                    rel_eps: float = DEFAULT_REL_EPS, tensor: str | None = None, output: bool = False) -> dict:
    """Compare device tensor ``x`` with golden tensor ``y``; never raises on data problems.

    Args:
        x, y: array-likes of any shape. Floats (float16/32/64 and the ml_dtypes bfloat16/float8/float4, these
            converted to float32 first) get the float metrics, computed in float64; integers, bool, the
            ml_dtypes int4/uint4/int2/uint2 and text (str/bytes/object arrays of strings: ONNX STRING) get
            ExactMatchRate (:mod:`.dtypes`). Text against numbers is a dtype class mismatch.
        thresholds: abnormal lines: None → :data:`DEFAULT_THRESHOLDS`; a string → :func:`parse_thresholds`
            (overrides on the defaults); a mapping (a :class:`~.thresholds.Thresholds` keeps which lines the
            user named) → exactly those lines.
        expected_noise: ``{"rtol": r, "atol": a}`` (missing keys = 0) for the op class' ordinary noise,
            e.g. FP16 rounding. When the error over the positions where both sides are finite is within
            the noise expected for those values (:func:`~.reductions.within_noise`: in root mean square,
            |x − y| <= a + r·max(|y|, rms(y))), no OverFlow occurred and the non-finite positions agree (same
            NaN/±inf on both sides), ``WithinExpectedNoise`` is True and a crossed *default* line (the tool's
            RMSE > 1.0 on values around 1e4, MeanRelativeError > 1 on a tensor near zero) does not make the
            tensor ``Abnormal``. A line the user set —
            named in a thresholds string (even at the default value), another value, another metric: see
            :func:`~.thresholds.noise_covers` — is applied as given: crossing it is abnormal whatever the noise.
        rel_eps: |y| floor for the relative errors (default 1e-6).
        tensor: the tensor's name: lines set for it alone (``"name:METRIC<VALUE"`` items,
            :attr:`~.thresholds.Thresholds.per_tensor`) replace the common ones.
        output: the tensor is a graph output, where the allowance does not excuse a shape metric's line
            (:data:`~.thresholds.OUTPUT_SHAPE_METRICS`). Default False.

    Returns:
        dict with :data:`ROW_KEYS`:
        ``CompareFailReason`` ('' when compared; else why not: shape mismatch (also empty vs non-empty),
        dtype class mismatch, unsupported dtype, no finite position pair; metrics are then NaN);
        ``DeviceNaN``/``DeviceInf``/``GoldenNaN``/``GoldenInf`` (element counts);
        ``NonFiniteMasked`` (True when some positions were left out because a side is NaN/inf: the float
        metrics cover only positions where both are finite); ``ComparedCount`` (positions compared);
        ``OverFlow`` (device NaN/inf where golden is finite); ``GoldenFP16OverflowRatio`` (share of
        golden elements with |y| > 65504, NaN for integer tensors); one value per metric of
        :data:`METRICS` (float tensors: all but ExactMatchRate; integer/bool tensors: ExactMatchRate only);
        ``WithinExpectedNoise`` (None without ``expected_noise``); ``AbnormalMetrics`` (every name whose
        line was crossed, plus ``"OverFlow"``; listed even when expected noise suppresses the verdict);
        ``Abnormal`` (bool: OverFlow, or a crossed line the expected noise does not cover — any line when
        not ``WithinExpectedNoise``, else only the non-default ones; when the tensors could not be compared
        only OverFlow can make it True: read ``CompareFailReason``).

    Empty tensors: two tensors with no elements, of the same shape and dtype class (e.g. boxes (0, 4) from
    both sides when nothing was detected) are an exact match, compared with ``ComparedCount`` 0: integer
    ExactMatchRate 1.0 (count(x == y) / n with n = 0 taken as "no position differs"); float errors 0.0
    (MaxAbsoluteError, the mean/relative errors, RelativeEuclideanDistance, KullbackLeiblerDivergence) and
    CosineSimilarity 1.0 — the convention the Ascend tool and :func:`~.similarity.cosine_similarity` use
    when both norms are 0 — so the pair never crosses a line; GoldenStd / DeviceStd are NaN (undefined).

    Raises:
        UsageError: bad ``thresholds`` or ``expected_noise`` (caller mistakes, not data problems).
    """
    lines = resolve_thresholds(thresholds).for_tensor(tensor)
    noise = _parse_noise(expected_noise)
    row = _new_row()
    xa, ya, reason = _standard_pair(x, y)
    with np.errstate(all="ignore"):
        fin_x, fin_y = _finite_info(xa, row, "Device"), _finite_info(ya, row, "Golden")
        reason = reason or _precheck(xa, ya)
        if not reason and xa.size == 0:
            _fill_empty(row, dtype_class(xa.dtype), noise)
        elif not reason and dtype_class(xa.dtype) == "integer":
            row["ExactMatchRate"] = exact_match_rate(xa, ya)
            row["ComparedCount"] = int(xa.size)
        elif not reason:
            reason = _compare_float(row, xa.reshape(-1), ya.reshape(-1), fin_x, fin_y, noise, rel_eps)
    row["CompareFailReason"] = reason
    _judge(row, lines, output)
    return row


def tolerance_that_would_pass(x, y, *, rel_eps: float = DEFAULT_REL_EPS) -> dict[str, float]:
    """For each metric that can carry a line, the strictest line the pair still passes (Polygraphy-style).

    Lines are strict (abnormal when value < line, or > line), so that line is the metric value itself.
    For float tensors two more keys give the element-wise tolerance (Polygraphy's check: every finite position
    within |x − y| <= atol + rtol·|y|; enough for ``expected_noise`` too, whose test is in root mean square): ``"atol"`` (with rtol = 0; = max|x − y|) and ``"rtol"`` (with atol = 0; =
    max |x − y|/|y|, inf when some y = 0 with x ≠ y). Non-finite disagreement and OverFlow are not
    tolerances and are not covered. Returns {} when the tensors cannot be compared.
    """
    row = compare_tensors(x, y, thresholds={}, rel_eps=rel_eps)
    if row["CompareFailReason"]:
        return {}
    passing = {name: row[name] for name in THRESHOLDABLE if not _isnan(row[name])}
    if dtype_class(np.asarray(x).dtype) == "float":
        passing["atol"] = row["MaxAbsoluteError"]
        passing["rtol"] = _rtol_needed(x, y)
    return passing


def _new_row() -> dict:
    row = dict.fromkeys(ROW_KEYS, math.nan)
    row.update(CompareFailReason="", OverFlow=False, DeviceNaN=0, DeviceInf=0, GoldenNaN=0, GoldenInf=0,
               NonFiniteMasked=False, ComparedCount=0, WithinExpectedNoise=None, Abnormal=False,
               AbnormalMetrics=[])
    return row


def _finite_info(a: np.ndarray, row: dict, side: str) -> np.ndarray | None:
    """Flat isfinite mask of a float tensor (None for other dtypes); fills the side's NaN/Inf counts."""
    if dtype_class(a.dtype) != "float":
        return None
    finite = np.isfinite(a).reshape(-1)
    if not finite.all():
        nan = int(np.count_nonzero(np.isnan(a)))
        row[f"{side}NaN"], row[f"{side}Inf"] = nan, int(finite.size - np.count_nonzero(finite)) - nan
    return finite


def _standard_pair(x, y) -> tuple[np.ndarray, np.ndarray, str]:
    """Both sides in their standard dtype (:func:`.dtypes.standard`), or the raw arrays and why one has none."""
    xa, ya = np.asarray(x), np.asarray(y)
    try:
        return standard(xa), standard(ya), ""
    except TypeError as exc:
        return (np.zeros(xa.shape, np.uint8), np.zeros(ya.shape, np.uint8),
                f"unsupported dtype: device {xa.dtype} vs golden {ya.dtype} ({exc})")


def _precheck(xa: np.ndarray, ya: np.ndarray) -> str:
    if xa.shape != ya.shape:
        return f"shape mismatch: device {xa.shape} vs golden {ya.shape}"
    kx, ky = value_kind(xa.dtype), value_kind(ya.dtype)
    if "other" in (kx, ky):
        return (f"unsupported dtype: device {xa.dtype} vs golden {ya.dtype}; expected float, integer, bool or "
                "string")
    if kx != ky:
        return f"dtype class mismatch: device {xa.dtype} ({kx}) vs golden {ya.dtype} ({ky})"
    return ""


def _fill_empty(row: dict, cls: str, noise: tuple[float, float] | None) -> None:
    """Two empty tensors of the same shape and dtype class agree exactly (nothing differs): see
    :func:`compare_tensors`. Integer: ExactMatchRate 1. Float: every error 0, CosineSimilarity 1 (the
    both-all-zero convention of :func:`~.similarity.cosine_similarity` and of the Ascend tool, whose norms
    are both 0 here), GoldenFP16OverflowRatio 0; GoldenStd / DeviceStd stay NaN (undefined, informational)."""
    if cls == "integer":
        row["ExactMatchRate"] = 1.0
        return
    for name, spec in METRICS.items():
        if spec.dtype_class == "float" and spec.direction != INFORMATIONAL:
            row[name] = 1.0 if spec.direction == HIGHER_IS_BETTER else 0.0
    row["GoldenFP16OverflowRatio"] = 0.0
    if noise is not None:
        row["WithinExpectedNoise"] = True


def _compare_float(row: dict, xa: np.ndarray, ya: np.ndarray, fin_x: np.ndarray, fin_y: np.ndarray,
                   noise: tuple[float, float] | None, rel_eps: float) -> str:
    """Fill the float metrics of ``row``; return a fail reason or ''."""
    over = np.count_nonzero(ya > FP16_MAX) + np.count_nonzero(ya < -FP16_MAX)
    row["GoldenFP16OverflowRatio"] = float(over) / ya.size
    nonfinite_agree = True
    if fin_x.all() and fin_y.all():
        x64, y64 = xa.reshape(-1), ya.reshape(-1)  # reduce_pair reads them in float64 chunks
    else:
        both = fin_x & fin_y
        row["OverFlow"] = bool(np.any(fin_y & ~fin_x))
        row["NonFiniteMasked"] = True
        nonfinite_agree = _nonfinite_agree(xa[~both], ya[~both])
        x64, y64 = xa[both], ya[both]
    row["ComparedCount"] = int(x64.size)
    if x64.size == 0:
        return "no position where both tensors are finite"
    sums: PairSums = reduce_pair(x64, y64, rel_eps=rel_eps, noise=noise)
    for name, spec in METRICS.items():
        if spec.from_sums is not None:
            row[name] = spec.from_sums(sums)
    if noise is not None:
        row["WithinExpectedNoise"] = bool(sums.within_noise and nonfinite_agree and not row["OverFlow"])
    return ""


def _nonfinite_agree(x: np.ndarray, y: np.ndarray) -> bool:
    """Same NaN / same ±inf on both sides at every position where at least one side is non-finite."""
    return bool(np.all((x == y) | (np.isnan(x) & np.isnan(y))))


def _judge(row: dict, lines: Mapping[str, float], output: bool = False) -> None:
    crossed = [name for name, line in lines.items() if METRICS[name].is_abnormal(row[name], line)]
    if row["OverFlow"]:
        crossed.append("OverFlow")
    row["AbnormalMetrics"] = crossed
    excused = row["WithinExpectedNoise"] is True
    row["Abnormal"] = any(not (excused and noise_covers(name, lines, output)) for name in crossed)


def _parse_noise(expected_noise: Mapping[str, float] | None) -> tuple[float, float] | None:
    if expected_noise is None:
        return None
    unknown = set(expected_noise) - {"rtol", "atol"}
    if unknown:
        raise UsageError(f"expected_noise: unknown key(s) {sorted(unknown)}; use 'rtol' and/or 'atol'")
    try:
        rtol, atol = float(expected_noise.get("rtol", 0.0)), float(expected_noise.get("atol", 0.0))
    except (TypeError, ValueError):
        raise UsageError(f"expected_noise: {dict(expected_noise)} must map rtol/atol to numbers") from None
    if not (rtol >= 0.0 and atol >= 0.0):
        raise UsageError(f"expected_noise: rtol={rtol}, atol={atol}; both must be >= 0")
    return rtol, atol


def _rtol_needed(x, y) -> float:
    """Smallest r with |x − y| <= r·|y| at every finite position, as evaluated in float64 (so it passes)."""
    x64, y64 = as_flat64(x), as_flat64(y)
    both = np.isfinite(x64) & np.isfinite(y64)
    diff, absy = np.abs(x64[both] - y64[both]), np.abs(y64[both])
    with np.errstate(all="ignore"):
        ratio = np.where(diff == 0.0, 0.0, diff / absy)
    rtol = float(ratio.max()) if ratio.size else 0.0
    while math.isfinite(rtol) and not np.all(diff <= rtol * absy):  # d/|y|·|y| may round below d
        rtol = float(np.nextafter(rtol, math.inf))
    return rtol


def _isnan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)
