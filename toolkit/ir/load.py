"""Load and validate an untrusted ONNX file.

`load_model(path)` returns an ``onnx.ModelProto`` that passed these checks, each failing with a one-line
:class:`toolkit.core.errors.ModelError` that names the file/node/tensor and says how to fix it:

- the file exists and parses as an ONNX protobuf (a truncated file is named as such);
- external-data locations stay inside the model's folder (no absolute paths, no ``..`` escapes, no symlinks
  out), and each declared ``offset``/``length`` fits inside the data file *before* anything is read;
- the default-domain opset lies in :data:`MIN_OPSET` .. :data:`MAX_OPSET`;
- every node's op is a known ONNX op (or a model-local function);
- ``onnx.checker.check_model`` passes (run on the file when weights stay on disk, see below);
- node names are made unique and non-empty (real exporters leave them empty or duplicated); the renaming is
  recorded in the model's metadata ``npuscope.renamed_nodes`` count.

External initializers of toolkit.ir.weights.MAP_MIN_BYTES (1 MiB) or more are not read: once checked they stay
in their files, memory-mapped by their readers (toolkit.ir.weights.array_of), so a model past protobuf's 2 GiB
limit loads in the memory of its graph alone. Initializers of that size stored inside the model file are left
there the same way (mapped at their offset in the .onnx file).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from toolkit.core.errors import ModelError
from toolkit.core.text import escape_surrogates
from toolkit.core.userpaths import check_path
from toolkit.ir.proto import metadata_json
from toolkit.ir.proto_checks import (
    check_dtypes,
    check_strings,
    check_tensor_data,
    dedupe_opsets,
    densify_sparse_initializers,
    graphs,
    node_cycle,
    nodes_unsorted,
    normalise_ir_version,
    raw_bytes_needed,
    sort_nodes,
)
from toolkit.ir.weights import MAP_MIN_BYTES, array_of, is_mapped, mark_mapped, remember_file_digest
from toolkit.ir.wire import lift_raw_data

#: Oldest default-domain opset accepted (onnxruntime's lower bound for most kernels).
MIN_OPSET = 7
#: Newest default-domain opset accepted: the installed onnx package's newest.
MAX_OPSET = onnx.defs.onnx_opset_version()
#: Largest model accepted, in bytes (protobuf's own 2 GiB limit).
MAX_MODEL_BYTES = 2**31 - 1


_DIGESTS: dict[tuple, str] = {}  # (resolved path, size, mtime ns) -> sha256 hex of the file's bytes
_LOADED: dict[str, str] = {}  # resolved path -> sha256 hex of the bytes load_model last parsed from it


def _digest_key(path: Path, st: os.stat_result) -> tuple:
    return str(path.resolve()), st.st_size, st.st_mtime_ns


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 (hex) of the file's bytes, remembered for this process by (resolved path, size, mtime in ns): a
    command hashes its model once although several steps name the digest (zoo lookup, loading). Raises
    ModelError (one line) when the file cannot be read."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            key = _digest_key(p, os.fstat(fh.fileno()))
            if key not in _DIGESTS:  # streamed: a data file may be larger than memory
                _DIGESTS[key] = hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError as exc:
        raise ModelError(f"model file '{p}' cannot be read ({exc.strerror or exc}); pass a readable .onnx "
                         "file") from None
    return _DIGESTS[key]


def loaded_sha256(path: str | os.PathLike) -> str | None:
    """sha256 (hex) of the bytes :func:`load_model` parsed from ``path`` (its latest load in this process), or
    None if it never loaded it: what a summary must name, even when the file is replaced during the run."""
    return _LOADED.get(str(Path(path).resolve()))


def _hash_into(key: tuple, data: bytes) -> None:
    """Remember the sha256 of ``data`` for file identity ``key`` (the thread lets ``data`` go when it ends)."""
    _DIGESTS.setdefault(key, hashlib.sha256(data).hexdigest())


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Read, check and normalise an ONNX model file. The sha256 of the bytes read is kept
    (:func:`loaded_sha256`).

    Args:
        path: the ``.onnx`` file. External data (if any) is read from its folder only; initializers of 1 MiB
            or more stay on disk (toolkit.ir.weights).

    Returns:
        the checked ``onnx.ModelProto`` with unique, non-empty node names.

    Raises:
        ModelError: missing file, not ONNX / truncated, external data outside the folder or too short,
            unsupported opset, unknown op, or a checker failure; a path the file system refuses
            (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way,
            permission denied).
    """
    p = Path(path)
    check_path(p, "model file", ModelError, "pass the .onnx file itself")
    if not p.exists():
        raise ModelError(f"model file '{p}' does not exist; check the path")
    if not p.is_file():
        raise ModelError(f"model path '{p}' is not a file; pass the .onnx file itself")
    size = p.stat().st_size
    if size == 0:
        raise ModelError(f"model file '{p}' is empty; re-export the model")
    if size > MAX_MODEL_BYTES:
        raise ModelError(f"model file '{p}' is {size} bytes, over protobuf's 2 GiB limit; save weights as external data")
    try:
        with open(p, "rb") as fh:  # one read: the bytes parsed are the bytes hashed
            key = _digest_key(p, os.fstat(fh.fileno()))
            data = fh.read()
    except OSError as exc:
        raise ModelError(f"model file '{p}' cannot be read ({exc.strerror or exc}); pass a readable .onnx file") from None
    hashing = None
    if key not in _DIGESTS:  # on a thread while the bytes are parsed and checked (hashlib releases the GIL)
        hashing = threading.Thread(target=_hash_into, args=(key, data), name="npuscope-model-sha256", daemon=True)
        hashing.start()
    try:
        # weights inside the file: lifted out of the bytes before parsing (toolkit.ir.wire), mapped in place
        lifted = lift_raw_data(data, MAP_MIN_BYTES) if size >= MAP_MIN_BYTES else None
        model, check = _parse_checked(p, data if lifted is None else lifted[0], lifted[1] if lifted else ())
    finally:
        if hashing is not None:
            hashing.join()
    del data, lifted
    if check is not None:
        _check(p, model, check)
    _LOADED[key[0]] = _DIGESTS[key]
    remember_file_digest(*key, _DIGESTS[key])  # weights mapped from inside this file: hashed already
    normalise_node_names(model)
    return model


def _map_lifted(model: onnx.ModelProto, lifted, path: Path) -> None:
    """Mark each initializer whose raw_data toolkit.ir.wire lifted out as mapped at its place in the model file
    ``path`` (toolkit.ir.weights.mark_mapped). Raises ModelError when its bytes do not fit its dims, with
    toolkit.ir.proto_checks.check_tensor_data's message."""
    inits = model.graph.initializer
    for lift in lifted:
        t = inits[lift.index]
        need = raw_bytes_needed(t)
        if need is None:
            raise ModelError(f"'{path}': initializer '{t.name}' is a STRING tensor with raw_data; strings go in "
                             "string_data: re-export the model")
        if need != lift.length:
            raise ModelError(f"'{path}': initializer '{t.name}' holds {lift.length} bytes of raw_data but its dims "
                             f"{list(t.dims)} need {need}; the model is corrupt or was edited by hand: re-export it")
        t.data_location = onnx.TensorProto.EXTERNAL
        loc = t.external_data.add()
        loc.key, loc.value = "location", escape_surrogates(path.name)  # a name that is not UTF-8: shown escaped
        mark_mapped(t, str(path.resolve()), lift.offset, lift.length)
        array_of(t)  # mapped now, as the bytes parsed: a file replaced later does not change this model


def _unshaped_io(model: onnx.ModelProto) -> list:
    """The main graph's inputs and outputs of tensor type whose ``shape`` field is absent (unknown rank): the ONNX
    checker requires the field on the main graph, onnxruntime runs such models (Loop scan outputs, If outputs whose
    branches differ in shape, a value_info made without a shape)."""
    g = model.graph
    return [v for v in (*g.input, *g.output)
            if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")]


def _checker_view(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` for the ONNX checker in which each initializer left on disk is a graph input of its
    type and dims instead (the checker would otherwise read the file again; the loader has checked their
    extents and sizes itself), and each main-graph input or output of unknown rank (:func:`_unshaped_io`) has an
    empty shape field: the checker requires the field, the model keeps its unknown rank."""
    view = onnx.ModelProto()
    view.CopyFrom(model)
    for v in _unshaped_io(view):
        v.type.tensor_type.shape.SetInParent()
    g = view.graph
    inputs = {i.name for i in g.input}
    keep = []
    for t in g.initializer:
        if is_mapped(t):
            if t.name not in inputs:
                g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    if len(keep) != len(g.initializer):
        del g.initializer[:]
        g.initializer.extend(keep)
    return view


def _check(p: Path, model: onnx.ModelProto, target) -> None:
    """Run the ONNX checker on ``target`` (a path, the bytes read or a ModelProto; see :func:`_parse_checked`).
    Raises ModelError with the checker's message, naming a node input nothing provides as such."""
    try:
        onnx.checker.check_model(target)
    except onnx.checker.ValidationError as exc:
        missing = unprovided_input(model)
        if missing is not None:  # the checker calls it an ordering problem ("must be topologically sorted")
            node, name = missing
            raise ModelError(f"'{p}': node '{node.name}' ({node.op_type}) reads '{name}', which no node, graph input "
                             "or initializer provides (a missing initializer or input); fix the exporter or the "
                             "model") from None
        cycle = node_cycle(model.graph)
        if cycle:  # the checker calls this an ordering problem too
            shown = ", ".join(cycle[:5]) + (f" and {len(cycle) - 5} more" if len(cycle) > 5 else "")
            raise ModelError(f"'{p}': the nodes {shown} form a cycle (each reads, directly or through the others, its "
                             "own output), which no execution order can run; fix the exporter or the model") from None
        raise ModelError(f"'{p}' fails the ONNX checker: {checker_message(exc)}; fix the exporter or the model") from None


def _parse_checked(p: Path, data: bytes, lifted=()) -> tuple[onnx.ModelProto, object]:
    """:func:`load_model`'s parse and checks of the bytes ``data`` read from ``p`` (``lifted``: the raw_data
    toolkit.ir.wire left out of them). Returns (model, None) once the ONNX checker passed, or with ``lifted``
    (model, the copy the checker is still to check: :func:`_check`). Raises ModelError."""
    try:
        model = onnx.load_model_from_string(data)
    except DecodeError as exc:
        raise ModelError(f"'{p}' is not a valid ONNX protobuf (truncated or not ONNX: {exc}); re-export or re-download it") from None
    except (ValueError, TypeError, RuntimeError) as exc:  # what else protobuf raises for garbage
        raise ModelError(f"'{p}' could not be parsed as ONNX ({type(exc).__name__}: {exc}); re-export or re-download it") from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"'{p}' parsed but holds no graph (not an ONNX model, or truncated); re-export it")
    notes = [(e.key, e.value) for e in model.metadata_props]
    check_strings(model, str(p))
    _map_lifted(model, lifted, p)
    check_proto(model, str(p))
    # the proto is still exactly the bytes read unless a repair noted itself in the metadata, external data is
    # read in or sparse initializers are made dense: then the checker takes those bytes (serialising a 0.4 GiB
    # model again cost 0.7 s)
    pristine = notes == [(e.key, e.value) for e in model.metadata_props] and \
        not any(True for _ in _tensors_with_external_data(model)) and \
        not any(g.sparse_initializer for g, _ in graphs(model))
    mapped = _load_external_data(model, p.parent.resolve(), p)
    densify_sparse_initializers(model, str(p))
    check_opsets(model, str(p))
    check_known_ops(model, str(p))
    if lifted:  # checked by the caller once the bytes read are freed; the weights lifted out stay out of it
        return model, _checker_view(model)
    # tensors left on disk: the checker gets them as graph inputs (their files, extents and sizes were checked
    # above; the checker's own path check refuses the symbolic links of a Hugging Face cache, which onnxruntime
    # reads)
    _check(p, model, _checker_view(model) if mapped or _unshaped_io(model) else data if pristine else model)
    _map_embedded(model, data, p.resolve())  # after the checker, which then still sees them in the proto
    return model, None


def check_model_proto(model: onnx.ModelProto, where: str = "model") -> onnx.ModelProto:
    """The in-memory checks and repairs of :func:`load_model` for a model given as a ModelProto (the Python
    API: toolkit.engine.as_model): :func:`check_proto`, then sparse initializers made dense. The caller's proto
    is left as it was: a copy is repaired when something needs it (sparse initializers, duplicate opsets, an
    IR version under 4). Raises ModelError naming the field."""
    domains = ["" if o.domain == "ai.onnx" else o.domain for o in model.opset_import]
    if model.graph.sparse_initializer or model.ir_version < 4 or len(set(domains)) != len(domains) or \
            nodes_unsorted(model):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    check_proto(model, where)
    densify_sparse_initializers(model, where)
    return model


def check_proto(model: onnx.ModelProto, where: str) -> None:
    """The field-level checks and repairs of toolkit.ir.proto_checks, in the order they depend on each other:
    strings (every later message reads names), element types (sizes need them), embedded tensor sizes,
    duplicate opset entries, old IR versions, node order. Raises ModelError naming the field."""
    check_strings(model, where)
    check_dtypes(model, where)
    check_tensor_data(model, where)
    dedupe_opsets(model)
    normalise_ir_version(model)
    sort_nodes(model)


def _tensors_with_external_data(model: onnx.ModelProto):
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            yield t
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_location == onnx.TensorProto.EXTERNAL:
                yield a.t


def _load_external_data(model: onnx.ModelProto, base: Path, src: Path) -> int:
    """Check every external-data reference before reading any (location inside ``base``, no NUL byte, integer
    offset/length, extent inside the file and exactly the tensor's size), then read them; a tensor without a
    length whose file holds more than it needs gets only the bytes it needs (as onnxruntime reads it).
    Initializers of at least toolkit.ir.weights.MAP_MIN_BYTES stay on disk, marked with their checked file
    (toolkit.ir.weights.mark_mapped; read through toolkit.ir.weights.array_of). Returns how many stay on disk.
    Raises ModelError naming the tensor and the field."""
    ext = list(_tensors_with_external_data(model))
    inits = {id(t) for t in model.graph.initializer}
    # the model's folder, and the folder of the file it is when its path is a symbolic link (a Hugging Face
    # cache: snapshots/<rev>/model.onnx and model.onnx_data both link into blobs/, where the data then lies)
    roots = {base, src.resolve().parent}
    mapped = 0
    reads = []  # (tensor, checked file, offset, bytes to read) of the tensors read into memory
    for t in ext:
        fields = {e.key: e.value for e in t.external_data}
        where = f"tensor '{t.name}' in '{src}'"
        loc = fields.get("location", "")
        if not loc:
            raise ModelError(f"{where} is marked as external data but names no file; re-save the model's external data")
        if "\x00" in loc:
            raise ModelError(f"{where}: external data location {loc!r} contains a NUL byte; re-save the model's "
                             "external data")
        if os.path.isabs(loc) or loc.startswith(("/", "\\")):
            raise ModelError(f"{where} points to external data '{loc}', an absolute path; "
                             "external data must be a relative path inside the model's folder")
        try:
            target = (base / loc).resolve()
        except (OSError, RuntimeError) as exc:  # a symbolic-link loop
            raise ModelError(f"{where}: external data '{loc}' cannot be resolved ({exc}); copy the data file next "
                             "to the model") from None
        if not any(os.path.commonpath([str(target), str(root)]) == str(root) for root in roots):
            link = f" (a symbolic link to '{target}')" if (base / loc).is_symlink() else ""
            raise ModelError(f"{where} points to external data '{loc}'{link} outside the model's "
                             f"folder '{base}'; move the data file next to the model")
        if not target.is_file():
            if not target.exists():
                raise ModelError(f"{where}: external data file '{loc}' is missing; copy it next to the model")
            kind = "a folder" if target.is_dir() else "not a regular file"
            raise ModelError(f"{where}: external data location '{loc}' is {kind}, not a data file; the location "
                             "must name the data file next to the model (re-save the model's external data)")
        fsize = target.stat().st_size
        offset, length = _extent_field(fields, "offset", where), _extent_field(fields, "length", where)
        if any(d < 0 for d in t.dims):  # before any size is worked out from them
            raise ModelError(f"{where} has negative dims {list(t.dims)}; re-export the model")
        need = raw_bytes_needed(t) or 0  # STRING tensors: unknown (0)
        problem = _extent_problem(offset or 0, length, need, fsize)
        if problem:
            raise ModelError(f"{where}: external data '{loc}' {problem}; the data file is "
                             "truncated or does not belong to this model (re-save the model's external data)")
        if id(t) in inits and need >= MAP_MIN_BYTES:
            mark_mapped(t, str(target), offset or 0, need)
            array_of(t)  # mapped now: a data file replaced later (a new inode) does not change this model
            mapped += 1
            continue
        # read below from the file checked here (not by onnx's reader: it refuses the symbolic links of a Hugging
        # Face cache, which onnxruntime reads); without a length, only the bytes the tensor needs
        reads.append((t, target, offset or 0, length if length is not None else (need or -1)))
    if len(ext) == mapped:
        return mapped
    try:
        for t, target, offset, size in reads:
            with open(target, "rb") as fh:
                fh.seek(offset)
                t.raw_data = fh.read(size)
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
    except OSError as exc:
        raise ModelError(f"external data of '{src}' cannot be read ({exc.strerror or exc}); check the data files "
                         "next to the model") from None
    return mapped


def _find(data: bytes, raw: bytes, start: int) -> int:
    """Offset of ``raw`` in ``data`` at or after ``start`` (-1: none): candidates by a 64-byte prefix, each
    confirmed by comparing every byte (a whole-pattern search costs ~6x more on weight-sized patterns)."""
    head = raw[:64]
    at = data.find(head, start)
    while at >= 0:
        if data.startswith(raw, at):
            return at
        at = data.find(head, at + 1)
    return -1


def _map_embedded(model: onnx.ModelProto, data: bytes, path: Path) -> int:
    """Leave large initializers stored inside the model file in it: each one of toolkit.ir.weights.MAP_MIN_BYTES
    or more whose ``raw_data`` bytes are found in ``data`` (the file's bytes, searched forward from the previous
    tensor's end, as protobuf writes them in order) is marked as mapped at that offset of the file itself and
    its ``raw_data`` dropped. Any match holds exactly the tensor's bytes, so its values are the tensor's.
    Returns how many were mapped."""
    pos, n = 0, 0
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL or not t.HasField("raw_data"):
            continue
        raw = t.raw_data
        if len(raw) < MAP_MIN_BYTES:
            continue
        at = _find(data, raw, pos)
        if at < 0:
            at = _find(data, raw, 0)
        if at < 0:
            continue
        pos = at + len(raw)
        t.ClearField("raw_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        loc = t.external_data.add()
        loc.key, loc.value = "location", escape_surrogates(path.name)  # a name that is not UTF-8: shown escaped
        mark_mapped(t, str(path), at, len(raw))
        array_of(t)  # mapped now, as the bytes parsed: a file replaced later does not change this model
        n += 1
    return n


def _extent_field(fields: dict[str, str], key: str, where: str) -> int | None:
    """External data ``offset`` / ``length`` as an int (None when absent). Raises ModelError naming the field
    when it is not an integer."""
    raw = fields.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ModelError(f"{where}: external data {key} {raw!r} is not an integer; re-save the model's external "
                         "data") from None


def check_opsets(model: onnx.ModelProto, where: str) -> None:
    """Refuse default-domain opsets outside MIN_OPSET..MAX_OPSET (raises ModelError)."""
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            if not MIN_OPSET <= imp.version <= MAX_OPSET:
                raise ModelError(f"'{where}' uses ONNX opset {imp.version}; supported opsets are "
                                 f"{MIN_OPSET}..{MAX_OPSET}; convert it with onnx.version_converter")


def _op_known(domain: str, op_type: str, version: int, local: set[tuple[str, str]]) -> bool:
    if (domain, op_type) in local:
        return True
    try:
        onnx.defs.get_schema(op_type, version, domain)
        return True
    except onnx.defs.SchemaError:
        return False


def check_known_ops(model: onnx.ModelProto, where: str) -> None:
    """Refuse nodes whose op has no schema in the imported opsets (raises ModelError)."""
    versions = {imp.domain or "": imp.version for imp in model.opset_import}
    local = {(f.domain, f.name) for f in model.functions}

    def visit(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            dom = node.domain or ""
            if dom == "ai.onnx":
                dom = ""
            ver = versions.get(dom, versions.get("ai.onnx", MAX_OPSET))
            if not _op_known(dom, node.op_type, ver, local):
                name = node.name or node.output[0] if node.output else node.op_type
                raise ModelError(f"node '{name}' in '{where}' uses op '{node.op_type}' "
                                 f"(domain '{dom or 'ai.onnx'}', opset {ver}) that no known schema defines; "
                                 "replace it with standard ONNX ops or register it as a model-local function")
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    visit(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for g in a.graphs:
                        visit(g)

    visit(model.graph)


#: metadata_props key of the loader's renames: JSON {name the loader gave a node: the name the file gives it ("" for
#: an unnamed node)} (:func:`normalise_node_names`).
NODE_NAMES_KEY = "npuscope.node_names"


def normalise_node_names(model: onnx.ModelProto) -> int:
    """Give every top-level node a unique, non-empty name; returns how many were renamed.

    Empty names become ``<OpType>_<index>``; a repeated name keeps it on its first node and gets ``__<n>``
    appended on the others. A name made here is never one the file gives another node (the smallest free
    ``__<n>`` is taken: a file with nodes ``dense``, ``dense__2``, ``dense`` gets ``dense__3``). What was renamed
    is recorded in the model's metadata (:data:`NODE_NAMES_KEY`, merged with an earlier call's, and the count in
    ``npuscope.renamed_nodes``), which :func:`twins_index` and :func:`loader_names` read.
    """
    taken = {n.name for n in model.graph.node if n.name}
    seen: set[str] = set()
    made: dict[str, str] = {}
    for i, node in enumerate(model.graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        name = base = node.name or f"{node.op_type}_{i}"
        k = 2
        while node.name == name or name in seen or name in taken:  # a repeat, or a made name already in use
            name = f"{base}__{k}"
            k += 1
        made[name] = node.name
        node.name = name
        seen.add(name)
    if made:
        props = {p.key: p.value for p in model.metadata_props}
        known = loader_names(model)
        known.update(made)
        props["npuscope.renamed_nodes"] = str(len(known))
        props[NODE_NAMES_KEY] = json.dumps(known, ensure_ascii=False, sort_keys=True)
        del model.metadata_props[:]
        onnx.helper.set_model_props(model, props)
    return len(made)


def loader_names(model: onnx.ModelProto) -> dict[str, str]:
    """{name :func:`normalise_node_names` gave a node: the name the model file gives it, "" for an unnamed
    node}; {} when it renamed none."""
    return {str(k): str(v) for k, v in metadata_json(model, NODE_NAMES_KEY).items()}


def renamed_twins(model: onnx.ModelProto, names, name: str) -> list[str]:
    """The names :func:`normalise_node_names` gave to later nodes that the model file also called ``name``
    (``name__2``, ``name__3``...), among ``names`` (the node names to search); [] when it renamed none."""
    return twins_index(model, names).get(name, [])


def twins_index(model: onnx.ModelProto, names) -> dict[str, list[str]]:
    """{file name: [the names :func:`normalise_node_names` gave to later nodes the file also called so]} over
    ``names`` (the node names to search), in one pass, from the recorded renames (:func:`loader_names`; a name
    the file itself gives, such as a real ``dense__2``, is never taken for a twin); {} when the loader renamed
    nothing."""
    made = loader_names(model) if has_renamed_nodes(model) else {}
    index: dict[str, list[str]] = {}
    for n in names:
        old = made.get(n)
        if old:
            index.setdefault(old, []).append(n)
    return index


def file_names_of(model: onnx.ModelProto) -> dict[str, str]:
    """{name the loader gave a node: the name the model file gives it} for every node :func:`normalise_node_names`
    renamed because the file repeats its name (``dense__9`` → ``dense``); {} when it renamed none."""
    index = twins_index(model, (n.name for n in model.graph.node))
    return {t: base for base, twins in index.items() for t in twins}


def unnamed_in_file(model: onnx.ModelProto, names) -> list[str]:
    """The names among ``names`` that :func:`normalise_node_names` gave to nodes the model file leaves unnamed
    (``MatMul_3``): npuscope knows them, a converter reading the file does not. [] when it renamed none."""
    made = loader_names(model) if has_renamed_nodes(model) else {}
    return [n for n in names if made.get(n) == ""]


def has_renamed_nodes(model: onnx.ModelProto) -> bool:
    """Whether :func:`normalise_node_names` renamed nodes of ``model`` (its ``npuscope.renamed_nodes`` metadata)."""
    return any(p.key == "npuscope.renamed_nodes" for p in model.metadata_props)


def _extent_problem(offset: int, length: int | None, need: int, fsize: int) -> str:
    """What is wrong with an external-data extent as declared (ONNX external data: ``offset`` and ``length``
    in bytes into the data file; a missing length means "to the end of the file"), or "" when it fits.
    ``need``: bytes the tensor's dims x element size take (0: unknown, for strings); ``fsize``: file bytes."""
    if offset < 0:
        return f"declares offset {offset}, which is negative"
    if offset > fsize:
        return f"declares offset {offset}, beyond the end of the data file ({fsize} bytes)"
    if length is None:
        if fsize - offset < need:
            return (f"declares offset {offset} and no length; the {fsize - offset} bytes from there to the end "
                    f"of the file ({fsize} bytes) are fewer than the {need} bytes the tensor needs")
        return ""
    if length < 0:
        return f"declares length {length}, which is negative"
    if offset + length > fsize:
        return (f"declares {length} bytes at offset {offset}, ending at byte {offset + length}, beyond the end of "
                f"the data file ({fsize} bytes)")
    if length < need:
        return f"declares length {length} bytes, fewer than the {need} bytes the tensor needs"
    if need and length > need:
        return f"declares length {length} bytes, more than the {need} bytes the tensor's dims need"
    return ""


#: Longest checker message kept in our one-line error (characters).
CHECKER_MESSAGE_MAX = 400


def unprovided_input(model: onnx.ModelProto):
    """(node, tensor name) of the first top-level node input that no node of the graph produces and that is no
    graph input or initializer, or None. Subgraphs may read outer names and are not looked into."""
    g = model.graph
    provided = {i.name for i in g.input} | {t.name for t in g.initializer} | \
        {s.values.name for s in g.sparse_initializer} | {o for n in g.node for o in n.output}
    for node in g.node:
        for name in node.input:
            if name and name not in provided:
                return node, name
    return None


def checker_message(exc: BaseException) -> str:
    """onnx.checker's message on one line: all its lines joined (the node's name and op type are often on the
    second and third line), whitespace collapsed, cut to :data:`CHECKER_MESSAGE_MAX` characters."""
    text = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
    return text if len(text) <= CHECKER_MESSAGE_MAX else text[:CHECKER_MESSAGE_MAX - 3] + "..."
