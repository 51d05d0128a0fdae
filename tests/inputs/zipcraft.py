"""Hand-written zip archives for the npz reader's tests: members whose central-directory sizes, method and CRC
are whatever the test says (zipfile itself only writes honest ones). Format: PKWARE APPNOTE 4.3."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

_U32 = 0xFFFFFFFF


@dataclass
class Member:
    """``payload`` is written as the member's (compressed) data; ``file_size`` / ``crc`` default to the honest
    values for a stored member (``method`` 0)."""

    name: str
    payload: bytes
    method: int = 0
    file_size: int | None = None
    crc: int | None = None
    flags: int = 0


def npy_bytes(header: str, data: bytes = b"", version: tuple[int, int] = (1, 0)) -> bytes:
    """A .npy stream with the header text ``header`` (padded as numpy does) followed by ``data``."""
    text = header.encode("latin1")
    size = 2 if version == (1, 0) else 4
    pad = (-(8 + size + len(text) + 1)) % 64
    text += b" " * pad + b"\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack("<H" if size == 2 else "<I", len(text)) + text + data


def npy_of(arr: np.ndarray) -> bytes:
    """``np.save``'s bytes for ``arr``."""
    import io

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def deflate(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def zeros_bomb(prefix: bytes, mib: int) -> bytes:
    """A raw deflate stream of ``prefix`` then ``mib`` MiB of zeros, built in ~1 KB per MiB without
    compressing the zeros ``mib`` times: after a full flush the compressor's state is reset, so every MiB of
    zeros compresses to the same bytes."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    return head + block * mib + c.flush()


def raw_zip(members: list[Member]) -> bytes:
    """The archive's bytes: local headers and data, then the central directory (zip64 extra fields where a
    size does not fit 32 bits) and the end record."""
    out, central = bytearray(), bytearray()
    for m in members:
        name = m.name.encode("utf-8")
        fsize = len(m.payload) if m.file_size is None else m.file_size
        csize = len(m.payload)
        crc = (zlib.crc32(m.payload) if m.crc is None else m.crc) & _U32
        big = fsize >= _U32 or csize >= _U32
        sizes = (_U32, _U32) if big else (csize, fsize)
        extra = struct.pack("<HHQQ", 1, 16, fsize, csize) if big else b""
        offset = len(out)
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 45, m.flags | 0x800, m.method, 0, 0x21, crc, *sizes,
                           len(name), len(extra)) + name + extra + m.payload
        central += struct.pack("<4s4B4HL2L5H2L", b"PK\x01\x02", 45, 3, 45, 0, m.flags | 0x800, m.method, 0, 0x21,
                               crc, *sizes, len(name), len(extra), 0, 0, 0, 0, offset) + name + extra
    n, cd_offset = len(members), len(out)
    out += central + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, len(central), cd_offset, 0)
    return bytes(out)
