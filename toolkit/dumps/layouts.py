"""Device data layouts → the ONNX layout (ND / NCHW / NCDHW), one small registered function per format.

:data:`LAYOUTS` maps a format name (dump_data.proto ``OutputFormat`` without ``FORMAT_``) to
``convert(array, original_shape) -> Converted``: ``array`` is the dumped data reshaped to the stored (device)
shape; ``original_shape`` is the shape the framework op had (the dump's ``original_shape``, in NCHW / NCDHW
order), or None when the dump does not record it. Every function checks the dims it needs and raises
:class:`LayoutError` with a one-line reason; none allocates more than one copy of the array.

Sources of the layout definitions: the CANN documentation's "Data Formats" pages (NC1HWC0, NDC1HWC0,
FRACTAL_Z, FRACTAL_NZ) and the format-conversion scripts of the CANN compare tool (operator_cmp
``format_manager/builtin_format_convert``, e.g. FRACTAL_Z → HWCN reshapes to (C1, H, W, N1, N0, C0)).

Block sizes are read from the dims, never assumed: C0 (and N0) is the last stored dim (16 for float16 and 8 or
16 for float32, depending on the toolchain; 32 for int8), M0 the one before it. Padding (C up to C1*C0, N up to
N1*N0, M up to M1*M0) is removed using the original shape; without it the padded size is kept and
:attr:`Converted.note` says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Shape = tuple[int, ...]


class LayoutError(ValueError):
    """The stored shape and the original shape do not fit the format (one-line reason)."""


@dataclass(frozen=True)
class Converted:
    """A converted array and, when something had to be assumed, a note saying what."""

    array: np.ndarray
    note: str = ""


#: format name -> convert(array in the device shape, original shape or None) -> Converted
LAYOUTS: dict[str, Callable[[np.ndarray, Shape | None], Converted]] = {}


def register(*names: str):
    """Decorator: register a conversion under each of ``names``."""

    def deco(fn):
        for name in names:
            LAYOUTS[name] = fn
        return fn

    return deco


def _rank(arr: np.ndarray, rank: int, fmt: str, dims: str) -> None:
    if arr.ndim != rank:
        raise LayoutError(f"{fmt} data needs a {rank}-D stored shape {dims}, got {_fmt(arr.shape)}")


def _fmt(shape) -> str:
    return "(" + ",".join(str(d) for d in shape) + ")"


def _fit(full: np.ndarray, original: Shape | None, fmt: str, note: str) -> Converted:
    """``full`` (already cropped) as ``original``: equal shapes, or an original of another rank holding the same
    elements (e.g. (N, C) stored as NC1HWC0 with H = W = 1) reshaped; else a LayoutError (a same-rank shape
    that differs is never reshaped: that would silently mix up dims)."""
    if original is None:
        return Converted(full, note)
    if tuple(full.shape) == tuple(original):
        return Converted(full)
    if len(full.shape) != len(original) and math.prod(full.shape) == math.prod(original):
        return Converted(full.reshape(original))
    raise LayoutError(f"{fmt} data converts to {_fmt(full.shape)}, which does not hold the original shape "
                      f"{_fmt(original)}")


def _channels(original: Shape | None, blocks: int, c0: int, fmt: str, axis: int = 1) -> int:
    """C from the original shape (its dim ``axis``), checked against C1 = ceil(C / C0); C1*C0 without it."""
    if original is None:
        return blocks * c0
    if len(original) <= axis:
        raise LayoutError(f"{fmt} data: the original shape {_fmt(original)} has no C dim (axis {axis})")
    c = original[axis]
    if -(-c // c0) != blocks:
        raise LayoutError(f"{fmt} data: C1={blocks} blocks of C0={c0} do not hold C={c} of the original shape "
                          f"{_fmt(original)} (expected C1={-(-c // c0)})")
    return c


@register("NCHW", "ND", "NCDHW", "NC", "RESERVED")
def identity(arr: np.ndarray, original: Shape | None) -> Converted:
    """Already in the ONNX layout: returned as stored (reshaped to the original shape when its size agrees).
    ``RESERVED`` is what the CANN tool writes for an array converted from numpy."""
    return _fit(arr, original, "ND", "")


@register("NHWC")
def nhwc(arr: np.ndarray, original: Shape | None) -> Converted:
    """(N, H, W, C) → (N, C, H, W): a transpose; the original shape (NCHW) must equal the result."""
    _rank(arr, 4, "NHWC", "(N,H,W,C)")
    return _fit(arr.transpose(0, 3, 1, 2), original, "NHWC", "")


@register("NC1HWC0")
def nc1hwc0(arr: np.ndarray, original: Shape | None) -> Converted:
    """(N, C1, H, W, C0) → (N, C, H, W), C ≤ C1*C0 from the original shape (C0 = the last stored dim).

    Element (n, c, h, w) is stored at [n, c // C0, h, w, c % C0]; channels C..C1*C0-1 are padding.
    """
    _rank(arr, 5, "NC1HWC0", "(N,C1,H,W,C0)")
    n, c1, h, w, c0 = arr.shape
    c = _channels(original, c1, c0, "NC1HWC0")
    full = arr.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)[:, :c]
    note = "" if original else f"no original shape: C kept padded to C1*C0={c1 * c0}"
    return _fit(full, original, "NC1HWC0", note)


@register("NDC1HWC0")
def ndc1hwc0(arr: np.ndarray, original: Shape | None) -> Converted:
    """(N, D, C1, H, W, C0) → (N, C, D, H, W) (NCDHW), C ≤ C1*C0 from the original shape.

    Element (n, c, d, h, w) is stored at [n, d, c // C0, h, w, c % C0].
    """
    _rank(arr, 6, "NDC1HWC0", "(N,D,C1,H,W,C0)")
    n, d, c1, h, w, c0 = arr.shape
    c = _channels(original, c1, c0, "NDC1HWC0")
    full = arr.transpose(0, 2, 5, 1, 3, 4).reshape(n, c1 * c0, d, h, w)[:, :c]
    note = "" if original else f"no original shape: C kept padded to C1*C0={c1 * c0}"
    return _fit(full, original, "NDC1HWC0", note)


@register("FRACTAL_Z")
def fractal_z(arr: np.ndarray, original: Shape | None) -> Converted:
    """Convolution weights (C1*H*W, N1, N0, C0) → (N, C, H, W).

    Weight (n, c, h, w) is stored at [(c // C0)*H*W + h*W + w, n // N0, n % N0, c % C0] (C1 outermost, then
    H, W); N is padded to N1*N0 (N0 = 16) and C to C1*C0. H and W come from the original shape (N, C, H, W);
    without it H = W = 1 is assumed (a 1x1 / fully-connected weight) and the padding is kept.
    """
    _rank(arr, 4, "FRACTAL_Z", "(C1*H*W,N1,N0,C0)")
    c1hw, n1, n0, c0 = arr.shape
    if original is None:
        full = arr.transpose(1, 2, 0, 3).reshape(n1 * n0, c1hw * c0, 1, 1)
        return Converted(full, f"no original shape: H=W=1 assumed, N kept padded to {n1 * n0} and C to {c1hw * c0}")
    if len(original) != 4:
        raise LayoutError(f"FRACTAL_Z data: the original shape {_fmt(original)} is not 4-D (N,C,H,W)")
    n, c, h, w = original
    if h * w == 0 or c1hw % (h * w):
        raise LayoutError(f"FRACTAL_Z data: stored dim 0 = {c1hw} is not C1*H*W for H={h}, W={w}")
    c1 = c1hw // (h * w)
    c = _channels(original, c1, c0, "FRACTAL_Z")
    if -(-n // n0) != n1:
        raise LayoutError(f"FRACTAL_Z data: N1={n1} blocks of N0={n0} do not hold N={n} (expected {-(-n // n0)})")
    full = arr.reshape(c1, h, w, n1, n0, c0).transpose(3, 4, 0, 5, 1, 2).reshape(n1 * n0, c1 * c0, h, w)
    return Converted(full[:n, :c])


@register("FRACTAL_NZ")
def fractal_nz(arr: np.ndarray, original: Shape | None) -> Converted:
    """(..., N1, M1, M0, N0) → (..., M, N), the padding of M up to M1*M0 and N up to N1*N0 removed.

    Element (..., m, n) is stored at [..., n // N0, m // M0, m % M0, n % N0] (M0 = 16, N0 = C0, the last
    stored dim). M and N are the last two original dims (an original of rank 1, (N,), is (1, N)); without an
    original shape the padded (M1*M0, N1*N0) is kept.
    """
    if arr.ndim < 4:
        raise LayoutError(f"FRACTAL_NZ data needs a stored shape (...,N1,M1,M0,N0) of rank >= 4, got {_fmt(arr.shape)}")
    *batch, n1, m1, m0, n0 = arr.shape
    lead = len(batch)
    full = arr.transpose(*range(lead), lead + 1, lead + 2, lead, lead + 3).reshape(*batch, m1 * m0, n1 * n0)
    if original is None:
        return Converted(full, f"no original shape: kept padded to (M,N)=({m1 * m0},{n1 * n0})")
    m, n = (1, original[0]) if len(original) == 1 else original[-2:]
    if -(-m // m0) != m1 or -(-n // n0) != n1:
        raise LayoutError(f"FRACTAL_NZ data: blocks (N1={n1},M1={m1}) of ({m0},{n0}) do not hold (M,N)=({m},{n}) of "
                          f"the original shape {_fmt(original)}")
    return _fit(full[..., :m, :n], original, "FRACTAL_NZ", "")


def convert(fmt: str, arr: np.ndarray, original: Shape | None) -> Converted:
    """``arr`` (stored in format ``fmt``) in the ONNX layout. Raises LayoutError for a format with no
    registered conversion (naming the ones that have one) or dims that do not fit."""
    fn = LAYOUTS.get(fmt)
    if fn is None:
        raise LayoutError(f"format {fmt} is not converted by npuscope (converted: {', '.join(sorted(LAYOUTS))}); "
                          f"convert it with msaccucmp.py convert -f NCHW")
    return fn(arr, tuple(original) if original is not None else None)
