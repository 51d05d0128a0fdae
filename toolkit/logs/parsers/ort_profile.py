"""onnxruntime profiling JSON (``SessionOptions.enable_profiling``; GUIDE §4): an array of Chrome-trace
complete events ``{cat, pid, tid, dur, ts, ph: "X", name, args}``, one per line.

- ``cat: "Node"`` events named ``<node>_kernel_time`` are kernel executions; args ``op_name`` (the op type),
  ``provider``, ``input_type_shape`` / ``output_type_shape`` (lists of ``{dtype: [dims]}``). Each becomes one
  op-summary task: Op Name = node name, OP Type = op_name, Task Type from the provider (CPUExecutionProvider →
  HOST_CPU, CANNExecutionProvider → AI_CORE, Memcpy* ops → MEMCPY, others → the provider name without
  "ExecutionProvider", upper case), Stream ID = tid, Task ID = event order, Task Start Time(us) = ts, Task
  Duration(us) = dur, shapes as ``d0,d1;...`` per input, data types upper case (``FLOAT``), Time Kind
  ``measured``, Source = the file name. Other Node events (``_fence_before``/``_fence_after`` of older
  versions) are skipped.
- ``cat: "Session"`` events (model_loading_*, session_initialization, model_run, ...) go to table
  ``ort_sessions``: Name, Count, Total(us), Mean(us).

Malformed (counted, skipped): a non-object, a node event without a name or whose ts/dur is not a number, not
finite or beyond 1e18 (toolkit.logs.numbers), or dur negative, unreadable fragments of a truncated file (recovered event by event, toolkit.logs.jsonio).
Finding ``framework_overhead`` (warning) when kernels fill less than half of the model_run time.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pandas as pd

from toolkit.core.records import Finding
from toolkit.logs.jsonio import load_events, number
from toolkit.logs.numbers import MAX_ABS
from toolkit.logs.registry import Parser, ParseResult, register_parser
from toolkit.profile.optable import op_summary_frame

NAME = "ort_profile"
DESCRIPTION = "onnxruntime profiling JSON (enable_profiling; cat Node <node>_kernel_time / Session events)"
SUFFIX = "_kernel_time"
PROVIDER_TASK_TYPES = {"CPUExecutionProvider": "HOST_CPU", "CANNExecutionProvider": "AI_CORE"}
MEMCPY_OPS = {"MemcpyFromHost", "MemcpyToHost", "Memcpy"}
#: kernels filling less than this share of model_run time → framework_overhead finding
KERNEL_SHARE_LINE = 0.5
_DETECT_RE = re.compile(r'^\s*\[\s*\{[^{}]*?"cat"\s*:\s*"(?:Session|Node)"')
_COLUMNS = ["Task ID", "Stream ID", "Op Name", "OP Type", "Task Type", "Task Start Time(us)", "Task Duration(us)",
            "Input Shapes", "Input Data Types", "Output Shapes", "Output Data Types"]


def detect(path: Path, head: str) -> bool:
    """A JSON array whose first event has cat "Session" or "Node"."""
    return _DETECT_RE.match(head) is not None


def _dims(dims) -> str:
    if isinstance(dims, list):
        return str(dims)[1:-1].replace(" ", "").replace("'", "")
    return str(dims)


def type_shapes(value) -> tuple[str, str]:
    """(shapes, dtypes) of an ``input_type_shape`` list: ``"4,64;64"``, ``"FLOAT;FLOAT"`` ("" when absent)."""
    if not isinstance(value, list):
        return "", ""
    shapes, types = [], []
    for item in value:
        if isinstance(item, dict) and len(item) == 1:
            for dtype, dims in item.items():
                shapes.append(_dims(dims))
                types.append(dtype.upper() if isinstance(dtype, str) else str(dtype))
    return ";".join(shapes), ";".join(types)


def task_type(provider: str, op_type: str) -> str:
    if op_type in MEMCPY_OPS:
        return "MEMCPY"
    if provider in PROVIDER_TASK_TYPES:
        return PROVIDER_TASK_TYPES[provider]
    return provider.replace("ExecutionProvider", "").upper()


def _num(v) -> float | None:
    if type(v) is float:                                  # fast path for JSON numbers
        return v if -MAX_ABS <= v <= MAX_ABS else None    # False for NaN and ±inf
    return number(v)


def _node(ev: dict, rows: list) -> bool:
    name, ts, dur = ev.get("name"), _num(ev.get("ts")), _num(ev.get("dur"))
    if ts is None or dur is None or dur < 0:
        return False
    args = ev.get("args")
    args = args if isinstance(args, dict) else {}
    op_type = str(args.get("op_name", ""))
    in_shapes, in_types = type_shapes(args.get("input_type_shape"))
    out_shapes, out_types = type_shapes(args.get("output_type_shape"))
    rows.append((len(rows), _num(ev.get("tid")), name[:-len(SUFFIX)], op_type,
                 task_type(str(args.get("provider", "")), op_type), ts, dur, in_shapes, in_types, out_shapes,
                 out_types))
    return True


def _read(events: list) -> tuple[list, dict, int, int]:
    rows, sessions, bad, other = [], defaultdict(list), 0, 0
    for ev in events:
        if not isinstance(ev, dict):
            bad += 1
            continue
        cat, name = ev.get("cat"), ev.get("name")
        if cat == "Node" and isinstance(name, str) and name.endswith(SUFFIX):
            bad += not _node(ev, rows)
        elif cat == "Node" and not isinstance(name, str):
            bad += 1
        elif cat == "Session" and isinstance(name, str) and number(ev.get("dur")) is not None:
            sessions[name].append(number(ev.get("dur")))
        else:
            other += 1
    return rows, sessions, bad, other


def _overhead(summary: pd.DataFrame, sessions: pd.DataFrame, name: str) -> list[Finding]:
    run = sessions[sessions["Name"] == "model_run"]
    if run.empty or run["Total(us)"].iloc[0] <= 0:
        return []
    total, kernels = float(run["Total(us)"].iloc[0]), float(summary["Task Duration(us)"].sum())
    share = kernels / total
    if share >= KERNEL_SHARE_LINE:
        return []
    return [Finding("warning", "framework_overhead", name,
                    {"model_runs": int(run["Count"].iloc[0]), "model_run_us": round(total, 3),
                     "kernel_us": round(kernels, 3), "kernel_share_pct": round(100 * share, 1)},
                    "most of each run is spent outside kernels (scheduling, allocation, copies, launch): batch "
                    "more work per run or fuse small ops")]


def parse(path: Path) -> ParseResult:
    """Read an onnxruntime profile (module docstring). Never raises for bad content."""
    path = Path(path)
    loaded = load_events(path)
    rows, sess, bad, other = _read(loaded.events)
    del loaded.events[:]                                        # free the parsed JSON before building the table
    summary = (op_summary_frame(pd.DataFrame.from_records(rows, columns=_COLUMNS).assign(
        **{"Time Kind": "measured", "Source": path.name})) if rows else op_summary_frame([]))
    sessions = pd.DataFrame([{"Name": k, "Count": len(v), "Total(us)": sum(v), "Mean(us)": sum(v) / len(v)}
                             for k, v in sess.items()], columns=["Name", "Count", "Total(us)", "Mean(us)"])
    notes = list(loaded.notes) + ([f"{other} other event(s) skipped (fences, non-node categories)"] if other else [])
    return ParseResult(str(path), NAME, op_summary=summary, tables={"ort_sessions": sessions}, records=len(summary),
                       malformed=bad + loaded.malformed, notes=notes, findings=_overhead(summary, sessions, path.name))


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
