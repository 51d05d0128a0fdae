"""Bounded reading of ``.npy`` headers and of the array data they declare (numpy.lib.format, NEP 1).

:func:`read_npy_header` reads only the header (at most 12 + :data:`MAX_HEADER_BYTES` bytes) and parses it
itself with :func:`ast.literal_eval`, so a truncated or malformed header is one :class:`NpyFormatError` with a
short reason instead of the ``tokenize.TokenError``, ``SyntaxError``, ``ValueError`` or ``NotImplementedError``
numpy's own reader lets escape. :func:`check_fits_memory` refuses a declared size this machine cannot hold
(before anything is allocated), and :func:`array_from_reader` allocates exactly the declared bytes and fills
them from a ``readinto``-like callable, never reading past them.
"""

from __future__ import annotations

import ast
import math
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: The longest header read (bytes). numpy's own default for np.load (``max_header_size``) is 10000.
MAX_HEADER_BYTES = 10000
MAGIC = b"\x93NUMPY"
_KEYS = {"descr", "fortran_order", "shape"}
_MAX_DIMS, _INTP_MAX = 64, int(np.iinfo(np.intp).max)
#: Share of this machine's physical memory one file's arrays may take (as toolkit.engine.check_host_memory).
MEMORY_SHARE = 0.8


class NpyFormatError(Exception):
    """A ``.npy`` header or body that cannot be read; ``str()`` is a short reason without the file's name."""


@dataclass(frozen=True)
class NpyHeader:
    """A parsed ``.npy`` header: ``shape``, ``fortran_order``, ``dtype`` and ``data_offset`` (bytes before the
    data: magic, version, header length and header). ``count`` elements, ``nbytes`` data bytes."""

    shape: tuple[int, ...]
    fortran_order: bool
    dtype: np.dtype
    data_offset: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


def read_exact(read: Callable[[int], bytes], n: int, what: str) -> bytes:
    """``n`` bytes from ``read`` (which may return fewer per call); NpyFormatError naming ``what`` when the
    stream ends first."""
    parts, got = [], 0
    while got < n:
        part = read(n - got)
        if not part:
            raise NpyFormatError(f"is truncated: its {what} ends after {got} of {n} bytes")
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def read_npy_header(read: Callable[[int], bytes]) -> NpyHeader:
    """Read and check the header of a ``.npy`` stream (``read(n) -> bytes``), reading no further.

    Format versions 1.0 (2-byte header length, latin-1), 2.0 (4-byte, latin-1) and 3.0 (4-byte, UTF-8).
    Object (pickled) dtypes are refused.

    Raises:
        NpyFormatError: no ``\\x93NUMPY`` magic, an unknown version, a header longer than
            :data:`MAX_HEADER_BYTES`, a truncated header, or one that is not the dict numpy writes
            (``descr``, ``fortran_order``, ``shape``) with a valid dtype and non-negative integer dims.
    """
    magic = read_exact(read, 8, ".npy magic")
    if not magic.startswith(MAGIC):
        raise NpyFormatError("is not a valid .npy array (it does not start with the .npy magic \\x93NUMPY)")
    version = (magic[6], magic[7])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise NpyFormatError(f"has an unknown .npy format version {version[0]}.{version[1]} (numpy writes 1.0-3.0)")
    size_bytes = 2 if version == (1, 0) else 4
    (hlen,) = struct.unpack("<H" if size_bytes == 2 else "<I", read_exact(read, size_bytes, ".npy header length"))
    if hlen > MAX_HEADER_BYTES:
        raise NpyFormatError(f"has a .npy header of {hlen} bytes, more than the {MAX_HEADER_BYTES} read")
    raw = read_exact(read, hlen, ".npy header")
    try:
        text = raw.decode("utf-8" if version == (3, 0) else "latin1")
    except UnicodeDecodeError:
        raise NpyFormatError("has a .npy header that is not UTF-8 text (format 3.0)") from None
    shape, fortran, dtype = _parse_header(text)
    return NpyHeader(shape, fortran, dtype, 8 + size_bytes + hlen)


def _parse_header(text: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    value = _literal(text)
    if value is None and re.search(r"\d[lL]\b", text):  # Python 2 longs such as (3L,), which numpy also reads
        value = _literal(re.sub(r"(\d)[lL]\b", r"\1", text))
    if not isinstance(value, dict):
        raise NpyFormatError(f"has a .npy header that is not a dict literal ({_clip(text)!r})")
    if set(value) != _KEYS:
        raise NpyFormatError(f"has a .npy header with keys {sorted(map(str, value))}, expected {sorted(_KEYS)}")
    shape, fortran = value["shape"], value["fortran_order"]
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise NpyFormatError(f"has a .npy header whose shape {_clip(repr(shape))} is not a tuple of non-negative ints")
    if not isinstance(fortran, bool):
        raise NpyFormatError(f"has a .npy header whose fortran_order {_clip(repr(fortran))} is not True or False")
    try:
        dtype = np.lib.format.descr_to_dtype(value["descr"])
    except (ValueError, TypeError, KeyError, IndexError, NotImplementedError, OverflowError, RecursionError):
        raise NpyFormatError(f"has a .npy header whose descr {_clip(repr(value['descr']))} is not a valid dtype") from None
    if dtype.hasobject:
        raise NpyFormatError("is an object (pickled) array, refused for safety")
    if dtype.subdtype is not None:
        raise NpyFormatError(f"has a .npy header whose descr {_clip(repr(value['descr']))} is a subarray dtype, which "
                             "numpy never writes (it puts the sub-dims into the shape)")
    if len(shape) > _MAX_DIMS:
        raise NpyFormatError(f"has a .npy header with {len(shape)} dims, more than numpy's {_MAX_DIMS}")
    if math.prod(d for d in shape if d) * max(dtype.itemsize, 1) > _INTP_MAX:  # numpy's own limit, zeros aside
        raise NpyFormatError(f"has a .npy header whose shape {_clip(repr(shape))} is too large for any array")
    return shape, fortran, dtype


def _literal(text: str):
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


# ------------------------------------------------------------------------------------------------- memory
def host_memory_bytes() -> int:
    """Physical memory of this machine in bytes (0 when unknown)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def memory_limit_bytes() -> int:
    """The most bytes of arrays one input file may declare: :data:`MEMORY_SHARE` of physical memory (0 when
    the machine does not say: then no limit is applied)."""
    return int(host_memory_bytes() * MEMORY_SHARE)


def check_fits_memory(nbytes: int, verb: str = "declares") -> None:
    """NpyFormatError when ``nbytes`` is more than :func:`memory_limit_bytes`; the message ("<verb> N data
    bytes (...), more than 80% of this machine's ... memory") gives both."""
    limit = memory_limit_bytes()
    if limit and nbytes > limit:
        raise NpyFormatError(f"{verb} {nbytes} data bytes ({_human(nbytes)}), more than {MEMORY_SHARE:.0%} of "
                             f"this machine's {_human(host_memory_bytes())} memory")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# ------------------------------------------------------------------------------------------------- data
def array_from_reader(header: NpyHeader, readinto: Callable[[memoryview], int]) -> np.ndarray:
    """The array ``header`` declares, filled from ``readinto(view) -> bytes written`` (0 at end of stream).

    Exactly ``header.nbytes`` bytes are allocated and read (as numpy.lib.format.read_array lays them out:
    C order, or Fortran order when the header says so; byte order as stored). Raises NpyFormatError when the
    stream ends before the declared data.
    """
    count = header.count
    arr = np.empty(count, header.dtype)
    if header.nbytes:
        view = memoryview(arr.view(np.uint8)).cast("B")
        got = 0
        while got < len(view):
            n = readinto(view[got:])
            if not n:
                raise NpyFormatError(f"is truncated: the header declares {header.nbytes} data bytes, the data ends "
                                     f"after {got}")
            got += n
    if header.fortran_order:
        return arr.reshape(header.shape[::-1]).transpose()
    return arr.reshape(header.shape)
