"""Counting a layer table's rows: every abnormal row is a compared row (toolkit.compare.counts)."""

import numpy as np
import pandas as pd
import pytest

from toolkit.compare.counts import abnormal_mask, compared_mask, layer_counts
from toolkit.compare.metrics import compare_tensors

RNG = np.random.default_rng(3)


def _rows(cases):
    rows = []
    for name, (x, y) in cases.items():
        r = compare_tensors(x, y, tensor=name)
        r["TensorName"], r["Role"] = name, ""
        rows.append(r)
    return pd.DataFrame(rows)


GOLDEN = RNG.standard_normal((4, 8)).astype(np.float32)
DEVICE_KINDS = {
    "close": GOLDEN + np.float32(1e-6),
    "all_inf": np.full_like(GOLDEN, np.inf),
    "all_nan": np.full_like(GOLDEN, np.nan),
    "half_inf": np.where(np.arange(GOLDEN.size).reshape(GOLDEN.shape) % 2 == 0, np.inf, GOLDEN),
    "wrong": -GOLDEN,
    "shape_mismatch": GOLDEN[:2],
}


@pytest.mark.parametrize("kind", sorted(DEVICE_KINDS))
def test_abnormal_rows_are_compared_rows(kind):
    df = _rows({"t": (DEVICE_KINDS[kind], GOLDEN)})
    counts = layer_counts(df)
    # abnormal under compare's rule implies judged by the comparator
    assert counts["abnormal"] <= counts["compared"] <= counts["tensors"] == 1
    assert not (abnormal_mask(df) & ~compared_mask(df)).any()


def test_nonfinite_tensor_is_compared_and_abnormal_not_dropped_from_the_count():
    df = _rows({"ok": (GOLDEN.copy(), GOLDEN), "inf": (DEVICE_KINDS["all_inf"], GOLDEN)})
    assert df.loc[1, "CompareFailReason"]  # no metrics: no finite position pair
    assert layer_counts(df)["compared"] == 2 and layer_counts(df)["abnormal"] == 1


def test_rows_without_a_verdict_are_not_compared():
    df = _rows({"ok": (GOLDEN.copy(), GOLDEN)})
    fused = {"TensorName": "fused", "CompareFailReason": "fused into kernel k", "Abnormal": False,
             "OverFlow": False, "Role": ""}
    df = pd.concat([df, pd.DataFrame([fused])], ignore_index=True)
    assert compared_mask(df).tolist() == [True, False]
    assert layer_counts(df) == {"tensors": 2, "compared": 1, "abnormal": 0, "overflow": 0, "origins": 0,
                                "propagated": 0}
