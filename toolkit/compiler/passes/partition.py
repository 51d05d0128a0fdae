"""Pass ``partition``: turn fusion groups and the remaining single nodes into kernels, in graph order.

A kernel runs at the position of its last node. A group whose inputs would not all exist by then (not
convex) is dissolved back into single-node kernels, and the refusal is logged.
"""

from __future__ import annotations

from toolkit.compiler.context import PassResult
from toolkit.compiler.plan import KernelSpec
from toolkit.compiler.registry import register_pass
from toolkit.ir.graph import node_reads
from toolkit.precision.contract import CONTROL, op_class

GROUP_CLASS = {"LayerNorm": "vector_reduction", "RMSNorm": "vector_reduction", "Attention": "cube"}


def _kernel(ctx, name, nodes, op_type, rule, fusion, cls):
    g = ctx.graph
    produced = [o for n in nodes for o in n.output if o]
    inside = {n.name for n in nodes}
    reads = []
    for n in nodes:
        for i in node_reads(n):
            if i not in produced and i not in reads and i not in g.consts:
                reads.append(i)
    outs = [t for t in produced
            if t in g.outputs or any(c.name not in inside for c in g.consumers.get(t, []))]
    internal = [t for t in produced if t not in outs]
    internal += [t for t, owner in ctx.absorbed.items() if owner in inside]
    originals = []
    for n in nodes:
        originals.extend(ctx.provenance.get(n.name, (None, [n.name]))[1])
        if rule is None and n.name in ctx.provenance:
            rule, fusion = ctx.provenance[n.name][0], "graph"
    placement = "CPU" if cls == CONTROL.name else "NPU"
    return KernelSpec(name=name, op_type=op_type, op_class=cls, nodes=originals, rule=rule, fusion=fusion,
                      inputs=reads, outputs=outs, internal=internal, placement=placement,
                      exec_nodes=[n.name for n in nodes])


def _each_node_in_one_kernel(ctx) -> bool:
    placed = [n for k in ctx.kernels for n in k.exec_nodes]
    return len(placed) == len(set(placed)) and set(placed) == {n.name for n in ctx.graph.nodes}


#: Postconditions (toolkit.compiler.registry.Ensure).
ENSURES = (("every graph node is executed by exactly one kernel", _each_node_in_one_kernel),)


@register_pass("partition", requires=("shapes",), provides=("kernels",), ensures=ENSURES)
def run(ctx) -> PassResult:
    g = ctx.graph
    pos = {n.name: i for i, n in enumerate(g.nodes)}
    units = []  # (last position, name, nodes, op_type, rule, fusion, cls)
    for grp in ctx.groups.values():
        nodes = sorted((g.by_name[n] for n in grp.nodes), key=lambda n: pos[n.name])
        cls = GROUP_CLASS.get(grp.op_type, "cube" if grp.fusion == "ub" else "vector")
        units.append((pos[nodes[-1].name], grp.name, nodes, grp.op_type, grp.rule, grp.fusion, cls))
    grouped = set(ctx.node_group)
    for n in g.nodes:
        if n.name not in grouped:
            units.append((pos[n.name], n.name, [n], n.op_type, None, "none", op_class(n.op_type).name))
    units.sort(key=lambda u: u[0])
    log, kernels = [], []
    avail = set(g.inputs) | set(g.consts)
    for u in units:
        k = _kernel(ctx, *u[1:])
        if not k.outputs:
            # nothing reads its results and none is a graph output: dead code (ONNX ops have no side
            # effects); onnxruntime refuses a kernel model without outputs, so it is dropped, not built
            log.append(f"dropped {u[1]} ({u[3]}): none of its outputs is read")
            continue
        if not all(i in avail for i in k.inputs) and len(u[2]) > 1:
            log.append(f"dissolved {u[4]} group {u[1]}: an input is produced after its first node")
            for n in u[2]:
                kk = _kernel(ctx, n.name, [n], n.op_type, None, "none", op_class(n.op_type).name)
                kernels.append(kk)
                avail.update(kk.outputs)
            continue
        kernels.append(k)
        avail.update(k.outputs + k.internal)
    ctx.kernels = kernels
    fused = sum(1 for k in kernels if len(k.nodes) > 1)
    log.insert(0, f"{len(g.nodes)} nodes -> {len(kernels)} kernels ({fused} fused)")
    return PassResult(len(g.nodes) - len(kernels), log)
