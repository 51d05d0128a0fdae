"""msprof's API time statistics: ``api_statistic_*.csv`` and its older form ``acl_statistic_*.csv``.

Formats (CANN profiling data reference): api_statistic ``Device_id, Level (AscendCL / Runtime / Node / Model /
HCCL / Communication), API Name, Time(us), Count, Avg(us), Min(us), Max(us), Variance``; acl_statistic ``Name,
Type, Time(%), Time(us), Count, Avg(us), Min(us), Max(us), [Process ID, Thread ID]`` (AscendCL APIs only).
These are host API times, never device task time: no op_summary rows. Table ``api_statistic``: Device_id
("host" for host data), Level (acl_statistic: its Type), API Name, Count, Total Time(us), Avg(us), Min(us),
Max(us), Variance. Detected by a header holding API Name (or Name and Type), Time(us) and Count. Malformed rows
(counted, skipped): a field count other than the header's, no API name, a Count or Time(us) that is missing,
not a number or negative.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from toolkit.logs.csvread import header, malformed_mask, numeric, read_counted
from toolkit.logs.numbers import sane_mask
from toolkit.logs.registry import Parser, ParseResult, register_parser

NAME = "api_statistic_csv"
DESCRIPTION = "profiler api_statistic / acl_statistic CSV (API Name or Name, Type; Time(us), Count, Avg/Min/Max)"
COLUMNS = ["Device_id", "Level", "API Name", "Count", "Total Time(us)", "Avg(us)", "Min(us)", "Max(us)", "Variance"]
_NUMBERS = ["Count", "Total Time(us)", "Avg(us)", "Min(us)", "Max(us)", "Variance"]


def detect(path: Path, head: str) -> bool:
    cols = set(header(head))
    return {"Time(us)", "Count"} <= cols and ("API Name" in cols or {"Name", "Type"} <= cols) \
        and "OP Type" not in cols


def parse(path: Path) -> ParseResult:
    """Read an api_statistic / acl_statistic CSV (module docstring)."""
    read = read_counted(Path(path), ["Device_id", "Level", "API Name", "Name", "Type", "Time(us)", "Count", "Avg(us)",
                                     "Min(us)", "Max(us)", "Variance"])
    src = read.frame
    col = lambda c: src[c].astype(str).str.strip() if c in src.columns else pd.Series("", index=src.index)  # noqa: E731
    old = "API Name" not in src.columns
    df = pd.DataFrame({"Device_id": col("Device_id"), "Level": col("Type") if old else col("Level"),
                       "API Name": col("Name") if old else col("API Name"), "Count": numeric(col("Count")),
                       "Total Time(us)": numeric(col("Time(us)"))})
    for c in ("Avg(us)", "Min(us)", "Max(us)", "Variance"):
        df[c] = numeric(col(c))
    ok, why = malformed_mask({"no API name": df["API Name"] == "",
                              "Count missing or not a number": ~sane_mask(df["Count"]),
                              "Time(us) missing or not a number": ~sane_mask(df["Total Time(us)"]),
                              "negative Count or Time(us)": (df["Count"] < 0) | (df["Total Time(us)"] < 0)})
    table = df[ok].reset_index(drop=True)[COLUMNS]
    form = "acl_statistic" if old else "api_statistic"
    return ParseResult(str(path), NAME, tables={"api_statistic": table}, records=len(table),
                       malformed=read.malformed + int((~ok).sum()),
                       notes=[f"{form}: {len(table)} API(s), host time {table['Total Time(us)'].sum():.6g} us "
                              "(not device task time)"] + read.notes + why)


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
