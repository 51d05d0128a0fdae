"""CSV helpers shared by the CSV parsers: header sniffing and a read that counts skipped lines.

Numbers in the device profiler's CSVs may carry a trailing tab (it keeps spreadsheets from reformatting long
timestamps) or ``N/A``; :func:`numeric` strips whitespace and turns anything unparseable into NaN.
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import pandas as pd

from toolkit.logs.detect import head_lines
from toolkit.report.csvjson import undo_formula_safe


def header(head: str) -> list[str]:
    """The column names of the first non-blank line of a CSV head (stripped; [] when unreadable)."""
    lines = head_lines(head, 1)
    if not lines:
        return []
    try:
        return [c.strip() for c in next(csv.reader([lines[0]]))]
    except (csv.Error, StopIteration):
        return []


def read_counted(path: Path) -> tuple[pd.DataFrame, int]:
    """All cells as strings (missing → ""), and the number of lines pandas skipped for having too many fields.

    Raises:
        pandas.errors.ParserError, UnicodeError, ValueError: the file cannot be read as CSV at all.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig", encoding_errors="replace",
                         on_bad_lines="warn", skip_blank_lines=True)
    skipped = sum(str(w.message).count("Skipping line") for w in caught)
    df = undo_formula_safe(df)  # our own CSVs prefix formula-like names with ' (toolkit.report.csvjson)
    df.columns = [str(c).strip() for c in df.columns]
    return df, skipped


def numeric(series: pd.Series) -> pd.Series:
    """Float values of a text column (whitespace stripped; unparseable → NaN)."""
    return pd.to_numeric(series.astype(str).str.strip(), errors="coerce").astype(float)
