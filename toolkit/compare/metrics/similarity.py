"""Similarity family: CosineSimilarity.

Source: Ascend CANN msaccucmp ``alg_CosineSimilarity.py`` (CANN 8.1.RC1) and the result-file field table
(:data:`~.spec.ASCEND_DOC`): range [−1, 1], 1 = same direction.
"""

from __future__ import annotations

import math
import sys

from .reductions import PairSums
from .spec import ASCEND_DOC, ASCEND_TOOL, HIGHER_IS_BETTER, define


def cosine_similarity(s: PairSums) -> float:
    """Σxy / (‖x‖·‖y‖), clipped to [−1, 1].

    Zero-norm convention (exact zeros, not the tool's epsilon): both tensors all zero → 1.0 (identical);
    exactly one all zero → 0.0 (no shared direction). The Ascend tool reports NaN in the second case; we
    return 0.0 so that the tensor crosses the default line (< 0.99) instead of escaping every comparison.
    A one-element tensor gives sign(x·y): 1, −1 or (one side zero) 0.

    Exactness: x == y element for element (max|x − y| = 0) gives exactly 1.0 — the three sums are rounded
    separately, and Σxy / (sqrt(Σx²)·sqrt(Σy²)) is 0.9999999999999998 for many identical tensors. Otherwise the
    denominator is sqrt(Σx²·Σy²) (one square root: sqrt(fl(a²)) = a exactly in binary floating point), so
    x = ±2^k·y (exactly proportional) gives exactly ±1; the two-root form is kept only where that product
    would overflow or underflow.
    """
    if s.sum_xx == 0.0 and s.sum_yy == 0.0:
        return 1.0
    if s.sum_xx == 0.0 or s.sum_yy == 0.0:
        return 0.0
    if s.max_abs_diff == 0.0:
        return 1.0
    product = s.sum_xx * s.sum_yy
    if _NORMAL_MIN <= product < math.inf:
        value = s.sum_xy / math.sqrt(product)
    else:
        value = s.sum_xy / (math.sqrt(s.sum_xx) * math.sqrt(s.sum_yy))
    return min(1.0, max(-1.0, value))


#: Smallest positive normal float64: below it Σx²·Σy² has lost precision (subnormal).
_NORMAL_MIN = sys.float_info.min


SPECS = (
    define("CosineSimilarity", cosine_similarity, family="error", direction=HIGHER_IS_BETTER,
           default_threshold=0.99, formula="Σxy / (‖x‖·‖y‖)", unit="dimensionless, [−1, 1]",
           source=f"{ASCEND_TOOL.format('CosineSimilarity')}; {ASCEND_DOC}"),
)
