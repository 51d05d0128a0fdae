"""Chrome trace JSON of a schedule (opens in Perfetto, https://ui.perfetto.dev, and chrome://tracing).

Format: the Trace Event Format ({"traceEvents": [...], "displayTimeUnit": "ms"}; Google, "Trace Event Format",
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU). Process 1 is the simulated
schedule with one thread (track) per stream, named by ``thread_name`` metadata events; every task is a complete
event (``ph: "X"``, ``ts``/``dur`` in µs) with its op type as category and request, stage, bytes in ``args``.
Every copy gets two flow arrows (``ph: "s"`` on the source slice, ``ph: "f"`` with ``bp: "e"`` on the target
slice): from the task that wrote the tensor to the copy, and from the copy to its first reader. Process 2,
when given, holds the kernels' measured host wall times laid end to end on one track (TimeKind measured).
"""

from __future__ import annotations

import json

import pandas as pd

from toolkit.profile.schedule import STREAMS

SIM_PID, MEASURED_PID = 1, 2


def _meta(pid: int, tid: int | None, key: str, name: str) -> dict:
    ev = {"ph": "M", "pid": pid, "name": key, "args": {"name": name}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _slices(events: pd.DataFrame, tids: dict[str, int]) -> list[dict]:
    out = []
    for r in events.itertuples(index=False):
        out.append({"ph": "X", "pid": SIM_PID, "tid": tids[r.Stream], "name": r.Name, "cat": r.OpType or r.Stage,
                    "ts": float(r.StartUs), "dur": float(r.DurationUs),
                    "args": {"kernel": r.Kernel, "request": int(r.Request), "stage": r.Stage, "bytes": float(r.Bytes),
                             "derived": bool(r.Derived), "time_kind": "measured" if r.Stage in ("pre", "post")
                             else "simulated"}})
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
            fid += 1
            out += _flow(fid, by_id[int(d)], r, tids)
        first = sorted(readers.get(int(r.Task), []), key=lambda x: x.StartUs)[:1]
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
        out.append({"ph": "X", "pid": MEASURED_PID, "tid": 1, "name": r.Kernel, "cat": r.OpType, "ts": t,
                    "dur": float(r.HostUs), "args": {"time_kind": "measured"}})
        t += float(r.HostUs)
    return out


def chrome_trace(events: pd.DataFrame, title: str = "npuscope simulated schedule",
                 measured: pd.DataFrame | None = None) -> dict:
    """The trace dict for a schedule's events (toolkit.profile.schedule.EVENT_COLUMNS) and, optionally, the
    measured kernel times (columns Kernel, OpType, HostUs in µs)."""
    used = [s for s in STREAMS if s in set(events["Stream"])]
    tids = {s: i + 1 for i, s in enumerate(used)}
    out = [_meta(SIM_PID, None, "process_name", f"{title} (simulated)")]
    out += [_meta(SIM_PID, tids[s], "thread_name", s) for s in used]
    out += [{"ph": "M", "pid": SIM_PID, "tid": tids[s], "name": "thread_sort_index", "args": {"sort_index": tids[s]}}
            for s in used]
    out += _slices(events, tids) + _flows(events, tids) + _measured(measured)
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def trace_json(events: pd.DataFrame, **kw) -> str:
    """:func:`chrome_trace` as compact JSON text."""
    return json.dumps(chrome_trace(events, **kw), separators=(",", ":"))
