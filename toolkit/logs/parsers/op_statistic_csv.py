"""The device profiler's op_statistic CSV (GUIDE §4): OP Type, Core Type, Count, Total Time(us), Avg Time(us),
Min Time(us), Max Time(us), Ratio(%) — plus, in npuscope's own files, a trailing Time Kind column.

Per op type, not per task, so ``op_summary`` is empty; the rows go to table ``op_statistic`` with exactly
:data:`toolkit.profile.optable.OP_STATISTIC_COLUMNS` (numbers as floats; a missing Core Type is ""; a file
without a Time Kind column, or an empty cell, is a real device's profile: Time Kind ``device``).
Malformed rows (counted, skipped): too many fields, no OP Type, a Count / Total Time(us) that is missing,
not a number, not finite, beyond 1e18 or negative, or another number column holding a non-finite value or
one beyond 1e18 (toolkit.logs.numbers).
"""

from __future__ import annotations

from pathlib import Path

from toolkit.logs.csvread import header, numeric, read_counted
from toolkit.logs.numbers import missing_or_sane, sane_mask
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
    df, skipped = read_counted(Path(path))
    for col in OP_STATISTIC_COLUMNS:
        if col not in df.columns:
            df[col] = ""
    df = df[OP_STATISTIC_COLUMNS].copy()
    df["Time Kind"] = df["Time Kind"].fillna("").astype(str).str.strip().replace("", "device")
    for col in _NUMBERS:
        df[col] = numeric(df[col])
    ok = (df["OP Type"].str.strip() != "") & sane_mask(df["Count"]) & (df["Count"] >= 0) \
        & sane_mask(df["Total Time(us)"]) & (df["Total Time(us)"] >= 0)
    for col in _NUMBERS:
        ok &= missing_or_sane(df[col])
    table = df[ok].reset_index(drop=True)
    return ParseResult(str(path), NAME, tables={"op_statistic": table}, records=len(table),
                       malformed=skipped + int((~ok).sum()),
                       notes=[f"{len(table)} op type(s), {table['Total Time(us)'].sum():.6g} us in total"])


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
