"""Reading JSON event files that may be cut short (a profiler killed mid-write).

``load_events(path)`` returns the event list of a Chrome-trace / onnxruntime profile: the top-level array, or
the ``traceEvents`` array of an object. When the file is not complete JSON, events are recovered one by one
with ``json.JSONDecoder.raw_decode``; an unreadable fragment is counted and skipped up to the next line that
starts an object. The Trace Event Format itself allows the array form to lack its closing ``]``.

The text is decoded by toolkit.core.textfile.decode_text: a leading UTF-8 BOM dropped, UTF-8 (RFC 8259 §8.1), or
GB18030 for a file that is not UTF-8 but all GB18030; other bytes become U+FFFD, counted in a note.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.core.boundedjson import MAX_DEPTH, nesting_depth, read_limited_bytes
from toolkit.core.textfile import decode_text
from toolkit.logs.numbers import sane

_SKIP = re.compile(r"[\s,]*")
_NEXT_OBJECT = re.compile(r"\n[ \t]*\{")
_TRACE_EVENTS = re.compile(r'"traceEvents"\s*:\s*\[')


@dataclass
class Events:
    """Events read from a file: ``events`` (list of whatever the array held), ``malformed`` fragments
    skipped, ``top`` (the top-level object for the ``{"traceEvents": ...}`` form, else {}), ``notes``."""

    events: list
    malformed: int = 0
    top: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def read_text(path: Path) -> tuple[str, list[str]]:
    """(the file as text, notes on its decoding: toolkit.core.textfile.decode_text — BOM removed, UTF-8 or
    GB18030, undecodable bytes replaced and counted). Only a regular file within
    toolkit.core.boundedjson.LIMITS["artifact"] is read.

    Raises:
        OSError: naming the file, when it is not a regular file, cannot be read or is over the limit.
    """
    return decode_text(read_limited_bytes(path, "JSON file", OSError, limit="artifact"))


def too_deep(text: str) -> str:
    """A note when ``text`` nests deeper than toolkit.core.boundedjson.MAX_DEPTH (json would raise RecursionError),
    else ''."""
    depth = nesting_depth(text)
    return f"nested {depth} levels deep, more than the {MAX_DEPTH} read; nothing read" if depth > MAX_DEPTH else ""


def recover_array(text: str, start: int) -> tuple[list, int]:
    """Items of a JSON array whose '[' is at ``start - 1``, read one by one; returns (items, skipped)."""
    dec, items, bad, i, n = json.JSONDecoder(), [], 0, start, len(text)
    while True:
        i = _SKIP.match(text, i).end()
        if i >= n or text[i] == "]":
            return items, bad
        try:
            obj, i = dec.raw_decode(text, i)
            items.append(obj)
        except json.JSONDecodeError:
            bad += 1
            m = _NEXT_OBJECT.search(text, i + 1)
            if m is None:
                return items, bad
            i = m.end() - 1


def _from_object(obj: dict) -> Events:
    ev = obj.get("traceEvents")
    if not isinstance(ev, list):
        return Events([], 1, notes=["top-level object has no 'traceEvents' array"])
    top = {k: v for k, v in obj.items() if k != "traceEvents"}
    return Events(ev, 0, top)


def load_events(path: Path) -> Events:
    """Events of a JSON trace file (module docstring); never raises for bad content (OSError as
    :func:`read_text` for a file it cannot read)."""
    text, decoded = read_text(path)
    events = _events(text)
    events.notes += decoded
    return events


def _events(text: str) -> Events:
    deep = too_deep(text)
    if deep:
        return Events([], 1, notes=[deep])
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return _recover(text)
    if isinstance(obj, list):
        return Events(obj)
    if isinstance(obj, dict):
        return _from_object(obj)
    return Events([], 1, notes=["the JSON is neither an array nor an object"])


def _recover(text: str) -> Events:
    stripped = text.lstrip()
    offset = len(text) - len(stripped)
    if stripped.startswith("["):
        start = offset + 1
    else:
        m = _TRACE_EVENTS.search(text)
        if m is None:
            return Events([], 1, notes=["not valid JSON and no event array found"])
        start = m.end()
    items, bad = recover_array(text, start)
    note = (f"not complete JSON (truncated or corrupt): recovered {len(items)} event(s) one by one, "
            f"{bad} unreadable fragment(s) skipped")
    return Events(items, bad, notes=[note])


def number(v) -> float | None:
    """``v`` as a float when it is a JSON number or a numeric string (not a bool) that is finite and at most
    toolkit.logs.numbers.MAX_ABS in magnitude, else None (so ``1e309``, ``NaN``, ``Infinity`` are not data)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float, str)):
        try:
            f = float(v)
        except (ValueError, OverflowError):  # OverflowError: an int too large for a float
            return None
        return f if sane(f) else None
    return None
