"""Dump file-name conventions, one small registered parser each, and the per-folder choice between them.

Conventions (Ascend accuracy-comparison docs, "Dump File Naming Conventions" and "Converting the Format of a
Dump File", msaccucmp.py ``convert``; MindSpore's asynchronous dump docs for the ``.npy`` form with format and
dtype):

``onnx``   ONNX golden dump: ``{node}.{output_index}.{timestamp}.npy``. Parsed from the right: the last two
           dot-separated fields are integers (timestamp, output index); everything before them, dots included,
           is the node name.
``device`` Device dump. The name itself (the raw file the device writes, read by :mod:`toolkit.dumps.raw`)
           has one of these forms (:data:`DEVICE_FORMS`), parsed from both ends because op names may hold dots:

           - ``5-field`` ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`` (the usual one);
           - ``4-field`` ``{op_type}.{op_name}.{task_id}.{timestamp}`` (older toolchains): taken only when the
             5-field form does not fit (the field before task_id is not an integer), and as a ``.npy`` only with
             the ``.output.{i}`` suffix (a plain ``a.b.1.2.npy`` is the ONNX golden form);
           - ``9-field`` ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.{task_type}.{context_id}.
             {thread_id}.{device_id}`` (newer toolchains; the vendor docs write the two ids before the timestamp
             as ``({stream_id}.){task_id}``, so an ``8-field`` form with one id is read too). Told from the
             5-field form by where the timestamp is: a field of at least 13 digits fifth from the end, followed
             by four short integers.

           Converted to numpy as ``<name>.output.{i}[.{shape}].npy`` / ``<name>.input.{i}[.{shape}].npy`` (shape
           like ``1x3x224x224``), MindSpore's ``<name>.output.{i}.{format}.{dtype}.npy`` (``DefaultFormat``,
           ``float16``), or simply ``<name>.npy`` (taken as output 0; not for the 4-field form). ``.input.{i}``
           files are parsed with ``role="input"``; the readers skip them.

A name such as ``Conv2D.conv1.3.1.1700000000000000.npy`` fits both conventions (ONNX node ``Conv2D.conv1.3``,
output 1), so a folder is read with one convention: :func:`choose_convention`. A name the chosen convention
cannot read gets its reason from :func:`name_problem` (the readers turn dump-like ones into rows).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

_INT = re.compile(r"^[0-9]+$")
_DEVICE_SUFFIX = re.compile(r"^(?P<stem>.+)\.(?P<role>output|input)\.(?P<index>[0-9]+)"
                            r"(?:\.[0-9]+(?:x[0-9]+)*"  # .{shape}, or MindSpore's .{format}.{dtype}
                            r"|\.(?P<layout>[A-Za-z][A-Za-z0-9_]*)\.(?P<dtype>[A-Za-z][A-Za-z0-9_]*))?$")
#: the shortest timestamp told apart from an id (the device writes 16-digit µs timestamps)
TIMESTAMP_MIN_DIGITS = 13
DEVICE_FORMS = ("5-field", "4-field", "9-field", "8-field")
_FORMS_TEXT = ("{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}, its 4-field form without stream_id, or "
               "the 9-field form ending .{timestamp}.{task_type}.{context_id}.{thread_id}.{device_id}")


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
        form: the device name form ("5-field", "4-field", "9-field", "8-field"; "" for onnx).
        raw: True for a raw device dump file (no ``.npy``), read by :mod:`toolkit.dumps.raw`.
        layout / dtype: MindSpore's ``.{format}.{dtype}`` after ``.output.{i}`` ("DefaultFormat", "float16"),
            else "".
        task_id: the device name's task id (-1 for onnx): dumps of one op with one timestamp are told apart by it
            (the higher ran later).
    """

    convention: str
    name: str
    index: int
    timestamp: int
    op_type: str = ""
    role: str = "output"
    converted: bool = False
    form: str = ""
    raw: bool = False
    layout: str = ""
    dtype: str = ""
    task_id: int = -1


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


def _is_int(field: str) -> bool:
    return bool(_INT.match(field))


def _is_timestamp(field: str) -> bool:
    return _is_int(field) and len(field) >= TIMESTAMP_MIN_DIGITS


def parse_device_stem(stem: str) -> ParsedName | str:
    """A device dump name without extension or suffix (see the module docstring) → ParsedName (role output,
    index 0), or the reason it is not one (a string)."""
    fields = stem.split(".")
    if len(fields) < 4:
        return f"{len(fields)} dot-separated field(s); expected {_FORMS_TEXT}"
    if not fields[0]:
        return "empty op_type (the name starts with a dot)"
    long_tail = len(fields) >= 8 and all(_is_int(f) for f in fields[-4:]) and _is_timestamp(fields[-5]) \
        and not _is_timestamp(fields[-1])
    if long_tail:
        if len(fields) >= 9 and _is_int(fields[-6]) and _is_int(fields[-7]):
            form, op_fields, ts, task = "9-field", fields[1:-7], fields[-5], fields[-6]
        elif _is_int(fields[-6]):
            form, op_fields, ts, task = "8-field", fields[1:-6], fields[-5], fields[-6]
        else:
            return f"'{fields[-6]}' before the timestamp {fields[-5]} is not an integer task id"
    elif not _is_int(fields[-1]):
        return f"the last field '{fields[-1]}' is not an integer timestamp; expected {_FORMS_TEXT}"
    elif len(fields) >= 5 and _is_int(fields[-2]) and _is_int(fields[-3]):
        form, op_fields, ts, task = "5-field", fields[1:-3], fields[-1], fields[-3]
    elif _is_int(fields[-2]):
        form, op_fields, ts, task = "4-field", fields[1:-2], fields[-1], fields[-2]
    else:
        return f"'{fields[-2]}' before the timestamp is not an integer id; expected {_FORMS_TEXT}"
    op_name = ".".join(op_fields)
    if not op_name:
        return f"no op_name between op_type '{fields[0]}' and the ids"
    return ParsedName("device", op_name, 0, int(ts), op_type=fields[0], form=form, task_id=int(task))


def device_name(filename: str) -> ParsedName | str:
    """A device dump file name (raw, or converted to ``.npy``) → ParsedName, or the reason it is not one."""
    npy = filename.endswith(".npy")
    stem = filename[:-4] if npy else filename
    suffix = _DEVICE_SUFFIX.match(stem) if npy else None
    if suffix:
        stem = suffix["stem"]
    parsed = parse_device_stem(stem)
    if isinstance(parsed, str):
        return parsed
    if npy and not suffix and parsed.form == "4-field":
        return ("a 4-field device name as a plain .npy is read as the ONNX golden form; device .npy files of this "
                "form need the .output.{i} suffix")
    if not suffix:
        return replace(parsed, raw=not npy)
    return replace(parsed, index=int(suffix["index"]), role=suffix["role"], converted=True,
                   layout=suffix["layout"] or "", dtype=suffix["dtype"] or "")


@register("device")
def parse_device(filename: str) -> ParsedName | None:
    """A device dump name (:func:`device_name`): raw, ``[.output|.input.{i}[.{shape}|.{format}.{dtype}]].npy``."""
    parsed = device_name(filename)
    return None if isinstance(parsed, str) else parsed


def name_problem(convention: str, filename: str) -> str:
    """Why ``filename`` is not a dump name of ``convention`` ("" when it is one)."""
    if CONVENTIONS[convention](filename) is not None:
        return ""
    if convention == "device":
        return device_name(filename)
    if not filename.endswith(".npy"):
        return "not a .npy file"
    return "expected {node}.{output_index}.{timestamp}.npy (the last two fields integers, a node name before them)"


def dump_like(convention: str, filename: str) -> bool:
    """True for a file that is meant as a dump of ``convention`` even when its name does not parse: any ``.npy``,
    and for ``device`` also a name of 4 or more dot-separated fields ending in an integer (a raw dump name).
    The readers make such files rows with their :func:`name_problem`; other files are listed as ignored."""
    if filename.endswith(".npy"):
        return True
    fields = filename.split(".")
    return convention == "device" and len(fields) >= 4 and _is_int(fields[-1])


def looks_like_raw_device_dump(filename: str) -> bool:
    """A not-yet-converted device dump name (no .npy) in one of the device forms."""
    parsed = parse_device(filename)
    return parsed is not None and parsed.raw


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
