"""Per-kernel sensitivity metrics (toolkit/tuning/sensitivity.py) equal compare_tensors and numpy."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.compare.metrics import compare_tensors
from toolkit.tuning.sensitivity import compare_metrics


def _cos_mae(x, y) -> tuple[float, float]:
    """Cosine (zero-norm convention of the metric's docs: both zero → 1, one zero → 0) and max |x − y|."""
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    cos = float(x @ y / (nx * ny)) if nx and ny else float(nx == ny == 0)
    return cos, float(np.abs(x - y).max())


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ------------------------------------------------------------------ comparisons with only the metrics needed
def test_compare_metrics_equals_compare_tensors_and_numpy():
    rng = np.random.default_rng(5)
    y = rng.standard_normal((4, 1000)).astype(np.float32)
    x = (y + rng.standard_normal((4, 1000)) * 1e-3).astype(np.float16)
    names = ["CosineSimilarity", "RelativeEuclideanDistance", "MaxAbsoluteError", "MeanRelativeError"]
    got, full = compare_metrics(x, y, names), compare_tensors(x, y, thresholds={})
    assert all(got[m] == full[m] for m in names)
    cos, mae = _cos_mae(x, y)
    assert got["CosineSimilarity"] == pytest.approx(cos, abs=1e-12) and got["MaxAbsoluteError"] == pytest.approx(mae)
    red = np.linalg.norm(x.astype(np.float64) - y) / np.linalg.norm(y.astype(np.float64))
    assert got["RelativeEuclideanDistance"] == pytest.approx(red, rel=1e-9)
    assert not got["OverFlow"] and got["DeviceNaN"] == 0


def test_compare_metrics_with_overflow_reports_it_like_compare_tensors():
    y = np.ones(100, np.float32)
    x = y.copy()
    x[3] = np.inf
    got = compare_metrics(x, y, ["CosineSimilarity"])
    assert got["OverFlow"] and got["DeviceInf"] == 1 and got["GoldenInf"] == 0
    shape = compare_metrics(np.ones(3, np.float32), np.ones(4, np.float32), ["CosineSimilarity"])
    assert shape["CompareFailReason"] and np.isnan(shape["CosineSimilarity"])
