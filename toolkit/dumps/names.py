"""Dump file-name conventions, one small registered parser each, and the per-folder choice between them.

Conventions (Ascend accuracy-comparison docs, "Dump File Naming Conventions" and "Converting the Format of a
Dump File", msaccucmp.py ``convert``):

``onnx``   ONNX golden dump: ``{node}.{output_index}.{timestamp}.npy``. Parsed from the right: the last two
           dot-separated fields are integers (timestamp, output index); everything before them, dots
           included, is the node name.
``device`` Device dump: ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}``, converted to numpy as
           ``<that>.output.{i}[.{shape}].npy`` / ``<that>.input.{i}[.{shape}].npy`` (shape like
           ``1x3x224x224``), or simply ``<that>.npy`` (taken as output 0). Parsed from both ends: the first
           field is op_type, the last three are integers (task_id, stream_id, timestamp), the fields between,
           dots included, are op_name (the docs restrict names to ``A-Za-z0-9_-``, but op names from other
           tools may hold dots). ``.input.{i}`` files are parsed with ``role="input"``; the readers skip them.

A name such as ``Conv2D.conv1.3.1.1700000000000000.npy`` fits both conventions (ONNX node
``Conv2D.conv1.3``, output 1), so a folder is read with one convention: :func:`choose_convention`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_INT = re.compile(r"^[0-9]+$")
_DEVICE_SUFFIX = re.compile(r"^(?P<stem>.+)\.(?P<role>output|input)\.(?P<index>[0-9]+)(?:\.[0-9]+(?:x[0-9]+)*)?$")


@dataclass(frozen=True)
class ParsedName:
    """What a dump file name says.

    Attributes:
        convention: the parser's name ("onnx", "device").
        name: ONNX node name (onnx) or device op name (device).
        index: output (or input) index, >= 0.
        timestamp: the name's timestamp field (µs on the device; any integer clock for goldens).
        op_type: device op type ("" for onnx).
        role: "output" or "input".
        converted: True for a device name with a ``.output.{i}`` / ``.input.{i}`` suffix.
    """

    convention: str
    name: str
    index: int
    timestamp: int
    op_type: str = ""
    role: str = "output"
    converted: bool = False


#: name → parser(file name) -> ParsedName | None, in registration order.
CONVENTIONS: dict[str, Callable[[str], ParsedName | None]] = {}


def register(name: str):
    """Decorator: add a file-name parser under ``name``."""

    def deco(fn):
        CONVENTIONS[name] = fn
        return fn

    return deco


def _fields(filename: str) -> list[str] | None:
    """Dot-separated fields of a ``.npy`` file name without the extension (None for other files)."""
    if not filename.endswith(".npy") or len(filename) <= 4:
        return None
    return filename[:-4].split(".")


@register("onnx")
def parse_onnx_golden(filename: str) -> ParsedName | None:
    """``{node}.{output_index}.{timestamp}.npy`` → ParsedName, else None."""
    fields = _fields(filename)
    if fields is None or len(fields) < 3 or not (_INT.match(fields[-1]) and _INT.match(fields[-2])):
        return None
    node = ".".join(fields[:-2])
    return ParsedName("onnx", node, int(fields[-2]), int(fields[-1])) if node else None


@register("device")
def parse_device(filename: str) -> ParsedName | None:
    """``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}[.output|.input.{i}[.{shape}]].npy`` → ParsedName."""
    if not filename.endswith(".npy"):
        return None
    stem, role, index, converted = filename[:-4], "output", 0, False
    suffix = _DEVICE_SUFFIX.match(stem)
    if suffix:
        stem, role, index, converted = suffix["stem"], suffix["role"], int(suffix["index"]), True
    fields = stem.split(".")
    if len(fields) < 5 or not all(_INT.match(f) for f in fields[-3:]):
        return None
    op_type, op_name = fields[0], ".".join(fields[1:-3])
    if not op_type or not op_name:
        return None
    return ParsedName("device", op_name, index, int(fields[-1]), op_type=op_type, role=role, converted=converted)


def looks_like_raw_device_dump(filename: str) -> bool:
    """A not-yet-converted device dump (``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}``, no .npy)."""
    fields = filename.split(".")
    return len(fields) >= 5 and bool(fields[0]) and all(_INT.match(f) for f in fields[-3:])


def choose_convention(filenames: list[str], prefer: str) -> tuple[str | None, dict[str, int]]:
    """The convention that reads the most of ``filenames``; ``prefer`` ("onnx" or "device") breaks a tie.

    Every unconverted device name also parses as an ONNX golden name, so a tie means "every file fits both";
    the golden side prefers ``onnx`` and the target side ``device`` (override with ``--golden-format`` /
    ``--target-format``). Returns (convention or None when no name parses, {convention: count}).
    """
    counts = {name: sum(1 for f in filenames if parse(f) is not None) for name, parse in CONVENTIONS.items()}
    best = max(counts.values(), default=0)
    if best == 0:
        return None, counts
    winners = [name for name, n in counts.items() if n == best]
    return (prefer if prefer in winners else winners[0]), counts
