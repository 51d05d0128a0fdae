"""Streamed comparison: the FP32 reference segment by segment (toolkit.ort.segments) and the NPU plan kernel by
kernel, each tensor compared the moment both sides have it and then let go.

The device run goes once over the whole plan (its arena holds only the live activations). When a kernel writes a
tensor, the reference segments up to the one that computes it are run (in node order) and the tensor's row of the
layer table is built at once (toolkit.compare.layerwise.LayerRows: the same rows, allowances and order as the
all-in-memory table). Tensors the device does not store (fused into a kernel, folded, ...) get their rows when their
segment runs. A reference tensor is dropped once its row is built; the arena view of a device tensor is never
copied, except for what is kept:

- the graph outputs, both sides;
- the tensors whose row crosses a line (Abnormal, OverFlow or any AbnormalMetrics), both sides, earliest first,
  while the kept bytes stay under ``keep_bytes``.

Every other tensor can still be read from the returned stores (toolkit.stream.stores): its segment is computed
again from the stored boundary tensors (the reference segments' crossing tensors; the device's live values at each
cut). Peak memory is then the weights (memory-mapped), the arena, a few segments' tensors, the boundaries and the
kept arrays, instead of every tensor of both runs.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import time

import numpy as np
import pandas as pd

from toolkit.compare.layerwise import LayerRows
from toolkit.compare.nondeterminism import dependent_tensors
from toolkit.ort.reference import inferred_types
from toolkit.ort.segments import DEFAULT_SEGMENT_BYTES, SegmentedReference, symbol_values, value_bytes
from toolkit.runtime.npu import RunResult
from toolkit.stream.stores import DeviceStore, GoldenStore, nbytes_of

#: Default bytes of crossing tensors kept as arrays (both sides together) besides the graph outputs.
DEFAULT_KEEP_BYTES = 256 << 20
#: Stream automatically when the reference's tensors (estimated from shape inference) exceed this (bytes).
AUTO_STREAM_BYTES = 256 << 20


def rss_bytes() -> int:
    """This process's resident set size now (bytes; /proc/self/statm), else its peak (getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def tensor_bytes(model, types: dict | None = None, feeds: dict | None = None) -> int:
    """Estimated bytes of every tensor the model's nodes compute (shape inference, symbolic dimensions sized from
    ``feeds``: toolkit.ort.segments.symbol_values; unknown shapes count 0)."""
    types = inferred_types(model) if types is None else types
    dims = symbol_values(model, feeds or {})
    declared = {v.name: v for v in model.graph.output}
    return sum(value_bytes(types.get(o) or declared.get(o), dims) for n in model.graph.node for o in n.output if o)


def device_cuts(runtime, budget_bytes: int) -> list[int]:
    """Kernel indices where device segments start: a new one after at least ``budget_bytes`` of kernel outputs
    (the plan's tensor sizes), 0 first."""
    cuts, acc = [0], 0
    for i, ek in enumerate(runtime.kernels):
        if acc >= budget_bytes and i > cuts[-1]:
            cuts.append(i)
            acc = 0
        for _, t in ek.fetches:
            spec = runtime.plan.tensors.get(t)
            acc += int(getattr(spec, "nbytes", 0) or 0)
    return cuts


@dataclasses.dataclass
class Streamed:
    """What a streamed pass leaves: ``table`` (the layer table before origin refinement, as
    toolkit.compare.layerwise.layer_table gives it), ``golden`` / ``device`` (toolkit.stream.stores), ``run``
    (the device run's RunResult: graph outputs, per-kernel times; no dumps), ``segments`` (reference segments),
    ``device_segments``, ``peak_rss_bytes`` (the highest RSS seen at a segment's end), ``kept_bytes``,
    ``reference_ms``; ``parts``: one record per part of a pass split across Ray workers
    (toolkit.stream.distributed; empty on one machine)."""

    table: pd.DataFrame
    golden: GoldenStore
    device: DeviceStore
    run: RunResult
    segments: int
    device_segments: int
    peak_rss_bytes: int
    kept_bytes: int
    reference_ms: float
    parts: list = dataclasses.field(default_factory=list)


def _crosses(row: dict) -> bool:
    crossed = row.get("AbnormalMetrics")
    return bool(row.get("Abnormal")) or bool(row.get("OverFlow")) or \
        (isinstance(crossed, (list, tuple)) and len(crossed) > 0)


class StreamPass:
    """The state of one streamed pass, built up kernel by kernel (:func:`streamed_comparison`'s steps as methods,
    so that a pass can stop at a kernel cut and go on elsewhere: toolkit.stream.distributed).

    Args: as :func:`streamed_comparison`.

    ``on_segment``: optional callable(pass, segment index, {tensor: reference value}) called once per reference
    segment, in order, right after it ran and its rows were built, while its values are held (toolkit.diagnose
    screens its force_fp32 triage run against them there instead of computing the reference again).

    State: ``golden`` / ``device`` (the stores; ``golden.done`` the last reference segment run), ``pending``
    ({tensor: reference value} of tensors a kernel writes whose segment ran before the kernel came), ``rowed``
    (tensors with a row), ``rows`` (the rows so far, in the order built), ``kept`` (bytes of crossing tensors
    kept), ``kept_names`` (the tensors kept as arrays, in order), ``rows_of`` (the LayerRows, whose noise
    allowances and |x| maxima later rows read), ``peak`` (bytes of RSS) and ``ref_ms`` (ms in the reference).
    :meth:`export` and :meth:`resume` carry what a later kernel needs across a cut."""

    def __init__(self, model, runtime, feeds: dict, thresholds=None, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 keep_bytes: int = DEFAULT_KEEP_BYTES, only=None, options=None, types: dict | None = None,
                 progress=None, memory_bytes: int | None = None, on_segment=None):
        self.model, self.runtime, self.feeds, self.only = model, runtime, feeds, only
        self.on_segment = on_segment
        self.keep_bytes = keep_bytes
        self.say = progress or (lambda _m: None)
        types = inferred_types(model) if types is None else types
        plan_sizes = {t: int(spec.nbytes) for t, spec in runtime.plan.tensors.items() if getattr(spec, "nbytes", 0)}
        self.reference = SegmentedReference(model, types, segment_bytes, only, dims=symbol_values(model, feeds),
                                            sizes=plan_sizes)
        held = 2 * segment_bytes if memory_bytes is None else memory_bytes
        self.golden = GoldenStore(self.reference, feeds, options, memory_bytes=held)
        self.device = DeviceStore(runtime, feeds, device_cuts(runtime, segment_bytes), memory_bytes=held)
        self.rows_of = LayerRows(model, runtime.plan, thresholds, random_src=dependent_tensors(model, self.golden))
        self.outputs = {o.name for o in model.graph.output}
        self.n_seg = len(self.reference.segments)
        self.kept, self.peak, self.ref_ms = 0, rss_bytes(), 0.0
        self.pending: dict = {}  # reference values of computed segments whose device value has not come yet
        self.rows: list[dict] = []
        self.rowed: set[str] = set()
        self.kept_names: dict[str, None] = {}
        self.wanted = set(self.golden)

    def _keep(self, t: str, g, d, row: dict) -> None:
        if t in self.outputs:
            self.golden.keep(t, g)
            self.device.keep(t, d)
            self.kept_names[t] = None
            return
        size = nbytes_of(g) + nbytes_of(d)
        if _crosses(row) and self.kept + size <= self.keep_bytes:
            self.golden.keep(t, g)
            self.device.keep(t, d)
            self.kept_names[t] = None
            self.kept += size

    def row_now(self, t: str, g, d, stored: bool) -> None:
        """Build ``t``'s row from its reference value ``g`` and device value ``d`` (``stored``: the device holds
        it) and keep the arrays the report needs."""
        if self.only is not None and t not in self.only:
            g, d, stored = None, None, False
        row = self.rows_of.tensor_row(t, g, d, stored)
        self.rows.append(row)
        self.rowed.add(t)
        if stored and g is not None:
            self._keep(t, g, d, row)
        elif t in self.outputs and g is not None:
            self.golden.keep(t, g)
            self.kept_names[t] = None

    def run_segments_to(self, target: int) -> None:
        """Run the reference segments up to ``target`` (an index), building the rows of the tensors no kernel
        writes and holding the others' reference values in ``pending``."""
        golden, device, rows_of = self.golden, self.device, self.rows_of
        while golden.done < target:
            ts = time.perf_counter()
            s, values = golden.advance()
            self.ref_ms += (time.perf_counter() - ts) * 1e3
            seg = self.reference.segments[s]
            for node in self.model.graph.node[seg.start:seg.stop]:
                for t in node.output:
                    if not t or t in self.rowed or t not in rows_of.position:
                        continue
                    g = values.get(t) if t in self.wanted else None
                    if device.written_by_kernel(t):
                        self.pending[t] = g
                    else:
                        self.row_now(t, g, device.kept.get(t), t in device)
            if self.on_segment is not None:
                self.on_segment(self, s, values)
            self.peak = max(self.peak, rss_bytes())
            self.say(f"reference segment {s + 1}/{self.n_seg} compared ({seg.stop - seg.start} nodes; RSS "
                     f"{self.peak / 2**30:.2f} GiB)")

    def input_rows(self) -> None:
        """The graph inputs' rows (first in the table)."""
        for name in self.runtime.plan.graph_inputs:
            self.rows.append(self.rows_of.input_row(
                name, (self.feeds[name], self.feeds[name]) if name in self.feeds else None))

    def on_kernel(self, _i, _spec, written: dict) -> None:
        """NpuRuntime's ``on_kernel``: the rows of the tensors kernel ``_i`` wrote."""
        for t, value in written.items():
            if t in self.rowed or t not in self.rows_of.position:
                continue
            s = self.reference.segment_of.get(t)
            if s is not None and s > self.golden.done:
                self.run_segments_to(s)
            self.row_now(t, self.pending.pop(t, None), value, True)

    def before_kernel(self, i, _spec) -> None:
        """NpuRuntime's ``before_kernel``: the device checkpoint at a cut."""
        self.device.checkpoint(i)

    def finish_reference(self) -> None:
        """The reference segments no kernel asked for, and the rows of tensors still pending (written by a kernel
        that never came: cannot happen in a valid plan)."""
        self.run_segments_to(self.n_seg - 1)
        for t, g in list(self.pending.items()):
            self.row_now(t, g, None, False)
        self.pending.clear()

    def result(self, run: RunResult) -> Streamed:
        """The :class:`Streamed` of the pass once ``run`` (the device run) is over; the graph outputs ``run``
        returns are kept on the device side."""
        for t, v in run.outputs.items():  # the plan's graph outputs as returned (declared dtype)
            if t not in self.device.kept and v is not None:
                self.device.keep(t, v)
        self.peak = max(self.peak, rss_bytes())
        return Streamed(self.rows_of.frame(self.rows), self.golden, self.device, run, self.n_seg,
                        len(self.device.cuts), self.peak, self.kept, self.ref_ms)

    def export(self) -> dict:
        """What the pass needs to go on at a later kernel, besides the device values live there: {"done": the
        last reference segment run, "pending", "rowed", "kept" (bytes), "allowed" / "absmax" (LayerRows'
        memory), "boundary": {tensor: array} of the stored reference boundary tensors that the segments not run
        yet read}. Arrays are copies."""
        later = {t for seg in self.reference.segments[self.golden.done + 1:] for t in seg.inputs}
        boundary = {t: _copied(self.golden.boundary[t]) for t in later if t in self.golden.boundary}
        return {"done": self.golden.done, "pending": dict(self.pending), "rowed": set(self.rowed),
                "kept": self.kept, "allowed": dict(self.rows_of.allowed), "absmax": dict(self.rows_of.absmax),
                "boundary": boundary}

    def resume(self, state: dict) -> None:
        """Take up :meth:`export` 's ``state`` (of a pass of the same model, plan and options)."""
        for t, v in state["boundary"].items():
            self.golden.boundary[t] = v
        self.golden.done = state["done"]
        self.pending = dict(state["pending"])
        self.rowed = set(state["rowed"])
        self.kept = state["kept"]
        self.rows_of.allowed.update(state["allowed"])
        self.rows_of.absmax.update(state["absmax"])


def _copied(value):
    if isinstance(value, list):
        return [np.array(x, copy=True) for x in value]
    return None if value is None else np.array(value, copy=True)


def streamed_comparison(model, runtime, feeds: dict, thresholds=None, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                        keep_bytes: int = DEFAULT_KEEP_BYTES, only=None, options=None, types: dict | None = None,
                        progress=None, memory_bytes: int | None = None, on_segment=None) -> Streamed:
    """One streamed pass (module docstring), on this machine (:class:`StreamPass` over one device run).

    Args:
        model: the loaded model; runtime: its NpuRuntime (kernels built); feeds: {graph input: array}.
        thresholds: abnormal lines (toolkit.compare.metrics syntax; None: the defaults).
        segment_bytes: tensor bytes per reference segment and per device segment (bytes).
        keep_bytes: bytes of crossing tensors kept as arrays (module docstring).
        only: the tensors compared and kept (a subset's, toolkit.compare.subset; None: all). The reference
            exposes only those; any other gets the row of a tensor neither side holds, as the all-in-memory
            table gives it for a subset.
        options: onnxruntime RunOptions of the reference segments.
        types: {tensor: ValueInfoProto} of the model (toolkit.ort.reference.inferred_types; computed if None).
        progress: callable(str) told each reference segment done, with the RSS.
        memory_bytes: bytes of stored boundary tensors held in memory on each side before they go to disk
            (toolkit.stream.spill; default: 2 x ``segment_bytes``).
        on_segment: optional callable(pass, segment index, {tensor: reference value}) after each reference
            segment (:class:`StreamPass`).

    Raises:
        InputError / KernelRuntimeError as NpuRuntime.run; ModelError when onnxruntime refuses a segment.
    """
    p = StreamPass(model, runtime, feeds, thresholds, segment_bytes=segment_bytes, keep_bytes=keep_bytes, only=only,
                   options=options, types=types, progress=progress, memory_bytes=memory_bytes, on_segment=on_segment)
    p.input_rows()
    run = runtime.run(feeds, dump=False, on_kernel=p.on_kernel, before_kernel=p.before_kernel)
    p.finish_reference()
    return p.result(run)


def should_stream(model, stream: bool | None, types: dict | None = None, feeds: dict | None = None) -> bool:
    """``stream`` when given; None (auto): stream when the model's tensors (:func:`tensor_bytes`, sized for
    ``feeds``) exceed :data:`AUTO_STREAM_BYTES`."""
    if stream is not None:
        return bool(stream)
    return tensor_bytes(model, types, feeds) > AUTO_STREAM_BYTES

