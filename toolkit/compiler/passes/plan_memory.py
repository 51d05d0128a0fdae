"""Pass ``plan_memory``: storage dtype, shape and lifetime of every runtime tensor, then arena offsets.

Storage dtypes: graph inputs keep their declared dtype; float32/float16 kernel outputs are stored in the
precision toolkit.compiler.passes.insert_casts.storage_precision gives (so an FP16-origin tensor written by an
FP32 kernel takes 4 bytes per element, an FP32-origin tensor written by an FP16 kernel 2); host-device copies
keep their source's storage dtype; other dtypes are stored as declared.

Device tensors with static shapes live in the arena; device tensors whose shape depends on data are
``dynamic`` (allocated when produced). Outputs of CPU-placed kernels (AI_CPU ops, ``MemcpyD2H`` copies),
string tensors and non-tensor values (sequences) are ``host`` (host memory, never in the arena; ``nbytes`` is
their size when the shape is static, else 0).

Lifetimes are stream-aware (toolkit.memory.lifetimes). The policy (``Config.memory_reuse``) places them:
``off`` every tensor its own range; ``conservative`` same-size free-list reuse; ``aggressive`` (default;
``greedy`` is an alias) greedy-by-size best fit over alias groups (views and in-place outputs share their
input's bytes, toolkit.memory.aliases). ``disable_reuse`` tensors (or the outputs of named nodes/kernels)
get exclusive ranges after everything else. A plan larger than ``device_memory_bytes`` is a compile error.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from toolkit.compiler.context import PassResult
from toolkit.compiler.passes.insert_casts import storage_precision
from toolkit.compiler.plan import Plan, TensorSpec
from toolkit.compiler.registry import register_pass
from toolkit.core.errors import ConfigError
from toolkit.core.text import suggest
from toolkit.memory.aliases import find_aliases
from toolkit.memory.capacity import check_capacity
from toolkit.memory.lifetimes import lifetimes
from toolkit.memory.planner import POLICIES, Block, align, lower_bound, place_exclusive


@functools.cache
def _name(dtype: np.dtype) -> str:
    """``dtype.name``, which numpy works out anew on every access (~5 µs: most of a TensorSpec's cost)."""
    return dtype.name


def _spec(g, name, kernel, precision, cast_of=None, placement="NPU", dtype=None):
    """TensorSpec of ``name``: its ONNX type (of ``cast_of`` for Cast/copy outputs) with float32/float16 stored
    as ``precision`` (``fp16``/``fp32``; None keeps the ONNX dtype), or ``dtype`` when given (copies: their
    source's storage dtype)."""
    vt = g.vtype(cast_of or name)
    if vt is None:
        return TensorSpec(name, "object", None, storage="host", producer=kernel)
    if dtype is None:
        dtype = vt.np_dtype
        if precision is not None and dtype in (np.float32, np.float16):
            dtype = np.dtype(np.float16 if precision == "fp16" else np.float32)
    dtype = np.dtype(dtype)
    if placement == "CPU" or dtype == np.dtype(object):  # host memory; string tensors hold Python objects
        nbytes = math.prod(vt.shape) * dtype.itemsize if vt.static and dtype.kind != "O" else 0
        return TensorSpec(name, _name(dtype), list(vt.shape) if vt.shape is not None else None, nbytes, "host",
                          producer=kernel)
    if not vt.static:
        return TensorSpec(name, _name(dtype), list(vt.shape) if vt.shape else None, storage="dynamic", producer=kernel)
    nbytes = math.prod(vt.shape) * dtype.itemsize
    return TensorSpec(name, _name(dtype), list(vt.shape), nbytes, "arena", producer=kernel)


def _output_spec(g, t, k, tensors, mode) -> TensorSpec:
    """TensorSpec of output ``t`` of kernel ``k``: copies keep their source's storage dtype; other float outputs
    are stored as insert_casts.storage_precision says (nbytes follow the storage dtype)."""
    if k.fusion == "copy" and k.inputs and k.inputs[0] in tensors:
        src = tensors[k.inputs[0]]
        return _spec(g, t, k.name, None, k.cast_of, k.placement,
                     dtype=src.dtype if src.dtype != "object" else None)
    return _spec(g, t, k.name, storage_precision(g, t, k, mode), k.cast_of, k.placement)


def exclusive_tensors(names, kernels, tensors) -> tuple[set[str], list[str]]:
    """(tensor names that get exclusive ranges, unknown names) for a ``disable_reuse`` list of tensor, node or
    kernel names (a node or kernel name selects the outputs of its kernel)."""
    wanted, out = set(names or ()), set()
    for k in kernels:
        hit = wanted.intersection([k.name, *k.nodes])
        if hit:
            out.update(k.outputs)
            wanted -= hit
    hit = wanted.intersection(tensors)
    out.update(hit)
    return out, sorted(wanted - hit)


def place(tensors: dict[str, TensorSpec], kernels, graph_inputs, graph_outputs, policy: str, alignment: int,
          disable_reuse=()) -> tuple[int, int, list[str]]:
    """Fill first/last/offset/stream/alias_of of ``tensors`` (in place); returns (arena bytes, lower bound
    bytes, log lines). See the module docstring for the policies. The lower bound is the peak of live bytes
    over the plan's distinct buffers (an alias group counts once, over the union of its lifetimes): with
    no aliases (off, conservative) it is the classic per-tensor bound."""
    policy = "aggressive" if policy == "greedy" else policy
    life = lifetimes(kernels, graph_inputs, graph_outputs)
    for name, t in tensors.items():
        lt = life.get(name)
        if lt is not None:
            t.first, t.last, t.stream = lt.first, lt.last, lt.stream
        t.alias_of = None
    exclusive, unknown = exclusive_tensors(disable_reuse, kernels, tensors)
    log = [f"disable_reuse: {len(exclusive)} tensor(s) with exclusive ranges"] if disable_reuse else []
    if unknown:
        log.append(f"disable_reuse: no tensor, node or kernel named {', '.join(unknown[:8])} (ignored)")
    arena_t = {n: t for n, t in tensors.items() if t.storage == "arena"}
    aliases = find_aliases(kernels, arena_t, life, exclusive) if policy == "aggressive" else {}
    root = {}
    for n in arena_t:
        r = n
        while r in aliases:
            r = aliases[r][0]
        root[n] = r
    groups: dict[str, Block] = {}
    for n, t in arena_t.items():
        size = align(max(t.nbytes, 1), alignment)
        b = groups.get(root[n])
        if b is None:
            groups[root[n]] = Block(root[n], size, t.first, t.last)
        else:
            b.size, b.first, b.last = max(b.size, size), min(b.first, t.first), max(b.last, t.last)
    shared = [b for r, b in groups.items() if r not in exclusive]
    arena = POLICIES[policy](shared) if shared else 0
    arena = place_exclusive([b for r, b in groups.items() if r in exclusive], arena)
    for n, t in arena_t.items():
        t.offset = groups[root[n]].offset
        if n in aliases:
            t.alias_of = aliases[n][0]
    nv = sum(1 for a in aliases.values() if a[1] == "view")
    if policy == "aggressive":
        log.append(f"aliases: {nv} view(s), {len(aliases) - nv} in-place output(s)")
    return arena, lower_bound(list(groups.values())), log


def check_disable_reuse(cfg, graph, kernels, tensors) -> None:
    """Refuse a ``disable_reuse`` name that is no tensor, node or kernel of the model (as keep_dtype refuses
    unknown nodes); a model tensor fused inside a kernel has no range and is accepted. Raises ConfigError
    (exit 2) naming the config file, with a did-you-mean."""
    if not cfg.disable_reuse:
        return
    _, unknown = exclusive_tensors(cfg.disable_reuse, kernels, tensors)
    model_names = {n.name for n in graph.nodes} | {t for n in graph.nodes for t in (*n.input, *n.output) if t}
    unknown = [u for u in unknown if u not in model_names]
    if unknown:
        known = {n for k in kernels for n in (k.name, *k.nodes)} | set(tensors) | model_names
        raise ConfigError(f"{cfg.where('disable_reuse')} names '{unknown[0]}', which is no tensor, node or kernel "
                          f"of the model{suggest(unknown[0], known)}; use names from plan.json or remove it")


def _arena_tensors_fit(ctx) -> bool:
    plan = ctx.plan
    return plan is not None and all(0 <= t.offset and t.offset + t.nbytes <= plan.arena_bytes
                                    for t in plan.tensors.values() if t.storage == "arena")


#: Postconditions (toolkit.compiler.registry.Ensure).
ENSURES = (("a plan is made and every arena tensor lies inside the arena", _arena_tensors_fit),)


@register_pass("plan_memory", requires=("casts",), provides=("plan",), ensures=ENSURES)
def run(ctx) -> PassResult:
    g, cfg = ctx.graph, ctx.config
    tensors: dict[str, TensorSpec] = {}
    for t in g.inputs:
        tensors[t] = _spec(g, t, None, None)  # graph inputs: their declared dtype
    for k in ctx.kernels:
        for t in k.outputs:
            tensors[t] = _output_spec(g, t, k, tensors, cfg.precision_mode)
    check_disable_reuse(cfg, g, ctx.kernels, tensors)
    arena, lb, log = place(tensors, ctx.kernels, g.inputs, g.outputs, cfg.memory_reuse, cfg.memory_alignment,
                           cfg.disable_reuse)
    ctx.plan = Plan(model=ctx.model_path, config=cfg.to_dict(), kernels=ctx.kernels, tensors=tensors,
                    graph_inputs=list(g.inputs), graph_outputs=list(g.outputs), folded=list(ctx.folded),
                    arena_bytes=arena, lower_bound_bytes=lb, alignment=cfg.memory_alignment)
    check_capacity(ctx.plan, cfg.device_memory_bytes)
    n_arena = sum(1 for t in tensors.values() if t.storage == "arena")
    dyn = [t.name for t in tensors.values() if t.storage == "dynamic"]
    host = [t.name for t in tensors.values() if t.storage == "host"]
    log.insert(0, f"policy {cfg.memory_reuse}: arena {arena} bytes for {n_arena} tensors; lower bound {lb} bytes "
                  f"({arena / lb if lb else 1:.3f}x)")
    if dyn:
        log.append(f"{len(dyn)} dynamic device tensors (data-dependent shape): {', '.join(dyn[:8])}")
    if host:
        log.append(f"{len(host)} host tensors (CPU-placed kernels, non-tensor or string values): {', '.join(host[:8])}")
    return PassResult(n_arena, log)
