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
    ``device_segments``, ``peak_rss_bytes`` (the highest RSS seen at a segment's end), ``kept_bytes``."""

    table: pd.DataFrame
    golden: GoldenStore
    device: DeviceStore
    run: RunResult
    segments: int
    device_segments: int
    peak_rss_bytes: int
    kept_bytes: int
    reference_ms: float


def _crosses(row: dict) -> bool:
    crossed = row.get("AbnormalMetrics")
    return bool(row.get("Abnormal")) or bool(row.get("OverFlow")) or \
        (isinstance(crossed, (list, tuple)) and len(crossed) > 0)


def streamed_comparison(model, runtime, feeds: dict, thresholds=None, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                        keep_bytes: int = DEFAULT_KEEP_BYTES, only=None, options=None, types: dict | None = None,
                        progress=None, memory_bytes: int | None = None) -> Streamed:
    """One streamed pass (module docstring).

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
            (toolkit.stream.spill; default: 4 x ``segment_bytes``).

    Raises:
        InputError / KernelRuntimeError as NpuRuntime.run; ModelError when onnxruntime refuses a segment.
    """
    say = progress or (lambda _m: None)
    types = inferred_types(model) if types is None else types
    plan_sizes = {t: int(spec.nbytes) for t, spec in runtime.plan.tensors.items() if getattr(spec, "nbytes", 0)}
    reference = SegmentedReference(model, types, segment_bytes, only, dims=symbol_values(model, feeds),
                                   sizes=plan_sizes)
    held = 4 * segment_bytes if memory_bytes is None else memory_bytes
    golden = GoldenStore(reference, feeds, options, memory_bytes=held)
    device = DeviceStore(runtime, feeds, device_cuts(runtime, segment_bytes), memory_bytes=held)
    rows_of = LayerRows(model, runtime.plan, thresholds, random_src=dependent_tensors(model, golden))
    outputs = {o.name for o in model.graph.output}
    n_seg = len(reference.segments)
    state = {"kept": 0, "peak": rss_bytes(), "ref_ms": 0.0}
    pending: dict = {}  # reference values of computed segments whose device value has not come yet
    rows: list[dict] = []
    rowed: set[str] = set()
    wanted = set(golden)

    def keep(t: str, g, d, row: dict) -> None:
        if t in outputs:
            golden.keep(t, g)
            device.keep(t, d)
            return
        size = nbytes_of(g) + nbytes_of(d)
        if _crosses(row) and state["kept"] + size <= keep_bytes:
            golden.keep(t, g)
            device.keep(t, d)
            state["kept"] += size

    def row_now(t: str, g, d, stored: bool) -> None:
        if only is not None and t not in only:
            g, d, stored = None, None, False
        row = rows_of.tensor_row(t, g, d, stored)
        rows.append(row)
        rowed.add(t)
        if stored and g is not None:
            keep(t, g, d, row)
        elif t in outputs and g is not None:
            golden.keep(t, g)

    def run_segments_to(target: int) -> None:
        while golden.done < target:
            ts = time.perf_counter()
            s, values = golden.advance()
            state["ref_ms"] += (time.perf_counter() - ts) * 1e3
            seg = reference.segments[s]
            for node in model.graph.node[seg.start:seg.stop]:
                for t in node.output:
                    if not t or t in rowed or t not in rows_of.position:
                        continue
                    g = values.get(t) if t in wanted else None
                    if device.written_by_kernel(t):
                        pending[t] = g
                    else:
                        row_now(t, g, device.kept.get(t), t in device)
            state["peak"] = max(state["peak"], rss_bytes())
            say(f"reference segment {s + 1}/{n_seg} compared ({seg.stop - seg.start} nodes; RSS "
                f"{state['peak'] / 2**30:.2f} GiB)")

    for name in runtime.plan.graph_inputs:
        rows.append(rows_of.input_row(name, (feeds[name], feeds[name]) if name in feeds else None))

    def on_kernel(_i, _spec, written: dict) -> None:
        for t, value in written.items():
            if t in rowed or t not in rows_of.position:
                continue
            s = reference.segment_of.get(t)
            if s is not None and s > golden.done:
                run_segments_to(s)
            row_now(t, pending.pop(t, None), value, True)

    def before_kernel(i, _spec) -> None:
        device.checkpoint(i)

    run = runtime.run(feeds, dump=False, on_kernel=on_kernel, before_kernel=before_kernel)
    run_segments_to(n_seg - 1)
    for t, g in list(pending.items()):  # written by a kernel that never came (cannot happen in a valid plan)
        row_now(t, g, None, False)
    pending.clear()
    for t, v in run.outputs.items():  # the plan's graph outputs as returned (declared dtype)
        if t not in device.kept and v is not None:
            device.keep(t, v)
    state["peak"] = max(state["peak"], rss_bytes())
    return Streamed(rows_of.frame(rows), golden, device, run, n_seg, len(device.cuts), state["peak"],
                    state["kept"], state["ref_ms"])


def should_stream(model, stream: bool | None, types: dict | None = None, feeds: dict | None = None) -> bool:
    """``stream`` when given; None (auto): stream when the model's tensors (:func:`tensor_bytes`, sized for
    ``feeds``) exceed :data:`AUTO_STREAM_BYTES`."""
    if stream is not None:
        return bool(stream)
    return tensor_bytes(model, types, feeds) > AUTO_STREAM_BYTES

