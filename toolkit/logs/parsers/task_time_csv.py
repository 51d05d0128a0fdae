"""msprof's task_time CSV (``task_time_*.csv``: one row per device task, older exports and per-task summaries).

Format (CANN profiling data reference, "task_time"): ``[Device_id,] kernel_name, kernel_type, stream_id, task_id,
task_time(us), task_start(ns | us), task_stop(ns | us)``; newer exports write the start and stop in µs,
older ones in ns (the unit is in the column name). Each row is a device task (Time Kind ``device``):
kernel_name → Op Name, kernel_type → Task Type (KERNEL_AICORE → AI_CORE, KERNEL_AIVEC → AI_VECTOR_CORE,
KERNEL_AICPU → AI_CPU, MEMCPY_ASYNC → MEMCPY: :data:`KERNEL_TYPES`; ``AI Core`` → AI_CORE; HCCL rows
COMMUNICATION), stream_id →
Stream ID, task_id → Task ID, task_time(us) → Task Duration(us), task_start → Task Start Time(us) and the exact
Task Start Time(ns) (toolkit.logs.profcells). Detected by a header holding kernel_name and task_time(us).
Malformed rows (counted, skipped): a field count other than the header's, no kernel_name, a task_time(us) that
is missing, not a number or negative, a negative start.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from toolkit.logs.csvread import header, malformed_mask, numeric, read_counted
from toolkit.logs.numbers import sane_mask
from toolkit.logs.parsers.kernel_details_csv import task_type
from toolkit.logs.profcells import COMMUNICATION, communication_rows, start_columns
from toolkit.logs.registry import Parser, ParseResult, register_parser
from toolkit.profile.optable import op_summary_frame

NAME = "task_time_csv"
DESCRIPTION = "profiler task_time CSV (kernel_name, kernel_type, stream_id, task_id, task_time(us), task_start)"
USED = ["Device_id", "kernel_name", "kernel_type", "stream_id", "task_id", "task_time(us)", "task_start(ns)",
        "task_start(us)"]


#: task_time's kernel_type values (the runtime's task types, e.g. KERNEL_AICORE, MEMCPY_ASYNC) → op_summary Task
#: Type, so that the findings on AI_CPU fallbacks and transfers see them; others go through kernel_details'
#: Accelerator Core mapping (``AI Core`` → AI_CORE).
KERNEL_TYPES = {"KERNEL_AICORE": "AI_CORE", "KERNEL_AIVEC": "AI_VECTOR_CORE", "KERNEL_AICPU": "AI_CPU",
                "KERNEL_MIX_AIC": "MIX_AIC", "KERNEL_MIX_AIV": "MIX_AIV", "KERNEL_HOSTCPU": "HOST_CPU",
                "MEMCPY_ASYNC": "MEMCPY", "MEMCPY": "MEMCPY"}


def kernel_type(value: str) -> str:
    """The op_summary Task Type of a task_time kernel_type (:data:`KERNEL_TYPES`, else kernel_details' mapping)."""
    key = "_".join(str(value).strip().upper().split())
    return KERNEL_TYPES.get(key) or task_type(value)


def detect(path: Path, head: str) -> bool:
    return {"kernel_name", "task_time(us)"} <= set(header(head))


def parse(path: Path) -> ParseResult:
    """Read a task_time CSV (module docstring); rows are typed chunk by chunk as they are read (:func:`typed`,
    toolkit.logs.csvread.read_counted: bounded memory)."""
    path = Path(path)
    read = read_counted(path, USED, convert=typed)
    df = read.frame
    ok, why = malformed_mask({"no kernel_name": df["Op Name"] == "",
                              "task_time(us) missing, not a number or beyond 1e18": ~sane_mask(df["Task Duration(us)"]),
                              "negative task_time(us)": df["Task Duration(us)"] < 0,
                              "negative task_start": df["Task Start Time(us)"] < 0})
    good = df[ok].assign(**{"Time Kind": "device", "Source": path.name})
    summary = op_summary_frame(good) if len(good) else op_summary_frame([])
    return ParseResult(str(path), NAME, op_summary=summary, records=len(summary),
                       malformed=read.malformed + int((~ok).sum()), notes=read.notes + why)


def typed(src: pd.DataFrame) -> pd.DataFrame:
    """Rows of a task_time CSV (text cells) as op_summary columns (module docstring); row by row."""
    col = lambda c: src[c].astype(str) if c in src.columns else pd.Series("", index=src.index)  # noqa: E731
    df = pd.DataFrame({"Op Name": col("kernel_name").str.strip(), "Task Type": col("kernel_type").map(kernel_type),
                       "Stream ID": numeric(col("stream_id")), "Task ID": numeric(col("task_id")),
                       "Task Duration(us)": numeric(col("task_time(us)")), "Device_id": col("Device_id").str.strip()})
    if "task_start(us)" in src.columns:
        df["Task Start Time(us)"], df["Task Start Time(ns)"] = start_columns(src, "task_start(us)")
    else:
        df["Task Start Time(us)"], df["Task Start Time(ns)"] = start_columns(src, "", "task_start(ns)")
    comm = communication_rows(df)
    df["Task Type"] = df["Task Type"].where(~comm, COMMUNICATION)
    return df


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
