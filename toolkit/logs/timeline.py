"""What a timeline event is: a device task, a communication task, a host API span or an overlap span.

The msprof timeline (``msprof_*.json``) and torch_npu's ``trace_view.json`` mix, in one Chrome trace, device
tasks (process "Ascend Hardware"; args ``Task Id``, ``Physic Stream Id`` / ``Stream Id``, ``Task Type``),
communication tasks (process "Communication" / "HCCL", names ``hcom_*`` / ``Hccl*``), host spans (processes
"CANN", "AscendCL", "Python", torch ops ``aten::*``: measured on the host) and the overlap analysis (process
"Overlap Analysis": Computing / Communication / Free spans, a summary of the others, never tasks). Sources: the
CANN profiling docs ("timeline", msprof_*.json) and torch_npu's profiler output (trace_view.json).

:func:`process_kind` classifies a process name, :func:`event_kind` one event from its name and args;
:data:`TIME_KIND` is the Time Kind each kind gets in the op summary (device tasks "device", host spans "host").
Overlap spans do not become tasks: they are summed in their own table (``overlap_spans``).
"""

from __future__ import annotations

from toolkit.logs.profcells import COMMUNICATION as COMMUNICATION_TASK_TYPE
from toolkit.logs.profcells import is_communication

DEVICE, COMMUNICATION, HOST, OVERLAP = "device", "communication", "host", "overlap"
#: Time Kind of each kind's rows in the op summary (overlap spans are not tasks).
TIME_KIND = {DEVICE: "device", COMMUNICATION: "device", HOST: "host"}
_PROCESS_WORDS = ((OVERLAP, ("overlap analysis",)), (COMMUNICATION, ("communication", "hccl")),
                  (DEVICE, ("ascend hardware", "npu", "device", "ai core")),
                  (HOST, ("cann", "ascendcl", "acl", "python", "pytorch", "cpu", "host", "runtime", "ge")))
_DEVICE_ARGS = ("Task Id", "Physic Stream Id")


def process_kind(name: str) -> str:
    """The kind of a process by its name (module docstring); "" when the name says nothing."""
    low = name.strip().lower()
    for kind, words in _PROCESS_WORDS:
        if any(low == w or low.startswith(w + " ") or w in low.split() for w in words):
            return kind
    return ""


def model_name(process: str) -> str:
    """The Model Name a process name gives its events: none ("") for a profiler's processes, which name a kind of
    event (Ascend Hardware, CANN, HCCL, Python, Overlap Analysis: :func:`process_kind`), never a model; any other
    name as it is (a trace naming its processes after models)."""
    return "" if process_kind(process) else process


def event_kind(name: str, args: dict) -> str:
    """The kind an event's own name and args give: communication for HCCL names or an args ``Task Type`` naming
    HCCL (toolkit.logs.profcells.is_communication, the CSVs' rule), device for a ``Task Id`` / ``Physic Stream
    Id`` arg, host for torch ``aten::`` ops; "" when they say nothing (the process decides)."""
    low = name.strip().lower()
    if is_communication(args.get("Task Type", ""), name):
        return COMMUNICATION
    if any(k in args for k in _DEVICE_ARGS):
        return DEVICE
    if low.startswith("aten::"):
        return HOST
    return ""


def _codes(s):
    """(int64 codes, categories as a list of str) of a Categorical (or any) Series."""
    import numpy as np
    import pandas as pd

    cat = s.astype("category") if not isinstance(s.dtype, pd.CategoricalDtype) else s
    return cat.cat.codes.to_numpy().astype(np.int64), [str(c) for c in cat.cat.categories]


def combine(columns: list, fn):
    """A Categorical of ``fn(*values)`` per row of the Categorical Series ``columns``, computed once per distinct
    combination of values (a timeline of millions of rows has a handful), so no per-row Python object exists."""
    import numpy as np
    import pandas as pd

    key = np.zeros(len(columns[0]), np.int64)
    cats = []
    for s in columns:
        codes, c = _codes(s)
        key = key * (len(c) + 1) + codes + 1
        cats.append(c)
    uniq, inverse = np.unique(key, return_inverse=True)
    out, index = [], {}
    for u in uniq:
        parts, rest = [], int(u)
        for c in reversed(cats):
            rest, code = divmod(rest, len(c) + 1)
            parts.append(c[code - 1] if code else "")
        value = fn(*reversed(parts))
        out.append(index.setdefault(value, len(index)))
    return pd.Categorical.from_codes(np.asarray(out, np.int32)[inverse], list(index))


def kinds(df, process: dict, pid: str, kind: str):
    """The kind of each row of an op-summary frame (a Categorical): the event's own (internal column ``kind``),
    else its process's (``pid``, a key of ``process``: {pid as str: process name}); "" when neither says."""
    return combine([df[pid], df[kind]], lambda p, k: k or process_kind(process.get(p, "")))


def resolve(df, process: dict, default_time_kind: str, pid: str, kind: str, hint: str):
    """Set Time Kind, Task Type (``COMMUNICATION`` for every communication task, whatever its own) and Model Name
    (:func:`model_name`) of an op-summary frame whose internal columns ``pid`` / ``kind``
    (the event's own kind) / ``hint`` (args time_kind) are Categoricals; returns (df, overlap row mask).
    ``process``: {pid as str: process name}."""
    import numpy as np

    def kind_of(p, k):
        return k or process_kind(process.get(p, ""))

    def time_kind(p, k, h, explicit):
        return explicit or h or TIME_KIND.get(kind_of(p, k), "") or default_time_kind

    def task_type(p, k, t):
        return COMMUNICATION_TASK_TYPE if kind_of(p, k) == COMMUNICATION else t

    of_rows = kinds(df, process, pid, kind)
    df["Time Kind"] = combine([df[pid], df[kind], df[hint], df["Time Kind"]], time_kind)
    df["Task Type"] = combine([df[pid], df[kind], df["Task Type"]], task_type)
    df["Model Name"] = combine([df["Model Name"], df[pid]], lambda m, p: m or model_name(process.get(p, "")))
    return df, np.asarray(of_rows == OVERLAP)
