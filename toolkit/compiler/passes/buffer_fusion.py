"""Pass ``buffer_fusion`` (UB fusion): a cube op (Conv, ConvTranspose, MatMul, Gemm) takes its elementwise
epilogue — bias/residual Add, Mul, activation, or a fused activation group — into the same kernel, so the
intermediates never leave on-chip memory (they stay FP32; only the kernel output is rounded).

An epilogue node is taken only if it is the sole reader of the running tensor and its other runtime input
was produced before the cube op (so the kernel stays convex and runnable in graph order). Cube ops on float32
and on float16 (FP16-origin models) data are fused alike: the kernel computes in FP32 either way.
"""

from __future__ import annotations

from toolkit.compiler.context import Group, PassResult
from toolkit.compiler.registry import register_pass
from toolkit.precision.contract import CUBE

RULE = "TbeCubeElemwiseFusionPass"
EPILOGUE_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Clip",
                          "HardSigmoid", "HardSwish", "Elu", "Selu", "Gelu", "Mish", "Softplus"})
ACT_GROUP_RULES = frozenset({"GeluFusionPass", "GeluTanhFusionPass", "SwishFusionPass", "HardSwishFusionPass"})
#: Longest epilogue taken into one cube kernel, in steps (an elementwise op or a whole fused activation).
MAX_EPILOGUE = 6


def _available_before(g, pos, tensor, anchor_pos):
    if tensor in g.consts or tensor in g.inputs or not tensor:
        return True
    prod = g.producer.get(tensor)
    return prod is not None and pos[prod.name] < anchor_pos


def _extend(ctx, pos, anchor):
    g = ctx.graph
    nodes, t, steps = [anchor], anchor.output[0], 0
    while steps < MAX_EPILOGUE:
        steps += 1
        readers = g.consumers.get(t, [])
        groups = {ctx.node_group.get(r.name) for r in readers}
        if t in g.outputs or not readers:
            break
        if len(groups) == 1 and None not in groups:  # every reader is in one fused activation group
            nxt = readers[0]
        elif len(readers) == 1:
            nxt = readers[0]
        else:
            break
        gname = ctx.node_group.get(nxt.name)
        if gname is not None:
            grp = ctx.groups[gname]
            if grp.rule not in ACT_GROUP_RULES:
                break
            members = [g.by_name[n] for n in grp.nodes]
            outer = {i for n in members for i in n.input if i and g.const(i) is None} - \
                {o for n in members for o in n.output}
            if outer != {t}:
                break
            nodes.extend(members)
            del ctx.groups[gname]
            t = members[-1].output[0]
            continue
        if nxt.op_type not in EPILOGUE_OPS:
            break
        others = [i for i in nxt.input if i and i != t]
        if not all(_available_before(g, pos, i, pos[anchor.name]) for i in others):
            break
        nodes.append(nxt)
        t = nxt.output[0]
    return nodes


@register_pass("buffer_fusion", requires=("shapes",), min_level=1, switch=("UBFusion", RULE), optional=True)
def run(ctx) -> PassResult:
    g = ctx.graph
    pos = {n.name: i for i, n in enumerate(g.nodes)}
    log, changed = [], 0
    for node in list(g.nodes):
        if node.op_type not in CUBE.ops or node.name in ctx.node_group or not g.is_float16_or_32(node.output[0]):
            continue
        nodes = _extend(ctx, pos, node)
        ctx.count_fusion("ub_fusion", RULE, len(nodes) > 1, len(nodes) > 1)
        if len(nodes) == 1:
            continue
        names = [n.name for n in nodes]
        ctx.add_group(Group(node.name, f"{node.op_type}+" + "+".join(n.op_type for n in nodes[1:]), RULE, "ub", names))
        changed += 1
        log.append(f"{RULE}: {', '.join(names)}")
    return PassResult(changed, log)
