"""Chrome trace JSON of a schedule (opens in Perfetto, https://ui.perfetto.dev, and chrome://tracing).

Format: the Trace Event Format ({"traceEvents": [...], "displayTimeUnit": "ms"}; Google, "Trace Event Format",
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU). Process 1 is the simulated
schedule with one thread (track) per stream, named by ``thread_name`` metadata events; every task is a complete
event (``ph: "X"``, ``ts``/``dur`` in µs) with its op type as category. Its ``args`` carry the op_summary
columns under their own names — ``Op Name``, ``OP Type``, ``Task Type``, ``Stream ID``, ``Time Kind``
(toolkit.profile.summary.op_fields, the mapping op_summary.csv uses) — plus request, stage, bytes and derived,
so ``npuscope parse-log trace.json`` reads back the same names, types, stream ids and durations as
op_summary.csv. Every copy gets two flow arrows (``ph: "s"`` on the source slice, ``ph: "f"`` with
``bp: "e"`` on the target slice): from the task that wrote the tensor to the copy, and from the copy to its
first reader. Process 2, when given, holds the kernels' measured host wall times laid end to end on one track
(Time Kind measured, Stream ID toolkit.profile.summary.MEASURED_STREAM_ID).

With ``costs`` (the kernel_costs table), view kernels (0 µs, no device task) are left out as in op_summary.csv
and Task Types come from it; ``stages`` (default all) limits the pre/post slices to the stages that were
measured, so a run without ``--pre`` shows no 0 µs "measured" pre-processing.
"""

from __future__ import annotations

import json

import pandas as pd

from toolkit.profile.schedule import STREAMS
from toolkit.profile.summary import MEASURED_STREAM_ID, op_fields

SIM_PID, MEASURED_PID = 1, 2


def _meta(pid: int, tid: int | None, key: str, name: str) -> dict:
    ev = {"ph": "M", "pid": pid, "name": key, "args": {"name": name}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _slices(events: pd.DataFrame, tids: dict[str, int], costs: dict[str, dict]) -> list[dict]:
    out = []
    for r in events.itertuples(index=False):
        fields = op_fields(r.Kernel, r.Name, r.OpType, r.Stage, r.Stream, costs.get(r.Kernel, {}))
        kind = "measured" if r.Stage in ("pre", "post") else "simulated"
        out.append({"ph": "X", "pid": SIM_PID, "tid": tids[r.Stream], "name": r.Name, "cat": r.OpType or r.Stage,
                    "ts": float(r.StartUs), "dur": float(r.DurationUs),
                    "args": {**fields, "Time Kind": kind, "request": int(r.Request), "stage": r.Stage,
                             "bytes": float(r.Bytes), "derived": bool(r.Derived)}})
    return out


def _flow(fid: int, src, dst, tids: dict[str, int]) -> list[dict]:
    base = {"name": "transfer", "cat": "copy", "id": fid, "pid": SIM_PID}
    return [{**base, "ph": "s", "tid": tids[src.Stream], "ts": float(src.StartUs)},
            {**base, "ph": "f", "bp": "e", "tid": tids[dst.Stream], "ts": float(dst.StartUs)}]


def _flows(events: pd.DataFrame, tids: dict[str, int]) -> list[dict]:
    by_id = {int(r.Task): r for r in events.itertuples(index=False)}
    readers: dict[int, list] = {}
    for r in events.itertuples(index=False):
        for d in filter(None, str(r.Deps).split(";")):
            readers.setdefault(int(d), []).append(r)
    out, fid = [], 0
    for r in events.itertuples(index=False):
        if r.Stream != "copy":
            continue
        for d in filter(None, str(r.Deps).split(";")):
            src = by_id.get(int(d))
            if src is None or src.Request != r.Request:  # a left-out task, or a pipeline hand-over (not data)
                continue
            fid += 1
            out += _flow(fid, src, r, tids)
        same = [x for x in readers.get(int(r.Task), []) if x.Request == r.Request]
        first = sorted(same, key=lambda x: x.StartUs)[:1]
        for dst in first:
            fid += 1
            out += _flow(fid, r, dst, tids)
    return out


def _measured(measured: pd.DataFrame | None) -> list[dict]:
    if measured is None or not len(measured):
        return []
    out = [_meta(MEASURED_PID, None, "process_name", "measured on this host (kernel wall time)"),
           _meta(MEASURED_PID, 1, "thread_name", "host (onnxruntime kernels)")]
    t = 0.0
    for r in measured.itertuples(index=False):
        args = {"Op Name": r.Kernel, "OP Type": r.OpType, "Task Type": "HOST_CPU", "Stream ID": MEASURED_STREAM_ID,
                "Time Kind": "measured"}
        out.append({"ph": "X", "pid": MEASURED_PID, "tid": 1, "name": r.Kernel, "cat": r.OpType, "ts": t,
                    "dur": float(r.HostUs), "args": args})
        t += float(r.HostUs)
    return out


def _kept(events: pd.DataFrame, costs: dict[str, dict], stages) -> pd.DataFrame:
    views = {k for k, c in costs.items() if c.get("IsView")}
    keep = ~events["Kernel"].isin(views) | (events["Kernel"] == "")
    if stages is not None:
        keep &= ~events["Stage"].isin({"pre", "post"} - set(stages))
    return events[keep]


def chrome_trace(events: pd.DataFrame, title: str = "npuscope simulated schedule",
                 measured: pd.DataFrame | None = None, costs: pd.DataFrame | None = None,
                 stages=None) -> dict:
    """The trace dict for a schedule's events (toolkit.profile.schedule.EVENT_COLUMNS) and, optionally, the
    measured kernel times (columns Kernel, OpType, HostUs in µs), the cost table (columns Kernel, TaskType,
    IsView: Task Types, views left out) and ``stages``, the pre/post stages to show (e.g. ["pre"]; None: all).
    Flow arrows to or from a left-out task are left out too."""
    by_kernel = costs.set_index("Kernel", drop=False).to_dict("index") if costs is not None and len(costs) else {}
    events = _kept(events, by_kernel, stages)
    used = [s for s in STREAMS if s in set(events["Stream"])]
    tids = {s: i + 1 for i, s in enumerate(used)}
    out = [_meta(SIM_PID, None, "process_name", f"{title} (simulated)")]
    out += [_meta(SIM_PID, tids[s], "thread_name", s) for s in used]
    out += [{"ph": "M", "pid": SIM_PID, "tid": tids[s], "name": "thread_sort_index", "args": {"sort_index": tids[s]}}
            for s in used]
    out += _slices(events, tids, by_kernel) + _flows(events, tids) + _measured(measured)
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def trace_json(events: pd.DataFrame, **kw) -> str:
    """:func:`chrome_trace` as compact JSON text."""
    return json.dumps(chrome_trace(events, **kw), separators=(",", ":"))
