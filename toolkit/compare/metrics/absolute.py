"""Absolute-error family: MaxAbsoluteError, MeanAbsoluteError, RootMeanSquareError.

All three are in the unit of the tensor itself, so their lines are scale dependent (the default
RootMeanSquareError > 1.0 line flags ordinary FP16 rounding of values around 1e4; see ``expected_noise``
in :func:`~.compare.compare_tensors`). Source: Ascend CANN msaccucmp ``alg_MaxAbsoluteError.py``,
``alg_MeanAbsoluteError.py``, ``alg_RootMeanSquareError.py`` (CANN 8.1.RC1).
"""

from __future__ import annotations

import math

from .reductions import PairSums
from .spec import ASCEND_DOC, ASCEND_TOOL, LOWER_IS_BETTER, define


def max_absolute_error(s: PairSums) -> float:
    """max |x − y|."""
    return s.max_abs_diff


def mean_absolute_error(s: PairSums) -> float:
    """Σ|x − y| / n."""
    return s.sum_abs_diff / s.n


def root_mean_square_error(s: PairSums) -> float:
    """sqrt(Σ(x − y)² / n)."""
    return math.sqrt(s.sum_sq_diff / s.n)


SPECS = (
    define("MaxAbsoluteError", max_absolute_error, family="error", direction=LOWER_IS_BETTER,
           formula="max|x − y|", unit="tensor units, [0, inf)",
           source=f"{ASCEND_TOOL.format('MaxAbsoluteError')}; {ASCEND_DOC}"),
    define("MeanAbsoluteError", mean_absolute_error, family="error", direction=LOWER_IS_BETTER,
           formula="Σ|x − y| / n", unit="tensor units, [0, inf)",
           source=f"{ASCEND_TOOL.format('MeanAbsoluteError')}; {ASCEND_DOC}"),
    define("RootMeanSquareError", root_mean_square_error, family="error", direction=LOWER_IS_BETTER,
           default_threshold=1.0, formula="sqrt(Σ(x − y)² / n)", unit="tensor units, [0, inf)",
           source=f"{ASCEND_TOOL.format('RootMeanSquareError')}; {ASCEND_DOC}"),
)
