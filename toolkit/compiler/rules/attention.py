"""Attention fusion: MatMul(Q, K^T) → [Mul/Div scalar scale] → [Add mask] → Softmax(last axis) → MatMul(·, V).

The fused kernel keeps the scores in FP32, so the scale is applied before anything is stored in FP16
(shared case c05).
"""

from __future__ import annotations

from toolkit.compiler.rules._util import attr, other_input, scalar, sole
from toolkit.compiler.rules.registry import Match, Refused, rule


@rule("AttentionFusionPass", anchors={"Softmax"})
def attention(g, sm):
    probs = sm.output[0]
    pv = sole(g, probs, {"MatMul"})
    if pv is None or pv.input[0] != probs:
        return None
    vt = g.vtype(probs)
    axis = attr(sm, "axis", -1)
    if vt is not None and vt.shape is not None and axis not in (-1, len(vt.shape) - 1):
        return Refused(f"Softmax axis {axis} is not the last axis", [sm])
    nodes = [sm, pv]
    t = sm.input[0]
    prod = g.producer.get(t)
    if prod is not None and prod.op_type == "Add" and g.only_consumer(t) is sm:
        nodes.insert(0, prod)  # mask add: the other operand is the mask bias
        mask_src = [i for i in prod.input
                    if g.producer.get(i) is not None and g.producer[i].op_type in ("MatMul", "Mul", "Div")]
        if not mask_src:
            return Refused("Add before Softmax has no score input", nodes)
        t = mask_src[0]
        prod = g.producer.get(t)
    if prod is not None and prod.op_type in ("Mul", "Div") and g.only_consumer(t) is nodes[0]:
        src = [i for i in prod.input if g.const(i) is None]
        src = src[0] if len(src) == 1 and (prod.op_type == "Mul" or prod.input[0] == src[0]) else ""
        if not src or scalar(g, other_input(prod, src) or "") is None:
            return Refused("score scale is not a scalar constant", [prod] + nodes)
        nodes.insert(0, prod)
        t = src
        prod = g.producer.get(t)
    if prod is None or prod.op_type != "MatMul" or g.only_consumer(t) is not nodes[0]:
        return Refused("scores are not produced by a MatMul read only by the pattern", nodes)
    nodes.insert(0, prod)
    return Match(nodes, "Attention")
