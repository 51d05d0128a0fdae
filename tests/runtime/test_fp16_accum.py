"""FP16 accumulation (toolkit/runtime/fp16_accum.py): the accumulation peak equals numpy sums, and overflow
raises no numpy warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from toolkit.runtime import fp16_accum

FP16_MAX = 65504.0  # largest finite IEEE binary16 value, by hand


ROWS, COLS = 4, 4096


def test_accumulation_peak_equals_numpy_sums():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 100, (3, 1000))  # non-negative: the largest running sum is the full row sum
    assert fp16_accum.accumulation_peak("ReduceMean", [x], {"axes": [1]}) == pytest.approx(x.sum(1).max(), rel=1e-12)
    assert fp16_accum.accumulation_peak("ReduceSumSquare", [x], {"axes": [1]}) == pytest.approx(
        (x * x).sum(1).max(), rel=1e-12)
    d = x - x.mean(1, keepdims=True)
    want = max(x.sum(1).max(), (d * d).sum(1).max())
    assert fp16_accum.accumulation_peak("LayerNormalization", [x, np.ones(1000)], {"axis": -1}) == pytest.approx(
        want, rel=1e-12)
    assert fp16_accum.accumulation_peak("Relu", [x], {}) is None


def test_fp16_accumulating_kernels_overflow_without_a_numpy_warning():
    x = np.full((2, COLS), 50.0, np.float16)  # 4096 * 50 = 204800 > 65504: the FP16 sum overflows
    assert 50.0 * COLS > FP16_MAX
    ln_in = np.random.default_rng(2).uniform(0, 100, (2, COLS)).astype(np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean = fp16_accum.reduce_mean(x, {"axes": [1]})
        ln = fp16_accum.layer_normalization(ln_in, {"axis": -1}, np.ones(COLS, np.float16))
    assert np.isinf(mean).all()
    assert np.isnan(ln).any()  # d / sqrt(inf) with an inf mean: what the device gives, silently
