"""reduce_pair's chunked passes (toolkit/compare/metrics/reductions.py).

Tensors of several chunks (CHUNK elements each, the last one partial) must give what one float64 pass over the
whole tensor gives: every expected value below is computed from full float64 copies with numpy and math.fsum,
sharing no code with the chunk loop. A pair must never be copied whole (memory measured with tracemalloc, which
numpy reports its buffers to)."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from toolkit.compare.metrics import compare_tensors
from toolkit.compare.metrics.reductions import CHUNK, KL_EPS, reduce_pair, within_noise


def _expected(x, y, rel_eps=1e-6, noise=(1e-3, 1e-5)) -> dict:
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    d = np.abs(x - y)
    q = np.abs(y) > rel_eps
    rel = d[q] / np.abs(y[q])

    def dist(v):
        lo, hi = v.min(), v.max()
        u = (v - lo) / (hi - lo) if hi > lo else np.ones_like(v)
        u = np.maximum(u, KL_EPS)
        return u / math.fsum(u)

    p, r = dist(y), dist(x)
    rms = math.sqrt(math.fsum(y * y) / y.size)
    scale = min(noise[1], noise[0] * rms) + noise[0] * np.maximum(np.abs(y), rms)
    return {"sum_xy": math.fsum(x * y), "sum_xx": math.fsum(x * x), "sum_yy": math.fsum(y * y),
            "sum_sq_diff": math.fsum(d * d), "sum_abs_diff": math.fsum(d), "max_abs_diff": float(d.max()),
            "rel_count": int(q.sum()), "rel_sum": math.fsum(rel), "rel_max": float(rel.max()) if rel.size else 0.0,
            "std_x": math.sqrt(math.fsum((x - math.fsum(x) / x.size) ** 2) / x.size),
            "std_y": math.sqrt(math.fsum((y - math.fsum(y) / y.size) ** 2) / y.size),
            "kl": max(math.fsum(r * np.log(r / p)), 0.0),  # device r first, as msaccucmp sums it
            "within_noise": math.fsum(d * d) <= math.fsum(scale * scale)}


# sizes around the chunk boundaries: one element, a partial chunk, exact chunks, several chunks and a tail
SIZES = [1, 5, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dx,dy", [(np.float16, np.float32), (np.float32, np.float32), (np.float64, np.float64),
                                   (np.float32, np.float16)], ids=str)
def test_chunked_sums_equal_one_float64_pass(n, dx, dy):
    rng = np.random.default_rng(n)
    y = (rng.standard_normal(n) * 10.0 ** rng.uniform(-2, 3, n)).astype(dy)
    y[::11] = 0.0  # zeros: skipped by the relative errors
    x = (y.astype(np.float64) * (1 + 1e-3 * rng.standard_normal(n)) + 1e-4 * rng.standard_normal(n)).astype(dx)
    got = reduce_pair(x, y, noise=(1e-3, 1e-5))
    for key, want in _expected(x, y).items():
        value = getattr(got, key)
        if isinstance(want, (bool, int)):
            assert value == want, key
        else:
            assert value == pytest.approx(want, rel=1e-9, abs=1e-15), key


@pytest.mark.parametrize("n", [CHUNK + 3, 2 * CHUNK])
def test_identical_multi_chunk_tensors_are_exact(n):
    y = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    row = compare_tensors(y.astype(np.float64), y, expected_noise={"rtol": 1e-3})
    assert row["CosineSimilarity"] == 1.0 and row["KullbackLeiblerDivergence"] == 0.0
    assert row["MaxAbsoluteError"] == 0.0 and row["RelativeEuclideanDistance"] == 0.0
    assert row["WithinExpectedNoise"] is True
    doubled = compare_tensors(y * np.float32(2.0), y)  # a power of two: same distribution, exactly
    assert doubled["KullbackLeiblerDivergence"] == 0.0 and doubled["CosineSimilarity"] == 1.0


def test_constant_chunks_across_a_varying_tensor_use_the_whole_range():
    # the first chunk is constant, the tensor is not: min-max must use the whole tensor's range
    y = np.concatenate([np.full(CHUNK, 2.0), np.linspace(-1.0, 5.0, CHUNK + 9)])
    x = y.copy()
    x[CHUNK:] *= 1.01
    assert reduce_pair(x, y, families=("kl",)).kl == pytest.approx(_expected(x, y)["kl"], rel=1e-9, abs=1e-15)


def test_within_noise_function_matches_the_reduce_pair_test():
    rng = np.random.default_rng(3)
    y = rng.uniform(-3e4, 3e4, 2 * CHUNK + 5)
    for err in (1.0, 40.0):
        x = y + rng.standard_normal(y.size) * err
        d, absy = np.abs(x - y), np.abs(y)
        want = _expected(x, y, noise=(1e-3, 1e-3))["within_noise"]
        assert within_noise(d, absy, 1e-3, 1e-3) is want
        assert reduce_pair(x, y, noise=(1e-3, 1e-3)).within_noise is want
    assert within_noise(np.zeros(0), np.zeros(0), 0.0, 0.0) is True


def test_inputs_are_neither_modified_nor_copied_whole():
    n = 4 * CHUNK * 8  # 2 Mi elements: an 8 MiB float32 side, 16 MiB as float64
    rng = np.random.default_rng(4)
    y = rng.standard_normal(n).astype(np.float32)
    x = (y + 1e-3 * rng.standard_normal(n)).astype(np.float16)
    x0, y0 = x.copy(), y.copy()
    tracemalloc.start()
    try:
        reduce_pair(x, y, noise=(1e-3, 1e-5))
        compare_tensors(x, y, expected_noise={"rtol": 1e-3, "atol": 1e-5})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(x, x0) and np.array_equal(y, y0)
    # the chunk buffers (4 x CHUNK float64 = 2 MiB) and compare_tensors' boolean masks (n bytes each): no
    # full-size float64 copy (16 MiB) of either side
    assert peak < 3 * 2**20 + 3 * n, peak



@pytest.mark.parametrize("rtol, atol", [(4e-3, 1e-3), (2e-3, 1e-4), (1e-3, 0.0)])
@pytest.mark.parametrize("magnitude", [1e-8, 1e-6, 1e-4, 1e-2, 1.0, 1e4])
def test_the_noise_allowance_scales_with_the_tensor(rtol, atol, magnitude):
    """FP16 rounding (each value rounded to binary16 precision, relative error <= 2**-11) is within the expected
    noise at every magnitude; an error of a third of the values is not, however small the values are (an op
    class' atol must not excuse a tensor of values far below it)."""
    rng = np.random.default_rng(7)
    y = rng.standard_normal(3 * CHUNK + 11) * magnitude
    rounded = y * (1 + rng.uniform(-2.0**-11, 2.0**-11, y.size))
    wrong = y * (1 + rng.uniform(-0.6, 0.6, y.size))
    for x, want in ((rounded, True), (wrong, False)):
        d, absy = np.abs(x - y), np.abs(y)
        assert within_noise(d, absy, rtol, atol) is want
        assert reduce_pair(x, y, noise=(rtol, atol)).within_noise is want
        assert _expected(x, y, noise=(rtol, atol))["within_noise"] is want
