"""LayerNorm and RMSNorm fusion over their decomposed forms."""

from __future__ import annotations

from toolkit.compiler.rules._util import (
    is_last_axis,
    other_input,
    reduce_axes,
    scalar,
    sole,
)
from toolkit.compiler.rules.registry import Match, Refused, rule


def _square_of(g, tensor):
    """A node computing tensor**2 as Pow(t, 2) or Mul(t, t) that reads ``tensor``, else None."""
    for n in g.consumers.get(tensor, []):
        if n.op_type == "Pow" and n.input[0] == tensor and scalar(g, n.input[1]) == 2.0:
            return n
        if n.op_type == "Mul" and list(n.input) == [tensor, tensor]:
            return n
    return None


def _affine_tail(g, tensor, nodes):
    """Optional Mul(gamma) then Add(beta) with constant operands, appended to ``nodes``."""
    mul = sole(g, tensor, {"Mul"})
    if mul is not None and g.const(other_input(mul, tensor) or "") is not None:
        nodes.append(mul)
        tensor = mul.output[0]
    add = sole(g, tensor, {"Add"})
    if add is not None and g.const(other_input(add, tensor) or "") is not None:
        nodes.append(add)
    return nodes


def _eps_sqrt_div(g, var, numer):
    """var → Add(eps) → Sqrt → Div(numer, ·) [or Reciprocal → Mul(numer, ·)]; returns nodes or a reason."""
    add = sole(g, var, {"Add"})
    if add is None or scalar(g, other_input(add, var) or "") is None:
        return "variance is not followed by Add(scalar eps)"
    sqrt = sole(g, add.output[0], {"Sqrt"})
    if sqrt is None:
        return "Add(eps) is not followed by Sqrt"
    nxt = sole(g, sqrt.output[0], {"Div", "Reciprocal"})
    if nxt is None:
        return "Sqrt is not followed by Div or Reciprocal"
    if nxt.op_type == "Div":
        if list(nxt.input) != [numer, sqrt.output[0]]:
            return "Div does not divide the normalised input by the root"
        return [add, sqrt, nxt]
    mul = sole(g, nxt.output[0], {"Mul"})
    if mul is None or other_input(mul, nxt.output[0]) != numer:
        return "Reciprocal is not followed by Mul with the normalised input"
    return [add, sqrt, nxt, mul]


@rule("LayerNormFusionPass", anchors={"ReduceMean"})
def layernorm(g, mean):
    x = mean.input[0]
    subs = [n for n in g.consumers.get(mean.output[0], []) if n.op_type == "Sub" and list(n.input) == [x, mean.output[0]]]
    if len(subs) != 1 or len(g.consumers.get(mean.output[0], [])) != 1:
        return None
    sub = subs[0]
    centered = sub.output[0]
    sq = _square_of(g, centered)
    if sq is None:
        return None
    var = sole(g, sq.output[0], {"ReduceMean"})
    if var is None:
        return Refused("square is not followed by ReduceMean", [mean, sub, sq])
    ax1, ax2 = reduce_axes(g, mean), reduce_axes(g, var)
    if ax1 != ax2 or not is_last_axis(g, x, ax1):
        return Refused(f"reduce axes differ or are not the last axis ({ax1} vs {ax2})", [mean, var])
    tail = _eps_sqrt_div(g, var.output[0], centered)
    if isinstance(tail, str):
        return Refused(tail, [mean, sub, sq, var])
    readers = {n.name for n in g.consumers.get(centered, [])}
    if readers != {sq.name, tail[-1].name}:
        return Refused(f"centered tensor '{centered}' has readers outside the pattern", [sub])
    nodes = _affine_tail(g, tail[-1].output[0], [mean, sub, sq, var] + tail)
    return Match(nodes, "LayerNorm", f"eps={scalar(g, tail[0].input[1]) or scalar(g, tail[0].input[0])}")


@rule("RMSNormFusionPass", anchors={"Pow", "Mul"})
def rmsnorm(g, sq):
    if sq.op_type == "Pow":
        if scalar(g, sq.input[1]) != 2.0:
            return None
    elif list(sq.input) != [sq.input[0], sq.input[0]]:
        return None
    x = sq.input[0]
    mean = sole(g, sq.output[0], {"ReduceMean"})
    if mean is None:
        return None
    if not is_last_axis(g, x, reduce_axes(g, mean)):
        return Refused(f"ReduceMean axes {reduce_axes(g, mean)} are not the last axis", [sq, mean])
    tail = _eps_sqrt_div(g, mean.output[0], x)
    if isinstance(tail, str):
        return Refused(tail, [sq, mean])
    out = tail[-1].output[0]
    nodes = [sq, mean] + tail
    mul = sole(g, out, {"Mul"})
    if mul is not None and g.const(other_input(mul, out) or "") is not None:
        nodes.append(mul)
    return Match(nodes, "RMSNorm")
