"""torch_npu's kernel_details.csv (Ascend PyTorch Profiler, ``ASCEND_PROFILER_OUTPUT/kernel_details.csv``).

Format (the Ascend PyTorch Profiler user guide, "kernel_details.csv", Table 1; base header constant
``OP_SUMMARY_KERNEL_BASE_HEADERS`` in torch_npu's ``profiler/analysis/prof_common_func/_csv_headers.py``): one
row per task executed on the NPU with the columns ``[Step Id,] Device_id, [Model ID, Task ID, Stream ID,] Name,
Type, [OP State,] Accelerator Core, Start Time(us), Duration(us), Wait Time(us), Block Num | Block Dim,
[Mix Block Num, HF32 Eligible, Input Shapes, Input Data Types, Input Formats, Output Shapes, Output Data Types,
Output Formats]`` and, with ``aic_metrics`` on, PMU columns after them (ignored). It is a projection of msprof's
op_summary, so each row becomes one op-summary task:

=====================  =====================
kernel_details          op_summary
=====================  =====================
Name                    Op Name
Type                    OP Type
Accelerator Core        Task Type (``AI Core`` / ``AI_CORE`` → AI_CORE, ``AI CPU`` → AI_CPU, spaces → ``_``,
                        upper case; ``MIXED_AIC`` → MIX_AIC)
Start Time(us)          Task Start Time(us)
Duration(us)            Task Duration(us)
Wait Time(us)           Task Wait Time(us)
Block Num / Block Dim   Block Dim (older versions of the guide name it Block Dim)
Task ID, Stream ID, Input/Output Shapes, Data Types, Formats: same names
=====================  =====================

Detected by a header holding ``Name``, ``Type``, ``Accelerator Core`` and ``Duration(us)``. Time Kind is
``device``, Source the file name. Model Name stays empty: the file names no model (``Step Id`` is a training
step, not a model, and is not read). Collective communication rows (HCCL) get Task Type COMMUNICATION, as in
op_summary (toolkit.logs.profcells). Malformed rows (counted, skipped, each reason in a note): more or
fewer fields than the header (toolkit.logs.csvread), no Name, a Duration(us) that is missing, not a number, not
finite, beyond 1e18 or negative, a negative Start Time(us) / Wait Time(us), a Task ID / Stream ID / Block Num
that is negative or not a whole number, another number that is not finite or beyond 1e18. A header naming a
column it reads twice makes the file unreadable (ValueError: ambiguous).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from toolkit.logs.csvread import header, malformed_mask, map_distinct, numeric, read_counted
from toolkit.logs.profcells import COMMUNICATION, communication_rows, start_columns, unquote
from toolkit.logs.numbers import missing_or_sane, sane_mask
from toolkit.logs.registry import Parser, ParseResult, register_parser
from toolkit.profile.optable import op_summary_frame

NAME = "kernel_details_csv"
DESCRIPTION = "torch_npu kernel_details.csv (Name, Type, Accelerator Core, Start Time(us), Duration(us), ...)"
#: kernel_details column -> op_summary column (module docstring).
RENAME = {"Name": "Op Name", "Type": "OP Type", "Accelerator Core": "Task Type",
          "Start Time(us)": "Task Start Time(us)", "Duration(us)": "Task Duration(us)", "Wait Time(us)": "Task Wait Time(us)", "Block Num": "Block Dim",
          "Block Dim": "Block Dim", "Mix Block Num": "Mix Block Dim", "Mix Block Dim": "Mix Block Dim",
          "Device_id": "Device_id"}
SAME = ["Task ID", "Stream ID", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
        "Output Data Types", "Output Formats"]
_NUMBERS = ["Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Mix Block Dim", "Task ID", "Stream ID"]
_CORES = {"AI_CORE": "AI_CORE", "AICORE": "AI_CORE", "AI_CPU": "AI_CPU", "AICPU": "AI_CPU",
          "AI_VECTOR_CORE": "AI_VECTOR_CORE", "AIV": "AI_VECTOR_CORE", "MIXED_AIC": "MIX_AIC",
          "MIXED_AIV": "MIX_AIV"}


def detect(path: Path, head: str) -> bool:
    return {"Name", "Type", "Accelerator Core", "Duration(us)"} <= set(header(head))


def task_type(core: str) -> str:
    """The op_summary Task Type of an Accelerator Core value (module docstring): ``AI Core`` → AI_CORE."""
    key = "_".join(str(core).strip().upper().split())
    return _CORES.get(key, key)


def parse(path: Path) -> ParseResult:
    """Read a kernel_details.csv (module docstring); rows are typed chunk by chunk as they are read
    (:func:`typed`, toolkit.logs.csvread.read_counted: bounded memory)."""
    path = Path(path)
    read = read_counted(path, list(RENAME) + SAME, convert=typed)
    df = read.frame
    ok, why = malformed_mask(_checks(df))
    good = df[ok].assign(**{"Time Kind": "device", "Source": path.name})
    summary = op_summary_frame(good) if len(good) else op_summary_frame([])
    return ParseResult(str(path), NAME, op_summary=summary, records=len(summary),
                       malformed=read.malformed + int((~ok).sum()), notes=read.notes + why)


def typed(src: pd.DataFrame) -> pd.DataFrame:
    """Rows of a kernel_details.csv (text cells) as op_summary columns (module docstring); row by row, so any
    chunk of a file gives its rows' part."""
    for num, dim in (("Block Num", "Block Dim"), ("Mix Block Num", "Mix Block Dim")):  # both: the Num one
        if num in src.columns and dim in src.columns:
            src = src.drop(columns=[dim])
    df = pd.DataFrame(index=src.index)
    for old, new in RENAME.items():
        if old in src.columns:
            df[new] = src[old].astype(str)
    for col in SAME:
        if col in src.columns:
            df[col] = src[col].astype(str)
    for col in _NUMBERS:
        df[col] = numeric(df[col]) if col in df.columns else float("nan")
    df["Task Start Time(us)"], df["Task Start Time(ns)"] = start_columns(src, "Start Time(us)")
    for col in ("Input Shapes", "Output Shapes"):
        if col in df.columns:
            df[col] = map_distinct(df[col], unquote)
    df["Task Type"] = map_distinct(df["Task Type"], task_type) if "Task Type" in df.columns else ""
    comm = communication_rows(df)
    if comm.any():
        df["Task Type"] = df["Task Type"].where(~comm, COMMUNICATION)
    return df


def _checks(df) -> dict:
    """{why: rows that are malformed for it} (module docstring)."""
    dur = df["Task Duration(us)"]
    checks = {"no Name": df["Op Name"].str.strip() == "",
              "Duration(us) missing, not a number, not finite or beyond 1e18": ~sane_mask(dur),
              "negative Duration(us)": dur < 0}
    for col in _NUMBERS:
        if col != "Task Duration(us)":
            checks[f"{col} not finite or beyond 1e18"] = ~missing_or_sane(df[col])
    checks["Task Start Time(us) not finite or beyond 1e18"] = ~missing_or_sane(df["Task Start Time(us)"])
    for col in ("Task Start Time(us)", "Task Wait Time(us)"):
        checks[f"negative {col}"] = df[col] < 0
    for col in ("Task ID", "Stream ID", "Block Dim"):
        fractional = df[col].notna() & (df[col] != df[col].round())
        checks[f"{col} negative or not a whole number"] = (df[col] < 0) | fractional
    return checks


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
