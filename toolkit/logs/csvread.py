"""CSV helpers shared by the CSV parsers: header sniffing, a read that counts malformed rows (a field count
other than the header's) and refuses an ambiguous header, and per-check malformed counts with notes.

Numbers in the device profiler's CSVs may carry a trailing tab (it keeps spreadsheets from reformatting long
timestamps), ``N/A``, or thousands separators when a spreadsheet saved the file ("1,234.5"); :func:`numeric`
strips whitespace, drops the separators of a number grouped by threes and turns anything unparseable into NaN.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.core.csvjson import undo_formula_safe
from toolkit.core.textfile import TextReader
from toolkit.logs.head import head_lines


def header(head: str) -> list[str]:
    """The column names of the first non-blank line of a CSV head (stripped; [] when unreadable)."""
    lines = head_lines(head, 1)
    if not lines:
        return []
    try:
        return [c.strip() for c in next(csv.reader([lines[0]]))]
    except (csv.Error, StopIteration):
        return []


@dataclass
class CsvRows:
    """A CSV read by :func:`read_counted`.

    Attributes:
        frame: the data rows, columns = the header's names (stripped; a name the header repeats keeps its first
            column only), all cells as strings — or, when :func:`read_counted` was given ``convert``, the
            concatenation of what it returned for each chunk of rows.
        malformed: rows skipped because their number of fields differs from the header's (more *or* fewer:
            a row is never shifted into other columns nor padded; a trailing empty field is not an extra one)
            or the csv module could not read them (a NUL byte, a field over :data:`MAX_FIELD_CHARS`).
        notes: what was skipped, ignored or decoded otherwise than as UTF-8 (toolkit.core.textfile.TextReader:
            "decoded as GB18030 (not UTF-8)", a count of bytes replaced with U+FFFD), one line each.
        columns: the header's column names as read (stripped, renamed, repeats dropped), whatever ``convert`` made.
    """

    frame: pd.DataFrame
    malformed: int = 0
    notes: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)


#: The longest field read (characters); a longer one makes its row malformed.
MAX_FIELD_CHARS = 1 << 20
#: Rows read into one frame at a time: the csv module's lists of text cells are held for one chunk only.
CHUNK_ROWS = 4_096
#: A column whose chunk holds at most this many distinct texts has them shared across chunks (one string object
#: per distinct value: OP Type, Task Type, shapes, dtypes repeat on every row of a profile).
SHARED_DISTINCT = 4_096
#: Chunks of fewer rows keep their strings as read: sharing pays only over many rows, and its cost is per column
#: (a CSV of a few rows and 200,000 columns).
SHARED_MIN_ROWS = 1_024


def read_counted(path: Path, used: list[str] | tuple[str, ...] = (), rename=None, convert=None,
                 chunk_rows: int | None = None) -> CsvRows:
    """Read a CSV with a header row (the first non-blank row) with Python's csv module, streamed from a regular
    file only, decoded by toolkit.core.textfile.TextReader: a UTF-8 BOM skipped; UTF-8, or GB18030 for a file that
    is not UTF-8 but GB18030 (a CSV re-saved by Excel on Chinese-locale Windows); other bytes replaced with U+FFFD,
    counted in a note.

    Rows of only blank cells are skipped (not malformed). A row with more or fewer fields than the header is
    malformed (counted, skipped; pandas would have shifted every cell of such rows one column to the right, its
    implicit index column). A trailing empty field is not a field: rows written with a comma at their end
    (``a,b,``) under a header without one — or the header with one and the rows without — are read as the
    header's columns (a note says so). A header naming one column several times: when the column is one of
    ``used`` (the columns the parser reads) which cell holds the data is ambiguous, so the file is refused;
    otherwise a note says so. ``rename(header) -> header`` (same length) renames the stripped header first, e.g. to
    tell apart the columns a format repeats by their position (the compare tool's two DataType columns).

    Bounded memory: rows are made into frames ``chunk_rows`` (default :data:`CHUNK_ROWS`) at a time, and
    ``convert(frame) -> DataFrame`` (row-wise work of the parser: typed numbers, renamed columns) is applied to
    each chunk as it is read, so only the converted rows are kept (text repeated in a column is one shared
    string object); the frames are concatenated in file order (index 0..n-1), as one read would give.

    Raises:
        ValueError: no header row; a column of ``used`` named twice in the header.
        OSError (toolkit.core.textfile.NotRegularFile): not a regular file.
    """
    chunk_rows = chunk_rows or CHUNK_ROWS
    bad, width, head = 0, 0, None
    rows: list[list[str]] = []
    parts: list[pd.DataFrame] = []
    shared: dict = {}
    trailing = 0
    notes: list[str] = []
    keep: list[int] = []
    columns: list[str] = []
    limit = csv.field_size_limit()
    try:
        csv.field_size_limit(MAX_FIELD_CHARS)
        with TextReader(path) as text:
            reader = csv.reader(text.lines())
            while True:
                try:
                    row = next(reader)
                except StopIteration:
                    break
                except csv.Error:  # a NUL byte, a field over the limit: that row only
                    bad += 1
                    continue
                if not any(c.strip() for c in row):
                    continue
                if head is None:
                    head = [c.strip() for c in row]
                    while len(head) > 1 and not head[-1]:  # "a,b," : the trailing empty name is no column
                        head.pop()
                    width = len(head)
                    if rename is not None:
                        head = list(rename(head))
                    names, notes = _unique_header(head, used)
                    keep = sorted(names.values())
                    continue
                if len(row) != width:
                    if len(row) > width and not any(c.strip() for c in row[width:]):
                        del row[width:]  # a trailing comma (or several): empty fields past the header's
                        trailing += 1
                    else:
                        bad += 1
                        continue
                rows.append(row)
                if len(rows) >= chunk_rows:
                    parts.append(_chunk(rows, head, keep, width, convert, shared, columns))
                    rows = []
    finally:
        csv.field_size_limit(limit)
    if head is None:
        raise ValueError("no header row")
    if rows or not parts:
        parts.append(_chunk(rows, head, keep, width, convert, shared, columns))
    del rows
    frame = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    notes += text.notes()
    if trailing:
        notes.append(f"{trailing} row(s) ending in empty field(s) past the header's {width} read without them "
                     "(a trailing comma)")
    if bad:
        notes.append(f"{bad} row(s) with a number of fields other than the header's {width} skipped (malformed)")
    return CsvRows(frame, bad, notes, columns)


_SEP = "\x00"  # rare in a cell; a cell holding NUL + ' only takes the cell-by-cell way (same result)
_QUOTE_START = _SEP + "'"


def _chunk(rows: list[list[str]], head: list[str], keep: list[int], width: int, convert, shared: dict,
           columns: list[str]) -> pd.DataFrame:
    """One chunk of rows as a frame of text cells (our own CSVs' formula prefixes undone), through ``convert``;
    its text columns with few distinct values share one string object per value (``shared``: across chunks).
    ``columns`` (empty at the first chunk) gets the header's names as read."""
    cells = np.empty((len(rows), len(keep)), dtype=object)  # one 2-D block: linear in the number of columns
    for j, r in enumerate(rows):
        cells[j] = r if len(keep) == width else [r[i] for i in keep]
    frame = pd.DataFrame(cells, columns=[head[i] for i in keep], dtype=object)
    # our own CSVs prefix formula-like names with ' (toolkit.core.csvjson): undone cell by cell only in a chunk where
    # some cell starts with ' (one joined-text search tells; the header's names are undone either way)
    if _QUOTE_START in _SEP + _SEP.join(c for r in rows for c in r):
        frame = undo_formula_safe(frame)
    else:
        frame.columns = undo_formula_safe(frame.iloc[:0]).columns
    frame.columns = [str(c).strip() for c in frame.columns]
    if not columns:
        columns.extend(frame.columns)
    if convert is not None:
        frame = convert(frame)
    return _share_texts(frame, shared)


def _share_texts(frame: pd.DataFrame, shared: dict) -> pd.DataFrame:
    """``frame`` with each text column (object or string dtype) of at most :data:`SHARED_DISTINCT` distinct values rebuilt from one
    string object per value (the same values: only the copies the csv module made of each cell are dropped);
    a frame of fewer than :data:`SHARED_MIN_ROWS` rows as it is."""
    if len(frame) < SHARED_MIN_ROWS:
        return frame
    for i, dtype in enumerate(frame.dtypes):
        if dtype != object and not isinstance(dtype, pd.StringDtype):
            continue
        codes, uniques = pd.factorize(frame.iloc[:, i], use_na_sentinel=False)
        if len(uniques) > SHARED_DISTINCT:
            continue
        values = np.array([shared.setdefault(v, v) if isinstance(v, str) else v for v in uniques], dtype=object)
        frame.isetitem(i, pd.Series(values.take(codes), index=frame.index, dtype=dtype))  # its own dtype kept
    return frame


def _unique_header(head: list[str], used) -> tuple[dict[str, int], list[str]]:
    """({name: index of its first column}, notes); raises ValueError for a repeated name in ``used``."""
    where: dict[str, list[int]] = {}
    for i, name in enumerate(head):
        where.setdefault(name, []).append(i)
    notes = []
    for name, idx in where.items():
        if len(idx) < 2:
            continue
        cols = ", ".join(str(i + 1) for i in idx)
        if name in used:
            raise ValueError(f"the header names column '{name[:80]}' {len(idx)} times (columns {cols}): which "
                             "one holds the data is ambiguous; remove or rename the extra column(s)")
        notes.append(f"the header names column '{name[:80]}' {len(idx)} times (columns {cols}); not read, ignored")
    return {name: idx[0] for name, idx in where.items()}, notes


def malformed_mask(checks: dict[str, pd.Series], index: pd.Index | None = None) -> tuple[pd.Series, list[str]]:
    """(rows that pass every check, one note per failed check). ``checks``: {why a row is malformed: boolean
    Series true for the rows it catches}, all on the same index; a note reads "N row(s) malformed: <why>"
    (a row failing several checks is counted under each). With no check every row of ``index`` passes (an empty
    mask when ``index`` is None too)."""
    bad = pd.Series(False, index=index if index is not None else pd.RangeIndex(0), dtype=bool) if not checks else None
    notes = []
    for why, mask in checks.items():
        mask = mask.fillna(False).astype(bool)
        bad = mask if bad is None else (bad | mask)
        if mask.any():
            notes.append(f"{int(mask.sum())} row(s) malformed: {why}")
    return ~bad, notes


#: A number written with thousands separators, as a spreadsheet exports it ("1,234.5", "-12,000"): commas only
#: between groups of three digits, so a decimal comma ("1,5") is never read as one.
THOUSANDS = r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][-+]?\d+)?"


def map_distinct(series: pd.Series, fn) -> pd.Series:
    """``series.map(fn)`` (the same values and dtype) with ``fn`` (a pure function of one cell) called once per
    distinct value: a profile's shape, dtype and format cells repeat on most rows."""
    codes, uniques = pd.factorize(series)  # missing cells (None, NaN) get -1: ``fn`` sees them as they are
    values = np.empty(len(uniques), dtype=object)
    values[:] = [fn(v) for v in uniques]
    out = np.empty(len(series), dtype=object)
    known = codes >= 0
    out[known] = values.take(codes[known])
    if not known.all():
        out[~known] = [fn(v) for v in series.to_numpy(dtype=object)[~known]]
    return pd.Series(out.tolist(), index=series.index)  # from a list: its dtype inferred as map does


def numeric(series: pd.Series) -> pd.Series:
    """Float values of a text column (whitespace stripped; thousands separators dropped where the text is a
    number grouped by threes (:data:`THOUSANDS`); unparseable → NaN).

    Cells that read as numbers as they are (most of a profile) are converted in one go; only the others are
    stripped and matched against :data:`THOUSANDS` (the same values as doing it for every cell, a fraction of
    the time on 200,000-row files)."""
    out = pd.to_numeric(series.astype(str), errors="coerce").astype(float)
    miss = out.isna().to_numpy()
    if miss.any():
        out[miss] = _numeric_slow(series[miss]).to_numpy()
    return out


def _numeric_slow(series: pd.Series) -> pd.Series:
    text = series.astype(str).str.strip()
    grouped = text.str.fullmatch(THOUSANDS, na=False)
    if grouped.any():
        text = text.where(~grouped, text.str.replace(",", "", regex=False))
    return pd.to_numeric(text, errors="coerce").astype(float)
