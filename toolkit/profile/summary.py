"""The profile as the real profiler's tables (toolkit.profile.optable): op_summary rows for the simulated
schedule (Time Kind ``simulated``), the measured host wall time of every kernel of the simulated run and of
the user's pre/post-processing (Time Kind ``measured``), and op_statistic of all of them, per Time Kind
(toolkit.profile.optable.op_statistic: Ratio(%) within each kind).

Mapping of the simulated rows (:func:`op_fields`, shared with trace.json, toolkit.profile.trace): Task ID =
schedule task id; Op Name = the plan kernel (a derived copy: ``MemcpyH2D:<tensor>``); OP Type = the kernel's op
type (pre/post-processing: ``PreProcess``/``PostProcess``); Task Type = the cost table's TaskType (copies
MEMCPY, host work HOST_CPU); Stream ID = index of the stream in toolkit.profile.schedule.STREAMS (pre 0, host 1,
copy 2, npu 3); Task Wait Time(us) = gap between the end of the stream's previous task and this start; Block
Dim is left empty (the cost model has no per-core split); formats are "ND". View kernels (0 µs, no device
task) are left out of the simulated rows, as a device profiler would not see them.

Measured rows: the kernels' host wall times are on their own Stream ID :data:`MEASURED_STREAM_ID` (4: another
clock, never mixed with a simulated stream); pre-processing rows on the ``pre`` stream (0) and
post-processing rows on ``host`` (1), where the pipelined schedule runs them.
"""

from __future__ import annotations

import pandas as pd

from toolkit.profile.optable import op_statistic, op_summary_frame
from toolkit.profile.schedule import STREAMS

MEASURED_STREAM_ID = len(STREAMS)
PREPOST_OP_TYPES = {"pre": "PreProcess", "post": "PostProcess"}


def op_fields(kernel: str, name: str, op_type: str, stage: str, stream: str, cost: dict) -> dict:
    """Op Name, OP Type, Task Type, Stream ID of one schedule task (``cost``: its kernel_costs row as a dict,
    {} for derived copies and pre/post)."""
    if stage in PREPOST_OP_TYPES:
        return {"Op Name": name, "OP Type": PREPOST_OP_TYPES[stage], "Task Type": "HOST_CPU",
                "Stream ID": STREAMS.index(stream)}
    return {"Op Name": kernel or name, "OP Type": op_type or stage,
            "Task Type": cost.get("TaskType", "MEMCPY" if stream == "copy" else "HOST_CPU"),
            "Stream ID": STREAMS.index(stream)}


def _wait(events: pd.DataFrame) -> pd.Series:
    prev_end = events.sort_values("StartUs", kind="stable").groupby("Stream")["EndUs"].shift(1)
    return (events["StartUs"] - prev_end.reindex(events.index)).fillna(events["StartUs"]).clip(lower=0.0)


def simulated_rows(events: pd.DataFrame, costs: pd.DataFrame, model_name: str, device: str) -> list[dict]:
    """op_summary rows of one request's schedule (events) joined with the cost table by kernel name."""
    by_kernel = costs.set_index("Kernel", drop=False).to_dict("index")
    wait = _wait(events)
    rows = []
    for idx, e in events.iterrows():
        c = by_kernel.get(e["Kernel"], {})
        if c.get("IsView"):
            continue
        rows.append({"Model Name": model_name, "Task ID": e["Task"],
                     **op_fields(e["Kernel"], e["Name"], e["OpType"], e["Stage"], e["Stream"], c),
                     "Task Start Time(us)": e["StartUs"], "Task Duration(us)": e["DurationUs"],
                     "Task Wait Time(us)": wait[idx], "Input Shapes": c.get("InputShapes", ""),
                     "Input Data Types": c.get("InputDtypes", ""), "Input Formats": "ND",
                     "Output Shapes": c.get("OutputShapes", ""), "Output Data Types": c.get("OutputDtypes", ""),
                     "Output Formats": "ND", "Time Kind": "simulated", "Source": f"cost model, device {device}"})
    return rows


def measured_rows(kernel_ms: list[float], costs: pd.DataFrame, model_name: str) -> list[dict]:
    """op_summary rows of the measured host wall time of each kernel (laid end to end from 0)."""
    rows, t = [], 0.0
    for (_, c), ms in zip(costs.iterrows(), kernel_ms):
        us = ms * 1e3
        rows.append({"Model Name": model_name, "Task ID": c["Index"], "Stream ID": MEASURED_STREAM_ID,
                     "Op Name": c["Kernel"], "OP Type": c["OpType"], "Task Type": "HOST_CPU",
                     "Task Start Time(us)": t, "Task Duration(us)": us, "Task Wait Time(us)": 0.0,
                     "Input Shapes": c["InputShapes"], "Input Data Types": c["InputDtypes"],
                     "Output Shapes": c["OutputShapes"], "Output Data Types": c["OutputDtypes"],
                     "Time Kind": "measured", "Source": "NpuRuntime kernel wall time on this host"})
        t += us
    return rows


def prepost_rows(name: str, stage: str, ms: list[float], model_name: str) -> list[dict]:
    """One measured op_summary row per request of the user's pre- (``stage`` "pre") or post-processing
    ("post")."""
    stream = "pre" if stage == "pre" else "host"
    return [{"Model Name": model_name, "Task ID": i, **op_fields("", name, "", stage, stream, {}), "Task Duration(us)": v * 1e3, "Time Kind": "measured",
             "Source": f"{name} wall time on this host, request {i}"} for i, v in enumerate(ms)]


def op_tables(events, costs, kernel_ms, pre_ms, post_ms, model_name: str, device: str, plans=None):
    """(op_summary, op_statistic): every row kind above; the statistic per Time Kind (the function parse-log
    uses, so parse-log on op_summary.csv gives back op_statistic.csv).

    ``plans``: when requests ran several plans (one per feed shape), a list of (events, costs, kernel_ms, feed
    label) per plan, used instead of the first three arguments: the simulated rows of every plan, then the
    measured rows of every plan, each plan's Source ending in ``, feed <label>``.
    """
    plans = plans or [(events, costs, kernel_ms, "")]
    rows = []
    for ev, co, _ms, label in plans:
        rows += _sourced(simulated_rows(ev, co, model_name, device), label)
    for _ev, co, ms, label in plans:
        rows += _sourced(measured_rows(ms, co, model_name), label)
    rows += prepost_rows("pre-processing", "pre", pre_ms, model_name)
    rows += prepost_rows("post-processing", "post", post_ms, model_name)
    summary = op_summary_frame(rows)
    return summary, op_statistic(summary)


def _sourced(rows: list[dict], label: str) -> list[dict]:
    """``rows`` with ``, feed <label>`` appended to their Source (unchanged for an empty label)."""
    if label:
        for r in rows:
            r["Source"] = f"{r['Source']}, feed {label}"
    return rows
