"""The per-op table every profiling source is brought to, in the real profiler's column names.

Both ``npuscope profile`` (simulated device time from the cost model and schedule) and ``npuscope parse-log``
(profiles and logs from real devices, onnxruntime profiling JSON, Chrome traces) produce an *op summary*: one
row per executed task (a kernel launch, a copy, a CPU op), with the columns of the device profiler's
op_summary CSV (GUIDE §4), and derive the *op statistic* (one row per op type) from it with
:func:`op_statistic`.

op_summary columns (:data:`OP_SUMMARY_COLUMNS`): Model Name, Task ID, Stream ID, Op Name, OP Type, Task Type
(AI_CORE, AI_VECTOR_CORE, AI_CPU, MIX_AIC, MIX_AIV; ours add HOST_CPU for measured host work and MEMCPY for
host-device copies), Task Start Time(us), Task Duration(us), Task Wait Time(us), Block Dim, Input Shapes,
Input Data Types, Input Formats, Output Shapes, Output Data Types, Output Formats, two of ours:
Time Kind (``simulated`` for cost-model device time, ``measured`` for wall time measured on this host,
``device`` for times read from a real device's profile, ``host`` for a real profile's host API spans) and Source
(the file or run the row comes from), then three the profilers write in some versions only, each under one name
whatever the version calls it: Device_id (msprof's), Mix Block Dim (``Mix Block Num`` / ``Mix Block Dim``; Block
Dim is also read from ``Block Num``) and Task Start Time(ns) (the start as exact integer text: from the µs
column's decimals, or from the older unit-less ``Task Start Time``, which is in ns; Task Start Time(us) is the
same instant as a float, whose 0.25 µs resolution at today's clock values is why the ns text is kept). Task Type
``COMMUNICATION`` marks collective communication (HCCL) rows, a class of their own.
Times are in microseconds. Columns a source does not know are empty strings (text) or NaN (numbers).

op_statistic columns (:data:`OP_STATISTIC_COLUMNS`): the profiler's OP Type, Core Type, Count, Total Time(us),
Avg Time(us), Min Time(us), Max Time(us), Ratio(%) (:data:`PROFILER_STATISTIC_COLUMNS`), then one of ours,
Time Kind: one row per (Time Kind, OP Type, Core Type), and Ratio(%) is the op type's share of the summed Task
Duration(us) *of its Time Kind* — simulated device time, measured host time and real device time are different
clocks and are never added together (each kind's Ratio(%) sums to 100). Kinds in :data:`TIME_KINDS` order.
"""

from __future__ import annotations

import pandas as pd

OP_SUMMARY_COLUMNS = [
    "Model Name", "Task ID", "Stream ID", "Op Name", "OP Type", "Task Type", "Task Start Time(us)",
    "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes", "Input Data Types", "Input Formats",
    "Output Shapes", "Output Data Types", "Output Formats", "Time Kind", "Source", "Device_id", "Mix Block Dim",
    "Task Start Time(ns)",
]
NUMERIC_COLUMNS = ["Task ID", "Stream ID", "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)",
                   "Block Dim", "Mix Block Dim"]
#: Columns the profiler writes as integers (op_summary: Task ID, Stream ID, Block Dim; op_statistic: Count).
INTEGER_COLUMNS = ["Task ID", "Stream ID", "Block Dim", "Mix Block Dim", "Count"]
PROFILER_STATISTIC_COLUMNS = ["OP Type", "Core Type", "Count", "Total Time(us)", "Avg Time(us)", "Min Time(us)",
                              "Max Time(us)", "Ratio(%)"]
OP_STATISTIC_COLUMNS = PROFILER_STATISTIC_COLUMNS + ["Time Kind", "Device_id", "Model Name"]
TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "HOST_CPU", "MEMCPY", "COMMUNICATION")
TIME_KINDS = ("simulated", "measured", "device", "host")


def op_summary_frame(rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """An op summary with exactly :data:`OP_SUMMARY_COLUMNS`, in that order: missing text columns become "",
    missing numeric ones NaN; numeric columns are converted to float (unparseable values become NaN).

    Raises:
        ValueError: a row has no "Op Name" or no "Task Duration(us)" column at all.
    """
    df = pd.DataFrame(rows) if not isinstance(rows, pd.DataFrame) else rows.copy()
    if len(df) and ("Op Name" not in df.columns or "Task Duration(us)" not in df.columns):
        raise ValueError("an op summary needs the columns 'Op Name' and 'Task Duration(us)'")
    for col in OP_SUMMARY_COLUMNS:
        if col not in df.columns:
            df[col] = float("nan") if col in NUMERIC_COLUMNS else ""
    for col in NUMERIC_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    return df[OP_SUMMARY_COLUMNS].reset_index(drop=True)


def integer_columns(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` for writing: each of its :data:`INTEGER_COLUMNS` whose present values are all whole
    numbers becomes pandas' nullable ``Int64`` (a CSV then shows ``2``, not ``2.0``, and a missing value stays
    an empty cell). A column holding a fractional or non-numeric value is left unchanged, so no value is
    altered. In-memory tables keep float numeric columns (:func:`op_summary_frame`)."""
    out = df.copy()
    for col in INTEGER_COLUMNS:
        if col not in out.columns:
            continue
        vals = pd.to_numeric(out[col], errors="coerce")
        present = vals.dropna()
        if present.notna().sum() != out[col].notna().sum() or not (present == present.round()).all():
            continue
        if len(present) and present.abs().max() >= 2 ** 53:
            continue
        out[col] = vals.round().astype("Int64")
    return out


def kind_order(kinds) -> list[str]:
    """The distinct Time Kinds of ``kinds`` in :data:`TIME_KINDS` order, unknown ones after (first-seen order)."""
    seen = list(dict.fromkeys(str(k) for k in kinds))
    return [k for k in TIME_KINDS if k in seen] + [k for k in seen if k not in TIME_KINDS]


def op_statistic(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (Time Kind, Device_id, Model Name, OP Type, Core Type) totals of an op summary
    (:data:`OP_STATISTIC_COLUMNS`): kinds in :func:`kind_order`, then devices and models in first-seen order,
    largest Total Time(us) first within each.

    Core Type is the row's Task Type; a row without a Time Kind counts as ``device``. Rows with a NaN duration
    are left out. Ratio(%) is the share of the total of its (Time Kind, Device_id, Model Name): two devices' or
    two models' rows are never merged nor share one 100% (sums to 100 per group; 0 for every row of a group
    whose total is 0).
    """
    df = summary.dropna(subset=["Task Duration(us)"])
    if df.empty:
        return pd.DataFrame(columns=OP_STATISTIC_COLUMNS)
    kinds = df["Time Kind"].astype(str).str.strip().replace("", "device") if "Time Kind" in df.columns \
        else pd.Series("device", index=df.index)
    device = df["Device_id"].astype(str).str.strip() if "Device_id" in df.columns else pd.Series("", index=df.index)
    model = df["Model Name"].astype(str).str.strip() if "Model Name" in df.columns else pd.Series("", index=df.index)
    parts = []
    for k in kind_order(kinds):
        in_kind = kinds == k
        for d, m in dict.fromkeys(zip(device[in_kind], model[in_kind])):
            rows = df[in_kind & (device == d) & (model == m)]
            parts.append(_statistic_of(rows).assign(**{"Time Kind": k, "Device_id": d, "Model Name": m}))
    return pd.concat(parts, ignore_index=True)[OP_STATISTIC_COLUMNS]


def share_pct(totals: pd.Series):
    """Each value's share of the sum of ``totals``, in percent (0 for every row when the sum is not above 0)."""
    total = totals.sum()
    return totals / total * 100.0 if total > 0 else 0.0


def _statistic_of(df: pd.DataFrame) -> pd.DataFrame:
    g = df.groupby([df["OP Type"].astype(str), df["Task Type"].astype(str)], sort=False)["Task Duration(us)"]
    out = g.agg(["count", "sum", "mean", "min", "max"]).reset_index()
    out.columns = PROFILER_STATISTIC_COLUMNS[:-1]
    out["Ratio(%)"] = share_pct(out["Total Time(us)"])
    return out.sort_values("Total Time(us)", ascending=False, kind="stable").reset_index(drop=True)
