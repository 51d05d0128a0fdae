"""The device profiler's op_summary CSV (GUIDE §4), also as written by ``npuscope profile`` / ``parse-log``.

Detected by a header holding ``Op Name`` and ``Task Duration(us)``. Columns of
:data:`toolkit.profile.optable.OP_SUMMARY_COLUMNS` are read (others, e.g. the real profiler's aicore_time(us),
are ignored); numbers may carry whitespace. Across toolchain versions (msprof's
profile_data_file_references.md, op_summary; torch_npu's ``_csv_headers.py``; toolkit.logs.profcells): ``Block
Num`` is read as Block Dim and ``Mix Block Num`` as Mix Block Dim when the older name is absent; Device_id is
kept; Task Start Time(ns) is the exact start (from the µs column's decimals, or the older unit-less ``Task Start
Time`` in ns, which also gives Task Start Time(us); a file that has a Task Start Time(ns) column, as ours, keeps it
as written); shape / dtype / format cells lose the quotes around them
(also tripled ones); collective communication rows (HCCL Task Type, hcom_* / Hccl* ops) get Task Type
COMMUNICATION; a Model Name of ``N/A`` (a run with no model: toolkit.logs.profcells.model_names) is empty. A
file without a ``Time Kind`` column is a real device's profile
(Time Kind ``device``); empty Time Kind cells are ``device`` too. Empty Source cells become the file name.

Malformed rows (counted, skipped, each reason in a note): more or fewer fields than the header (never
shifted: toolkit.logs.csvread), no Op Name, a Task Duration(us) that is missing, not a number, not finite,
beyond 1e18 or negative, any other numeric column (Task Start Time(us), Stream ID, ...) holding a number that
is not finite or beyond 1e18 (toolkit.logs.numbers; an empty or non-numeric cell there is just missing), a
negative Task Start Time(us) / Task Wait Time(us), or a Task ID / Stream ID / Block Dim that is negative or not
a whole number. A header naming a column it reads twice makes the file unreadable (ValueError: ambiguous).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from toolkit.logs.csvread import header, malformed_mask, map_distinct, numeric, read_counted
from toolkit.logs.profcells import COMMUNICATION, communication_rows, model_names, ns_text, start_columns, unquote
from toolkit.logs.numbers import missing_or_sane, sane_mask
from toolkit.logs.registry import Parser, ParseResult, register_parser
from toolkit.profile.optable import (
    NUMERIC_COLUMNS,
    OP_SUMMARY_COLUMNS,
    op_summary_frame,
)

NAME = "op_summary_csv"
#: cells written quoted (``"1,3,224,224"``, some exports triple the quotes)
TEXT_CELLS = ["Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
              "Output Formats"]
DESCRIPTION = "profiler op_summary CSV (Op Name, OP Type, Task Type, Task Start Time(us), Task Duration(us), ...)"


def detect(path: Path, head: str) -> bool:
    cols = set(header(head))
    return "Op Name" in cols and "Task Duration(us)" in cols


def parse(path: Path) -> ParseResult:
    """Read an op_summary CSV (module docstring); rows are typed chunk by chunk as they are read (:func:`typed`,
    toolkit.logs.csvread.read_counted: bounded memory)."""
    path = Path(path)
    read = read_counted(path, OP_SUMMARY_COLUMNS + ["Block Num", "Mix Block Num", "Task Start Time"],
                        convert=lambda chunk: typed(chunk, path.name))
    df = read.frame
    notes = list(read.notes)
    if "Time Kind" not in read.columns:
        notes.append("no Time Kind column: read as a real device's profile (Time Kind 'device')")
    ok, why = malformed_mask(_checks(df))
    summary = op_summary_frame(df[ok])
    return ParseResult(str(path), NAME, op_summary=summary, records=len(summary),
                       malformed=read.malformed + int((~ok).sum()), notes=notes + why)


def typed(src: pd.DataFrame, source: str) -> pd.DataFrame:
    """Rows of an op_summary CSV (text cells) as op_summary columns: numbers as floats (NaN where missing),
    exact start times, shape cells unquoted, communication rows' Task Type, Time Kind ``device`` where absent,
    Source ``source`` where empty (module docstring). Row by row: any chunk of a file gives its rows' part."""
    for new, old in (("Block Dim", "Block Num"), ("Mix Block Dim", "Mix Block Num")):
        if old in src.columns and new not in src.columns:
            src = src.rename(columns={old: new})
    df = src[[c for c in OP_SUMMARY_COLUMNS if c in src.columns and c != "Task Start Time(ns)"]].copy()
    for col in NUMERIC_COLUMNS:
        if col in df.columns and col != "Task Start Time(us)":
            df[col] = numeric(df[col])
    if "Task Start Time(us)" in src.columns or "Task Start Time" in src.columns:
        df["Task Start Time(us)"], df["Task Start Time(ns)"] = start_columns(src, "Task Start Time(us)",
                                                                             "Task Start Time")
    if "Task Start Time(ns)" in src.columns:  # our own op_summary.csv: its exact starts (or none) as written
        df["Task Start Time(ns)"] = src["Task Start Time(ns)"].map(ns_text)
    for col in TEXT_CELLS:
        if col in df.columns:
            df[col] = map_distinct(df[col], unquote)
    if "Task Type" in df.columns or "OP Type" in df.columns:
        comm = communication_rows(df)
        if comm.any():
            df["Task Type"] = df.get("Task Type", "").where(~comm, COMMUNICATION)
    if "Model Name" in df.columns:
        df["Model Name"] = model_names(df["Model Name"])
    df["Time Kind"] = df["Time Kind"].str.strip().replace("", "device") if "Time Kind" in df.columns else "device"
    df["Source"] = df["Source"].replace("", source) if "Source" in df.columns else source
    return df


def _checks(df) -> dict:
    """{why: rows that are malformed for it} (module docstring)."""
    dur = df["Task Duration(us)"]
    checks = {"no Op Name": df["Op Name"].str.strip() == "",
              "Task Duration(us) missing, not a number, not finite or beyond 1e18": ~sane_mask(dur),
              "negative Task Duration(us)": dur < 0}
    for col in NUMERIC_COLUMNS:
        if col in df.columns and col != "Task Duration(us)":
            checks[f"{col} not finite or beyond 1e18"] = ~missing_or_sane(df[col])
    for col in ("Task Start Time(us)", "Task Wait Time(us)"):
        if col in df.columns:
            checks[f"negative {col}"] = df[col] < 0
    for col in ("Task ID", "Stream ID", "Block Dim"):
        if col in df.columns:
            checks[f"{col} negative or not a whole number"] = (df[col] < 0) | (df[col].notna() & (df[col] != df[col].round()))
    return checks


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
