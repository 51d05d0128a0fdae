"""check_constants' FP16 representability test against a float64 statement of the three faults, on random
arrays over 19 decades and on the boundaries (2**-25 rounds to zero, 2**-24 does not; 65504 is the largest
finite FP16, 65520 rounds to inf; odd integers above 2048 are inexact)."""

import warnings

import numpy as np
import pytest

from toolkit.compiler.passes.check_constants import fp16_constant_issues


def reference(arr: np.ndarray) -> dict:
    a = arr.astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = arr.astype(np.float16).astype(np.float64)
    fin = np.isfinite(a)
    ev = {}
    over = fin & (np.abs(a) > 65504)
    if over.any():
        ev["overflow"] = {"count": int(over.sum()), "absmax": float(np.abs(a[over]).max())}
    under = fin & (a != 0) & (h == 0)
    if under.any():
        ev["underflow_to_zero"] = {"count": int(under.sum()), "absmin": float(np.abs(a[under]).min()),
                                   "nonzero": int((fin & (a != 0)).sum())}
    ints = fin & (a == np.round(a)) & (np.abs(a) > 2048) & (h != a) & ~over
    if ints.any():
        ev["integer_inexact"] = {"count": int(ints.sum()), "example": float(a[ints].flat[0])}
    return ev


EDGES = [
    np.array([], np.float32),
    np.array([2.0 ** -25, -(2.0 ** -25), 2.0 ** -24, 1e-30, 0.0], np.float32),
    np.array([2048, 2049, 2050, 4097, -4097], np.float32),
    np.array([65504, 65519, 65520, -1e6, np.inf, -np.inf, np.nan], np.float32),
    np.full((3, 4), 0.5, np.float32),
]


@pytest.mark.parametrize("arr", EDGES, ids=["empty", "underflow-edge", "integers", "overflow-edge", "benign"])
def test_boundaries(arr):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fp16_constant_issues(arr) == reference(arr)


def test_random_arrays_over_many_decades():
    rng = np.random.default_rng(11)
    for _ in range(400):
        a = (rng.standard_normal(int(rng.integers(1, 64))) * 10.0 ** rng.uniform(-12, 7)).astype(np.float32)
        if rng.random() < 0.3:
            a = np.round(a)
        if rng.random() < 0.1:
            a[0] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert fp16_constant_issues(a) == reference(a)


@pytest.mark.parametrize("values,want", [
    ([1e-12], "error"),                      # an eps that becomes 0
    ([1e-12, -3e-9, 0.0], "error"),          # every non-zero value flushes
    ([0.5, 1e-12, 0.25, -0.75], "warning"),  # some weights flush: each moves by < 2**-25
    ([1e5, 0.5], "error"),                   # overflow
    ([4097.0, 2.0], "warning"),              # integer exactness only
])
def test_severity(values, want):
    from toolkit.compiler.passes.check_constants import severity

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert severity(fp16_constant_issues(np.array(values, np.float32))) == want

