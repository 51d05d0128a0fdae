"""The device profiler's op_statistic CSV (GUIDE §4): OP Type, Core Type, Count, Total Time(us), Avg Time(us),
Min Time(us), Max Time(us), Ratio(%) — plus, in npuscope's own files, a trailing Time Kind column.

Per op type, not per task, so ``op_summary`` is empty; the rows go to table ``op_statistic`` with exactly
:data:`toolkit.profile.optable.OP_STATISTIC_COLUMNS` (numbers as floats; a missing Core Type is ""; a file
without a Time Kind column, or an empty cell, is a real device's profile: Time Kind ``device``; a Model Name of
``N/A``, the profiler's "no model", is empty: toolkit.logs.profcells.model_names).
Malformed rows (counted, skipped, each reason in a note): more or fewer fields than the header (never
shifted: toolkit.logs.csvread), no OP Type, a Count / Total Time(us) that is missing, not a number, not finite,
beyond 1e18 or negative, another number column holding a non-finite value or one beyond 1e18
(toolkit.logs.numbers), and impossible values: a Count that is not a whole number, a Count of 0 with a time
(Total / Avg / Min / Max) above 0, a negative Avg / Min / Max Time(us) or Ratio(%), or Min Time(us) above
Max Time(us). A header naming a column it reads twice makes the file unreadable (ValueError: ambiguous).
"""

from __future__ import annotations

from pathlib import Path

from toolkit.logs.csvread import header, malformed_mask, numeric, read_counted
from toolkit.logs.numbers import missing_or_sane, sane_mask
from toolkit.logs.profcells import model_names
from toolkit.logs.registry import Parser, ParseResult, register_parser
from toolkit.profile.optable import OP_STATISTIC_COLUMNS

NAME = "op_statistic_csv"
DESCRIPTION = "profiler op_statistic CSV (OP Type, Core Type, Count, Total Time(us), ...)"
_NUMBERS = ["Count", "Total Time(us)", "Avg Time(us)", "Min Time(us)", "Max Time(us)", "Ratio(%)"]


def detect(path: Path, head: str) -> bool:
    cols = set(header(head))
    return {"OP Type", "Count", "Total Time(us)"} <= cols and "Op Name" not in cols


def parse(path: Path) -> ParseResult:
    """Read an op_statistic CSV (module docstring)."""
    read = read_counted(Path(path), OP_STATISTIC_COLUMNS)
    df = read.frame
    for col in OP_STATISTIC_COLUMNS:
        if col not in df.columns:
            df[col] = ""
    df = df[OP_STATISTIC_COLUMNS].copy()
    df["Time Kind"] = df["Time Kind"].fillna("").astype(str).str.strip().replace("", "device")
    df["Model Name"] = model_names(df["Model Name"])
    for col in _NUMBERS:
        df[col] = numeric(df[col])
    ok, why = malformed_mask(_checks(df))
    table = df[ok].reset_index(drop=True)
    return ParseResult(str(path), NAME, tables={"op_statistic": table}, records=len(table),
                       malformed=read.malformed + int((~ok).sum()),
                       notes=[f"{len(table)} op type(s), {table['Total Time(us)'].sum():.6g} us in total"]
                       + read.notes + why)


def _checks(df) -> dict:
    """{why: rows that are malformed for it} (module docstring)."""
    count, total = df["Count"], df["Total Time(us)"]
    times = ["Total Time(us)", "Avg Time(us)", "Min Time(us)", "Max Time(us)"]
    checks = {"no OP Type": df["OP Type"].str.strip() == "",
              "Count missing, not a number, not finite or beyond 1e18": ~sane_mask(count),
              "Total Time(us) missing, not a number, not finite or beyond 1e18": ~sane_mask(total),
              "Count not a whole number": count.notna() & (count != count.round()),
              "Count 0 with a time above 0": (count == 0) & (df[times] > 0).any(axis=1)}
    for col in _NUMBERS:
        checks[f"{col} not finite or beyond 1e18"] = ~missing_or_sane(df[col])
        checks[f"negative {col}"] = df[col] < 0
    checks["Min Time(us) above Max Time(us)"] = df["Min Time(us)"] > df["Max Time(us)"]
    return checks


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
