"""Bounded reading of ``.npz`` archives (zip files of ``<name>.npy`` members, as ``np.savez`` writes them).

Everything a member declares is checked before its data is inflated, so a zip bomb costs neither time nor
memory: the member's name, its compression method (stored or deflate only, PKWARE APPNOTE 4.4.5), that the
compressed members do not declare more than :data:`BOMB_BYTES` at a ratio over :data:`BOMB_RATIO` (only a
bomb or near-constant data does: save those uncompressed), that its compressed bytes lie inside the archive, its ``.npy`` header (read alone, bounded:
:func:`toolkit.inputs.npyheader.read_npy_header`), that the header's data size (shape × itemsize) equals
the member's declared uncompressed size, that the arrays of the whole file fit in this machine's memory, and
that deflate can produce the declared size from the compressed size at all (at most ~1032:1).

Data is then inflated member by member with :mod:`zlib` straight into the array numpy allocates for it, never
past the declared size: a member whose stream inflates to more than it declares is refused as soon as one byte
more comes out, and one that inflates to less, or fails its CRC-32, is refused too.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np

from toolkit.core.errors import InputError
from toolkit.core.textfile import NotRegularFile, open_regular
from toolkit.inputs.npyheader import (
    NpyFormatError,
    NpyHeader,
    array_from_reader,
    check_fits_memory,
    read_npy_header,
)

#: Compression methods by number (APPNOTE 4.4.5), for messages. Only 0 and 8 are read.
_METHODS = {0: "stored", 1: "shrink", 6: "implode", 8: "deflate", 9: "deflate64", 12: "bzip2", 14: "lzma",
            18: "IBM TERSE", 19: "IBM LZ77", 93: "zstandard", 95: "xz", 96: "JPEG", 97: "WavPack", 98: "PPMd",
            99: "AE-x (WinZip AES encryption)"}
_READ = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
#: Deflate's largest expansion: a 258-byte match per ~2 bits of code gives about 1032:1 (RFC 1951); slack for
#: the block headers of a tiny member.
DEFLATE_MAX_RATIO, _RATIO_SLACK = 1032, 1024
#: Compressed members declaring more than BOMB_BYTES in all may inflate at most BOMB_RATIO times their size.
#: Real tensors compress far less (float data 1-10:1); a zip bomb's 6 MB would otherwise allocate GBs.
BOMB_BYTES, BOMB_RATIO = 64 << 20, 50
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # APPNOTE 4.3.7: 30 bytes, then the name and the extra field
_CHUNK = 1 << 20
FIX = "re-save the inputs with np.savez(path, name=array)"


@dataclass(frozen=True)
class NpzMember:
    """One checked member: its array ``key`` (the name without ``.npy``), zip ``info`` and .npy ``header``."""

    key: str
    info: zipfile.ZipInfo
    header: NpyHeader


def read_npz(src: str | os.PathLike | bytes, source: str) -> dict[str, np.ndarray]:
    """{key: array} of an ``.npz`` file (a path) or of its bytes, every member checked first (module doc).

    Args:
        src: the file (read only when it is a regular file) or its bytes.
        source: how messages name it, e.g. ``"npz file 'x.npz'"`` or ``"input '0001.npz'"``.

    Returns:
        the arrays in archive order, fully read, in the byte order stored (no pickle: object arrays refused).

    Raises:
        InputError: one line naming ``source`` and, for a member, its name: not a zip archive, a member that is
            not ``<name>.npy``, encrypted, compressed otherwise than stored/deflate (the method named), stored
            outside the archive, a truncated or malformed .npy header, a header whose size disagrees with the
            member's, arrays larger than this machine's memory (byte counts given), a stream that inflates to
            more or fewer bytes than declared or fails its CRC.
    """
    with _open(src, source) as fh:
        members = _scan(fh, source)
        out = {}
        for m in members:
            try:
                stream = _MemberStream(fh, m.info)
                read_npy_header(stream.read)
                out[m.key] = array_from_reader(m.header, stream.readinto)
                stream.finish()
            except NpyFormatError as exc:
                raise _member_error(source, m.info.filename, exc) from None
        return out


def npz_headers(src: str | os.PathLike | bytes, source: str) -> dict[str, NpyHeader]:
    """{key: header} of an ``.npz``, after every check :func:`read_npz` makes before reading data (no data is
    inflated beyond the headers). Raises InputError as :func:`read_npz`."""
    with _open(src, source) as fh:
        return {m.key: m.header for m in _scan(fh, source)}


# ---------------------------------------------------------------------------------------------- the checks
def _open(src, source: str):
    if isinstance(src, (bytes, bytearray, memoryview)):
        return io.BytesIO(src)

    try:
        return open_regular(src)
    except NotRegularFile as exc:
        raise InputError(f"{source} is {exc}; pass an .npz file written by np.savez") from None
    except OSError as exc:
        raise InputError(f"{source} cannot be read ({exc.strerror or type(exc).__name__}); check the file") from None


def _scan(fh, source: str) -> list[NpzMember]:
    """Every member checked from the central directory and its .npy header (module doc). Raises InputError."""
    size = fh.seek(0, os.SEEK_END)
    fh.seek(0)
    try:
        zf = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, struct.error) as exc:
        raise InputError(f"{source} cannot be read as .npz ({_first_line(exc)}); {FIX}") from None
    members, seen, total = [], set(), 0
    inflated = deflated = 0
    for info in zf.infolist():
        name = info.filename
        _check_entry(info, source)
        if info.compress_type == zipfile.ZIP_DEFLATED:
            inflated, deflated = inflated + info.file_size, deflated + info.compress_size
            _check_ratio(inflated, deflated, source, name, alone=inflated == info.file_size)
        key = name[:-4]
        if key in seen:
            raise InputError(f"{source}: member {name!r} appears twice in the archive; {FIX}")
        seen.add(key)
        try:
            header = read_npy_header(_MemberStream(fh, info, size).read)
            data = info.file_size - header.data_offset
            if data != header.nbytes:
                raise NpyFormatError(
                    f"has a .npy header declaring {header.nbytes} data bytes (shape {header.shape}, "
                    f"{header.dtype.str}) but its zip entry declares {max(data, 0)} ({info.file_size} uncompressed "
                    f"bytes in all)")
            total += header.nbytes
            check_fits_memory(total, "declares" if total == header.nbytes else "brings the file's arrays to")
            if (info.compress_type == zipfile.ZIP_DEFLATED
                    and info.file_size > info.compress_size * DEFLATE_MAX_RATIO + _RATIO_SLACK):
                raise NpyFormatError(
                    f"declares {info.file_size} uncompressed bytes from {info.compress_size} compressed bytes, "
                    f"more than deflate can expand (at most {DEFLATE_MAX_RATIO}:1): a zip bomb or a corrupt archive")
        except NpyFormatError as exc:
            raise _member_error(source, name, exc) from None
        members.append(NpzMember(key, info, header))
    return members


def _check_entry(info: zipfile.ZipInfo, source: str) -> None:
    """The name, encryption, method and sizes of a member, from the central directory alone."""
    name = info.filename
    where = f"{source}: member {name!r}"
    if not name.endswith(".npy") or info.is_dir():
        raise InputError(f"{where} is not a .npy array (an npz holds only <name>.npy members); {FIX}")
    if info.flag_bits & 0x1:
        raise InputError(f"{where} is encrypted, which is not read; {FIX}")
    if info.compress_type not in _READ:
        method = _METHODS.get(info.compress_type, "an unknown method")
        raise InputError(f"{where} is compressed with {method} (zip method {info.compress_type}); only stored and "
                         f"deflate members are read: {FIX} or np.savez_compressed")
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise InputError(f"{where} is stored uncompressed but declares {info.file_size} bytes and holds "
                         f"{info.compress_size}: the archive is corrupt; {FIX}")


def _check_ratio(inflated: int, deflated: int, source: str, name: str, alone: bool) -> None:
    """Refuse a file whose deflate members so far declare more than :data:`BOMB_BYTES` that would inflate more
    than :data:`BOMB_RATIO` times: only near-constant data compresses so well, and a zip bomb does."""
    if inflated > BOMB_BYTES and inflated > BOMB_RATIO * deflated:
        what = "declares" if alone else "brings the archive's compressed members to"
        raise InputError(f"{source}: member {name!r} {what} {inflated} uncompressed "
                         f"bytes from {deflated} compressed bytes (ratio {inflated / max(deflated, 1):.0f}:1, more than "
                         f"{BOMB_RATIO}:1 over {BOMB_BYTES >> 20} MiB): refused as a likely zip bomb; save large "
                         "near-constant arrays uncompressed with np.savez(path, name=array)")


def _member_error(source: str, name: str, exc: NpyFormatError) -> InputError:
    key = name[:-4] if name.endswith(".npy") else name
    return InputError(f"{source}: array {key!r}: member {name!r} {exc}; {FIX}")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


# ---------------------------------------------------------------------------------------------- inflating
class _MemberStream:
    """The uncompressed bytes of one member, read from the archive ``fh`` and never more than it declares.

    ``read(n)`` / ``readinto(view)`` stop at the declared size; :meth:`finish` then refuses a stream that holds
    more (one more byte is inflated to see), that ended early, or whose CRC-32 differs. Raises NpyFormatError.
    """

    def __init__(self, fh, info: zipfile.ZipInfo, archive_size: int | None = None):
        self._fh, self._info = fh, info
        fh.seek(info.header_offset)
        local = fh.read(_LOCAL_HEADER.size)
        if len(local) < _LOCAL_HEADER.size or not local.startswith(b"PK\x03\x04"):
            raise NpyFormatError(f"has no local file header at offset {info.header_offset}: the archive is corrupt")
        name_len, extra_len = _LOCAL_HEADER.unpack(local)[-2:]
        self._pos = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        if archive_size is not None and self._pos + info.compress_size > archive_size:
            raise NpyFormatError(f"declares {info.compress_size} compressed bytes from offset {self._pos}, past the "
                                 f"end of the {archive_size}-byte archive: it is truncated or corrupt")
        self._left_in, self._left_out = info.compress_size, info.file_size
        self._inflate = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
        self._tail, self._crc = b"", 0

    def _raw(self, n: int) -> bytes:
        self._fh.seek(self._pos)
        data = self._fh.read(min(n, self._left_in))
        self._pos += len(data)
        self._left_in -= len(data)
        return data

    def _produce(self, n: int) -> bytes:
        """Up to ``n`` uncompressed bytes (b'' at the end of the stream)."""
        d = self._inflate
        if d is None:
            return self._raw(n)
        try:
            while True:
                if self._tail:
                    data = d.decompress(self._tail, n)
                elif d.eof or not self._left_in:
                    return b""
                else:
                    data = d.decompress(self._raw(_CHUNK), n)
                self._tail = d.unconsumed_tail
                if data:
                    return data
        except zlib.error as exc:
            raise NpyFormatError(f"is corrupt (its deflate stream: {exc})") from None

    def read(self, n: int) -> bytes:
        n = min(n, self._left_out, _CHUNK)
        data = self._produce(n) if n > 0 else b""
        self._left_out -= len(data)
        self._crc = zlib.crc32(data, self._crc)
        return data

    def readinto(self, view: memoryview) -> int:
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def finish(self) -> None:
        size = self._info.file_size
        if self._left_out:
            raise NpyFormatError(f"is truncated: it inflates to {size - self._left_out} of the {size} bytes it declares")
        if self._produce(1):
            raise NpyFormatError(f"inflates to more than the {size} bytes it declares: a zip bomb or a corrupt archive")
        if self._inflate is not None and not self._inflate.eof:
            raise NpyFormatError("is truncated: its deflate stream does not end")
        if self._crc != self._info.CRC:
            raise NpyFormatError(f"fails its CRC-32 check (0x{self._crc:08x}, the archive says 0x{self._info.CRC:08x}):"
                                 " the archive is corrupt")
