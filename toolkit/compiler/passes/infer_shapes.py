"""Pass ``infer_shapes``: ONNX shape inference with data propagation over the bound input shapes."""

from __future__ import annotations

from toolkit.compiler.context import PassResult
from toolkit.compiler.registry import register_pass
from toolkit.ir.graph import Graph
from toolkit.ir.shape_inference import infer_into


def reinfer(ctx) -> int:
    """Re-run shape inference on ctx.graph (in place); returns how many tensors have a static shape."""
    model = ctx.graph.sync()
    del model.graph.value_info[:]
    try:
        inferred = infer_into(model, strict_mode=False, data_prop=True)
    except Exception:  # inference is best effort; unknown shapes become dynamic tensors
        inferred = model
    ctx.graph = Graph(inferred)
    return sum(1 for t in ctx.graph.types.values() if t.static)


@register_pass("infer_shapes", provides=("shapes",))
def run(ctx) -> PassResult:
    n = reinfer(ctx)
    unknown = [o for node in ctx.graph.nodes for o in node.output
               if o and not (ctx.graph.vtype(o) and ctx.graph.vtype(o).static)]
    log = [f"{n} tensors with static shapes; {len(unknown)} node outputs dynamic or unknown"]
    if unknown:
        log.append("dynamic: " + ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else ""))
    return PassResult(0, log)
