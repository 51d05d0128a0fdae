"""The FP32 reference run segment by segment: contiguous blocks of the model's nodes, each an onnxruntime model
of its own that reads the tensors crossing into it (its boundary) and exposes what it computes.

A streamed diagnosis (toolkit.stream) runs the segments in order, keeping a segment's tensors only until they are
compared, and stores each segment's boundary tensors so that any reference tensor can be computed again later
from them (origin isolation on stored boundary tensors). A segment runs the same onnxruntime kernels on the same
inputs as the whole-model :class:`~toolkit.ort.reference.ReferenceRunner` (graph optimisations off), so its
tensors equal the whole model's bit for bit.

Cuts: after at least ``budget_bytes`` of tensors (numel × itemsize from shape inference; a tensor of unknown
shape counts 0) a segment ends at the first position where every tensor crossing the cut has a known type (a
sub-model's inputs must be declared). Nodes with subgraphs (If / Loop / Scan) read their outer-scope names as
boundary inputs too (toolkit.ir.graph.node_reads).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
import onnx

from toolkit.ir.graph import node_reads
from toolkit.ir.weights import array_of
from toolkit.ort.reference import ReferenceRunner, exposed_tensors

#: Default reference segment size: tensor bytes a segment computes before it may end (bytes).
DEFAULT_SEGMENT_BYTES = 64 << 20


def symbol_values(model: onnx.ModelProto, feeds: dict) -> dict[str, int]:
    """{dim_param: size} read off the graph inputs' declared shapes against the arrays fed (``feeds``), so that
    symbolic dimensions (``batch``, ``seq``) that shape inference carries through the graph have a size."""
    out: dict[str, int] = {}
    for vi in model.graph.input:
        shape = np.shape(feeds[vi.name]) if vi.name in feeds and hasattr(feeds[vi.name], "shape") else None
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if shape is None or tt is None or not tt.HasField("shape") or len(tt.shape.dim) != len(shape):
            continue
        for d, n in zip(tt.shape.dim, shape):
            if d.HasField("dim_param") and d.dim_param:
                out.setdefault(d.dim_param, int(n))
    return out


def value_bytes(vi: onnx.ValueInfoProto | None, dims: dict | None = None) -> int:
    """numel × itemsize of a tensor ValueInfo whose shape is known (bytes), symbolic dimensions sized by ``dims``
    (:func:`symbol_values`); 0 when a dimension, the shape or the dtype is unknown or the value is not a
    tensor."""
    if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.elem_type:
        return 0
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return 0
    sizes = []
    for d in tt.shape.dim:
        n = d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param) if d.dim_param else None
        if n is None:
            return 0
        sizes.append(n)
    try:
        item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).itemsize
    except Exception:
        return 0
    return int(np.prod(sizes, dtype=np.int64)) * item


@dataclasses.dataclass
class RefSegment:
    """Nodes ``start`` to ``stop`` (exclusive) of the model's node list. ``inputs``: the tensors it reads that no
    node of it produces (graph inputs and earlier segments' tensors; initializers left out), in first-read order;
    ``outputs``: the tensors it computes that later segments read or that are graph outputs; ``exposed``: the
    other tensors it computes that the reference exposes (toolkit.ort.reference.exposed_tensors);
    ``bytes``: the estimated bytes of its tensors."""

    index: int
    start: int
    stop: int
    inputs: list[str]
    outputs: list[str]
    exposed: list[str]
    bytes: int


def _typed(vi) -> bool:
    return vi is not None and vi.type.WhichOneof("value") is not None


def plan_segments(model: onnx.ModelProto, types: dict, budget_bytes: int = DEFAULT_SEGMENT_BYTES,
                  only=None, dims: dict | None = None, sizes: dict | None = None) -> list[RefSegment]:
    """Cut ``model``'s nodes into :class:`RefSegment` s (module docstring). ``types``: {tensor: ValueInfoProto}
    (toolkit.ort.reference.inferred_types); ``only``: the tensors to expose (None: all the reference exposes);
    ``dims``: sizes of symbolic dimensions (:func:`symbol_values`); ``sizes``: {tensor: bytes} known otherwise
    (a compiled plan's, whose shapes are bound to the inputs), used first.

    Raises:
        ValueError: ``budget_bytes`` < 1."""
    if budget_bytes < 1:
        raise ValueError(f"segment budget must be at least 1 byte, got {budget_bytes}")
    g = model.graph
    nodes = list(g.node)
    inits = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
    declared = {v.name: v for v in list(g.input) + list(g.output)}
    reads = [node_reads(n) for n in nodes]
    last_read: dict[str, int] = {}
    for i, names in enumerate(reads):
        for t in names:
            last_read[t] = i
    graph_outputs = {o.name for o in g.output}
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer.setdefault(o, i)
    sizes = sizes or {}

    def size(o: str) -> int:
        return sizes[o] if o in sizes else value_bytes(types.get(o) or declared.get(o), dims)

    cuts, acc, live = [0], 0, set()
    for i, n in enumerate(nodes):
        if i > cuts[-1] and acc >= budget_bytes:
            crossing = {t for t in live if last_read.get(t, -1) >= i}
            live = crossing
            if all(_typed(types.get(t) or declared.get(t)) for t in crossing):
                cuts.append(i)
                acc = 0
        for o in n.output:
            if o:
                acc += size(o)
                live.add(o)
    cuts.append(len(nodes))
    exposed = set(exposed_tensors(model, types, only))
    out = []
    for s, (a, b) in enumerate(zip(cuts, cuts[1:])):
        made = {o for n in nodes[a:b] for o in n.output if o}
        ins = list(dict.fromkeys(t for names in reads[a:b] for t in names if t not in made and t not in inits))
        later = [o for n in nodes[a:b] for o in n.output
                 if o and (o in graph_outputs or last_read.get(o, -1) >= b)]
        later = list(dict.fromkeys(later))
        shown = [o for n in nodes[a:b] for o in n.output if o in exposed and o not in later]
        out.append(RefSegment(s, a, b, ins, later, shown, sum(size(o) for o in made)))
    return out


class SegmentedReference:
    """The FP32 reference of ``model`` as :class:`RefSegment` s, run one at a time.

    Args:
        model: the loaded model (not modified; weights left on disk stay on disk).
        types: {tensor: ValueInfoProto} of the whole model (toolkit.ort.reference.inferred_types).
        budget_bytes: tensor bytes per segment (:func:`plan_segments`).
        only: tensors to expose (None: every tensor the whole-model reference exposes).
        sessions_bytes: onnxruntime sessions kept for re-use while the weights they hold (the segment's
            initializers, bytes) stay under this; older ones are dropped first. 0 keeps none.
        dims, sizes: the sizes of symbolic dimensions and of tensors (:func:`plan_segments`).
    """

    def __init__(self, model: onnx.ModelProto, types: dict, budget_bytes: int = DEFAULT_SEGMENT_BYTES, only=None,
                 sessions_bytes: int = 0, dims: dict | None = None, sizes: dict | None = None):
        self.model, self.types = model, types
        self.segments = plan_segments(model, types, budget_bytes, only, dims, sizes)
        self.segment_of: dict[str, int] = {}
        for seg in self.segments:
            for n in model.graph.node[seg.start:seg.stop]:
                for o in n.output:
                    if o:
                        self.segment_of.setdefault(o, seg.index)
        self._inits = {t.name: t for t in model.graph.initializer}
        self._sessions: OrderedDict[int, tuple[ReferenceRunner, int]] = OrderedDict()
        self._sessions_bytes = sessions_bytes

    def submodel(self, seg: RefSegment) -> tuple[onnx.ModelProto, int]:
        """(the ModelProto of ``seg``, the bytes of the initializers it holds). Its inputs are ``seg.inputs``
        typed as the whole model declares or infers them; its outputs ``seg.outputs``."""
        g = self.model.graph
        declared = {v.name: v for v in list(g.input) + list(g.output)}
        m = onnx.ModelProto()
        m.ir_version = self.model.ir_version
        m.opset_import.extend(self.model.opset_import)
        m.functions.extend(self.model.functions)
        sub = m.graph
        sub.name = f"{g.name or 'graph'}_segment{seg.index}"
        nodes = g.node[seg.start:seg.stop]
        sub.node.extend(nodes)
        reads = {t for n in nodes for t in node_reads(n)}
        weight_bytes = 0
        for name in reads:
            t = self._inits.get(name)
            if t is not None:
                sub.initializer.append(t)
                weight_bytes += int(np.prod(t.dims, dtype=np.int64)) * max(
                    np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize, 1)
        sub.sparse_initializer.extend(t for t in g.sparse_initializer if t.values.name in reads)
        for name in seg.inputs:
            vi = declared.get(name) or self.types.get(name)
            sub.input.append(vi)
        for name in seg.outputs:
            vi = declared.get(name) or self.types.get(name)
            if vi is None:
                vi = onnx.helper.make_empty_tensor_value_info(name)
            out = sub.output.add()
            out.CopyFrom(vi)
            if out.type.HasField("tensor_type"):
                out.type.tensor_type.ClearField("shape")
        return m, weight_bytes

    def _runner(self, seg: RefSegment) -> ReferenceRunner:
        hit = self._sessions.get(seg.index)
        if hit is not None:
            self._sessions.move_to_end(seg.index)
            return hit[0]
        m, size = self.submodel(seg)
        runner = ReferenceRunner(m, only=seg.exposed, types=self.types)
        if size <= self._sessions_bytes:
            self._sessions[seg.index] = (runner, size)
            while sum(v[1] for v in self._sessions.values()) > self._sessions_bytes:
                self._sessions.popitem(last=False)
        return runner

    def run(self, index: int, values, options=None) -> dict:
        """{tensor: array} of segment ``index`` run on ``values`` (a mapping holding its ``inputs``): its
        ``outputs`` and ``exposed`` tensors. ``options``: onnxruntime RunOptions (toolkit.ort.reference).

        Raises:
            KeyError: a boundary input missing from ``values``; ModelError when onnxruntime refuses the
            segment."""
        seg = self.segments[index]
        feeds = {t: values[t] for t in seg.inputs}
        return self._runner(seg).run(feeds, options)

    def constant_outputs(self) -> dict:
        """{graph output: array} of graph outputs no node computes that are initializers (their value)."""
        made = set(self.segment_of)
        return {o.name: array_of(self._inits[o.name]) for o in self.model.graph.output
                if o.name not in made and o.name in self._inits}
