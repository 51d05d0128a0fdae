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
from toolkit.logs.detect import head_lines


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
        frame: the data rows, all cells as strings, columns = the header's names (stripped; a name the header
            repeats keeps its first column only).
        malformed: rows skipped because their number of fields differs from the header's (more *or* fewer:
            a row is never shifted into other columns nor padded) or the csv module could not read them (a NUL
            byte, a field over :data:`MAX_FIELD_CHARS`).
        notes: what was skipped, ignored or decoded otherwise than as UTF-8 (toolkit.core.textfile.TextReader:
            "decoded as GB18030 (not UTF-8)", a count of bytes replaced with U+FFFD), one line each.
    """

    frame: pd.DataFrame
    malformed: int = 0
    notes: list[str] = field(default_factory=list)


#: The longest field read (characters); a longer one makes its row malformed.
MAX_FIELD_CHARS = 1 << 20


def read_counted(path: Path, used: list[str] | tuple[str, ...] = (), rename=None) -> CsvRows:
    """Read a CSV with a header row (the first non-blank row) with Python's csv module, streamed from a regular
    file only, decoded by toolkit.core.textfile.TextReader: a UTF-8 BOM skipped; UTF-8, or GB18030 for a file that
    is not UTF-8 but GB18030 (a CSV re-saved by Excel on Chinese-locale Windows); other bytes replaced with U+FFFD,
    counted in a note.

    Rows of only blank cells are skipped (not malformed). A row with more or fewer fields than the header is
    malformed (counted, skipped; pandas would have shifted every cell of such rows one column to the right, its
    implicit index column). A header naming one column several times: when the column is one of ``used``
    (the columns the parser reads) which cell holds the data is ambiguous, so the file is refused; otherwise
    a note says so. ``rename(header) -> header`` (same length) renames the stripped header first, e.g. to tell
    apart the columns a format repeats by their position (the compare tool's two DataType columns).

    Raises:
        ValueError: no header row; a column of ``used`` named twice in the header.
        OSError (toolkit.core.textfile.NotRegularFile): not a regular file.
    """
    rows, bad, width, head = [], 0, 0, None
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
                    head, width = [c.strip() for c in row], len(row)
                elif len(row) != width:
                    bad += 1
                else:
                    rows.append(row)
    finally:
        csv.field_size_limit(limit)
    if head is None:
        raise ValueError("no header row")
    if rename is not None:
        head = list(rename(head))
    names, notes = _unique_header(head, used)
    keep = sorted(names.values())
    cells = np.empty((len(rows), len(keep)), dtype=object)  # one 2-D block: linear in the number of columns
    for j, r in enumerate(rows):
        cells[j] = r if len(keep) == width else [r[i] for i in keep]
    frame = pd.DataFrame(cells, columns=[head[i] for i in keep], dtype=object)
    frame = undo_formula_safe(frame)  # our own CSVs prefix formula-like names with ' (toolkit.core.csvjson)
    frame.columns = [str(c).strip() for c in frame.columns]
    notes += text.notes()
    if bad:
        notes.append(f"{bad} row(s) with a number of fields other than the header's {width} skipped (malformed)")
    return CsvRows(frame, bad, notes)


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


def malformed_mask(checks: dict[str, pd.Series]) -> tuple[pd.Series, list[str]]:
    """(rows that pass every check, one note per failed check). ``checks``: {why a row is malformed: boolean
    Series true for the rows it catches}, all on the same index; a note reads "N row(s) malformed: <why>"
    (a row failing several checks is counted under each)."""
    bad = None
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


def numeric(series: pd.Series) -> pd.Series:
    """Float values of a text column (whitespace stripped; thousands separators dropped where the text is a
    number grouped by threes (:data:`THOUSANDS`); unparseable → NaN)."""
    text = series.astype(str).str.strip()
    grouped = text.str.fullmatch(THOUSANDS, na=False)
    if grouped.any():
        text = text.where(~grouped, text.str.replace(",", "", regex=False))
    return pd.to_numeric(text, errors="coerce").astype(float)
