"""Folder entries for raw device dumps and for file names no convention reads (hooks of :mod:`toolkit.dumps.readers`).

A raw dump file (:mod:`toolkit.dumps.raw`) becomes one :class:`~toolkit.dumps.entry.DumpEntry` per output. Its
header is read (and checked) when the folder is listed; the output's bytes only when the row is compared. An
output whose header records ``original_op`` is keyed by that op's name and output index (the ONNX node and
output a fused device op stands for), with the device op in ``DumpEntry.kernel``; an output without one is
keyed by the device op name and the output's position. A file whose header fails a check becomes one
unreadable entry for output 0 of the op its file name names ("raw dump: <what is wrong>"), so the comparison
still runs and the row says why.
"""

from __future__ import annotations

from pathlib import Path

from .entry import NODE, DumpEntry, DumpReadError
from .names import ParsedName
from .raw import RawDump, RawDumpError, RawTensor, read_header, read_tensor

#: prefix of the DumpReadError reasons given here (toolkit.commands.compare_dumps maps it to advice)
RAW_REASON = "raw dump"
NAME_REASON = "file name not understood"


def raw_dump_entries(folder: Path, fname: str, parsed: ParsedName, order: int) -> tuple[list[DumpEntry], int]:
    """(one entry per output of the raw dump ``folder/fname``, the number of inputs it holds)."""
    try:
        dump = read_header(folder / fname)
    except RawDumpError as exc:
        return [failed_entry(fname, parsed, order, f"{RAW_REASON}: {exc.reason}")], 0
    op = dump.op_name or parsed.name
    entries = []
    for t in dump.outputs:
        source = fname if len(dump.outputs) == 1 else f"{fname}:output.{t.index}"
        if t.original_name:
            entry = DumpEntry(t.original_name, t.original_index, NODE, source, _loader(dump, t), op_type=parsed.op_type,
                              timestamp=parsed.timestamp, kernel=op, order=order, dump_id=dump_id(parsed, t.index),
                              task_id=parsed.task_id)
        else:
            entry = DumpEntry(op, t.index, NODE, source, _loader(dump, t), op_type=parsed.op_type,
                              timestamp=parsed.timestamp, order=order, dump_id=dump_id(parsed, t.index),
                              task_id=parsed.task_id)
        entries.append(entry)
    return entries, len(dump.inputs)


def failed_entry(fname: str, parsed: ParsedName, order: int, reason: str) -> DumpEntry:
    """An entry for output 0 of ``parsed``'s op whose load raises DumpReadError(``reason``)."""
    return DumpEntry(parsed.name, 0, NODE, fname, _raiser(reason), op_type=parsed.op_type,
                     timestamp=parsed.timestamp, order=order, dump_id=dump_id(parsed, 0), task_id=parsed.task_id)


def dump_id(parsed: ParsedName, index: int) -> tuple | None:
    """(op name as the file name writes it, output ``index``, timestamp) of a device-convention file
    (``DumpEntry.dump_id``), None for another convention."""
    return (parsed.name, index, parsed.timestamp) if parsed.convention == "device" else None


def unparsed_entry(fname: str, reason: str, order: int) -> DumpEntry:
    """An entry named after a file whose name no convention reads; loading it raises DumpReadError saying why."""
    return DumpEntry(fname, 0, NODE, fname, _raiser(f"{NAME_REASON}: {reason}"), order=order)


def _raiser(reason: str):
    def load():
        raise DumpReadError(reason)

    return load


def _loader(dump: RawDump, tensor: RawTensor):
    def load():
        try:
            return read_tensor(dump, tensor)
        except RawDumpError as exc:
            raise DumpReadError(f"{RAW_REASON}: {exc.reason}") from None

    return load
