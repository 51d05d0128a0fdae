"""The registry of ONNX ops that draw random numbers (nondeterministic ops), without dependencies on the
compiler: constant folding never evaluates them (toolkit.ort.const_eval) and the comparison does not compare
what they produce (toolkit.compare.nondeterminism, which explains the rules).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx

#: A lookup of constant values: tensor name -> numpy array, or None when unknown.
Lookup = Callable[[str], "np.ndarray | None"]

#: {op type: predicate(node, lookup) -> whether this node draws random numbers} (default ONNX domain).
NONDETERMINISTIC: dict[str, Callable[[onnx.NodeProto, Lookup], bool]] = {}


def register(*op_types: str):
    """Decorator: register ``fn(node, lookup) -> bool`` as the nondeterminism test of ``op_types``."""
    def deco(fn):
        for op in op_types:
            NONDETERMINISTIC[op] = fn
        return fn
    return deco


@register("RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial", "Bernoulli")
def _always(node: onnx.NodeProto, lookup: Lookup) -> bool:
    return True


@register("Dropout")
def _dropout_training(node: onnx.NodeProto, lookup: Lookup) -> bool:
    """Dropout draws a mask only in training mode (input 2, default false) with a ratio (input 1) above 0."""
    if len(node.input) < 3 or not node.input[2]:
        return False
    mode = lookup(node.input[2])
    if mode is not None and mode.size and not bool(np.asarray(mode).reshape(-1)[0]):
        return False
    ratio = lookup(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    return not (ratio is not None and ratio.size and float(np.asarray(ratio).reshape(-1)[0]) == 0.0)


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def is_nondeterministic(node: onnx.NodeProto, lookup: Lookup) -> bool:
    """Whether ``node`` draws random numbers: its op type's registered test, or (for If/Loop/Scan) a node of
    one of its subgraphs does."""
    if node.domain in ("", "ai.onnx") and node.op_type in NONDETERMINISTIC and NONDETERMINISTIC[node.op_type](node, lookup):
        return True
    return any(is_nondeterministic(n, lookup) for g in _subgraphs(node) for n in g.node)
