"""Per-kernel sensitivity metrics (toolkit/tuning/sensitivity.py) equal compare_tensors and numpy; the ranking
order and the measured output shares."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from toolkit.compare.metrics import compare_tensors
from toolkit.tuning.sensitivity import compare_metrics, output_shares, rank_kernels


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


# ------------------------------------------------------------------ ranking order and output shares
def _table(seed: int, n: int = 12) -> pd.DataFrame:
    """A kernel_sensitivity-shaped table: random LocalRED (some NaN), some overflow flags, in graph order."""
    rng = np.random.default_rng(seed)
    red = rng.uniform(0, 1, n)
    red[rng.choice(n, 2, replace=False)] = np.nan
    return pd.DataFrame({"Rank": None, "Kernel": [f"k{i}" for i in range(n)], "KeepName": [f"n{i}" for i in range(n)],
                         "OpType": "Add", "Nodes": "", "LocalCosine": 1.0, "LocalRED": red, "LocalMaxAbs": 0.0,
                         "LocalOverflow": rng.random(n) < 0.15, "RangeOverflow": rng.random(n) < 0.15,
                         "AccCosine": 1.0, "AccRED": 0.0, "OutputShare": np.nan})


@pytest.mark.parametrize("seed", range(6))
def test_ranking_puts_overflow_first_in_graph_order_then_local_error_worst_first(seed):
    df = _table(seed)
    out = rank_kernels(df)
    over = [k for k, a, b in zip(df["KeepName"], df["LocalOverflow"], df["RangeOverflow"]) if a or b]
    rest = [k for k in df["KeepName"] if k not in over]
    red = dict(zip(df["KeepName"], df["LocalRED"]))
    # independently: NaN (no finite pair) is the worst local error; ties keep graph order
    rest = sorted(rest, key=lambda k: (-(np.inf if np.isnan(red[k]) else red[k]), int(k[1:])))
    assert list(out["KeepName"]) == over + rest
    assert list(out["Rank"]) == list(range(len(df))) and out["OutputShare"].isna().all()


@pytest.mark.parametrize("base", [2.0, np.inf])
def test_output_shares_measure_the_first_ranked_kernels_without_overflow_and_keep_the_order(base):
    ranked = rank_kernels(_table(3))
    errs = {f"n{i}": (0.25 * i if np.isfinite(base) else (np.inf if i % 2 else 0.1)) for i in range(12)}
    asked = []

    def output_error(keep):
        asked.append(keep)
        return errs[keep[0]]

    out = output_shares(ranked, output_error, base, top_k=3)
    assert list(out["KeepName"]) == list(ranked["KeepName"])  # the order is not changed by a share
    clean = [k for k, a, b in zip(ranked["KeepName"], ranked["LocalOverflow"], ranked["RangeOverflow"])
             if not (a or b)][:3]
    assert asked == [[k] for k in clean]
    for k, v in zip(out["KeepName"], out["OutputShare"]):
        if k not in clean:
            assert np.isnan(v)
        elif np.isfinite(base):
            assert v == pytest.approx(max(0.0, 1 - errs[k] / base))
        else:
            assert v == (0.0 if np.isinf(errs[k]) else 1.0)
    assert output_shares(ranked, output_error, 0.0, top_k=3)["OutputShare"].isna().all()  # nothing to remove
    assert output_shares(ranked, output_error, base, top_k=0)["OutputShare"].isna().all()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("where", ["none", "pos", "neg", "inf", "nan_and_pos", "all_nan", "empty"])
def test_range_overflow_is_any_value_fp16_cannot_hold_nan_ignored(dtype, where):
    from toolkit.tuning.sensitivity import _beyond_fp16

    a = np.linspace(-6e4, 6e4, 101).astype(np.float64)
    if where in ("pos", "nan_and_pos") and dtype != np.float16:
        a[7] = 7e4
    if where == "neg" and dtype != np.float16:
        a[9] = -1e6
    if where == "inf":
        a[3] = -np.inf
    if where == "nan_and_pos":
        a[0] = np.nan
    if where == "all_nan":
        a[:] = np.nan
    if where == "empty":
        a = a[:0]
    arr = a.astype(dtype)
    finite_or_inf = arr[~np.isnan(arr)].astype(np.float64)
    assert _beyond_fp16(arr) == bool((np.abs(finite_or_inf) > 65504.0).any())
    assert _beyond_fp16(arr.astype(np.int64) if where in ("none", "pos") else np.zeros(3, np.int32)) is False
