"""Exact family: ExactMatchRate, the metric for integer, bool and string tensors (indices, masks, shapes, labels).

Our addition: the Ascend tool has no integer metric. Compared in the tensors' own dtypes (no float64
round trip, so int64 values above 2**53 stay exact); ml_dtypes int4/uint4/int2/uint2 as int8/uint8 and
strings as numpy unicode (``compare_tensors`` converts them first: :func:`~.dtypes.standard`).
"""

from __future__ import annotations

import numpy as np

from .spec import HIGHER_IS_BETTER, MetricSpec


def exact_match_rate(x: np.ndarray, y: np.ndarray) -> float:
    """Share of positions where x == y, in [0, 1]; x, y flat and of equal length (n > 0)."""
    x, y = np.asarray(x).reshape(-1), np.asarray(y).reshape(-1)
    return int(np.count_nonzero(x == y)) / x.size


SPECS = (
    MetricSpec(name="ExactMatchRate", fn=exact_match_rate, direction=HIGHER_IS_BETTER, default_threshold=1.0,
               formula="count(x == y) / n", unit="share, [0, 1]", source="npuscope (integer/bool/string tensors)",
               dtype_class="integer"),
)
