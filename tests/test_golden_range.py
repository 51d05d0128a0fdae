"""layerwise.golden_range: the finite range of a reference tensor, against a float64 statement of it."""

import numpy as np
import pytest


def golden_range_reference(y) -> dict:
    a = np.asarray(y)
    if a.size == 0 or a.dtype.kind not in "fiub":
        return {}
    f = a.astype(np.float64)
    fin = f[np.isfinite(f)]
    if fin.size == 0:
        return {}
    return {"GoldenMin": float(fin.min()), "GoldenMax": float(fin.max()), "GoldenAbsMax": float(np.abs(fin).max())}


@pytest.mark.parametrize("y", [np.array([np.nan, 1.0]), np.array([np.inf, -2.0], np.float32), np.array([True, False]),
                               np.array([2**62, -3], np.int64), np.array([], np.float32), np.array([np.nan]),
                               np.array([-0.0, 0.0]), np.array([1, 2], np.uint8), np.array([-5.5], np.float16),
                               np.array(["a"]), np.random.default_rng(1).standard_normal((3, 7)).astype(np.float32)])
def test_golden_range_fast_path_equals_the_finite_range(y):
    """layerwise.golden_range skips the float64 copy when there is no NaN/inf; the result must not change."""
    from toolkit.compare.layerwise import golden_range

    assert golden_range(y) == golden_range_reference(y)
