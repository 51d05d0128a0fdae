"""Dataset aggregation (toolkit/dataset/aggregate.py): the accumulator against numpy, percentile labels and
bad percentiles."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# -------------------------------------------------------------------------------------------- aggregation
def test_accumulator_matches_numpy(tmp_path):
    from toolkit.dataset.aggregate import AGG_METRICS, Accumulator
    from toolkit.dataset.worker import COLUMNS

    rng = np.random.default_rng(1)
    n_in, n_t = 23, 7
    tensors = [f"t{i}" for i in range(n_t)]
    vals = rng.random((n_in, n_t, len(COLUMNS)))
    vals[rng.random((n_in, n_t)) < 0.2] = np.nan  # tensors not compared on some inputs
    vals[:, 6, :] = np.nan  # never compared
    names = [f"x{i:02d}" for i in range(n_in)]
    acc = Accumulator(tensors, (10, 50, 99.5), tmp_path)
    for name, v in zip(names, vals):
        rows = np.flatnonzero(~np.isnan(v).all(axis=1)).astype(np.int32)
        acc.add(name, rows, v[rows])
    df = acc.finish().set_index("TensorName")
    assert list(df.index) == tensors[:6] and not list(tmp_path.iterdir())  # spill files removed
    for m in AGG_METRICS:
        a = vals[:, :6, COLUMNS.index(m)]
        low = m in ("CosineSimilarity", "ExactMatchRate")
        worst = np.nanmin(a, axis=0) if low else np.nanmax(a, axis=0)
        at = np.nanargmin(a, axis=0) if low else np.nanargmax(a, axis=0)
        np.testing.assert_array_equal(df[f"{m}_worst"].to_numpy(), worst)
        assert df[f"{m}_worst_input"].tolist() == [names[i] for i in at]
        np.testing.assert_allclose(df[f"{m}_mean"].to_numpy(), np.nanmean(a, axis=0), rtol=1e-12)
        for q in (10, 50, 99.5):
            np.testing.assert_allclose(df[f"{m}_p{q:g}"].to_numpy(), np.nanpercentile(a, q, axis=0), rtol=1e-12)
    assert df["Inputs"].tolist() == (~np.isnan(vals[:, :6, 0])).sum(axis=0).tolist()


# ------------------------------------------------------------------------------------------- percentiles
def test_percentile_labels_are_plain_decimals(tmp_path):
    from toolkit.dataset.aggregate import Accumulator, parse_percentiles, percentile_label
    from toolkit.dataset.worker import COLUMNS

    qs = parse_percentiles("0.0000001, 1e-7, 12.345671, 12.345672, 50, 99.5, -0, 100")
    assert qs == (1e-7, 12.345671, 12.345672, 50.0, 99.5, 0.0, 100.0)
    assert [percentile_label(q) for q in qs] == ["p0.0000001", "p12.345671", "p12.345672", "p50", "p99.5", "p0",
                                                 "p100"]
    vals = np.random.default_rng(3).random((9, 1, len(COLUMNS)))
    acc = Accumulator(["t"], qs, tmp_path)
    for i, v in enumerate(vals):
        acc.add(f"x{i}", np.array([0], np.int32), v)
    df = acc.finish()
    a = vals[:, 0, COLUMNS.index("CosineSimilarity")]
    for q, label in (("1e-7", "p0.0000001"), (12.345672, "p12.345672"), (99.5, "p99.5")):
        assert df[f"CosineSimilarity_{label}"].iloc[0] == pytest.approx(np.percentile(a, float(q)), abs=1e-15)
    assert not any("e-" in c for c in df.columns)


@pytest.mark.parametrize("text, message", [("", "--percentiles is empty"), ("  ", "--percentiles is empty"),
                                           ("50,,90", "entry ''"), ("nan", "entry 'nan'"), ("101", "entry '101'")])
def test_bad_percentiles_are_usage_errors(text, message):
    from toolkit.dataset.aggregate import parse_percentiles
    from toolkit.core.errors import UsageError

    with pytest.raises(UsageError, match=message):
        parse_percentiles(text)
    assert parse_percentiles("none") == () and parse_percentiles(None) == (50.0, 90.0, 99.0)
