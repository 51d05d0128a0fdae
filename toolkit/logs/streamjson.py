"""JSON trace events in bounded memory: a streaming reader (ijson) and a compact column store for the rows.

:func:`iter_events` yields the events of a Chrome-trace file one at a time with ijson (the yajl2 C backend when
available) — the top-level array's items, or the ``traceEvents`` array's items of an object — so a trace of
several GB is never held as text nor as a list of dicts. Numbers arrive as Python floats. A file cut short or
corrupt ends the stream: what was read before is kept and :attr:`Stream.error` says where it stopped.
``otherData`` (npuscope's ``Time Kind``) is read from the head of the file when it precedes the events.
ijson reads UTF-8 only and stops at the first byte that is not, so the file reaches it through
toolkit.core.textfile.TextReader (a UTF-8 BOM dropped; UTF-8, or GB18030 when the head is GB18030; other bytes
replaced with U+FFFD and counted) re-encoded as UTF-8; :attr:`Stream.notes` gives the reader's notes.

:class:`Columns` accumulates rows column by column: numbers in float64 arrays, text as int32 codes into one
dictionary per column, and a column that has held one value only is kept as that value (no per-row storage),
so a 1 GB timeline of ~4 M tasks takes ~50 bytes per row. :meth:`Columns.frame` gives a DataFrame whose text
columns are pandas Categoricals.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import ijson
import numpy as np
import pandas as pd

from toolkit.core.textfile import TextReader, open_regular

_OTHER = re.compile(rb'"otherData"\s*:\s*(\{[^{}]*\})')
HEAD = 64 * 1024


@dataclass
class Stream:
    """The state of one :func:`iter_events` pass: ``top_level`` ("array" / "object" / ""), ``other_data``
    (the ``otherData`` object when found in the head, else {}), ``error`` (why the stream stopped early, ""),
    ``notes`` (how the text was decoded when not plain UTF-8: toolkit.core.textfile.TextReader.notes; set when
    the stream ends)."""

    top_level: str = ""
    other_data: dict = field(default_factory=dict)
    error: str = ""
    notes: list[str] = field(default_factory=list)


class Utf8Bytes:
    """A binary file-like object (``read(n)`` only) giving the text of a :class:`TextReader` as UTF-8 bytes, one
    decoded chunk at a time (a read may return fewer than ``n`` bytes; b"" only at the end)."""

    def __init__(self, text: TextReader, chunk: int = 1 << 20):
        self._chunks = text.chunks(chunk)
        self._buffer, self._at = b"", 0

    def read(self, n: int = -1) -> bytes:
        while self._at >= len(self._buffer):
            text = next(self._chunks, None)
            if text is None:
                return b""
            self._buffer, self._at = text.encode("utf-8"), 0
        end = len(self._buffer) if n < 0 else self._at + n
        out = self._buffer[self._at:end]
        self._at += len(out)
        return out


def iter_events(path: Path, state: Stream) -> Iterator[object]:
    """The events of the trace at ``path`` (module docstring); ``state`` is filled as the file is read.
    Raises OSError (toolkit.core.textfile.NotRegularFile) for a file that cannot be opened as a regular file."""
    import json

    with open_regular(path) as fh:
        head = fh.read(HEAD)
        start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
        state.top_level = {b"[": "array", b"{": "object"}.get(start, "")
        m = _OTHER.search(head)
        if m:
            try:
                state.other_data = json.loads(m.group(1))
            except ValueError:
                state.other_data = {}
    if not state.top_level:
        state.error = "neither a JSON array nor an object"
        return
    prefix = "item" if state.top_level == "array" else "traceEvents.item"
    with TextReader(path) as text:
        try:
            yield from ijson.items(Utf8Bytes(text), prefix, use_float=True)
        except ijson.common.IncompleteJSONError as exc:
            state.error = f"not complete JSON (truncated or corrupt): stopped at {_short(exc)}"
        except ijson.common.JSONError as exc:
            state.error = f"not valid JSON: {_short(exc)}"
        state.notes = text.notes()


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:160]


class _Column:
    """One column: all default (NaN / "") until another value arrives, then per-row storage (padded with the
    default for rows that did not set it)."""

    __slots__ = ("numeric", "n", "values", "codes", "index")

    def __init__(self, numeric: bool):
        self.numeric, self.n = numeric, 0
        self.values = self.codes = None
        self.index: dict[str, int] = {"": 0}

    def put(self, i: int, v) -> None:
        """Set row ``i`` (>= every row set before) to ``v``."""
        if self.numeric:
            v = float("nan") if v is None else float(v)
            if self.values is None:
                if v != v:
                    return
                self.values = array("d", [float("nan")]) * i
            elif i > len(self.values):
                self.values.extend(array("d", [float("nan")]) * (i - len(self.values)))
            self.values.append(v)
            return
        v = "" if v is None else v if isinstance(v, str) else str(v)
        if self.codes is None:
            if not v:
                return
            self.codes = array("i", [0]) * i
        elif i > len(self.codes):
            self.codes.extend(array("i", [0]) * (i - len(self.codes)))
        self.codes.append(self.index.setdefault(v, len(self.index)))

    def stored(self) -> bool:
        """True once a row holds another value than the default."""
        return self.values is not None or self.codes is not None

    def series(self, n: int) -> pd.Series:
        """The column as a Series of ``n`` rows; the storage is handed over (padded in place, not copied)."""
        if self.numeric:
            if self.values is None:
                return pd.Series(np.full(n, np.nan))
            if len(self.values) < n:
                self.values.extend(array("d", [float("nan")]) * (n - len(self.values)))
            return pd.Series(np.frombuffer(self.values, np.float64), copy=False)
        if self.codes is None:
            return pd.Series(pd.Categorical.from_codes(np.zeros(n, np.int8), [""]))
        if len(self.codes) < n:
            self.codes.extend(array("i", [0]) * (n - len(self.codes)))
        return pd.Series(pd.Categorical.from_codes(np.frombuffer(self.codes, np.int32), list(self.index)))


class Columns:
    """Rows stored column by column (module docstring). ``numeric``: the names of the float columns."""

    def __init__(self, names: list[str], numeric: set[str]):
        self.names, self.n = list(names), 0
        self._cols = {c: _Column(c in numeric) for c in names}

    def append(self, row: dict) -> None:
        """Add one row {column: value}; columns it does not name get NaN / "". Raises KeyError for a column
        that is not one of ``names``."""
        i, cols = self.n, self._cols
        for name, v in row.items():
            cols[name].put(i, v)
        self.n = i + 1

    def holds(self, name: str) -> bool:
        """True when some row set column ``name`` to a non-default value."""
        return self._cols[name].stored()

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame with the columns in order (text columns Categorical, numbers float64); the
        store is emptied as each column is handed over."""
        out = {}
        for c in self.names:
            out[c] = self._cols.pop(c).series(self.n)
        return pd.DataFrame(out, copy=False)

    def column(self, name: str) -> pd.Series:
        return self._cols[name].series(self.n)
