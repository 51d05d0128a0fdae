"""Activation fusions (GELU erf/tanh forms, SiLU, HardSwish) found structurally and checked numerically.

Pattern: from the anchor (Erf, Tanh, Sigmoid, HardSigmoid, Clip) walk back to the activation's input x, then
grow the region of nodes downstream of x whose runtime inputs are x or the region's own outputs, in graph
order, until it closes (one output leaves it). Check: the region, evaluated by onnxruntime (graph optimisation
off) on a probe x in [-8, 8], equals the target function to 1e-3 — so every association order of the decomposed
formula is accepted and nothing else is. FP16-origin regions (float16 tensors in the model) are probed with
their constants widened to float32: the function they compute does not depend on the storage dtype, and FP16
rounding inside the probe would blur the check.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from toolkit.compiler.rules.registry import Match, Refused, rule
from toolkit.ort.ort_env import make_session
from toolkit.ort.terminate import reraise_if_terminated, run_options

_PROBE = np.linspace(-8.0, 8.0, 129, dtype=np.float32)
_erf = np.vectorize(math.erf)
TARGETS = {
    "Gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "GeluTanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
    "Swish": lambda x: x / (1.0 + np.exp(-x)),
    "HardSwish": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
}
MAX_REGION = 8
MAX_BACK = 4


def _runtime_inputs(g, node):
    return [i for i in node.input if i and g.const(i) is None]


def _candidates_x(g, anchor):
    """Runtime tensors up to MAX_BACK nodes upstream of the anchor (breadth first, closest first)."""
    out, frontier = [], [anchor]
    for _ in range(MAX_BACK):
        nxt = []
        for node in frontier:
            for t in _runtime_inputs(g, node):
                if t not in out:
                    out.append(t)
                    prod = g.producer.get(t)
                    if prod is not None and prod.op_type in ("Div", "Mul", "Add", "Pow", "Sub"):
                        nxt.append(prod)
        frontier = nxt
    return out


def _closed(g, region, outs):
    """The single tensor that leaves the region, or None if zero or several do."""
    names = {n.name for n in region}
    leaving = [t for t in outs if t in g.outputs or any(c.name not in names for c in g.consumers.get(t, []))]
    return leaving[0] if len(leaving) == 1 else None


#: probe results by region signature (see :func:`_signature`): a model repeats the same activation many times
#: (PP-OCRv4 det: 24 HardSwish regions), and each evaluation builds an onnxruntime session (~1-2 ms)
_PROBED: dict = {}


def _signature(g, region, x, y) -> tuple:
    """The region with tensor names replaced by their role (x, y, n-th internal tensor) and constants by their
    dtype and bytes: two regions with equal signatures compute the same function of x."""
    names = {x: "x", y: "y"}
    for n in region:
        for o in n.output:
            names.setdefault(o, f"t{len(names)}")

    def ref(t):
        c = g.const(t) if t else None
        return ("c", str(c.dtype), c.shape, c.tobytes()) if c is not None else names.get(t, ("?", t))
    return tuple((n.op_type, n.domain, tuple(ref(i) for i in n.input), tuple(names.get(o, o) for o in n.output),
                  tuple(a.SerializeToString() for a in n.attribute)) for n in region)


def _probe(g, region, x, y):
    """Evaluate the region on the probe (memoised by :func:`_signature`); returns the values or None if it
    cannot run on a vector."""
    key = (_signature(g, region, x, y), tuple(o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")))
    if key not in _PROBED:
        _PROBED[key] = _evaluate_probe(g, region, x, y)
    return _PROBED[key]


def _evaluate_probe(g, region, x, y):
    consts = {i for n in region for i in n.input if i and g.const(i) is not None}
    inits = [onnx.numpy_helper.from_array(g.const(c).astype(np.float32) if g.const(c).dtype == np.float16
                                          else g.const(c), c) for c in consts]
    if any(g.const(c).size != 1 for c in consts):
        return None
    graph = onnx.helper.make_graph(list(region), "probe",
                                   [onnx.helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [None])],
                                   [onnx.helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, None)], inits)
    opset = [o for o in g.model.opset_import if o.domain in ("", "ai.onnx")]
    model = onnx.helper.make_model(graph, opset_imports=opset)
    try:
        return make_session(model.SerializeToString(), optimize=False).run(None, {x: _PROBE}, run_options())[0]
    except Exception as exc:
        reraise_if_terminated(exc)
        return None


def _between(g, x, anchor):
    """Nodes on paths from tensor x to the anchor (inclusive of the anchor)."""
    keep, stack, seen = {anchor.name}, [anchor], set()
    while stack:
        node = stack.pop()
        for t in _runtime_inputs(g, node):
            if t == x:
                continue
            prod = g.producer.get(t)
            if prod is not None and prod.name not in seen:
                seen.add(prod.name)
                stack.append(prod)
                keep.add(prod.name)
    return keep


def _activation(g, anchor, target: str):
    """Match the activation around ``anchor``: Match, Refused (closed region computing something else) or None."""
    if not g.is_float16_or_32(anchor.output[0]):
        return None
    pos = {n.name: i for i, n in enumerate(g.nodes)}
    refused = None
    for x in _candidates_x(g, anchor):
        core = _between(g, x, anchor)
        if len(core) > MAX_REGION:
            continue
        region = sorted((g.by_name[n] for n in core), key=lambda n: pos[n.name])
        if any(i != x and g.producer.get(i) is not None and g.producer[i].name not in core
               for n in region for i in _runtime_inputs(g, n)):
            continue  # the path from x to the anchor reads another runtime tensor: x is too close
        outs = [o for n in region for o in n.output if o]
        side: dict[str, object] = {}  # outputs of nodes reading only x: join only if the region uses them
        start = pos[g.producer[x].name] + 1 if x in g.producer else 0
        for node in [None] + g.nodes[start:start + 4 * MAX_REGION]:
            if node is not None:
                if node.name in core:
                    continue
                ins = _runtime_inputs(g, node)
                if ins and all(i == x for i in ins):
                    side.update({o: node for o in node.output if o})
                    continue
                if not any(i in outs for i in ins) or any(i != x and i not in outs and i not in side for i in ins):
                    continue
                for i in ins:
                    if i in side and side[i] not in region:
                        region.append(side[i])
                        outs.extend(o for o in side[i].output if o)
                region.append(node)
                outs.extend(o for o in node.output if o)
                if len(region) > MAX_REGION:
                    break
            y = _closed(g, region, outs)
            if y is None:
                continue
            got = _probe(g, sorted(region, key=lambda n: pos[n.name]), x, y)
            want = TARGETS[target](_PROBE.astype(np.float64))
            if got is not None and got.shape == want.shape and np.allclose(got, want, atol=1e-3, rtol=1e-3):
                return Match(sorted(region, key=lambda n: pos[n.name]), target)
            if refused is None:
                refused = Refused(f"region from '{x}' to '{y}' does not compute {target} on the probe "
                                  "(or has non-scalar constants)", list(region))
    return refused


@rule("GeluFusionPass", anchors={"Erf"})
def gelu_erf(g, node):
    return _activation(g, node, "Gelu")


@rule("GeluTanhFusionPass", anchors={"Tanh"})
def gelu_tanh(g, node):
    return _activation(g, node, "GeluTanh")


@rule("SwishFusionPass", anchors={"Sigmoid"})
def swish(g, node):
    return _activation(g, node, "Swish")


@rule("HardSwishFusionPass", anchors={"HardSigmoid", "Clip"})
def hardswish(g, node):
    return _activation(g, node, "HardSwish")
