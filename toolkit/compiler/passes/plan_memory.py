"""Pass ``plan_memory``: storage dtype, shape and lifetime of every runtime tensor, then arena offsets.

Tensors with static shapes live in the arena; tensors whose shape depends on data (NonMaxSuppression,
NonZero, ...) are ``dynamic`` (allocated when produced); non-tensor values (sequences) are ``host``.
"""

from __future__ import annotations

import numpy as np

from toolkit.compiler.pipeline import PassResult, register_pass
from toolkit.compiler.plan import Plan, TensorSpec
from toolkit.memory.planner import Block, align, lower_bound, plan_greedy_by_size, plan_no_reuse


def _spec(g, name, kernel, precision, cast_of=None):
    vt = g.vtype(cast_of or name)
    if vt is None:
        return TensorSpec(name, "object", None, storage="host", producer=kernel)
    dtype = vt.np_dtype
    if precision == "fp16" and dtype == np.float32:
        dtype = np.dtype(np.float16)
    if not vt.static or dtype == np.dtype(object):  # string tensors hold Python objects: never in the arena
        return TensorSpec(name, dtype.name, list(vt.shape) if vt.shape else None, storage="dynamic", producer=kernel)
    nbytes = int(np.prod(vt.shape, dtype=np.int64)) * dtype.itemsize
    return TensorSpec(name, dtype.name, list(vt.shape), nbytes, "arena", producer=kernel)


@register_pass("plan_memory", requires=("casts",), provides=("plan",))
def run(ctx) -> PassResult:
    g, cfg = ctx.graph, ctx.config
    tensors: dict[str, TensorSpec] = {}
    for t in g.inputs:
        tensors[t] = _spec(g, t, None, "fp32")
        tensors[t].first = -1
    for i, k in enumerate(ctx.kernels):
        for t in k.outputs:
            spec = _spec(g, t, k.name, k.precision, k.cast_of)
            spec.first = spec.last = i
            tensors[t] = spec
        for t in k.inputs:
            if t in tensors:
                tensors[t].last = max(tensors[t].last, i)
    end = len(ctx.kernels)
    for t in g.outputs:
        if t in tensors:
            tensors[t].last = end
    blocks = [Block(t.name, align(max(t.nbytes, 1), cfg.memory_alignment), t.first, t.last)
              for t in tensors.values() if t.storage == "arena"]
    arena = plan_greedy_by_size(blocks) if cfg.memory_reuse == "greedy" else plan_no_reuse(blocks)
    for b in blocks:
        tensors[b.name].offset = b.offset
    lb = lower_bound(blocks)
    ctx.plan = Plan(model=ctx.model_path, config=cfg.to_dict(), kernels=ctx.kernels, tensors=tensors,
                    graph_inputs=list(g.inputs), graph_outputs=list(g.outputs), folded=list(ctx.folded),
                    arena_bytes=arena, lower_bound_bytes=lb, alignment=cfg.memory_alignment)
    dyn = [t.name for t in tensors.values() if t.storage != "arena"]
    log = [f"arena {arena} bytes for {len(blocks)} tensors; lower bound {lb} bytes "
           f"({arena / lb if lb else 1:.3f}x)"]
    if dyn:
        log.append(f"{len(dyn)} tensors outside the arena (dynamic shape or non-tensor): {', '.join(dyn[:8])}")
    return PassResult(len(blocks), log)
