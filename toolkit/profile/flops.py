"""Floating-point operations of one ONNX node, by op type (a small registry of counting rules).

A rule receives the node and ``shape(name) -> list[int] | None`` and returns ``(cube_flops, vector_flops)``.
Counting conventions (one multiply-add = 2 FLOPs, as vendors count peak TFLOPS):

- Conv: ``2 · numel(Y) · Cin/group · kH · kW`` = ``2 · numel(Y) · numel(W) / Cout`` (cube).
- ConvTranspose: ``2 · numel(X) · Cout/group · kH · kW`` = ``2 · numel(X) · numel(W) / Cin`` (cube).
- MatMul: ``2 · numel(Y) · K`` (K = last dim of A); Gemm: ``2 · M · N · K`` (+ ``M · N`` for C) (cube).
- pooling: ``numel(Y) · kernel size``; Global*Pool, reductions: ``numel(X)`` (vector).
- normalisations (Softmax, LayerNormalization, ...): ``5 · numel(X)`` (max/sub, exp, sum, div; an estimate).
- transcendental elementwise (Exp, Sigmoid, Erf, ...): ``4 · numel(Y)`` (an estimate of the vector unit's
  polynomial/table cost); other elementwise math: ``numel(Y)``.
- data movement (Reshape, Transpose, Concat, Cast, Resize, ...): 0 (only bytes cost).

Shapes come from the compiled graph (value_info, initializers, inputs/outputs); an unknown shape counts 0.
"""

from __future__ import annotations

import math
from typing import Callable

from onnx import NodeProto

from toolkit.precision.contract import CONTROL, DATA_MOVEMENT, VECTOR_REDUCTION

ShapeFn = Callable[[str], "list[int] | None"]
RULES: dict[str, Callable[[NodeProto, ShapeFn], tuple[float, float]]] = {}

#: Elementwise ops counted at 4 FLOPs per output element.
TRANSCENDENTAL = frozenset({"Exp", "Log", "Sigmoid", "Tanh", "Erf", "Softplus", "Softsign", "Pow", "Sqrt",
                            "Reciprocal", "HardSwish", "HardSigmoid", "Gelu", "Elu", "Selu", "Celu", "Mish", "Sin",
                            "Cos", "Tan", "Atan", "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"})
NORMALISATIONS = frozenset({"Softmax", "LogSoftmax", "LayerNormalization", "RMSNormalization",
                            "GroupNormalization", "InstanceNormalization", "BatchNormalization",
                            "LpNormalization", "MeanVarianceNormalization"})
POOLS = frozenset({"AveragePool", "MaxPool", "LpPool"})


def numel(shape) -> int:
    """Number of elements of a shape list (0 when unknown or holding non-int dims)."""
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        return 0
    return math.prod(shape)


def rule(*op_types: str):
    """Register a counting function for ``op_types``."""
    def deco(fn):
        for op in op_types:
            RULES[op] = fn
        return fn
    return deco


def _in(node, i):
    return node.input[i] if len(node.input) > i and node.input[i] else None


@rule("Conv", "ConvInteger", "QLinearConv")
def _conv(node, shape):
    w = shape(_in(node, 3 if node.op_type == "QLinearConv" else 1))
    y = shape(node.output[0])
    if not w or not numel(w):
        return 0.0, 0.0
    return 2.0 * numel(y) * numel(w) / w[0], 0.0


@rule("ConvTranspose")
def _conv_transpose(node, shape):
    w, x = shape(_in(node, 1)), shape(_in(node, 0))
    if not w or not numel(w):
        return 0.0, 0.0
    return 2.0 * numel(x) * numel(w) / w[0], 0.0


@rule("MatMul", "MatMulInteger", "QLinearMatMul")
def _matmul(node, shape):
    a = shape(_in(node, 0))
    if not a:
        return 0.0, 0.0
    return 2.0 * numel(shape(node.output[0])) * a[-1], 0.0


@rule("Gemm")
def _gemm(node, shape):
    a = shape(_in(node, 0))
    trans_a = next((at.i for at in node.attribute if at.name == "transA"), 0)
    y = shape(node.output[0])
    if not a or len(a) != 2:
        return 0.0, 0.0
    k = a[0] if trans_a else a[1]
    return 2.0 * numel(y) * k, float(numel(y)) if _in(node, 2) else 0.0


def _kernel_size(node) -> int:
    ks = next((list(at.ints) for at in node.attribute if at.name == "kernel_shape"), [])
    return math.prod(ks) if ks else 1


def node_flops(node: NodeProto, shape: ShapeFn) -> tuple[float, float]:
    """(cube FLOPs, vector FLOPs) of ``node`` (see module docstring)."""
    fn = RULES.get(node.op_type)
    if fn is not None:
        return fn(node, shape)
    op = node.op_type
    if op in POOLS:
        return 0.0, float(numel(shape(node.output[0])) * _kernel_size(node))
    if op in NORMALISATIONS:
        return 0.0, 5.0 * numel(shape(_in(node, 0)))
    if op in VECTOR_REDUCTION.ops:
        return 0.0, float(numel(shape(_in(node, 0))))
    if op in DATA_MOVEMENT.ops or op in CONTROL.ops or op in ("Cast", "CastLike", "Constant"):
        return 0.0, 0.0
    per = 4.0 if op in TRANSCENDENTAL else 1.0
    return 0.0, per * sum(numel(shape(o)) for o in node.output if o)
