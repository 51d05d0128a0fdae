"""ONNX layout (ND / NCHW / NCDHW) → device data layouts, one small registered function per format: the inverse
of :mod:`toolkit.dumps.layouts`, used to write a simulated run as the raw dumps a device writes
(:mod:`toolkit.dumps.export`).

:data:`TO_DEVICE` maps a format name (dump_data.proto ``OutputFormat`` without ``FORMAT_``) to
``lay_out(array, c0) -> np.ndarray | None``: ``array`` in the framework shape, ``c0`` the block size of the
last stored dim (16 for float16 / float32, 32 for int8 on the device); the result is the stored array, padding
zero-filled, or None when the format cannot hold a tensor of that rank (the caller then writes it as ND).
Ranks the device pads: a tensor of rank 2 or 3 is laid out as NCHW with trailing H / W of 1 ((N, C) → (N, C, 1,
1)), rank 2-4 as NCDHW with D = 1 for NDC1HWC0; FRACTAL_Z takes 4-D weights only; FRACTAL_NZ takes rank >= 1
(a vector (N,) is the matrix (1, N)). The reader recovers the original rank from the recorded original shape.

Source of the layout definitions: the CANN documentation's "Data Formats" pages (as :mod:`toolkit.dumps.layouts`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: format name -> lay_out(array in the framework shape, c0) -> stored array, or None (rank not held)
TO_DEVICE: dict[str, Callable[[np.ndarray, int], np.ndarray | None]] = {}
#: the N0 / M0 block of FRACTAL_Z and FRACTAL_NZ (16 on every toolchain)
BLOCK = 16


def register(name: str):
    """Decorator: register a forward layout under ``name``."""

    def deco(fn):
        TO_DEVICE[name] = fn
        return fn

    return deco


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _as_nchw(x: np.ndarray) -> np.ndarray | None:
    """Rank 2-4 as 4-D NCHW (trailing dims of 1), else None."""
    if not 2 <= x.ndim <= 4:
        return None
    return x.reshape(x.shape + (1,) * (4 - x.ndim))


def _pad_axis(x: np.ndarray, axis: int, to: int) -> np.ndarray:
    if x.shape[axis] == to:
        return x
    shape = list(x.shape)
    shape[axis] = to
    out = np.zeros(shape, x.dtype)
    out[tuple(slice(0, d) for d in x.shape)] = x
    return out


@register("ND")
def nd(x: np.ndarray, c0: int) -> np.ndarray:
    """Stored as is."""
    return x


@register("NC1HWC0")
def nc1hwc0(x: np.ndarray, c0: int) -> np.ndarray | None:
    """(N, C, H, W) → (N, C1, H, W, C0), C padded to C1*C0: element (n, c, h, w) at [n, c // C0, h, w, c % C0]."""
    x4 = _as_nchw(x)
    if x4 is None:
        return None
    n, c, h, w = x4.shape
    c1 = _ceil(c, c0)
    return _pad_axis(x4, 1, c1 * c0).reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2).copy()


@register("NDC1HWC0")
def ndc1hwc0(x: np.ndarray, c0: int) -> np.ndarray | None:
    """(N, C, D, H, W) → (N, D, C1, H, W, C0); rank 2-4 as NCDHW with D = 1 (after C)."""
    if x.ndim == 5:
        x5 = x
    else:
        x4 = _as_nchw(x)
        if x4 is None:
            return None
        x5 = x4[:, :, None]
    n, c, d, h, w = x5.shape
    c1 = _ceil(c, c0)
    return _pad_axis(x5, 1, c1 * c0).reshape(n, c1, c0, d, h, w).transpose(0, 3, 1, 4, 5, 2).copy()


@register("FRACTAL_Z")
def fractal_z(x: np.ndarray, c0: int) -> np.ndarray | None:
    """4-D (N, C, H, W) → (C1*H*W, N1, N0, C0), N0 = 16: weight (n, c, h, w) at
    [(c // C0)*H*W + h*W + w, n // N0, n % N0, c % C0]."""
    if x.ndim != 4:
        return None
    n, c, h, w = x.shape
    c1, n1 = _ceil(c, c0), _ceil(n, BLOCK)
    padded = _pad_axis(_pad_axis(x, 0, n1 * BLOCK), 1, c1 * c0)
    return padded.reshape(n1, BLOCK, c1, c0, h, w).transpose(2, 4, 5, 0, 1, 3).reshape(c1 * h * w, n1, BLOCK, c0)


@register("FRACTAL_NZ")
def fractal_nz(x: np.ndarray, c0: int) -> np.ndarray | None:
    """(..., M, N) → (..., N1, M1, M0, N0), M0 = 16, N0 = ``c0``: element (..., m, n) at
    [..., n // N0, m // M0, m % M0, n % N0]; a vector (N,) is (1, N)."""
    if x.ndim == 0:
        return None
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    *batch, m, n = x2.shape
    m1, n1 = _ceil(m, BLOCK), _ceil(n, c0)
    lead = len(batch)
    padded = _pad_axis(_pad_axis(x2, lead, m1 * BLOCK), lead + 1, n1 * c0)
    return padded.reshape(*batch, m1, BLOCK, n1, c0).transpose(*range(lead), lead + 2, lead, lead + 1,
                                                               lead + 3).copy()


@register("NHWC")
def nhwc(x: np.ndarray, c0: int) -> np.ndarray | None:
    """(N, C, H, W) → (N, H, W, C); rank 2-3 padded to 4-D first."""
    x4 = _as_nchw(x)
    return None if x4 is None else x4.transpose(0, 2, 3, 1).copy()


def default_c0(dtype: np.dtype) -> int:
    """The C0 the device uses for ``dtype``: 32 for 1-byte types, 16 otherwise."""
    return 32 if np.dtype(dtype).itemsize == 1 else 16


def lay_out(fmt: str, x: np.ndarray, c0: int | None = None) -> tuple[str, np.ndarray]:
    """(format written, stored array) of ``x`` in ``fmt``; ("ND", x) when ``fmt`` cannot hold ``x``'s rank.

    Raises:
        KeyError: ``fmt`` has no forward layout (see :data:`TO_DEVICE`).
    """
    stored = TO_DEVICE[fmt](np.asarray(x), c0 or default_c0(np.asarray(x).dtype))
    return ("ND", np.asarray(x)) if stored is None else (fmt, stored)
