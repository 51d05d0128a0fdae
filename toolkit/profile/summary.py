"""The profile as the real profiler's tables (toolkit.profile.optable): op_summary rows for the simulated
schedule (Time Kind ``simulated``), the measured host wall time of every kernel of the simulated run and of
the user's pre/post-processing (Time Kind ``measured``), and op_statistic over the simulated rows.

Mapping of the simulated rows: Task ID = schedule task id; Stream ID = index of the stream in
toolkit.profile.schedule.STREAMS; Task Wait Time(us) = gap between the end of the stream's previous task and
this start; Block Dim is left empty (the cost model has no per-core split); formats are "ND". View kernels
(0 µs, no device task) are left out of the simulated rows, as a device profiler would not see them.
"""

from __future__ import annotations

import pandas as pd

from toolkit.profile.optable import op_statistic, op_summary_frame
from toolkit.profile.schedule import STREAMS


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
        rows.append({"Model Name": model_name, "Task ID": e["Task"], "Stream ID": STREAMS.index(e["Stream"]),
                     "Op Name": e["Kernel"] or e["Name"], "OP Type": e["OpType"] or e["Stage"],
                     "Task Type": c.get("TaskType", "MEMCPY" if e["Stream"] == "copy" else "HOST_CPU"),
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
        rows.append({"Model Name": model_name, "Task ID": c["Index"], "Stream ID": STREAMS.index("host"),
                     "Op Name": c["Kernel"], "OP Type": c["OpType"], "Task Type": "HOST_CPU",
                     "Task Start Time(us)": t, "Task Duration(us)": us, "Task Wait Time(us)": 0.0,
                     "Input Shapes": c["InputShapes"], "Input Data Types": c["InputDtypes"],
                     "Output Shapes": c["OutputShapes"], "Output Data Types": c["OutputDtypes"],
                     "Time Kind": "measured", "Source": "NpuRuntime kernel wall time on this host"})
        t += us
    return rows


def prepost_rows(name: str, op_type: str, ms: list[float], model_name: str) -> list[dict]:
    """One measured op_summary row per request of the user's pre- or post-processing."""
    return [{"Model Name": model_name, "Task ID": i, "Stream ID": STREAMS.index("host"), "Op Name": name,
             "OP Type": op_type, "Task Type": "HOST_CPU", "Task Duration(us)": v * 1e3, "Time Kind": "measured",
             "Source": f"{name} wall time on this host, request {i}"} for i, v in enumerate(ms)]


def op_tables(events, costs, kernel_ms, pre_ms, post_ms, model_name: str, device: str):
    """(op_summary, op_statistic): every row kind above; the statistic over the simulated rows only."""
    rows = simulated_rows(events, costs, model_name, device) + measured_rows(kernel_ms, costs, model_name)
    rows += prepost_rows("pre-processing", "PreProcess", pre_ms, model_name)
    rows += prepost_rows("post-processing", "PostProcess", post_ms, model_name)
    summary = op_summary_frame(rows)
    return summary, op_statistic(summary[summary["Time Kind"] == "simulated"])
