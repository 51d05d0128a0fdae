"""Fold the constant part of a top-level graph by evaluating it once with onnxruntime.

A node is *computable* at compile time when

- it is ``Shape`` or ``Size`` and its input's shape is fully static (after the input shapes are bound; from
  ONNX shape inference with data propagation): its value is computed here from that shape; or
- every input it reads is an initializer or the output of a computable node, it is in the default ONNX
  domain, it is deterministic (not ``Random*``, ``Bernoulli``, ``Multinomial``), it holds no subgraph, and
  shape inference gives every output a static shape of at most ``limit`` elements.

The computable nodes whose results the rest of the graph (or a graph output) reads are evaluated together in
one onnxruntime session with graph optimisations off — the same kernels the FP32 reference uses — and replaced
by initializers of the same names; nodes and initializers that only fed them are dropped. What is left is the
graph the runtime executes.

Used by toolkit.compiler.passes.fold_constants for graphs without control flow; it costs a shape inference and
one small session (~20-60 ms on PP-OCRv4 rec) where the onnxscript folder costs ~0.4 s to import and ~0.3 s to
run. Subgraph-holding nodes (If/Loop/Scan) are left to the onnxscript folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from toolkit.ir.nondeterminism import (
    NONDETERMINISTIC,  # never folded (random ops, Dropout)
)
from toolkit.ir.proto import copy_fields
from toolkit.ir.shape_inference import infer_light
from toolkit.ir.weights import array_of, for_onnxruntime, is_mapped
from toolkit.ort.ort_env import make_session
from toolkit.ort.terminate import reraise_if_terminated, run_options

SHAPE_OPS = frozenset({"Shape", "Size"})


class NotFoldable(Exception):
    """The constant part cannot be evaluated here (onnxruntime refused it); the caller falls back."""


@dataclass
class Folded:
    """``model``: the folded graph (a new ModelProto); ``tensors``: names computed away, graph order."""

    model: onnx.ModelProto
    tensors: list[str] = field(default_factory=list)


def has_subgraphs(model: onnx.ModelProto) -> bool:
    """Whether a top-level node holds a subgraph (If, Loop, Scan, ...)."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for n in model.graph.node for a in n.attribute)


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """{tensor: dims} for every tensor whose shape inference (with data propagation) gives only fixed dims."""
    try:
        inferred = infer_light(model, data_prop=True)
    except Exception:  # noqa: BLE001 - no shapes: only constant-input nodes with known outputs can fold
        inferred = model
    g = inferred.graph
    out = {}
    for vi in (*g.input, *g.value_info, *g.output):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None or not tt.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if all(d is not None for d in dims):
            out[vi.name] = tuple(int(d) for d in dims)
    for t in g.initializer:
        out[t.name] = tuple(t.dims)
    return out


def _shape_value(node: onnx.NodeProto, dims: tuple[int, ...]) -> np.ndarray:
    """The value of a Shape (``start``/``end`` attributes, opset 15, clamped) or Size node on ``dims``."""
    if node.op_type == "Size":
        return np.array(int(np.prod(dims, dtype=np.int64)), np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    rank = len(dims)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start, end = (s + rank if s < 0 else s for s in (start, end))
    start, end = min(max(start, 0), rank), min(max(end, 0), rank)
    return np.array(dims[start:end], np.int64)


def _computable(model: onnx.ModelProto, shapes: dict, limit: int) -> tuple[list[int], dict[str, np.ndarray]]:
    """(indices of the computable nodes, graph order; {output: value} of the Shape/Size ones among them)."""
    known = {t.name for t in model.graph.initializer}
    idx, shape_values = [], {}
    for i, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC or any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            continue
        outs = [o for o in node.output if o]
        if node.op_type in SHAPE_OPS and node.input and node.input[0] in shapes:
            shape_values[outs[0]] = _shape_value(node, shapes[node.input[0]])
        else:
            ins = [i for i in node.input if i]
            if not ins or not all(i in known for i in ins):
                continue
            if not all(o in shapes and int(np.prod(shapes[o], dtype=np.int64)) <= limit for o in outs):
                continue
        idx.append(i)
        known.update(outs)
    return idx, shape_values


def _evaluate(model: onnx.ModelProto, nodes: list, shape_values: dict, wanted: list[str]) -> dict:
    """{name: value} of ``wanted`` outputs of ``nodes``, from one onnxruntime session. Raises NotFoldable."""
    produced = {o for n in nodes for o in n.output if o}
    reads = {i for n in nodes for i in n.input if i and i not in produced}
    inits = [t for t in model.graph.initializer if t.name in reads]
    inits += [numpy_helper.from_array(v, k) for k, v in shape_values.items() if k in reads]
    outputs = [onnx.ValueInfoProto(name=w) for w in wanted]
    graph = onnx.helper.make_graph(nodes, "constant_part", [], outputs, inits)
    sub = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    try:
        external = {t.name: array_of(t) for t in sub.graph.initializer if is_mapped(t)}
        folder = for_onnxruntime(sub)  # weights left on disk: onnxruntime reads our maps of them in place
        sess = make_session(sub.SerializeToString(), optimize=False, folder=folder,
                            shared=external if folder else None, external=None if folder else external)
        values = sess.run(wanted, {}, run_options())
    except Exception as exc:  # noqa: BLE001 - onnxruntime's refusal, one line
        reraise_if_terminated(exc)
        raise NotFoldable(" ".join(str(exc).split())[:200] or type(exc).__name__) from None
    return dict(zip(wanted, values))


#: rounds of folding at most: a folded shape subgraph can make the shapes downstream of it static, and with
#: them further Shape nodes computable (PP-OCRv4 rec needs 2)
MAX_ROUNDS = 4


def fold(model: onnx.ModelProto, limit: int) -> Folded:
    """The graph of ``model`` (not modified) with its computable part replaced by initializers (module
    docstring), repeated while a round leaves a Shape/Size node it could not compute and folded something
    (at most MAX_ROUNDS). ``limit``: the largest tensor to create, in elements. Raises NotFoldable when
    onnxruntime cannot evaluate a computable part."""
    done = Folded(model, [])
    for _ in range(MAX_ROUNDS):
        step = _fold_once(done.model, limit)
        done = Folded(step.model, done.tensors + step.tensors)
        if not step.tensors or not any(n.op_type in SHAPE_OPS for n in step.model.graph.node):
            break
    return done


def _fold_once(model: onnx.ModelProto, limit: int) -> Folded:
    shapes = _static_shapes(model)
    idx, shape_values = _computable(model, shapes, limit)
    all_nodes = list(model.graph.node)
    gone = set(idx)
    keep = [n for i, n in enumerate(all_nodes) if i not in gone]
    to_run = [all_nodes[i] for i in idx if all_nodes[i].op_type not in SHAPE_OPS]
    needed = {i for n in keep for i in n.input if i} | {o.name for o in model.graph.output}
    computed = [o for i in idx for o in all_nodes[i].output if o]
    wanted = [o for n in to_run for o in n.output if o and o in needed]
    values = {k: v for k, v in shape_values.items() if k in needed}
    if wanted:
        values.update(_evaluate(model, to_run, shape_values, wanted))
    out = copy_fields(model, onnx.ModelProto(), skip=("graph",))  # the weights are copied once, not twice
    copy_fields(model.graph, out.graph, skip=("node", "initializer"))
    out.graph.node.extend(keep)
    out.graph.initializer.extend(t for t in model.graph.initializer if t.name in needed)
    out.graph.initializer.extend(numpy_helper.from_array(np.asarray(values[k]), k) for k in computed if k in values)
    return Folded(out, computed)
