"""Write raw Ascend device dump files (the format :mod:`toolkit.dumps.raw` reads), for tests and round trips.

A file is: uint64 little-endian header length, a DumpData protobuf header (:mod:`toolkit.dumps.dump_proto`),
then every input's bytes, then every output's bytes. Arrays are written as given: lay them out in the device
format first (their shape is written as the stored shape) and pass the framework shape as ``original_shape``.
Every field can be overridden (``size``, ``data_type``, ``format`` as raw enum numbers) so that tests can also
write malformed files on purpose.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .dump_proto import DATA_TYPE_NUMBERS, FORMAT_NUMBERS, dump_data_class
from .raw import numpy_dtypes


@dataclass
class RawTensorSpec:
    """One tensor to write.

    Attributes:
        data: the array in its stored (device) layout; its bytes are written little-endian.
        format: OutputFormat name without ``FORMAT_`` ("NC1HWC0") or an enum number; default "ND".
        original_shape: the framework op's shape (None: not recorded).
        original_op: (name, output index) of the framework op this output stands for (outputs only).
        original_format: that op's format (name or number); default NCHW (0, not written).
        data_type: OutputDataType name or number; default from ``data.dtype``.
        shape: stored shape to declare; default ``data.shape``.
        size: byte count to declare; default ``data.nbytes`` (the bytes written are always ``data``'s).
    """

    data: np.ndarray
    format: str | int = "ND"
    original_shape: Sequence[int] | None = None
    original_op: tuple[str, int] | None = None
    original_format: str | int | None = None
    data_type: str | int | None = None
    shape: Sequence[int] | None = None
    size: int | None = None


def _data_type_number(spec: RawTensorSpec) -> int:
    if isinstance(spec.data_type, int):
        return spec.data_type
    if spec.data_type is not None:
        return DATA_TYPE_NUMBERS[spec.data_type]
    dt = np.asarray(spec.data).dtype
    want = dt.newbyteorder("<") if dt.byteorder == ">" else dt
    for name, np_dtype in numpy_dtypes().items():
        if np_dtype == want:
            return DATA_TYPE_NUMBERS[name]
    raise ValueError(f"no dump_data.proto data_type for numpy dtype {dt}; pass data_type=")


def _format_number(fmt: str | int) -> int:
    return fmt if isinstance(fmt, int) else FORMAT_NUMBERS[fmt]


def _le_bytes(arr: np.ndarray) -> bytes:
    arr = np.ascontiguousarray(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr.tobytes()


def _fill(msg, spec: RawTensorSpec, is_output: bool) -> bytes:
    data = _le_bytes(np.asarray(spec.data))
    msg.data_type = _data_type_number(spec)
    msg.format = _format_number(spec.format)
    msg.shape.dim.extend(int(d) for d in (spec.shape if spec.shape is not None else np.shape(spec.data)))
    msg.size = len(data) if spec.size is None else int(spec.size)
    if spec.original_shape is not None:
        msg.original_shape.dim.extend(int(d) for d in spec.original_shape)
        if not spec.original_shape:
            msg.original_shape.SetInParent()
    if is_output and spec.original_op is not None:
        msg.original_op.name, msg.original_op.output_index = spec.original_op[0], int(spec.original_op[1])
        if spec.original_format is not None:
            msg.original_op.format = _format_number(spec.original_format)
    return data


def encode_raw_dump(outputs: Sequence[RawTensorSpec], inputs: Sequence[RawTensorSpec] = (), *, op_name: str = "",
                    version: str = "2.0", dump_time: int | None = None) -> bytes:
    """The bytes of a raw dump file holding ``inputs`` and ``outputs`` (``dump_time`` in µs; default now)."""
    msg = dump_data_class()()
    msg.version, msg.op_name = version, op_name
    msg.dump_time = int(time.time() * 1e6) if dump_time is None else int(dump_time)
    blobs = [_fill(msg.input.add(), s, False) for s in inputs]
    blobs += [_fill(msg.output.add(), s, True) for s in outputs]
    header = msg.SerializeToString()
    return struct.pack("<Q", len(header)) + header + b"".join(blobs)


def write_raw_dump(path: str | os.PathLike, outputs: Sequence[RawTensorSpec], inputs: Sequence[RawTensorSpec] = (),
                   **kw) -> Path:
    """Write :func:`encode_raw_dump` (same arguments) to ``path``; returns the path."""
    path = Path(path)
    path.write_bytes(encode_raw_dump(outputs, inputs, **kw))
    return path
