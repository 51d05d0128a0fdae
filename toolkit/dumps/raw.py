"""Read raw Ascend device dump files (the files the device writes, before ``msaccucmp.py convert``).

File layout (little-endian), as the CANN compare tool reads it (operator_cmp ``dump_parse``, "big dump data")::

    uint64 H                      header length in bytes
    H bytes                       a DumpData protobuf message (toolkit.dumps.dump_proto): version, dump_time,
                                  op_name, and per input / output: data_type, format, shape, size, original_shape,
                                  and per output original_op (name, output_index of the framework op it stands for)
    each input's size bytes, in order, then each output's, then each buffer's, then each workspace's

:func:`read_header` checks everything a header declares against the file before anything is allocated: the file
holds the 8-byte length, the header fits in the file, it decodes as DumpData, every data_type and format is a
number of dump_data.proto, each tensor's size is its shape times its dtype's item size, and 8 + H + the sum of
all sizes is the file size. :func:`read_tensor` reads one tensor's bytes and converts its layout to the ONNX one
(:mod:`toolkit.dumps.layouts`). Any problem raises :class:`RawDumpError`, an InputError whose message is one
line naming the file and what is wrong. Only regular files are opened (toolkit.core.textfile.open_regular).

The writer for the same format is :mod:`toolkit.dumps.raw_writer`.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from toolkit.core.errors import InputError
from toolkit.core.textfile import NotRegularFile, open_regular

from . import layouts
from .dump_proto import DATA_TYPES, FORMATS, dump_data_class

HEADER_LENGTH_BYTES = 8


@lru_cache(maxsize=1)
def numpy_dtypes() -> dict[str, np.dtype]:
    """OutputDataType name -> little-endian numpy dtype, for the types npuscope reads (bfloat16 and float8 via
    ml_dtypes). Others (strings, quantised, sub-byte, 6/4-bit floats) have no entry. Built once; do not modify."""
    import ml_dtypes

    table = {"DT_FLOAT": "<f4", "DT_FLOAT16": "<f2", "DT_DOUBLE": "<f8", "DT_INT8": "i1", "DT_UINT8": "u1",
             "DT_INT16": "<i2", "DT_UINT16": "<u2", "DT_INT32": "<i4", "DT_UINT32": "<u4", "DT_INT64": "<i8",
             "DT_UINT64": "<u8", "DT_BOOL": "?", "DT_COMPLEX64": "<c8", "DT_COMPLEX128": "<c16"}
    out = {k: np.dtype(v) for k, v in table.items()}
    for name, attr in (("DT_BF16", "bfloat16"), ("DT_FLOAT8_E5M2", "float8_e5m2"),
                       ("DT_FLOAT8_E4M3FN", "float8_e4m3fn"), ("DT_FLOAT8_E8M0", "float8_e8m0fnu")):
        if hasattr(ml_dtypes, attr):
            out[name] = np.dtype(getattr(ml_dtypes, attr))
    return out


class RawDumpError(InputError):
    """A raw dump that cannot be read; ``str()`` is ``raw dump '<file>': <reason>`` (one line)."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"raw dump '{path}': {reason}")


@dataclass(frozen=True)
class RawTensor:
    """One input or output a raw dump's header declares.

    Attributes:
        role: "input" or "output"; index: its position among them (0-based).
        data_type: the OutputDataType name ("DT_FLOAT16"); format: the OutputFormat name without ``FORMAT_``.
        shape: the stored (device) shape; original_shape: the framework op's shape, None when not recorded.
        size: bytes of data; offset: where they start in the file (bytes).
        original_name / original_index: the framework op (e.g. the ONNX node) this output stands for and its
            output index ("" / 0 when not recorded; inputs have none); original_format: that op's format name.
    """

    role: str
    index: int
    data_type: str
    format: str
    shape: tuple[int, ...]
    original_shape: tuple[int, ...] | None
    size: int
    offset: int
    original_name: str = ""
    original_index: int = 0
    original_format: str = "NCHW"


@dataclass(frozen=True)
class RawDump:
    """A raw dump's header: ``op_name`` (the device op), ``version``, ``dump_time`` (µs), its inputs and
    outputs in file order, and the file size it was checked against (bytes)."""

    path: Path
    version: str
    dump_time: int
    op_name: str
    inputs: tuple[RawTensor, ...]
    outputs: tuple[RawTensor, ...]
    file_size: int


def _fmt(shape) -> str:
    return "(" + ",".join(str(d) for d in shape) + ")"


def read_header(path: str | os.PathLike) -> RawDump:
    """Read and check the header of the raw dump at ``path`` (see the module docstring for every check).

    Raises:
        RawDumpError: not a regular file, shorter than 8 bytes, header length beyond the file, not a DumpData
            message, an unknown data_type / format number, a size that is not shape x item size, or sizes that
            do not add up to the file size.
    """
    from google.protobuf.message import DecodeError


    path = Path(path)
    try:
        with open_regular(path) as fh:
            file_size = os.fstat(fh.fileno()).st_size
            if file_size < HEADER_LENGTH_BYTES:
                raise RawDumpError(path, f"truncated: {file_size} byte(s), less than the 8-byte header length")
            (hlen,) = struct.unpack("<Q", fh.read(HEADER_LENGTH_BYTES))
            if hlen > file_size - HEADER_LENGTH_BYTES:
                raise RawDumpError(path, f"header length {hlen} exceeds the {file_size - HEADER_LENGTH_BYTES} "
                                         f"byte(s) after the 8-byte length field (truncated or not a raw dump)")
            content = fh.read(hlen)
    except NotRegularFile as exc:
        raise RawDumpError(path, str(exc)) from None
    except OSError as exc:
        raise RawDumpError(path, f"cannot be read ({type(exc).__name__}: {exc.strerror or exc})") from None
    msg = dump_data_class()()
    try:
        msg.ParseFromString(content)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise RawDumpError(path, f"the {hlen}-byte header is not a DumpData protobuf message ({exc})") from None
    return _checked(path, msg, hlen, file_size)


def _checked(path: Path, msg, hlen: int, file_size: int) -> RawDump:
    extra = sum(b.size for b in msg.buffer) + sum(s.size for s in msg.space)
    total = HEADER_LENGTH_BYTES + hlen + sum(t.size for t in msg.input) + sum(t.size for t in msg.output) + extra
    if total != file_size:
        raise RawDumpError(path, f"sizes do not add up: 8 + {hlen} (header) + {sum(t.size for t in msg.input)} "
                                 f"(inputs) + {sum(t.size for t in msg.output)} (outputs) + {extra} (buffers, "
                                 f"workspaces) = {total} bytes, but the file holds {file_size}")
    if not msg.output and not msg.input:
        raise RawDumpError(path, "the header declares no input and no output tensor")
    offset = HEADER_LENGTH_BYTES + hlen
    tensors = {"input": [], "output": []}
    for role, items in (("input", msg.input), ("output", msg.output)):
        for i, t in enumerate(items):
            tensors[role].append(_tensor(path, role, i, t, offset))
            offset += t.size
    return RawDump(path, msg.version, msg.dump_time, msg.op_name, tuple(tensors["input"]), tuple(tensors["output"]),
                   file_size)


def _tensor(path: Path, role: str, i: int, t, offset: int) -> RawTensor:
    what = f"{role} {i}"
    if t.data_type not in DATA_TYPES:
        raise RawDumpError(path, f"{what}: unknown data_type enum {t.data_type} (not in dump_data.proto "
                                 "OutputDataType; a newer toolchain?)")
    if t.format not in FORMATS:
        raise RawDumpError(path, f"{what}: unknown format enum {t.format} (not in dump_data.proto OutputFormat)")
    shape = tuple(int(d) for d in t.shape.dim)
    dtype = numpy_dtypes().get(DATA_TYPES[t.data_type])
    if dtype is not None and math.prod(shape) * dtype.itemsize != t.size:
        raise RawDumpError(path, f"{what}: size {t.size} bytes does not match its shape {_fmt(shape)} of "
                                 f"{DATA_TYPES[t.data_type]} ({math.prod(shape) * dtype.itemsize} bytes)")
    original = tuple(int(d) for d in t.original_shape.dim) if t.HasField("original_shape") else None
    if original == () and math.prod(shape) != 1:
        original = None  # an empty original shape next to a non-scalar tensor: not recorded
    orig = t.original_op if role == "output" and t.HasField("original_op") else None
    return RawTensor(role, i, DATA_TYPES[t.data_type], FORMATS[t.format], shape, original, int(t.size), offset,
                     orig.name if orig else "", int(orig.output_index) if orig else 0,
                     FORMATS.get(orig.format, "NCHW") if orig else "NCHW")


def read_tensor(dump: RawDump, tensor: RawTensor, convert: bool = True) -> np.ndarray:
    """The array of ``tensor`` (one of ``dump``'s), in the ONNX layout unless ``convert`` is False (then in the
    stored shape). Raises RawDumpError: a dtype npuscope does not read, a file changed since its header was
    read, or a layout that cannot be converted (:mod:`toolkit.dumps.layouts` says why)."""
    where = f"{tensor.role} {tensor.index}"
    dtype = numpy_dtypes().get(tensor.data_type)
    if dtype is None:
        raise RawDumpError(dump.path, f"{where}: data_type {tensor.data_type} is not read by npuscope")
    buf = bytearray(tensor.size)
    try:
        with open_regular(dump.path) as fh:
            if os.fstat(fh.fileno()).st_size != dump.file_size:
                raise RawDumpError(dump.path, "the file changed size since its header was read")
            fh.seek(tensor.offset)
            got = fh.readinto(buf)
    except NotRegularFile as exc:
        raise RawDumpError(dump.path, str(exc)) from None
    except OSError as exc:
        raise RawDumpError(dump.path, f"cannot be read ({type(exc).__name__}: {exc.strerror or exc})") from None
    if got != tensor.size:
        raise RawDumpError(dump.path, f"{where}: truncated, {got} of {tensor.size} bytes read")
    arr = np.frombuffer(buf, dtype=dtype).reshape(tensor.shape)
    if not convert:
        return arr
    try:
        return to_onnx_layout(tensor, arr)
    except layouts.LayoutError as exc:
        raise RawDumpError(dump.path, f"{where}: {exc}") from None


def to_onnx_layout(tensor: RawTensor, arr: np.ndarray) -> np.ndarray:
    """``arr`` (``tensor``'s data in its stored shape) in the layout of the framework op: NCHW / NCDHW / ND, or
    NHWC when the original op was NHWC (its original shape is then read in NHWC order). Raises LayoutError."""
    original = tensor.original_shape
    if tensor.format == tensor.original_format:
        return layouts.identity(arr, original).array
    if tensor.original_format == "NHWC" and original is not None and len(original) == 4:
        n, h, w, c = original
        nchw = layouts.convert(tensor.format, arr, (n, c, h, w)).array
        return nchw.transpose(0, 2, 3, 1)
    return layouts.convert(tensor.format, arr, original).array


def read_raw_dump(path: str | os.PathLike, convert: bool = True) -> tuple[RawDump, list[np.ndarray]]:
    """The header and every output array of the raw dump at ``path`` (see :func:`read_tensor`)."""
    dump = read_header(path)
    return dump, [read_tensor(dump, t, convert) for t in dump.outputs]
