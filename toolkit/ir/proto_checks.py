"""Checks and repairs of a parsed ``ModelProto`` before anything else reads it (called by toolkit.ir.load).

Refused, each with one :class:`~toolkit.core.errors.ModelError` line naming the field:

- a string field that is not UTF-8 (:func:`check_strings`): protobuf's upb implementation hands such a proto2
  string back as ``bytes``, which later breaks every use of it (UnicodeDecodeError, TypeError in onnx's C++
  bindings). ``doc_string`` fields, free text, are repaired instead (invalid bytes replaced);
- an element-type enum that does not exist (:func:`check_dtypes`): a tensor's ``data_type``, a type's
  ``elem_type`` (``-1``, ``99``; ``0`` too on graph inputs/outputs), Cast's ``to`` (``0`` included), a
  ``dtype``/``output_dtype`` attribute;
- a tensor whose data does not match its dims (:func:`check_tensor_data`): ``raw_data`` longer or shorter than
  dims × element size, a typed field (``float_data``, ...) with another count than the dims give; onnxruntime
  refuses these too ("ValidateEmbeddedTensorProtoDataSizeAndShape").

Accepted as onnxruntime accepts them, with a note (logged as a warning, and listed in the model's metadata
``npuscope.load_notes``):

- ``sparse_initializer`` entries become ordinary dense initializers (:func:`densify_sparse_initializers`);
- duplicate ``opset_import`` entries of one domain: the last is kept (:func:`dedupe_opsets`);
- ``ir_version`` 0..3 is read as the IR version the opsets need (:func:`normalise_ir_version`);
- main-graph nodes out of topological order are sorted (:func:`sort_nodes`; stable: the file's order wherever it
  already holds; an unsorted subgraph is refused, as onnxruntime refuses it). A real cycle is left for the
  checker, and :func:`node_cycle` names its nodes.
"""

from __future__ import annotations

import heapq
import logging
import math

import onnx
from onnx import AttributeProto, TensorProto

from toolkit.core.errors import ModelError

_log = logging.getLogger("npuscope.ir")
NOTES_KEY = "npuscope.load_notes"
_VALID_TYPES = frozenset(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}
_DTYPE_ATTRS = ("to", "dtype", "output_dtype")
#: Largest dense initializer made from a sparse one: protobuf's 2 GiB message limit.
MAX_DENSE_BYTES = 2**31 - 1


def add_note(model: onnx.ModelProto, note: str) -> None:
    """Log ``note`` as a warning and append it to the model's ``npuscope.load_notes`` metadata (' | ' joined)."""
    _log.warning("%s", note)
    for p in model.metadata_props:
        if p.key == NOTES_KEY:
            p.value = f"{p.value} | {note}"
            return
    entry = model.metadata_props.add()
    entry.key, entry.value = NOTES_KEY, note


# ------------------------------------------------------------------------------------------ strings
def check_strings(model: onnx.ModelProto, where: str) -> None:
    """Refuse a non-UTF-8 string field anywhere in ``model``, or one holding a NUL character (a name such as
    ``"a\x00b"``; external-data entries are left to toolkit.ir.load's external-data check, which names the
    tensor): ModelError naming its path, e.g. ``graph.node[0].name``. Repair ``doc_string`` fields (invalid
    bytes become U+FFFD) with a note."""
    repaired = []
    stack = [(model, "")]
    while stack:
        msg, path = stack.pop()
        for fd, value in msg.ListFields():
            field = f"{path}.{fd.name}" if path else fd.name
            if fd.type == fd.TYPE_MESSAGE:
                items = list(enumerate(value)) if fd.is_repeated else [(None, value)]
                stack.extend((v, field if i is None else f"{field}[{i}]") for i, v in reversed(items))
            elif fd.type == fd.TYPE_STRING:
                for i, v in enumerate(value if fd.is_repeated else [value]):
                    if isinstance(v, str) and "\x00" in v and fd.name != "doc_string" and "external_data" not in field:
                        at = f"{field}[{i}]" if fd.is_repeated else field
                        raise ModelError(f"'{where}': field {at} holds a NUL character ({v[:40]!r}); names and other "
                                         "ONNX strings cannot contain one here: rename it in the exporter")
                    if not isinstance(v, bytes):
                        continue
                    if fd.name == "doc_string" and not fd.is_repeated:
                        msg.doc_string = v.decode("utf-8", "replace")
                        repaired.append(field)
                        continue
                    at = f"{field}[{i}]" if fd.is_repeated else field
                    raise ModelError(f"'{where}': field {at} is not UTF-8 text ({_clip_bytes(v)}); ONNX strings are "
                                     "UTF-8: re-export the model (or fix the exporter's names)")
    if repaired:
        add_note(model, f"{len(repaired)} doc_string field(s) were not UTF-8 text (e.g. {repaired[0]}); their "
                        "invalid bytes were replaced")


def _clip_bytes(v: bytes, n: int = 24) -> str:
    return repr(v[:n]) + ("..." if len(v) > n else "")


# ------------------------------------------------------------------------------------------ walking
def graphs(model: onnx.ModelProto):
    """(graph, label) for the main graph, every subgraph in a node attribute, and the nodes of model-local
    functions (as a pseudo-graph label: only their nodes are visited)."""
    stack = [(model.graph, "graph")]
    while stack:
        g, label = stack.pop()
        yield g, label
        for node in g.node:
            for a in node.attribute:
                if a.type == AttributeProto.GRAPH:
                    stack.append((a.g, f"subgraph '{a.name}' of node '{node.name}'"))
                elif a.type == AttributeProto.GRAPHS:
                    stack.extend((sub, f"subgraph '{a.name}[{i}]' of node '{node.name}'") for i, sub in enumerate(a.graphs))


def _nodes(model: onnx.ModelProto):
    for g, _ in graphs(model):
        yield from g.node
    for f in model.functions:
        yield from f.node


def tensors(model: onnx.ModelProto):
    """(tensor, what it is for messages) for every TensorProto of the model: initializers, sparse initializers'
    values and indices, node attributes (Constant's value, ...)."""
    for g, label in graphs(model):
        where = "" if label == "graph" else f" in {label}"
        for t in g.initializer:
            yield t, f"initializer '{t.name}'{where}"
        for sp in g.sparse_initializer:
            yield sp.values, f"sparse initializer '{sp.values.name}' values{where}"
            yield sp.indices, f"sparse initializer '{sp.values.name}' indices{where}"
    for node in _nodes(model):
        for a in node.attribute:
            if a.type == AttributeProto.TENSOR:
                yield a.t, f"attribute '{a.name}' of node '{node.name}' ({node.op_type})"
            elif a.type == AttributeProto.TENSORS:
                for i, t in enumerate(a.tensors):
                    yield t, f"attribute '{a.name}[{i}]' of node '{node.name}' ({node.op_type})"


# ------------------------------------------------------------------------------------------ dtypes
def _type_name(v: int) -> str:
    try:
        return TensorProto.DataType.Name(v)
    except ValueError:
        return "no ONNX type"


def check_dtypes(model: onnx.ModelProto, where: str) -> None:
    """Refuse element-type enums that do not exist (module docstring). Raises ModelError naming the field."""
    for t, what in tensors(model):
        if t.data_type not in _VALID_TYPES:
            raise ModelError(f"'{where}': {what} has data_type {t.data_type} ({_type_name(t.data_type)}), not an ONNX "
                             "element type (1 FLOAT ... see onnx.TensorProto.DataType); re-export the model")
    for g, label in graphs(model):
        for kind, infos in (("input", g.input), ("output", g.output), ("value_info", g.value_info)):
            for vi in infos:
                _check_type(vi.type, f"{kind} '{vi.name}'" + ("" if label == "graph" else f" of {label}"), where,
                            allow_undefined=kind == "value_info")
    for node in _nodes(model):
        if node.domain not in ("", "ai.onnx"):
            continue
        for a in node.attribute:
            if a.type == AttributeProto.INT and a.name in _DTYPE_ATTRS:
                ok = a.i in _VALID_TYPES or (a.i == 0 and a.name != "to")  # output_dtype / dtype 0: "from the input"
                if not ok:
                    raise ModelError(f"'{where}': node '{node.name}' ({node.op_type}): attribute '{a.name}' is {a.i} "
                                     f"({_type_name(a.i)}), not an ONNX element type; fix the exporter or the model")


def _check_type(tp: onnx.TypeProto, what: str, where: str, allow_undefined: bool) -> None:
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        inner = getattr(tp, kind)
        if inner.HasField("elem_type"):
            v = inner.elem_type
            if v not in _VALID_TYPES and not (v == 0 and allow_undefined):
                raise ModelError(f"'{where}': {what} has elem_type {v} ({_type_name(v)}), not an ONNX element type; "
                                 "re-export the model")
    elif kind in ("sequence_type", "optional_type"):
        inner = getattr(tp, kind)
        if inner.HasField("elem_type"):
            _check_type(inner.elem_type, what, where, allow_undefined)
    elif kind == "map_type":
        if tp.map_type.key_type not in _VALID_TYPES:
            raise ModelError(f"'{where}': {what} has map key_type {tp.map_type.key_type}, not an ONNX element type; "
                             "re-export the model")
        _check_type(tp.map_type.value_type, what, where, allow_undefined)


# ------------------------------------------------------------------------------------------ tensor data
#: data_type -> (typed field, values per element) for tensors without raw_data (onnx.proto TensorProto comments).
_TYPED = {TensorProto.FLOAT: ("float_data", 1), TensorProto.COMPLEX64: ("float_data", 2),
          TensorProto.DOUBLE: ("double_data", 1), TensorProto.COMPLEX128: ("double_data", 2),
          TensorProto.INT64: ("int64_data", 1), TensorProto.UINT32: ("uint64_data", 1),
          TensorProto.UINT64: ("uint64_data", 1), TensorProto.STRING: ("string_data", 1)}
for _t in ("INT32", "INT16", "INT8", "UINT16", "UINT8", "BOOL", "FLOAT16", "BFLOAT16", "FLOAT8E4M3FN",
           "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0"):
    if hasattr(TensorProto, _t):
        _TYPED[getattr(TensorProto, _t)] = ("int32_data", 1)
#: element types narrower than a byte: elements per byte (raw_data) and per int32_data entry are packed.
_PACKED = {getattr(TensorProto, n): k for n, k in (("INT4", 2), ("UINT4", 2), ("FLOAT4E2M1", 2), ("INT2", 4),
                                                   ("UINT2", 4)) if hasattr(TensorProto, n)}


def _itemsize(data_type: int) -> int:
    return onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize


def raw_bytes_needed(t: TensorProto) -> int | None:
    """Bytes of ``raw_data`` the dims and element type of ``t`` take (None for STRING, which has none)."""
    if t.data_type == TensorProto.STRING:
        return None
    numel = math.prod(t.dims)
    if t.data_type in _PACKED:
        return -(-numel // _PACKED[t.data_type])
    return numel * _itemsize(t.data_type)


def check_tensor_data(model: onnx.ModelProto, where: str) -> None:
    """Refuse an embedded tensor whose data does not match its dims (module docstring); external tensors are
    checked by toolkit.ir.load before their data is read. Raises ModelError naming the tensor and both sizes."""
    for t, what in tensors(model):
        if t.data_location == TensorProto.EXTERNAL:
            continue
        if any(d < 0 for d in t.dims):
            raise ModelError(f"'{where}': {what} has negative dims {list(t.dims)}; re-export the model")
        shape = f"dims {list(t.dims)} of {_type_name(t.data_type)}"
        if t.HasField("raw_data"):
            need = raw_bytes_needed(t)
            if need is None:
                raise ModelError(f"'{where}': {what} is a STRING tensor with raw_data; strings go in string_data: "
                                 "re-export the model")
            held = len(t.raw_data)
            if held != need:
                raise ModelError(f"'{where}': {what} holds {held} bytes of raw_data but its {shape} need {need}; "
                                 "the model is corrupt or was edited by hand: re-export it")
            continue
        field, per = _TYPED.get(t.data_type, (None, 0))
        numel = math.prod(t.dims)
        if t.data_type in _PACKED:
            field, want = "int32_data", -(-numel // _PACKED[t.data_type])
        elif field is None:
            continue
        else:
            want = numel * per
        held = len(getattr(t, field))
        if held != want:
            raise ModelError(f"'{where}': {what} holds {held} values in {field} but its {shape} need {want}; "
                             "the model is corrupt or was edited by hand: re-export it")


# ------------------------------------------------------------------------------------------ accepted kinds
def densify_sparse_initializers(model: onnx.ModelProto, where: str) -> None:
    """Turn every ``sparse_initializer`` into a dense initializer of the same name (the name is kept in the
    values tensor, SparseTensorProto.values.name), as onnxruntime does when it loads such a model; a note says
    so. Raises ModelError: no name, a name another initializer has, indices that do not fit the dims, or a
    dense size over :data:`MAX_DENSE_BYTES`."""
    import numpy as np
    from onnx import numpy_helper

    for g, label in graphs(model):
        if not g.sparse_initializer:
            continue
        taken = {t.name for t in g.initializer}
        names = []
        for sp in g.sparse_initializer:
            name = sp.values.name
            what = f"sparse initializer '{name}'" + ("" if label == "graph" else f" in {label}")
            if not name:
                raise ModelError(f"'{where}': a sparse initializer has no name (values.name is empty); re-export the model")
            if name in taken:
                raise ModelError(f"'{where}': {what} has the name of another initializer; re-export the model")
            taken.add(name)
            dims = list(sp.dims)
            values, idx = numpy_helper.to_array(sp.values), numpy_helper.to_array(sp.indices)
            numel = math.prod(dims)
            if any(d < 0 for d in dims):
                raise ModelError(f"'{where}': {what} has negative dims {dims}; re-export the model")
            if numel * values.dtype.itemsize > MAX_DENSE_BYTES:
                raise ModelError(f"'{where}': {what} has dims {dims}: as a dense tensor that is "
                                 f"{numel * values.dtype.itemsize} bytes, over protobuf's 2 GiB; re-export the model")
            flat = _linear_indices(values, idx, dims)
            if flat is None:
                raise ModelError(f"'{where}': {what}: indices of shape {list(idx.shape)} do not index the "
                                 f"{values.size} values in dims {dims} (COO: [NNZ] linear or [NNZ, rank] indices "
                                 "inside the dims); re-export the model")
            dense = np.zeros(numel, values.dtype)
            dense[flat] = values
            g.initializer.append(numpy_helper.from_array(dense.reshape(dims), name))
            names.append(name)
        g.ClearField("sparse_initializer")
        add_note(model, f"sparse initializer(s) {', '.join(repr(n) for n in names[:5])}"
                        f"{' ...' if len(names) > 5 else ''} made dense (as onnxruntime does)")


def _linear_indices(values, idx, dims: list[int]):
    """The linear (C-order) positions of a COO sparse tensor's values, or None when the indices do not fit."""
    import numpy as np

    nnz = values.shape[0] if values.ndim == 1 else -1
    if nnz < 0 or idx.dtype.kind not in "iu" or idx.shape not in ((nnz,), (nnz, len(dims))):
        return None
    idx = idx.astype(np.int64)
    if idx.ndim == 2:
        if nnz and not ((idx >= 0) & (idx < np.array(dims, np.int64))).all():
            return None
        return np.ravel_multi_index(tuple(idx.T), dims) if nnz else np.zeros(0, np.int64)
    numel = math.prod(dims)
    return idx if not nnz or (idx.min() >= 0 and idx.max() < numel) else None


def dedupe_opsets(model: onnx.ModelProto) -> None:
    """Keep the last ``opset_import`` entry of each domain ('' and 'ai.onnx' are one), as onnxruntime does;
    a note names the domain and the versions listed."""
    listed: dict[str, list[int]] = {}
    spelled: dict[str, str] = {}
    for imp in model.opset_import:
        dom = "" if imp.domain == "ai.onnx" else imp.domain
        listed.setdefault(dom, []).append(imp.version)
        spelled[dom] = imp.domain
    if all(len(v) == 1 for v in listed.values()):
        return
    del model.opset_import[:]
    for dom, versions in listed.items():
        model.opset_import.append(onnx.helper.make_opsetid(spelled[dom], versions[-1]))
        if len(versions) > 1:
            add_note(model, f"opset_import lists domain '{dom or 'ai.onnx'}' {len(versions)} times (versions "
                            f"{', '.join(map(str, versions))}); the last, {versions[-1]}, is used (as onnxruntime does)")


def normalise_ir_version(model: onnx.ModelProto) -> None:
    """Read ``ir_version`` 0..3 (unset, or older than IR 4, when initializers also had to be graph inputs) as
    the oldest IR version the model's opsets need (at least 4), as onnxruntime reads such models; a note says so."""
    old = model.ir_version
    if old >= 4:
        return
    try:
        need = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except ValueError:
        need = 4
    model.ir_version = max(4, need)
    add_note(model, f"ir_version {old} read as IR version {model.ir_version} (the oldest its opsets need), as "
                    "onnxruntime does")


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """Names the nodes of ``graph`` (and of its own subgraphs) read that ``graph`` does not define: the outer-scope
    values a node holding it depends on."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer} | \
        {o for n in graph.node for o in n.output}
    reads = set()
    for n in graph.node:
        reads.update(i for i in n.input if i)
        for a in n.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) if a.type == AttributeProto.GRAPHS
                        else []):
                reads |= _outer_reads(sub)
    return reads - defined


def _order(graph: onnx.GraphProto) -> tuple[list[int], list[int]]:
    """(a topological order of ``graph``'s node indices that keeps the file's order wherever it holds, the indices
    left over because they lie on or behind a cycle). A node depends on the producers of its inputs and of the
    outer-scope names its subgraphs read."""
    producer = {}
    for i, n in enumerate(graph.node):
        for o in n.output:
            if o:
                producer.setdefault(o, i)
    needs: list[set[int]] = []
    for i, n in enumerate(graph.node):
        reads = {x for x in n.input if x}
        for a in n.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) if a.type == AttributeProto.GRAPHS
                        else []):
                reads |= _outer_reads(sub)
        needs.append({producer[x] for x in reads if x in producer and producer[x] != i} |
                     ({i} if any(producer.get(x) == i for x in reads) else set()))
    users: dict[int, list[int]] = {}
    for i, deps in enumerate(needs):
        for d in deps:
            users.setdefault(d, []).append(i)
    waiting = [len(d) for d in needs]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    placed = set(order)
    return order, [i for i in range(len(graph.node)) if i not in placed]


def nodes_unsorted(model: onnx.ModelProto) -> bool:
    """Whether the main graph of ``model`` lists a node before the producer of a value it reads (cycles
    included)."""
    return _order(model.graph)[0] != list(range(len(model.graph.node)))


def sort_nodes(model: onnx.ModelProto) -> None:
    """Put the nodes of the main graph of ``model`` in topological order where a node is listed before a producer
    of its inputs (stable: :func:`_order`), as onnxruntime orders them itself; a note says so. Subgraphs are left
    as they are: onnxruntime refuses an unsorted If/Loop/Scan body, and so does the ONNX checker. A graph with a
    cycle is left as it is (the checker refuses it; :func:`node_cycle` names the nodes)."""
    g = model.graph
    order, left = _order(g)
    if left or order == list(range(len(g.node))):
        return
    copies = []
    for i in order:
        c = onnx.NodeProto()
        c.CopyFrom(g.node[i])
        copies.append(c)
    del g.node[:]
    g.node.extend(copies)
    add_note(model, "the nodes of the main graph were not in topological order (a node listed before the producer "
                    "of its input); they were sorted, as onnxruntime does")


def node_cycle(graph: onnx.GraphProto) -> list[str]:
    """The nodes of ``graph`` that lie on a cycle of its data flow (a node reading, directly or through others, its
    own output), each as ``'name' (OpType)``; [] when there is none."""
    _, left = _order(graph)
    if not left:
        return []
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    stuck = set(left)
    # nodes behind a cycle are also left: keep only those from which the cycle is reached again (on a cycle)
    on_cycle = []
    for start in left:
        seen, todo = set(), [producer[x] for x in graph.node[start].input if x in producer and producer[x] in stuck]
        while todo:
            i = todo.pop()
            if i == start:
                on_cycle.append(start)
                break
            if i not in seen:
                seen.add(i)
                todo += [producer[x] for x in graph.node[i].input if x in producer and producer[x] in stuck]
    return [f"'{graph.node[i].name}' ({graph.node[i].op_type})" if graph.node[i].name else
            f"unnamed node #{i} ({graph.node[i].op_type})" for i in on_cycle]
