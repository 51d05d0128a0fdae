"""Nondeterministic ops: the registry of ONNX ops that draw random numbers, and the tensors that depend on them.

The FP32 reference (onnxruntime) and the NPU plan draw their random numbers with different generators, so a
tensor a random op produces — and every tensor computed from it — differs between the two runs whatever the
compiler does. Such tensors are not compared (:func:`toolkit.compare.layerwise.layer_table` gives them the
reason :func:`reason`), the stage triage skips them (:func:`toolkit.diagnose.triage`), and each op is reported
once as a warning finding ``nondeterministic_op`` (:func:`findings`).

A ``seed`` attribute does not make an op deterministic here: a seed repeats one generator's own sequence, it
does not make two different generators (onnxruntime's and the device's) draw the same numbers.

Registry (toolkit.ir.nondeterminism.NONDETERMINISTIC, default ONNX domain; ``register`` adds an op): RandomUniform,
RandomNormal, RandomUniformLike, RandomNormalLike, Multinomial, Bernoulli (always), and Dropout when its
``training_mode`` input (opset >= 12) is true and its ``ratio`` is not 0 — in inference mode Dropout is the
identity (ONNX operator spec, Dropout-13). A ``training_mode`` whose value is unknown counts as true.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from toolkit.core.records import Finding
from toolkit.ir.nondeterminism import (  # noqa: F401
    NONDETERMINISTIC,
    Lookup,
    _subgraphs,
    is_nondeterministic,
    register,
)
from toolkit.ir.weights import array_of

#: Prefix of the CompareFailReason of a tensor that depends on a nondeterministic op.
REASON_PREFIX = "depends on nondeterministic op"


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """{name: value} of the graph's initializers and Constant-node outputs holding a tensor ``value``."""
    out = {t.name: array_of(t) for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    out[n.output[0]] = numpy_helper.to_array(a.t)
    return out


def _lookup(graph: onnx.GraphProto, values: dict | None) -> Lookup:
    """Constant (else known) values by name; the constants are decoded on the first question only (a Dropout
    asks; most models never do)."""
    consts: dict | None = None

    def get(name: str):
        nonlocal consts
        if consts is None:
            consts = _constants(graph)
        v = consts.get(name)
        if v is None and values is not None:
            v = values.get(name)
        try:
            return None if v is None else np.asarray(v)
        except Exception:  # noqa: BLE001 - a non-tensor value: unknown
            return None
    return get


def _reads(node: onnx.NodeProto) -> set[str]:
    """Tensors ``node`` reads: its inputs and, for subgraph holders, every name its subgraphs read."""
    names = {i for i in node.input if i}
    for g in _subgraphs(node):
        for n in g.node:
            names |= _reads(n)
    return names


def _candidates(graph: onnx.GraphProto) -> bool:
    """Whether any node (subgraphs included) has a registered op type: the cheap screen before the real test."""
    return any((n.op_type in NONDETERMINISTIC and n.domain in ("", "ai.onnx"))
               or any(_candidates(g) for g in _subgraphs(n)) for n in graph.node)


def sources(model: onnx.ModelProto, values: dict | None = None) -> list[onnx.NodeProto]:
    """The top-level nodes of ``model`` that draw random numbers, graph order. ``values``: known tensor values
    {name: array} (e.g. the reference run's, feeds included) used to read a Dropout ``training_mode`` that is
    not a constant."""
    if not _candidates(model.graph):
        return []
    lookup = _lookup(model.graph, values)
    return [n for n in model.graph.node if is_nondeterministic(n, lookup)]


def dependent_tensors(model: onnx.ModelProto, values: dict | None = None) -> dict[str, onnx.NodeProto]:
    """{tensor: the nondeterministic node it depends on (the earliest in graph order)} for every tensor
    produced by a nondeterministic node or computed from one (top-level graph; graph order is topological)."""
    if not _candidates(model.graph):
        return {}
    lookup = _lookup(model.graph, values)
    nodes = list(model.graph.node)
    taint: dict[str, int] = {}  # tensor -> index of its source node
    for i, n in enumerate(nodes):
        own = [i] if is_nondeterministic(n, lookup) else []
        src = min(own + [taint[t] for t in _reads(n) if t in taint], default=None)
        if src is not None:
            for t in n.output:
                if t:
                    taint[t] = src
    return {t: nodes[i] for t, i in taint.items()}


def reason(node: onnx.NodeProto) -> str:
    """CompareFailReason of a tensor depending on ``node`` (starts with :data:`REASON_PREFIX`)."""
    return f"{REASON_PREFIX} '{node.name}' ({node.op_type}): reference and NPU draw different numbers"


def _seed(node: onnx.NodeProto):
    for a in node.attribute:
        if a.name == "seed":
            return float(a.f)
    return None


def findings(model: onnx.ModelProto, outputs=None, values: dict | None = None) -> list[Finding]:
    """One warning ``nondeterministic_op`` per nondeterministic node of ``model``. Evidence: op_type, seed
    (None when unset), dependent_tensors (count), outputs_affected (graph outputs depending on it; ``outputs``:
    graph output names, default the model's)."""
    if not _candidates(model.graph):
        return []
    outputs = [o.name for o in model.graph.output] if outputs is None else list(outputs)
    taint = dependent_tensors(model, values)
    out = []
    for n in sources(model, values):
        deps = [t for t, src in taint.items() if src.name == n.name and src.output == n.output]
        hit = [o for o in outputs if o in deps]
        seed = _seed(n)
        ev = {"op_type": n.op_type, "seed": seed, "dependent_tensors": len(deps), "outputs_affected": hit}
        seeded = (" A fixed seed ('seed' attribute) makes each engine repeat its own numbers, not the other's"
                  if seed is not None else " Fixing the 'seed' attribute makes each engine repeatable, though "
                  "onnxruntime and the device still draw different numbers")
        out.append(Finding("warning", "nondeterministic_op", n.name, ev,
                           f"'{n.name}' ({n.op_type}) draws random numbers: its {len(deps)} dependent tensor(s)"
                           f"{' including output(s) ' + ', '.join(repr(o) for o in hit) if hit else ''} are not "
                           "compared. Feed the random values as a graph input (so both runs use the same numbers) "
                           f"or remove the op for inference (e.g. Dropout in eval mode).{seeded}."))
    return out
