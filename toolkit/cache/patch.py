"""Recompile after a value edit by patching a cached compile instead of running every pass again.

A model that differs from a cached one only in attribute values or constant values (same family key,
toolkit.cache.keys.Manifest) is patchable when every difference is one of:

- the weights/bias of a Conv or ConvTranspose: a constant (initializer or ``Constant`` node) whose readers
  are all such nodes, which the compile left as they were (same tensor in the compiled graph, no BatchNorm
  folded into them);
- an attribute of such a node whose output shapes (ONNX shape inference, inputs typed as in the compiled
  graph) stay the same, and whose outputs no BatchNormalization reads.

Why this is exact: the passes before ``assign_precision`` read these nodes only through their op type, wiring
and shapes (constant folding folds a node only when all its inputs are constant; buffer fusion groups by op
type and wiring; graph-fusion rules never match Conv; BN folding is excluded), so the compiled graph of the
edited model is the cached one with the same values substituted. After an attribute edit the passes from
``place_ops`` on run again (toolkit.compiler.pipeline.recompile_precision). After a value-only edit the cached
plan stands as it is: of those passes only ``check_constants`` reads constant values, so only the edited
constants are checked again (toolkit.compiler.passes.check_constants.recheck). Anything else raises
NotPatchable and the model compiles in full.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import onnx
from onnx import numpy_helper

from toolkit.cache.compile_entry import result_from, value_digest
from toolkit.cache.keys import Manifest
from toolkit.compiler.passes import check_constants
from toolkit.compiler.pipeline import recompile_precision
from toolkit.ir.graph import node_reads
from toolkit.ir.weights import array_of

LOG = logging.getLogger("npuscope.cache")
PATCHABLE_OPS = frozenset({"Conv", "ConvTranspose"})


class NotPatchable(Exception):
    """Why a cached compile cannot be patched (one line)."""


@dataclass
class Patched:
    """result: the CompileResult; what: the edits (text); values: {constant: value digest} of the edited
    model; stale_nodes: nodes whose kernels must be rebuilt (edited nodes, readers of edited constants)."""

    result: object
    what: str
    values: dict
    stale_nodes: set


#: ops whose subgraph attributes can read outer-scope tensors (node_reads walks them; others read .input)
_SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def _readers(model: onnx.ModelProto, names: set[str]) -> dict[str, list[onnx.NodeProto]]:
    """{tensor in ``names``: nodes reading it} (subgraph reads included)."""
    out: dict[str, list] = {t: [] for t in names}
    for n in model.graph.node:
        full = n.op_type in _SUBGRAPH_OPS or n.domain not in ("", "ai.onnx")
        for t in (node_reads(n) if full else n.input):
            if t in out:
                out[t].append(n)
    return out


def _types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    g = model.graph
    types = {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}
    for t in g.initializer:
        types[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
    return types


def _changes(base: Manifest, new: Manifest, model: onnx.ModelProto):
    """({tensor: new array} of value edits, [node] of attribute edits) between two same-family manifests."""
    if base.rest != new.rest or [n[2] for n in base.nodes] != [n[2] for n in new.nodes] or \
            {k: v[1] for k, v in base.inits.items()} != {k: v[1] for k, v in new.inits.items()}:
        raise NotPatchable("the model's structure differs")
    values, attrs = {}, []
    for (name, full, _), (_, old, _), node in zip(new.nodes, base.nodes, model.graph.node):
        if full == old:
            continue
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        elif node.op_type in PATCHABLE_OPS and node.domain in ("", "ai.onnx"):
            attrs.append(node)
        else:
            raise NotPatchable(f"node '{name}' ({node.op_type}) changed; only Conv/ConvTranspose attributes "
                               "and constants are patched")
    inits = {t.name: t for t in model.graph.initializer}
    for name, (full, _) in new.inits.items():
        if base.inits[name][0] != full:
            values[name] = array_of(inits[name])
    return values, attrs


def _check_value(name, arr, compiled, c_cons, new_cons, old_values, rewritten) -> None:
    init = next((t for t in compiled.graph.initializer if t.name == name), None)
    old = array_of(init) if init is not None else None
    if old is None or value_digest(old) != old_values.get(name):
        raise NotPatchable(f"constant '{name}' was transformed by the compile")
    if (old.dtype, old.shape) != (arr.dtype, arr.shape):
        raise NotPatchable(f"constant '{name}' changes dtype or shape")
    readers = new_cons.get(name, [])
    if not readers or {n.name for n in readers} != {n.name for n in c_cons.get(name, [])}:
        raise NotPatchable(f"constant '{name}' has other readers after the compile")
    for n in readers:
        if n.op_type not in PATCHABLE_OPS or n.name in rewritten:
            raise NotPatchable(f"constant '{name}' is read by '{n.name}' ({n.op_type})")


def _check_attrs(node, by_name, new_cons, types, rewritten, opset: int) -> None:
    old = by_name.get(node.name)
    if old is None or node.name in rewritten or (old.op_type, old.domain, list(old.input), list(old.output)) != \
            (node.op_type, node.domain, list(node.input), list(node.output)):
        raise NotPatchable(f"node '{node.name}' was transformed by the compile")
    if any(c.op_type == "BatchNormalization" for o in node.output for c in new_cons.get(o, [])):
        raise NotPatchable(f"node '{node.name}' feeds a BatchNormalization")
    ins = [i for i in node.input if i]
    if any(i not in types for i in ins) or any(o and o not in types for o in node.output):
        raise NotPatchable(f"node '{node.name}' has untyped tensors")
    g = onnx.helper.make_graph([node], "probe", [onnx.helper.make_value_info(i, types[i]) for i in ins],
                               [onnx.helper.make_value_info(o, onnx.TypeProto()) for o in node.output if o])
    probe = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=True)
    except Exception as exc:  # noqa: BLE001 - an attribute set ONNX refuses: compile in full (and fail there)
        raise NotPatchable(f"node '{node.name}': shape inference fails ({type(exc).__name__})") from None
    got = {v.name: v.type for v in inferred.graph.output}
    if any(got.get(o) != types[o] for o in node.output if o):
        raise NotPatchable(f"node '{node.name}': output shapes change")


def patch(meta: dict, payload: bytes, base: Manifest, new: Manifest, model: onnx.ModelProto, config,
          model_path: str):
    """The :class:`Patched` compile of ``model`` from cached entry (meta, payload) of a same-family model.
    Raises NotPatchable (the reason) when the difference is not a value edit covered above."""
    if meta.get("stage") is None:
        raise NotPatchable("the cached compile kept no stage")
    values, attrs = _changes(base, new, model)
    compiled = onnx.ModelProto()
    compiled.ParseFromString(payload)
    rewritten = set(meta["stage"]["provenance"]) | set(meta["stage"]["absorbed"].values())
    watched = set(values) | {o for n in attrs for o in n.output if o}
    c_cons, new_cons = _readers(compiled, watched), _readers(model, watched)
    for name, arr in values.items():
        _check_value(name, arr, compiled, c_cons, new_cons, meta.get("values", {}), rewritten)
    by_name = {n.name: n for n in compiled.graph.node}
    opset = next((o.version for o in compiled.opset_import if o.domain in ("", "ai.onnx")), 0)
    types = _types(compiled) if attrs else {}
    for node in attrs:
        _check_attrs(node, by_name, new_cons, types, rewritten, opset)
    for node in attrs:
        del by_name[node.name].attribute[:]
        by_name[node.name].attribute.extend(node.attribute)
    for t in compiled.graph.initializer:
        if t.name in values:
            t.CopyFrom(numpy_helper.from_array(values[t.name], t.name))
    result = result_from(meta, compiled, config, model_path)
    if attrs:
        result = recompile_precision(result, config)
    else:  # values only: no pass but check_constants reads a value, and the plan stays as it is
        check_constants.recheck(result, set(values))
    what = [f"constant {n}" for n in sorted(values)] + [f"attributes of {n.name}" for n in attrs]
    digests = dict(meta.get("values", {}))
    digests.update({n: value_digest(a) for n, a in values.items()})
    stale = {n.name for n in attrs} | {r.name for name in values for r in new_cons.get(name, [])}
    return Patched(result, ", ".join(what), digests, stale)
