"""Pass ``fold_constants``: evaluate at compile time every node whose inputs are known.

``Constant`` nodes become initializers; then the computable part of the graph (constant-input nodes and shape
subgraphs, once input shapes are bound) is evaluated once by onnxruntime and replaced by initializers
(toolkit.ort.const_eval). Graphs with control flow (If/Loop/Scan), or whose constant part onnxruntime refuses,
go through the onnxscript optimizer's constant folder instead (it folds into subgraphs; ~0.4 s to import).
Tensors computed away are recorded in ``ctx.folded`` so comparisons list them as "computed at compile time",
and the removed nodes' names in ``ctx.folded_nodes``.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import numpy_helper

from toolkit.compiler import derived
from toolkit.compiler.context import PassResult
from toolkit.compiler.registry import register_pass
from toolkit.ir.graph import Graph
from toolkit.ort import const_eval
from toolkit.ort.terminate import reraise_if_terminated

#: Largest tensor the folder will create, in elements (bigger results stay runtime kernels).
FOLD_OUTPUT_LIMIT = 1 << 22


def _sparse_to_dense(sp: onnx.SparseTensorProto) -> np.ndarray:
    """Dense array of a SparseTensorProto: zeros of ``dims`` with ``values`` at ``indices`` (flat [NNZ] or
    per-axis [NNZ, rank] coordinates, ONNX IR spec "SparseTensorProto")."""
    values = numpy_helper.to_array(sp.values)
    out = np.zeros(tuple(sp.dims), values.dtype)
    idx = numpy_helper.to_array(sp.indices).astype(np.int64)
    if values.size:
        if idx.ndim == 1:
            out.reshape(-1)[idx] = values.reshape(-1)
        else:
            out[tuple(idx.T)] = values.reshape(-1)
    return out


#: the value attributes of ONNX ``Constant`` (opset 1-25) -> their array (dtypes as the operator spec says)
CONSTANT_VALUES = {
    "value": lambda a: numpy_helper.to_array(a.t),
    "sparse_value": lambda a: _sparse_to_dense(a.sparse_tensor),
    "value_float": lambda a: np.array(a.f, np.float32),
    "value_floats": lambda a: np.array(list(a.floats), np.float32),
    "value_int": lambda a: np.array(a.i, np.int64),
    "value_ints": lambda a: np.array(list(a.ints), np.int64),
    "value_string": lambda a: np.array(a.s.decode("utf-8", "surrogateescape"), dtype=object),
    "value_strings": lambda a: np.array([b.decode("utf-8", "surrogateescape") for b in a.strings], dtype=object),
}


def constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The array a default-domain ``Constant`` node produces (any of :data:`CONSTANT_VALUES`), or None for other
    nodes and Constants without exactly one value attribute (the checker refuses those)."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
        return None
    a = node.attribute[0]
    fn = CONSTANT_VALUES.get(a.name)
    return None if fn is None else fn(a)


def constants_to_initializers(model: onnx.ModelProto) -> int:
    """Replace top-level ``Constant`` nodes by initializers (in place); returns how many. Every value attribute
    is converted (``value``, ``sparse_value`` densified, ``value_float(s)``, ``value_int(s)``,
    ``value_string(s)``), so no Constant kernel remains: onnxruntime's run of a lone sparse Constant returns a
    sparse tensor the runtime cannot store."""
    keep, n = [], 0
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) == 1 \
                and node.attribute[0].name == "value" and node.attribute[0].t.data_location != onnx.TensorProto.EXTERNAL:
            t = model.graph.initializer.add()  # the tensor as it is: no round trip through numpy
            t.CopyFrom(node.attribute[0].t)
            t.name = node.output[0]
            n += 1
            continue
        arr = constant_value(node)
        if arr is not None:
            model.graph.initializer.append(numpy_helper.from_array(arr, node.output[0]))
            n += 1
            continue
        keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    return n


def _drop_orphaned_default_inputs(before: onnx.ModelProto, after: onnx.ModelProto) -> None:
    """Remove graph inputs that were initializers (IR < 4 "inputs with a default value") when the folder
    removed their initializer as unused: left behind they would become required inputs nobody feeds."""
    had_default = {i.name for i in before.graph.initializer}
    still = {i.name for i in after.graph.initializer}
    keep = [vi for vi in after.graph.input if not (vi.name in had_default and vi.name not in still)]
    if len(keep) != len(after.graph.input):
        del after.graph.input[:]
        after.graph.input.extend(keep)


#: ops whose result the folder can compute from input *shapes* alone (shape subgraphs)
SHAPE_OPS = frozenset({"Shape", "Size"})


def has_foldable_nodes(model: onnx.ModelProto) -> bool:
    """Whether the constant folder could compute anything beyond turning Constant nodes into initializers: a
    node whose every input is constant, a shape op (Shape/Size, folded once input shapes are bound), or a
    node holding a subgraph (If/Loop/Scan). When none exists no folder runs (only Constant nodes become
    initializers); the onnxscript folder would still remove no-op Cast/Reshape/Identity nodes, which the engine
    runs as ordinary kernels instead."""
    consts = {i.name for i in model.graph.initializer}
    consts |= {o for n in model.graph.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx") for o in n.output}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            continue
        if n.op_type in SHAPE_OPS or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                         for a in n.attribute):
            return True
        if all(i in consts for i in n.input if i):
            return True
    return False


@register_pass("fold_constants", provides=("folded",), optional=True)
def run(ctx) -> PassResult:
    model = ctx.graph.sync()
    if not has_foldable_nodes(model):
        return _constants_only(ctx, model)
    if not const_eval.has_subgraphs(model):
        done = _fold_with_onnxruntime(ctx, model)
        if done is not None:
            return done
    return _fold_with_onnxscript(ctx, model)


def _fold_with_onnxruntime(ctx, model: onnx.ModelProto) -> PassResult | None:
    """toolkit.ort.const_eval on a graph without control flow; None (graph untouched) if onnxruntime refuses."""
    before = {o for n in model.graph.node for o in n.output if o}
    nodes_before = _node_facts(model)
    work = onnx.ModelProto()
    work.CopyFrom(model)
    n_const = constants_to_initializers(work)
    try:
        done = const_eval.fold(work, FOLD_OUTPUT_LIMIT)
    except Exception as exc:  # noqa: BLE001 - NotFoldable or a graph it cannot read: the other folder tries
        reraise_if_terminated(exc)
        logging.getLogger("npuscope.compiler").debug("fold_constants: onnxruntime did not fold the constant part "
                                                     "(%s); using the onnxscript folder", exc)
        return None
    _drop_orphaned_default_inputs(model, done.model)
    ctx.graph = Graph(done.model)
    folded = sorted(before - {o for n in done.model.graph.node for o in n.output if o})
    ctx.folded.extend(folded)
    _record_nodes(ctx, nodes_before)
    log = [f"{len(folded)} tensors computed at compile time (onnxruntime, one session); {n_const} Constant nodes "
           "made initializers"]
    if folded:
        log.append("folded: " + ", ".join(folded[:12]) + (" ..." if len(folded) > 12 else ""))
    return PassResult(len(folded), log)


def _fold_with_onnxscript(ctx, model: onnx.ModelProto) -> PassResult:
    from onnxscript import optimizer

    before = {o for n in model.graph.node for o in n.output if o}
    nodes_before = _node_facts(model)
    outputs = [o.name for o in model.graph.output]
    logging.getLogger("onnxscript").setLevel(logging.ERROR)
    log = []
    # fold a copy: a folder that fails half-way must not leave a half-rewritten graph behind
    work = onnx.ModelProto()
    work.CopyFrom(model)
    try:
        optimizer.fold_constants(work, onnx_shape_inference=True, output_size_limit=FOLD_OUTPUT_LIMIT)
        optimizer.remove_unused_nodes(work)
    except Exception as exc:  # the folder is an optimisation; never fail the compile on it
        work = None
        log.append(f"constant folder failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                   "continuing unfolded")
    if work is not None and [o.name for o in work.graph.output] != outputs:
        work = None  # graph outputs must keep their names; the folder renamed one
        log.append("constant folder renamed a graph output; continuing unfolded")
    if work is not None:
        _drop_orphaned_default_inputs(model, work)
        model = work
    # Constant nodes become initializers even when folding failed (a kernel then reads them as constants)
    n_const = constants_to_initializers(model)
    ctx.graph = Graph(model)
    after = {o for n in model.graph.node for o in n.output if o}
    folded = sorted(before - after)
    ctx.folded.extend(folded)
    _record_nodes(ctx, nodes_before)
    log.insert(0, f"{len(folded)} tensors computed at compile time; {n_const} Constant nodes made initializers")
    if folded:
        log.append("folded: " + ", ".join(folded[:12]) + (" ..." if len(folded) > 12 else ""))
    return PassResult(len(folded), log)


def _record_nodes(ctx, nodes_before) -> None:
    """Add the names of the nodes the fold removed to ``ctx.folded_nodes`` (so that an option naming one, e.g.
    keep_dtype, can be told it was computed at compile time), and record in the compiled model where each
    constant that replaced a removed node's output comes from (toolkit.compiler.derived: the node, its op type
    and inputs), so that a finding about it can name them. ``nodes_before``: the graph's nodes before the fold."""
    left = {n.name for n in ctx.graph.nodes}
    ctx.folded_nodes.extend(name for name, _, _, _ in nodes_before if name not in left)
    # a Constant node's value is the model's own constant, under the name the model gives it
    derived.record(ctx.graph.model, {o: {"rule": "fold_constants", "node": name, "op_type": op_type,
                                         "inputs": [i for i in inputs if i]}
                                     for name, op_type, inputs, outputs in nodes_before
                                     if name not in left and op_type != "Constant"
                                     for o in outputs if o and o in ctx.graph.consts})


def _node_facts(model: onnx.ModelProto) -> list[tuple[str, str, list[str], list[str]]]:
    """(name, op type, inputs, outputs) of the top-level nodes of ``model``, copied (the fold rewrites them)."""
    return [(n.name, n.op_type, list(n.input), list(n.output)) for n in model.graph.node]


def _constants_only(ctx, model: onnx.ModelProto) -> PassResult:
    before = {o for n in model.graph.node for o in n.output if o}
    nodes_before = _node_facts(model)
    n_const = constants_to_initializers(model)
    ctx.graph = Graph(model)
    folded = sorted(before - {o for n in model.graph.node for o in n.output if o})
    ctx.folded.extend(folded)
    _record_nodes(ctx, nodes_before)
    return PassResult(len(folded), [f"{len(folded)} tensors computed at compile time; {n_const} Constant nodes made "
                                    "initializers", "no node computable from constants or shapes: folder not run"])
