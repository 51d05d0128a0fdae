"""Dynamic memory check: run a plan with freed bytes poisoned and every byte range tagged with its owner.

The arena starts filled with ``0xFF`` (NaN in FP16/FP32, -1 in integers). After each kernel, the ranges it
wrote are tagged with the *content* they hold: a new content id per tensor, except a view at its base's
offset, which keeps the base's content (same bytes). When the last reader of every tensor holding a content
has run (stream-aware lifetimes), the bytes still tagged with it are poisoned again and untagged. Before each
kernel, and before the graph outputs are read back, every arena input is checked: bytes tagged with another
content, or poisoned (never written, or freed: the event names the tensor and kernel that last held them),
are reported as a :class:`DynamicEvent` as it happens.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass

from toolkit.memcheck.static_check import FEED, READBACK
from toolkit.memory.aliases import is_view
from toolkit.memory.lifetimes import lifetimes

POISON = 0xFF


@dataclass
class DynamicEvent:
    """reader (kernel or ``<graph outputs>``) at reader_step read ``tensor`` but bytes [start, end) held
    ``owner`` (a tensor name, ``<poison>`` for freed bytes) written by ``writer`` at writer_step."""

    reader: str
    reader_step: int
    tensor: str
    owner: str
    writer: str
    writer_step: int
    start: int
    end: int

    def to_dict(self) -> dict:
        return asdict(self)


class OwnerMap:
    """Disjoint [start, end) byte intervals tagged with an owner id; untagged bytes have owner None."""

    def __init__(self):
        self.starts: list[int] = []
        self.items: list[tuple[int, int, object]] = []

    def _cut(self, pos: int) -> None:
        i = bisect.bisect_right(self.starts, pos) - 1
        if i >= 0:
            s, e, o = self.items[i]
            if s < pos < e:
                self.items[i:i + 1] = [(s, pos, o), (pos, e, o)]
                self.starts[i:i + 1] = [s, pos]

    def assign(self, start: int, end: int, owner) -> None:
        self._cut(start)
        self._cut(end)
        i, j = bisect.bisect_left(self.starts, start), bisect.bisect_left(self.starts, end)
        new = [(start, end, owner)] if owner is not None else []
        self.items[i:j] = new
        self.starts[i:j] = [s for s, _, _ in new]

    def query(self, start: int, end: int) -> list[tuple[int, int, object]]:
        """Pieces covering [start, end), untagged gaps as (s, e, None)."""
        out, pos = [], start
        i = max(bisect.bisect_right(self.starts, start) - 1, 0)
        while i < len(self.items) and pos < end:
            s, e, o = self.items[i]
            i += 1
            if e <= pos:
                continue
            if s >= end:
                break
            if s > pos:
                out.append((pos, s, None))
            out.append((max(s, pos), min(e, end), o))
            pos = min(e, end)
        if pos < end:
            out.append((pos, end, None))
        return out

    def ranges_of(self, owner) -> list[tuple[int, int]]:
        return [(s, e) for s, e, o in self.items if o == owner]


class DynamicChecker:
    """Hooks for :meth:`toolkit.runtime.npu.NpuRuntime.run` (``before_kernel``/``on_kernel``); call
    :meth:`start` right before the run. ``events`` collects what it finds."""

    def __init__(self, runtime):
        self.rt, self.plan = runtime, runtime.plan
        self.life = lifetimes(self.plan.kernels, self.plan.graph_inputs, self.plan.graph_outputs)
        self.arena = {n: t for n, t in self.plan.tensors.items() if t.storage == "arena" and t.nbytes > 0}
        self.events: list[DynamicEvent] = []
        self.dies: dict[int, list[str]] = {}
        # reads of CPU-placed kernels stay in flight until the NPU stream syncs (toolkit.memory.lifetimes):
        # they are checked again at that step, {sync step: [(launch step, tensors)]}
        self.inflight: dict[int, list[tuple[int, list[str]]]] = {}
        for n, lt in self.life.items():
            for r, e in lt.read_end.items():
                if e > r and n in self.arena:
                    self.inflight.setdefault(e, []).append((r, [n]))
        for n in self.arena:
            lt = self.life.get(n)
            if lt is not None:
                self.dies.setdefault(lt.last, []).append(n)

    def start(self) -> None:
        self.rt.arena.fill(POISON)
        self.owners = OwnerMap()
        self.content: dict[str, int] = {}   # tensor -> content id it was written with
        self.holders: dict[int, set[str]] = {}  # content id -> live tensors holding it
        self.cid_name: dict[int, tuple[str, int]] = {}  # content id -> (tensor, step) that created it
        self.inputs_done = False

    def _write(self, name: str, step: int, same_as: str | None = None) -> None:
        t = self.arena[name]
        cid = self.content.get(same_as) if same_as else None
        if cid is None:
            cid = len(self.cid_name)
            self.cid_name[cid] = (name, step)
        self.content[name] = cid
        self.holders.setdefault(cid, set()).add(name)
        self.owners.assign(t.offset, t.offset + t.nbytes, cid)

    def _check_reads(self, step: int, names, reader_step: int | None = None) -> None:
        rs = step if reader_step is None else reader_step
        reader = READBACK if rs >= len(self.plan.kernels) else self.plan.kernels[rs].name
        for name in dict.fromkeys(names):
            t = self.arena.get(name)
            if t is None or name not in self.content:
                continue
            want = self.content[name]
            for s, e, o in self.owners.query(t.offset, t.offset + t.nbytes):
                if o == want:
                    continue
                if o is None:
                    owner, wstep = "<poison: never written>", -2
                elif isinstance(o, tuple):  # freed bytes: poisoned, last held by the content o[1]
                    name0, wstep = self.cid_name[o[1]]
                    owner = f"<poison: freed '{name0}'>"
                else:
                    owner, wstep = self.cid_name[o]
                writer = FEED if wstep == -1 else (self.plan.kernels[wstep].name if wstep >= 0 else "<none>")
                self.events.append(DynamicEvent(reader, rs, name, owner, writer, wstep, s, e))

    def _free(self, step: int) -> None:
        for name in self.dies.get(step, ()):
            cid = self.content.get(name)
            if cid is None:
                continue
            holders = self.holders.get(cid, set())
            holders.discard(name)
            if not holders:
                for s, e in self.owners.ranges_of(cid):
                    self.rt.arena[s:e] = POISON
                    self.owners.assign(s, e, ("freed", cid))

    def before_kernel(self, i: int, spec) -> None:
        if not self.inputs_done:  # the runtime copied the feeds in before the first kernel
            self.inputs_done = True
            for name in self.plan.graph_inputs:
                if name in self.arena:
                    self._write(name, -1)
            self._free(-1)
        for launch, names in self.inflight.get(i, ()):
            self._check_reads(i, names, reader_step=launch)
        if spec is None:
            self._check_reads(i, self.plan.graph_outputs)
        else:
            self._check_reads(i, spec.inputs)

    def on_kernel(self, i: int, spec, outputs) -> None:
        for name in spec.outputs:
            if name not in self.arena:
                continue
            src = self.arena.get(spec.inputs[0]) if spec.inputs else None
            view = src is not None and src.offset == self.arena[name].offset and is_view(spec, src, self.arena[name])
            self._write(name, i, same_as=src.name if view else None)
        self._free(i)


def dynamic_check(runtime, feeds, dump: bool = False):
    """Run ``feeds`` through ``runtime`` under the checker; returns (RunResult, events). A kernel that fails on
    poisoned data is reported by raising its KernelRuntimeError after the events found so far are attached
    as ``exc.memcheck_events``."""
    chk = DynamicChecker(runtime)
    chk.start()
    try:
        res = runtime.run(feeds, dump=dump, on_kernel=chk.on_kernel, before_kernel=chk.before_kernel)
    except Exception as exc:
        exc.memcheck_events = chk.events
        raise
    return res, chk.events
