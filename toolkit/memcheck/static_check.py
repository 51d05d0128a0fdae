"""Static memory check of a plan: every write that lands on bytes another tensor still needs.

Lifetimes are recomputed from the kernel list (stream-aware, toolkit.memory.lifetimes), never taken from the
plan's own ``first``/``last``, so a planner that misjudged a lifetime is caught. For each tensor ``A`` written
at step ``s`` (graph inputs: step -1) and each other arena tensor ``V`` whose byte range meets ``A``'s and that
is live at ``s`` (written at or before ``s`` and read at or after it), the write is accepted only when it is
a share the runtime makes safe (toolkit.memory.aliases.benign_share): ``A`` is a view of ``V`` at the same
offset, or a verified in-place op writing over an input whose last read is this step. A view kernel's write
changes no byte at all (it copies its input onto itself, toolkit.memory.aliases), so it meets no tensor sharing
those bytes, e.g. another view of the same base. Anything else is a
:class:`Conflict`: the writer kernel, the tensor it writes, the victim and the reader that comes too late.
An arena tensor whose offset breaks the plan's ``alignment`` is a conflict of kind ``misaligned`` (an edited
plan.json; the planner never makes one).
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass

from toolkit.memory.aliases import VIEW_OPS, benign_share, is_view
from toolkit.memory.lifetimes import lifetimes

FEED = "<graph inputs>"
READBACK = "<graph outputs>"


@dataclass
class Conflict:
    """One overwrite of live data.

    writer / writer_step: the kernel (``<graph inputs>`` for the feed copy) and its step;
    written: the tensor it writes; victim: the live tensor whose bytes it overwrites;
    reader / reader_step: the first read of the victim at or after the write (``<graph outputs>`` = read-back);
    overlap: [start, end) bytes; kind: ``overlap`` | ``inplace_with_later_reader`` | ``view_outlives_base`` |
    ``stream_read_in_flight`` | ``same_step`` | ``overwrites_own_input`` | ``misaligned`` (an arena offset
    that is not a multiple of the plan's alignment, :func:`misaligned`); detail: one sentence.
    """

    writer: str
    writer_step: int
    written: str
    victim: str
    reader: str
    reader_step: int
    overlap_start: int
    overlap_end: int
    kind: str
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.writer, self.victim, self.reader)


def _kernel_name(plan, step: int) -> str:
    if step < 0:
        return FEED
    if step >= len(plan.kernels):
        return READBACK
    return plan.kernels[step].name


def _is_view_of_earlier_base(plan, life, victim, reader_step) -> bool:
    lv = life[victim.name]
    prod = plan.kernels[lv.first] if 0 <= lv.first < len(plan.kernels) else None
    if prod is None or prod.op_type not in VIEW_OPS or not prod.inputs:
        return False
    base = plan.tensors.get(prod.inputs[0])
    return base is not None and base.offset == victim.offset and life[base.name].last < reader_step


def _rewrites_own_bytes(plan, k, a) -> bool:
    """Kernel ``k`` writes ``a`` as a view of its first input at that input's offset: the bytes it writes are the
    ones already there."""
    src = plan.tensors.get(k.inputs[0]) if k is not None and k.inputs else None
    return src is not None and src.storage == "arena" and src.offset == a.offset and is_view(k, src, a)


def _classify(plan, life, s, k, v) -> tuple[str, int] | None:
    """(kind, reader step) when writing at step ``s`` over live tensor ``v`` is a conflict, else None."""
    lv = life[v.name]
    later = [r for r in lv.reads if r > s]
    if lv.first == s:
        return "same_step", (later[0] if later else lv.last)
    inflight = sorted(r for r, e in lv.read_end.items() if r < s <= e)
    if inflight:
        return "stream_read_in_flight", inflight[0]
    if not later:
        return "overwrites_own_input", s
    if k is not None and v.name in k.inputs:
        return "inplace_with_later_reader", later[0]
    if _is_view_of_earlier_base(plan, life, v, later[0]):
        return "view_outlives_base", later[0]
    return "overlap", later[0]


def static_conflicts(plan) -> list[Conflict]:
    """All conflicts of ``plan`` (see module docstring) plus its :func:`misaligned` tensors, ordered by writer
    step then victim name."""
    life = lifetimes(plan.kernels, plan.graph_inputs, plan.graph_outputs)
    arena = sorted((t for t in plan.tensors.values() if t.storage == "arena" and t.nbytes > 0 and t.name in life),
                   key=lambda t: t.offset)
    starts = [t.offset for t in arena]
    maxlen = max((t.nbytes for t in arena), default=0)
    out = []
    for a in arena:
        s = life[a.name].first
        k = plan.kernels[s] if 0 <= s < len(plan.kernels) else None
        if _rewrites_own_bytes(plan, k, a):
            continue
        lo = bisect.bisect_left(starts, a.offset - maxlen)
        hi = bisect.bisect_left(starts, a.offset + a.nbytes)
        for v in arena[lo:hi]:
            if v is a or v.offset + v.nbytes <= a.offset:
                continue
            lv = life[v.name]
            if not (lv.first <= s <= lv.last):
                continue
            if lv.first == s and v.name < a.name:
                continue  # same-step pair: reported once
            if lv.first < s and k is not None and benign_share(k, v, a) and (is_view(k, v, a) or lv.last == s):
                continue  # a view keeps v's bytes; a verified in-place op consumes v's last read
            kind, rs = _classify(plan, life, s, k, v)
            lo_b, hi_b = max(a.offset, v.offset), min(a.offset + a.nbytes, v.offset + v.nbytes)
            reader = _kernel_name(plan, rs)
            out.append(Conflict(_kernel_name(plan, s), s, a.name, v.name, reader, rs, lo_b, hi_b, kind,
                                f"kernel '{_kernel_name(plan, s)}' writes '{a.name}' over bytes [{lo_b}, {hi_b}) of "
                                f"'{v.name}', which '{reader}' (step {rs}) still reads"))
    out += misaligned(plan, life)
    return sorted(out, key=lambda c: (c.writer_step, c.victim, c.written))


def misaligned(plan, life=None) -> list[Conflict]:
    """A ``misaligned`` :class:`Conflict` for every arena tensor (nbytes > 0) whose offset is not a multiple
    of ``plan.alignment`` (bytes; the device addresses arena buffers at that granularity, and the planner only
    ever places tensors on it, toolkit.memory.planner.align). The tensor is both ``written`` and ``victim``
    (the fix moves it to an aligned range of its own); writer: its producer (``<graph inputs>`` for a feed),
    reader: its first read after that (``<graph outputs>``: read-back); overlap: the tensor's own bytes."""
    life = life if life is not None else lifetimes(plan.kernels, plan.graph_inputs, plan.graph_outputs)
    out = []
    for t in plan.tensors.values():
        if t.storage != "arena" or t.nbytes <= 0 or t.offset % plan.alignment == 0:
            continue
        lt = life.get(t.name)
        s = lt.first if lt is not None else t.first
        later = [r for r in lt.reads if r > s] if lt is not None else []
        rs = later[0] if later else (lt.last if lt is not None else t.last)
        writer = _kernel_name(plan, s)
        out.append(Conflict(writer, s, t.name, t.name, _kernel_name(plan, rs), rs, t.offset, t.offset + t.nbytes,
                            "misaligned", f"tensor '{t.name}' at offset {t.offset} breaks the plan's alignment of "
                            f"{plan.alignment} bytes (the device needs aligned buffers); move it to a multiple of "
                            f"{plan.alignment}"))
    return out
