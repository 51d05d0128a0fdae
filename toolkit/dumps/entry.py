"""One dumped tensor (:class:`DumpEntry`), one side of a comparison (:class:`DumpSet`) and the safe .npy reader.

Arrays are loaded lazily, one pair at a time, so a comparison never holds more than two dumps in memory
(a Polygraphy JSON is the exception: polygraphy parses the whole file).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from toolkit.core.textfile import NotRegularFile, open_regular
from toolkit.inputs.npyheader import (
    NpyFormatError,
    array_from_reader,
    check_fits_memory,
    read_npy_header,
)

NODE, TENSOR = "node", "tensor"


class DumpReadError(Exception):
    """A dump that cannot be read (truncated, not .npy, object dtype, ...): becomes a row's CompareFailReason."""


@dataclass(frozen=True)
class DumpEntry:
    """One dumped tensor.

    Attributes:
        name: ONNX node / device op name (``keyed_by == "node"``) or tensor name (``"tensor"``).
        index: output index of the node/op (0 for tensor-keyed dumps).
        keyed_by: ``"node"`` (name + output index) or ``"tensor"`` (tensor name).
        source: where it came from, for the report: a file name, or ``runner[iteration]:tensor``.
        load: () -> np.ndarray; raises :class:`DumpReadError`.
        op_type: device op type ("" when unknown).
        timestamp: the file name's timestamp (None when the format has none).
        kernel: the npuscope kernel that wrote it (npuscope dump folders), or the device op of a raw device dump
            output keyed by its recorded original op (``name`` / ``index`` are then that op's), else "".
        order: position in the side's listing (file order / JSON order), for stable sorting.
        dump_id: the device dump it comes from, (op name as its file name writes it, the op's output index,
            timestamp), for device-convention files (raw and ``.npy``); None otherwise. A raw file's output
            and its ``.npy`` conversion share it.
        task_id: the device file name's task id (-1 when it has none): between dumps of one op and one timestamp,
            the higher task id ran later.
    """

    name: str
    index: int
    keyed_by: str
    source: str
    load: Callable[[], np.ndarray] = field(compare=False, repr=False)
    op_type: str = ""
    timestamp: int | None = None
    kernel: str = ""
    order: int = 0
    dump_id: tuple | None = None
    task_id: int = -1


@dataclass
class DumpSet:
    """One side (golden or target) as read from disk.

    Attributes:
        path: the folder or JSON file given.
        format: "npuscope", "onnx", "device" or "polygraphy".
        keyed_by: ``"node"`` or ``"tensor"`` (every entry of a side is keyed the same way).
        entries: one per (name, index); when a name was dumped several times, the latest timestamp.
        ignored: files that are not dumps of the chosen format (file names).
        input_dumps: device ``.input.{i}`` files skipped.
        superseded: older dumps of the same (name, index) skipped in favour of the latest.
        detail: a line for the report (runner and iteration of a Polygraphy JSON, the counts per convention).
    """

    path: Path
    format: str
    keyed_by: str
    entries: list[DumpEntry]
    ignored: list[str] = field(default_factory=list)
    input_dumps: int = 0
    superseded: int = 0
    detail: str = ""


def read_npy(path: Path) -> np.ndarray:
    """Load one ``.npy`` file (NumPy format v1–v3, no pickles) and return its array.

    Only a regular file is read (toolkit.core.textfile.open_regular: a FIFO, socket, device or a link to one such as
    ``/dev/zero`` is refused without blocking: "not a regular file but a FIFO (named pipe)"). The header alone is
    read and checked first (bounded: toolkit.inputs.npyheader.read_npy_header), then its declared size against
    the file size and this machine's memory, so a truncated file, a malformed header or one declaring terabytes
    is reported without allocating the declared array; no more than the declared bytes are read. Raises
    :class:`DumpReadError` with a short reason ("truncated: ...", "object (pickled) arrays ...", "not a
    readable .npy file (...)").
    """
    try:
        with open_regular(path) as fh:
            header = read_npy_header(fh.read)
            held = os.fstat(fh.fileno()).st_size - header.data_offset
            if held < header.nbytes:
                raise DumpReadError(f"truncated: header declares {header.nbytes} data bytes, file holds {held}")
            check_fits_memory(header.nbytes)
            return array_from_reader(header, fh.readinto)
    except NpyFormatError as exc:
        why = str(exc)
        if "pickled" in why:
            raise DumpReadError("object (pickled) arrays are not read; save numeric arrays") from None
        if why.startswith("is truncated: "):
            raise DumpReadError(f"truncated: {why[len('is truncated: '):]}") from None
        raise DumpReadError(f"not a readable .npy file (it {why})") from None
    except NotRegularFile as exc:
        raise DumpReadError(str(exc)) from None
    except OSError as exc:
        raise DumpReadError(f"not a readable .npy file ({type(exc).__name__}: {_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."
