"""Numpy references of the device layouts (ND -> device), shared by test_layouts and test_raw.

Each is written from the layout definitions (CANN "Data Formats": pad, reshape, transpose) and checked element
by element against the index formula in test_layouts.test_references_follow_the_index_formulas.
"""

from __future__ import annotations

import math

import numpy as np


def ceil(a: int, b: int) -> int:
    return -(-a // b)


def values(shape, dtype) -> np.ndarray:
    """Distinct values (exact in float16 up to 2048) so that any misplaced element changes the result."""
    n = math.prod(shape)
    return ((np.arange(n) % 2000) + 1).reshape(shape).astype(dtype)


def ref_nc1hwc0(x: np.ndarray, c0: int) -> np.ndarray:
    n, c, h, w = x.shape
    c1 = ceil(c, c0)
    padded = np.zeros((n, c1 * c0, h, w), x.dtype)
    padded[:, :c] = x
    return padded.reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2)


def ref_ndc1hwc0(x: np.ndarray, c0: int) -> np.ndarray:
    n, c, d, h, w = x.shape
    c1 = ceil(c, c0)
    padded = np.zeros((n, c1 * c0, d, h, w), x.dtype)
    padded[:, :c] = x
    return padded.reshape(n, c1, c0, d, h, w).transpose(0, 3, 1, 4, 5, 2)


def ref_fractal_z(x: np.ndarray, c0: int, n0: int = 16) -> np.ndarray:
    n, c, h, w = x.shape
    c1, n1 = ceil(c, c0), ceil(n, n0)
    padded = np.zeros((n1 * n0, c1 * c0, h, w), x.dtype)
    padded[:n, :c] = x
    return padded.reshape(n1, n0, c1, c0, h, w).transpose(2, 4, 5, 0, 1, 3).reshape(c1 * h * w, n1, n0, c0)


def ref_fractal_nz(x: np.ndarray, n0: int, m0: int = 16) -> np.ndarray:
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    *batch, m, n = x2.shape
    m1, n1 = ceil(m, m0), ceil(n, n0)
    padded = np.zeros((*batch, m1 * m0, n1 * n0), x.dtype)
    padded[..., :m, :n] = x2
    lead = len(batch)
    return padded.reshape(*batch, m1, m0, n1, n0).transpose(*range(lead), lead + 2, lead, lead + 1, lead + 3)


def ref_nhwc(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 2, 3, 1)
