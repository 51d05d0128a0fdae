"""The streamed pass past one machine: the plan's kernels cut into K contiguous parts, each run by a Ray task on
whatever node has room for it, one after the other, handing on to the next through Ray's object store.

Part ``p`` runs kernels ``[cuts[p], cuts[p + 1])``. Its task loads the model by path (the file and its external
data must be at the same path on every node: weights stay memory-mapped on disk, so a worker touches only the
weights its kernels and reference segments read), compiles it with the driver's Config (the compile is
deterministic; the task refuses a plan whose digest differs from the driver's), and takes up a
toolkit.stream.streamed.StreamPass where the previous part left it (:meth:`StreamPass.export`): the device values
live at its first kernel (NpuRuntime.live_at, restored by NpuRuntime.run_range), the reference boundary tensors
the segments not run yet read, the last reference segment run, the reference values still waiting for their
kernel (``pending``), the tensors with a row, the kept bytes and the noise allowances later rows read. It runs its
kernels, advancing the reference segments they need, builds the rows of the tensors it completes (in the order
one machine builds them) and returns two objects: the hand-over, passed as an ObjectRef straight to the next
part's task (it never goes through the driver), and its result for the driver: its rows, the reference boundary
tensors of the segments it ran, the device checkpoints at the device cuts in its range, the arrays it kept, and
its timings.

The driver concatenates the parts' rows in order (the same layer table, byte for byte, as one machine's pass)
and fills its own stores (toolkit.stream.stores) with the boundaries and checkpoints the parts returned: the
rest of the diagnosis (origin refinement, advice, force_fp32 triage, verdict) runs on the driver as on one
machine, and a tensor it asks for is computed again from those stored boundaries, locally. So the parts hold
at most their own weights, a few segments and the hand-over; the driver holds the stored boundaries (which
spill to disk as on one machine) and no tensor of the pass.

Each task asks Ray for one CPU and a ``memory`` resource of :func:`part_memory` bytes (an estimate: Ray's
memory resource reserves, it does not cap), so a node only takes the parts it has room for; a part larger than
every node is refused before anything runs (give more parts). Tasks are placed with the SPREAD strategy. The
metric sums use BLAS dot products whose float64 rounding depends on the BLAS thread count: the tasks get this
process' count as OPENBLAS_NUM_THREADS (Ray sets OMP_NUM_THREADS=1), so rows built there equal rows built here.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import onnx

from toolkit.core.errors import InputError, ModelError, UsageError
from toolkit.core.ray_cluster import blas_threads, connect
from toolkit.engine import Session, shapes_of
from toolkit.ir.load import load_model, loaded_sha256
from toolkit.ort.segments import DEFAULT_SEGMENT_BYTES
from toolkit.runtime.npu import RunResult
from toolkit.stream.streamed import DEFAULT_KEEP_BYTES, Streamed, StreamPass, rss_bytes

#: Bytes of a worker process before any tensor: the interpreter, onnxruntime, numpy, pandas and npuscope.
BASE_BYTES = 512 << 20
#: How many reference segments' tensors a part holds at once at most (the segment run, those pending, the
#: boundaries held in memory before they spill), for :func:`part_memory`.
SEGMENTS_HELD = 6


def _copied(value):
    if isinstance(value, list):
        return [np.array(x, copy=True) for x in value]
    return None if value is None else np.array(value, copy=True)


def plan_digest(plan) -> str:
    """sha256 (hex) of a compiled plan's JSON (kernels, tensors and their arena offsets, config): two compiles
    that agree on it run the same kernels on the same arena."""
    return hashlib.sha256(json.dumps(plan.to_dict(), sort_keys=True, default=str).encode()).hexdigest()


def _weight_bytes(runtime) -> dict[str, int]:
    """{initializer of the compiled model: bytes} (numel x itemsize; external data included)."""
    out = {}
    for t in runtime.compiled.model.graph.initializer:
        try:
            item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        except Exception:  # noqa: BLE001 - an exotic dtype: counted as one byte per element
            item = 1
        out[t.name] = int(np.prod(t.dims, dtype=np.int64)) * max(item, 1)
    return out


def _kernel_bytes(runtime) -> list[int]:
    """Per kernel: the bytes of its outputs (the plan's sizes) plus the weights it is the first to read."""
    weights, seen, out = _weight_bytes(runtime), set(), []
    for ek in runtime.kernels:
        b = sum(int(getattr(runtime.plan.tensors.get(t), "nbytes", 0) or 0) for _, t in ek.fetches)
        for _, t in ek.feeds:
            if t in weights and t not in seen:
                seen.add(t)
                b += weights[t]
        out.append(b)
    return out


def part_cuts(runtime, parts: int) -> list[int]:
    """Kernel indices where the parts start (0 first), at most ``parts`` of them and none empty: the kernels'
    bytes (outputs and the weights they first read) split as evenly as contiguous ranges allow, cutting after
    at least total / ``parts`` bytes as toolkit.stream.streamed.device_cuts does.

    Raises:
        UsageError: ``parts`` < 1."""
    if parts < 1:
        raise UsageError(f"--ray-parts {parts}: give a number of parts >= 1")
    sizes = _kernel_bytes(runtime)
    if not sizes:
        return [0]
    budget = max(1, -(-sum(sizes) // parts))
    cuts, acc = [0], 0
    for i, b in enumerate(sizes):
        if acc >= budget and i > cuts[-1] and len(cuts) < parts:
            cuts.append(i)
            acc = 0
        acc += b
    return cuts


def part_memory(runtime, start: int, stop: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> int:
    """Estimated bytes a part running kernels ``[start, stop)`` needs (the Ray ``memory`` it asks for):
    :data:`BASE_BYTES`, twice the weights its kernels read (the plan's and the reference's copies), the whole
    arena, its kernels' outputs twice (device and reference) up to :data:`SEGMENTS_HELD` segments, and the device
    values live at both ends (the hand-overs). ``(0, len(kernels))`` estimates the whole model on one worker."""
    weights = _weight_bytes(runtime)
    plan = runtime.plan
    w, outs, seen = 0, 0, set()
    for ek in runtime.kernels[start:stop]:
        for _, t in ek.feeds:
            if t in weights and t not in seen:
                seen.add(t)
                w += weights[t]
        outs += sum(int(getattr(plan.tensors.get(t), "nbytes", 0) or 0) for _, t in ek.fetches)

    def live(i):
        return sum(int(getattr(plan.tensors.get(t), "nbytes", 0) or 0) for t in runtime.live_at(i))

    return int(BASE_BYTES + 2 * w + plan.arena_bytes + min(2 * outs, SEGMENTS_HELD * segment_bytes)
               + live(start) + live(stop))


def check_feeds(runtime, feeds: dict) -> None:
    """The checks of NpuRuntime.run on the graph inputs, made before any part runs.

    Raises:
        InputError: a missing input or one whose shape differs from the compiled shape."""
    for name in runtime.plan.graph_inputs:
        if name not in feeds:
            raise InputError(f"input '{name}' is missing; the model needs {runtime.plan.graph_inputs}")
        val, view = feeds[name], runtime.views.get(name)
        if view is not None and val is not None and not isinstance(val, list) and np.shape(val) != view.shape:
            raise InputError(f"input '{name}' has shape {np.shape(val)} but the plan was compiled for "
                             f"{view.shape}; recompile with --input-shape or pass matching inputs")


def run_part(spec: dict, index: int, start: int, stop: int, handoff: dict | None) -> tuple[dict | None, dict]:
    """Part ``index`` of a split pass: kernels ``[start, stop)`` (module docstring). Runs in a Ray task, or in
    this process.

    Args:
        spec: {"model_path", "model_sha256" (or ""), "plan_digest", "config", "feeds", "thresholds",
            "segment_bytes", "keep_bytes", "only", "memory_bytes"} shared by every part.
        handoff: the previous part's hand-over (None for the first part): {"state": StreamPass.export(),
            "live": {tensor: value} live before kernel ``start``}.

    Returns:
        (the hand-over for the next part, None after the last kernel; this part's result: "rows",
        "boundary" {tensor: array}, "checkpoints" {cut: {tensor: value}}, "kept_golden" / "kept_device"
        {tensor: array}, "kept_bytes", "segments" [first, last] run (last < first: none), "reference_ms",
        "kernel_ms", "npu_ms", "peak_rss_bytes", "outputs" (the last part's graph outputs, else None)).

    Raises:
        ModelError: the model file is missing, differs from the driver's, or compiles to another plan;
        KernelRuntimeError as NpuRuntime.run_range."""
    path = spec["model_path"]
    if not Path(path).is_file():
        raise ModelError(f"--ray: part {index + 1} finds no model file '{path}' on its node; the workers read the "
                         "model by path: put it (and its external data) at the same path on every node")
    model = load_model(path)
    if spec["model_sha256"] and loaded_sha256(path) != spec["model_sha256"]:
        raise ModelError(f"--ray: the model file '{path}' on part {index + 1}'s node differs from the one the "
                         "driver read; give every node the same file")
    feeds = spec["feeds"]
    sess = Session(model, spec["config"], input_shapes=shapes_of(feeds), model_path=path)
    if plan_digest(sess.plan) != spec["plan_digest"]:
        raise ModelError(f"--ray: part {index + 1} compiled '{path}' to another plan than the driver's (another "
                         "npuscope or onnxruntime version on its node?); install the same versions everywhere")
    runtime = sess.runtime
    p = StreamPass(model, runtime, feeds, spec["thresholds"], segment_bytes=spec["segment_bytes"],
                   keep_bytes=spec["keep_bytes"], only=spec["only"], memory_bytes=spec["memory_bytes"])
    if handoff is None:
        p.input_rows()
        restore = {n: feeds[n] for n in runtime.plan.graph_inputs if n in feeds}
    else:
        p.resume(handoff["state"])
        restore = handoff["live"]
    first_segment = p.golden.done + 1
    cuts = set(p.device.cuts)
    checkpoints: dict[int, dict] = {}

    def capture(i: int) -> None:  # the device checkpoint before kernel i (DeviceStore.checkpoint's values)
        if i in cuts:
            checkpoints[i] = {t: _copied(runtime.read(t)) for t in runtime.live_at(i)}

    def on_kernel(i, kspec, written) -> None:
        p.on_kernel(i, kspec, written)
        if i + 1 < stop:
            capture(i + 1)

    runtime.run_range(restore, start, start, dump=False)  # the arena as it stands before kernel ``start``
    capture(start)
    ts = time.perf_counter()
    res = runtime.run_range(restore, start, stop, dump=False, on_kernel=on_kernel)
    npu_ms = (time.perf_counter() - ts) * 1e3
    last = stop >= len(runtime.kernels)
    nxt, outputs = None, None
    if last:
        outputs = runtime.read_outputs(feeds)
        p.finish_reference()
    else:
        nxt = {"state": p.export(), "live": {t: _copied(runtime.read(t)) for t in runtime.live_at(stop)}}
    boundary = {}
    for s in range(first_segment, p.golden.done + 1):
        for t in p.reference.segments[s].outputs:
            if t in p.golden.boundary:
                boundary[t] = _copied(p.golden.boundary[t])
    result = {"index": index, "kernels": [start, stop], "rows": p.rows, "boundary": boundary,
              "checkpoints": checkpoints,
              "kept_golden": {t: p.golden.kept[t] for t in p.kept_names if t in p.golden.kept},
              "kept_device": {t: p.device.kept[t] for t in p.kept_names if t in p.device.kept},
              "kept_bytes": p.kept, "segments": [first_segment, p.golden.done], "reference_ms": p.ref_ms,
              "kernel_ms": list(res.kernel_ms), "npu_ms": max(0.0, npu_ms - p.ref_ms),
              "peak_rss_bytes": max(p.peak, rss_bytes()), "outputs": outputs, "pid": os.getpid()}
    return nxt, result


def _ray_part(spec, index: int, start: int, stop: int, handoff):
    """:func:`run_part` in a Ray task, its result naming the node and the resources Ray gave it."""
    import ray  # optional dependency (the 'ray' extra), present wherever this task runs

    nxt, result = run_part(spec, index, start, stop, handoff)
    ctx = ray.get_runtime_context()
    result["node_id"] = ctx.get_node_id()
    result["assigned"] = {k: float(v) for k, v in ctx.get_assigned_resources().items()}
    return nxt, result


def _largest_node_memory(ray) -> int | None:
    sizes = [int(n.get("Resources", {}).get("memory", 0)) for n in ray.nodes() if n.get("Alive")]
    return max(sizes) if sizes else None


def distributed_comparison(model, runtime, feeds: dict, thresholds=None, *, model_path, config, address: str,
                           parts: int | None = None, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                           keep_bytes: int = DEFAULT_KEEP_BYTES, only=None, types: dict | None = None,
                           progress=None, memory_bytes: int | None = None) -> Streamed:
    """toolkit.stream.streamed.streamed_comparison split into parts run by Ray tasks (module docstring): the same
    :class:`Streamed` (table, stores, outputs; ``peak_rss_bytes`` the highest of the driver's and the parts'
    RSS, ``run.kernel_ms`` the parts' kernel times in plan order), plus ``parts``: per part {"part", "kernels" [start, stop),
    "segments" [first, last] reference segments run, "rows", "memory_bytes" (the Ray memory asked for),
    "assigned" (the resources Ray gave the task), "node_id", "pid", "peak_rss_bytes", "reference_ms",
    "npu_ms"}.

    Args:
        model, runtime, feeds, thresholds, segment_bytes, keep_bytes, only, types, progress, memory_bytes: as
            streamed_comparison (``runtime``: the driver's NpuRuntime; its stores compute tensors again).
        model_path: the model file the tasks load (the same path on every node).
        config: the Config ``runtime`` was compiled with.
        address: the Ray cluster ('auto', 'local', host:port; a Ray already initialised here is used as it is).
        parts: how many parts (None: the cluster's CPU count); fewer when the plan has fewer kernels.

    Raises:
        UsageError: no ray, an unreachable address, ``parts`` < 1, or a part larger than the largest node's
        memory; InputError / ModelError / KernelRuntimeError as a part raises them."""
    say = progress or (lambda _m: None)
    check_feeds(runtime, feeds)
    ray, started = connect(address)
    try:
        n = len(runtime.kernels)
        k = parts if parts is not None else max(1, int(ray.cluster_resources().get("CPU", 1)))
        cuts = part_cuts(runtime, k)
        ranges = list(zip(cuts, cuts[1:] + [n])) if n else [(0, 0)]
        budgets = [part_memory(runtime, a, b, segment_bytes) for a, b in ranges]
        room = _largest_node_memory(ray)
        if room and max(budgets) > room:
            i = budgets.index(max(budgets))
            raise UsageError(f"--ray: part {i + 1} (kernels {ranges[i][0]}-{ranges[i][1] - 1}) needs an estimated "
                             f"{max(budgets) / 2**20:.0f} MiB but the largest node offers {room / 2**20:.0f} MiB; "
                             "give more --ray-parts or a smaller --segment-mb")
        spec = {"model_path": str(Path(model_path).resolve()), "model_sha256": loaded_sha256(model_path) or "",
                "plan_digest": plan_digest(runtime.plan), "config": config, "feeds": feeds,
                "thresholds": thresholds, "segment_bytes": segment_bytes, "keep_bytes": keep_bytes,
                "only": only, "memory_bytes": memory_bytes}
        spec_ref = ray.put(spec)
        task = ray.remote(_ray_part)
        env = {"env_vars": {"OPENBLAS_NUM_THREADS": blas_threads()}}
        say(f"ray: {len(ranges)} part(s) of the plan's {n} kernels, one Ray task each, run in turn")
        handoff, pending = None, []
        for i, (a, b) in enumerate(ranges):
            handoff, res = task.options(num_cpus=1, memory=budgets[i], num_returns=2, max_retries=0,
                                        scheduling_strategy="SPREAD", runtime_env=env).remote(spec_ref, i, a, b,
                                                                                               handoff)
            pending.append(res)
        del handoff
        return _assemble(ray, pending, ranges, budgets, model, runtime, feeds, thresholds, say,
                         segment_bytes=segment_bytes, keep_bytes=keep_bytes, only=only, types=types,
                         memory_bytes=memory_bytes)
    finally:
        if started:
            ray.shutdown()


def _get(ray, ref):
    """ray.get, a task's own error raised as itself (a UserError keeps its one line and exit code)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


def _assemble(ray, pending, ranges, budgets, model, runtime, feeds, thresholds, say, **kw) -> Streamed:
    """The driver's side: the parts' results, in order, into one StreamPass's rows and stores."""
    p = StreamPass(model, runtime, feeds, thresholds, segment_bytes=kw["segment_bytes"], keep_bytes=kw["keep_bytes"],
                   only=kw["only"], types=kw["types"], memory_bytes=kw["memory_bytes"])
    kernel_ms, outputs, records, npu_ms = [], {}, [], 0.0
    for i, ref in enumerate(pending):
        r = _get(ray, ref)
        pending[i] = None  # the result is ours now: Ray may free its copy
        p.rows.extend(r["rows"])
        for t, v in r["boundary"].items():
            p.golden.boundary[t] = v
        for c, live in r["checkpoints"].items():  # into the driver's DeviceStore, through the arena
            runtime.run_range(live, c, c, dump=False)
            p.device.checkpoint(c)
        for t, v in r["kept_golden"].items():
            p.golden.keep(t, v)
        for t, v in r["kept_device"].items():
            p.device.keep(t, v)
        p.golden.done = max(p.golden.done, r["segments"][1])
        p.kept = r["kept_bytes"]
        p.ref_ms += r["reference_ms"]
        p.peak = max(p.peak, r["peak_rss_bytes"])
        npu_ms += r["npu_ms"]
        kernel_ms += r["kernel_ms"]
        outputs = r["outputs"] if r["outputs"] is not None else outputs
        records.append({"part": i + 1, "kernels": r["kernels"], "segments": r["segments"], "rows": len(r["rows"]),
                        "memory_bytes": budgets[i], "assigned": r.get("assigned", {}),
                        "node_id": r.get("node_id", ""), "pid": r["pid"], "peak_rss_bytes": r["peak_rss_bytes"],
                        "reference_ms": round(r["reference_ms"], 2), "npu_ms": round(r["npu_ms"], 2)})
        say(f"ray: part {i + 1}/{len(pending)} done (kernels {ranges[i][0]}-{ranges[i][1] - 1}, {len(r['rows'])} "
            f"rows, reference segments {r['segments'][0] + 1}-{r['segments'][1] + 1})")
    run = RunResult(outputs, {}, kernel_ms, npu_ms)
    st = p.result(run)
    st.parts = records
    return st
