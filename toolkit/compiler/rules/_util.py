"""Small helpers shared by rules: constant scalars, reduce axes, single-consumer walks."""

from __future__ import annotations

import numpy as np
import onnx


def attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def scalar(g, name):
    """The value of a constant tensor with one element, else None."""
    c = g.const(name)
    if c is None or c.size != 1:
        return None
    return float(c.reshape(()))


def other_input(node, name):
    """The input of a binary node that is not ``name`` (None if both are / neither is)."""
    ins = list(node.input)
    if len(ins) != 2 or ins.count(name) != 1:
        return None
    return ins[1] if ins[0] == name else ins[0]


def reduce_axes(g, node):
    """Axes of a Reduce* node (attribute before opset 18, input after), or None if not constant."""
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        c = g.const(node.input[1])
        axes = None if c is None else [int(a) for a in c.reshape(-1)]
    return axes


def is_last_axis(g, tensor, axes) -> bool:
    vt = g.vtype(tensor)
    if axes is None or len(axes) != 1 or vt is None or vt.shape is None:
        return axes == [-1]
    return axes[0] in (-1, len(vt.shape) - 1)


def sole(g, tensor, op_types):
    """The only consumer of ``tensor`` if it exists and is one of ``op_types``."""
    n = g.only_consumer(tensor)
    return n if n is not None and n.op_type in op_types else None


def near(value, target, rtol=1e-3) -> bool:
    return value is not None and np.isclose(value, target, rtol=rtol, atol=0)
