"""Discrete-event schedule of a plan over streams: ``npu`` (device compute), ``copy`` (the
host-device copy engine) and ``host`` (the CPU thread that runs CPU-placed ops; post-processing in
end-to-end schedules, toolkit.profile.e2e, which adds a ``pre`` thread).

Tasks are issued in plan order. Each stream runs one task at a time; when a stream is free it starts,
among its tasks whose dependencies have all ended, the one issued first (list scheduling with issue order as
priority, as a graph engine runs independent branches without waiting for one another). So a CPU-placed op
and its copies overlap device work that does not depend on them, and a chain of dependent tasks runs as
``start = max(stream free, max(end of dependencies))``, ``end = start + duration``. Dependencies are true data
dependencies (a task waits for the writers of the tensors it reads); the arena's memory reuse is not modelled
as a dependency.

Where each tensor lives: graph inputs on the host (they come from pre-processing); outputs of ``npu`` tasks
and of MemcpyH2D copies on the device; outputs of ``host`` tasks and MemcpyD2H copies on the host. A task
that reads a tensor on the other side gets a transfer: the plan's own copy kernels (fusion ``copy``) when it
has them, otherwise a *derived* copy task (one per tensor and direction, shared by all readers), which the
notes report. Graph outputs left on the device get a derived D2H copy at the end.

:func:`simulate` returns the events DataFrame, columns :data:`EVENT_COLUMNS`: Task (int id), Name, Kernel
(plan kernel, "" for derived copies and pre/post), OpType, Stream, Request, Stage (pre, h2d, device, d2h, cpu,
post), StartUs, DurationUs, EndUs, Deps (';'-joined ids), Derived (bool), Tensor (copied tensor), Bytes.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

import pandas as pd

from toolkit.compiler.plan import Plan
from toolkit.profile.cost import COPY_OPS, copy_time
from toolkit.profile.device import DeviceProfile

EVENT_COLUMNS = ["Task", "Name", "Kernel", "OpType", "Stream", "Request", "Stage", "StartUs", "DurationUs",
                 "EndUs", "Deps", "Derived", "Tensor", "Bytes"]
STREAMS = ("pre", "host", "copy", "npu")
SIDE = {"npu": "device", "host": "host", "pre": "host"}


@dataclass
class Task:
    """One unit of work on one stream; ``deps`` are indices of earlier tasks in the same list."""

    name: str
    stream: str
    duration_us: float
    deps: list[int] = field(default_factory=list)
    kernel: str = ""
    op_type: str = ""
    stage: str = "device"
    derived: bool = False
    tensor: str = ""
    nbytes: float = 0.0
    request: int = 0


@dataclass
class DeviceGraph:
    """The tasks of one request (plan kernels + derived copies) and notes on what was derived."""

    tasks: list[Task]
    notes: list[str]


def stage_of(stream: str, op_type: str) -> str:
    if stream == "copy":
        return "h2d" if COPY_OPS.get(op_type, "h2d") == "h2d" else "d2h"
    return "cpu" if stream == "host" else "device"


class _Builder:
    """Builds a DeviceGraph from a plan and its cost rows (one pass in plan order)."""

    def __init__(self, plan: Plan, costs: pd.DataFrame, device: DeviceProfile):
        self.plan, self.costs, self.device = plan, costs, device
        self.tasks: list[Task] = []
        self.where: dict[str, str] = {n: "host" for n in plan.graph_inputs}
        self.writer: dict[str, int] = {}
        self.moved: dict[tuple[str, str], int] = {}  # (tensor, side) -> copy task index
        self.derived_cpu = 0

    def build(self) -> DeviceGraph:
        for i, k in enumerate(self.plan.kernels):
            self._add_kernel(k, self.costs.iloc[i])
        for name in self.plan.graph_outputs:
            if self.where.get(name) == "device":
                self._transfer(name, "host")
        return DeviceGraph(self.tasks, self._notes())

    def _add_kernel(self, k, row) -> None:
        stream = row["Stream"]
        deps = []
        for t in k.inputs:
            if stream == "copy":
                idx = self.writer.get(t)
            else:
                idx = self._ready_on(t, SIDE[stream])
            if idx is not None:
                deps.append(idx)
        self.tasks.append(Task(k.name, stream, float(row["DurationUs"]), sorted(set(deps)), k.name, k.op_type,
                               stage_of(stream, k.op_type), nbytes=float(row["Bytes"])))
        idx = len(self.tasks) - 1
        side = ("device" if COPY_OPS.get(k.op_type, "h2d") == "h2d" else "host") if stream == "copy" else SIDE[stream]
        for t in k.outputs:
            self.writer[t], self.where[t] = idx, side

    def _ready_on(self, tensor: str, side: str) -> int | None:
        """Index of the task after which ``tensor`` is readable on ``side`` (adding a derived copy if needed)."""
        here = self.where.get(tensor)
        if here is None or here == side:
            return self.writer.get(tensor)
        return self._transfer(tensor, side)

    def _transfer(self, tensor: str, side: str) -> int:
        key = (tensor, side)
        if key not in self.moved:
            direction = "h2d" if side == "device" else "d2h"
            spec = self.plan.tensors.get(tensor)
            nbytes = float(spec.nbytes if spec is not None else 0)
            src = self.writer.get(tensor)
            self.tasks.append(Task(f"{'MemcpyH2D' if direction == 'h2d' else 'MemcpyD2H'}:{tensor}", "copy",
                                   copy_time(nbytes, direction, self.device), [] if src is None else [src],
                                   op_type="MemcpyH2D" if direction == "h2d" else "MemcpyD2H", stage=direction,
                                   derived=True, tensor=tensor, nbytes=nbytes))
            self.moved[key] = len(self.tasks) - 1
            if tensor not in self.plan.graph_inputs and tensor not in self.plan.graph_outputs:
                self.derived_cpu += 1
        return self.moved[key]

    def _notes(self) -> list[str]:
        notes = []
        n_cpu = int((self.costs["Stream"] == "host").sum())
        n_copy = int((self.costs["Stream"] == "copy").sum())
        if self.derived_cpu:
            why = "the plan has no copy kernels" if n_cpu and not n_copy else "the plan's copy kernels miss them"
            notes.append(f"{self.derived_cpu} host-device transfer(s) around {n_cpu} CPU-placed kernel(s) were derived "
                         f"from the stream changes of their tensors ({why})")
        io = sum(1 for (t, _s) in self.moved if t in self.plan.graph_inputs or t in self.plan.graph_outputs)
        if io:
            notes.append(f"{io} transfer(s) of graph inputs/outputs between host and device were added (derived)")
        return notes


def device_graph(plan: Plan, costs: pd.DataFrame, device: DeviceProfile) -> DeviceGraph:
    """The tasks of one request: ``costs`` (toolkit.profile.cost.kernel_costs, one row per plan kernel in order;
    the Stream and DurationUs columns are used) plus derived copies (module docstring)."""
    if len(costs) != len(plan.kernels):
        raise ValueError(f"costs has {len(costs)} rows but the plan has {len(plan.kernels)} kernels")
    return _Builder(plan, costs.reset_index(drop=True), device).build()


def simulate(tasks: list[Task]) -> pd.DataFrame:
    """Run the discrete-event schedule of ``tasks`` (module docstring; priority = list order) and return the
    events DataFrame (:data:`EVENT_COLUMNS`, times in µs from 0, rows in list order).

    Raises:
        ValueError: a dependency index that is not an earlier task.
    """
    n = len(tasks)
    waiting = [len(set(t.deps)) for t in tasks]
    dependents: list[list[int]] = [[] for _ in range(n)]
    for i, t in enumerate(tasks):
        for d in set(t.deps):
            if not 0 <= d < i:
                raise ValueError(f"task {i} ({t.name}) depends on {d}, which is not an earlier task")
            dependents[d].append(i)
    ready: dict[str, list[int]] = {}
    for i in range(n):
        if not waiting[i]:
            heapq.heappush(ready.setdefault(tasks[i].stream, []), i)
    start, end = [0.0] * n, [0.0] * n
    busy: set[str] = set()
    running: list[tuple[float, int]] = []
    now = 0.0
    while True:
        for stream, queue in ready.items():
            if stream not in busy and queue:
                i = heapq.heappop(queue)
                start[i], end[i] = now, now + tasks[i].duration_us
                busy.add(stream)
                heapq.heappush(running, (end[i], i))
        if not running:
            break
        now = running[0][0]
        while running and running[0][0] == now:  # finish everything ending now before choosing what starts
            _, i = heapq.heappop(running)
            busy.discard(tasks[i].stream)
            for j in dependents[i]:
                waiting[j] -= 1
                if not waiting[j]:
                    heapq.heappush(ready.setdefault(tasks[j].stream, []), j)
    return _events(tasks, start, end)


def _events(tasks: list[Task], start: list[float], end: list[float]) -> pd.DataFrame:
    rows = [[i, t.name, t.kernel, t.op_type, t.stream, t.request, t.stage, start[i], t.duration_us, end[i],
             ";".join(map(str, t.deps)), t.derived, t.tensor, t.nbytes] for i, t in enumerate(tasks)]
    return pd.DataFrame(rows, columns=EVENT_COLUMNS)


def makespan_us(events: pd.DataFrame) -> float:
    """End of the last task minus start of the first, µs (0 for no events)."""
    return float(events["EndUs"].max() - events["StartUs"].min()) if len(events) else 0.0


def schedule_plan(plan: Plan, costs: pd.DataFrame, device: DeviceProfile) -> tuple[pd.DataFrame, list[str]]:
    """(events, notes) of one request of ``plan`` (see :func:`device_graph`, :func:`simulate`)."""
    g = device_graph(plan, costs, device)
    return simulate(g.tasks), g.notes


def offset_tasks(tasks: list[Task], base: int, request: int) -> list[Task]:
    """Copies of ``tasks`` for another request, with dependency indices shifted by ``base``."""
    return [replace(t, deps=[d + base for d in t.deps], request=request) for t in tasks]
