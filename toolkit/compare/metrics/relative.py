"""Relative-error family: RelativeEuclideanDistance, MaxRelativeError, MeanRelativeError,
AccumulatedRelativeError.

Element-wise relative error: e_i = |x_i / y_i − 1| (= |x_i − y_i| / |y_i|), taken only over the
elements with |y_i| > rel_eps (default :data:`~.reductions.DEFAULT_REL_EPS` = 1e-6; the Ascend tool uses
float64 machine epsilon). Elements below the floor are skipped; when none qualifies, all three
element-wise metrics are 0.

Source: Ascend CANN msaccucmp ``alg_RelativeEuclideanDistance.py``, ``alg_MaxRelativeError.py``,
``alg_MeanRelativeError.py`` and ``alg_AccumulatedRelativeError.py`` (CANN 8.1.RC1,
tools/operator_cmp/compare/algorithm_manager/builtin_algorithm/). The last one defines
AccumulatedRelativeError as the *sum* of the element-wise relative errors,
Σ_{|y_i|>eps} |x_i/y_i − 1| (its docstring: "(|x[i]-y[i]|) / |y[i]| + (x[i+1]-y[i+1]) / y[i+1]"),
not Σ|x − y| / Σ|y|; we follow the tool. It therefore grows with the element count.
"""

from __future__ import annotations

import math

from .reductions import PairSums
from .spec import ASCEND_DOC, ASCEND_TOOL, LOWER_IS_BETTER, define


def relative_euclidean_distance(s: PairSums) -> float:
    """sqrt(Σ(x − y)² / Σy²) = ‖x − y‖ / ‖y‖.

    Σy² = 0: 0.0 when x is identical (all zero too), else inf. (The tool returns 0 whenever y is all
    zero, which would hide any device output.)
    """
    if s.sum_yy == 0.0:
        return 0.0 if s.sum_sq_diff == 0.0 else math.inf
    return math.sqrt(s.sum_sq_diff / s.sum_yy)


def max_relative_error(s: PairSums) -> float:
    """max |x/y − 1| over |y| > rel_eps; 0 when no element qualifies."""
    return s.rel_max if s.rel_count else 0.0


def mean_relative_error(s: PairSums) -> float:
    """Σ|x/y − 1| / m over the m elements with |y| > rel_eps; 0 when m = 0.

    The Ascend tool divides by the total element count n instead (skipped elements count as 0), which
    dilutes the error of sparse tensors such as ReLU outputs; we average over qualifying elements only.
    """
    return s.rel_sum / s.rel_count if s.rel_count else 0.0


def accumulated_relative_error(s: PairSums) -> float:
    """Σ|x/y − 1| over |y| > rel_eps (the tool's definition, see the module docstring); 0 when none."""
    return s.rel_sum if s.rel_count else 0.0


_REL = "dimensionless ratio, [0, inf)"
SPECS = (
    define("RelativeEuclideanDistance", relative_euclidean_distance, family="error",
           direction=LOWER_IS_BETTER, default_threshold=0.05, formula="sqrt(Σ(x − y)² / Σy²)", unit=_REL,
           source=f"{ASCEND_TOOL.format('RelativeEuclideanDistance')}; {ASCEND_DOC}"),
    define("MaxRelativeError", max_relative_error, family="relative", direction=LOWER_IS_BETTER,
           formula="max |x/y − 1| over |y| > eps", unit=_REL,
           source=f"{ASCEND_TOOL.format('MaxRelativeError')}; {ASCEND_DOC}"),
    define("MeanRelativeError", mean_relative_error, family="relative", direction=LOWER_IS_BETTER,
           default_threshold=1.0, formula="mean |x/y − 1| over |y| > eps", unit=_REL,
           source=f"{ASCEND_TOOL.format('MeanRelativeError')} (tool divides by n; see docstring); {ASCEND_DOC}"),
    define("AccumulatedRelativeError", accumulated_relative_error, family="relative",
           direction=LOWER_IS_BETTER, formula="Σ |x/y − 1| over |y| > eps", unit=_REL,
           source=f"{ASCEND_TOOL.format('AccumulatedRelativeError')}; {ASCEND_DOC}"),
)
