"""Pair golden and target dumps and put the pairs in execution order.

Identity: a node-keyed dump (ONNX golden, device) is (node or op name, output index); a tensor-keyed dump
(npuscope, Polygraphy) is a tensor name. Node names are compared after :func:`norm` (every character outside
``A-Za-z0-9_-`` becomes ``_``, as the dump tools write names into file names), so ``backbone/conv1`` in a
model matches ``backbone_conv1`` in a file name. Target op names found in the mapping
(:mod:`toolkit.dumps.mapping`) stand for their LAST original node; the other originals get "fused into <op>".
A raw device dump output that records its original op (:mod:`toolkit.dumps.raw_entries`: ``DumpEntry.kernel``
is the device op, ``name`` / ``index`` the original op and output) stands for that op's output whatever the
mapping says; the mapping still names the op's other originals ("fused into <op>") and its FusedNodes.

An ``npuscope run --dump`` folder records the kernel that wrote each tensor (its index.json): the undumped
tensors inside that kernel read "fused into <kernel>" when the folder is the target, and "fused into <kernel> in
the golden run" when it is the golden (a force_fp32 run) and only the target dumped them.

Order:
- with a model (:func:`pair_with_model`): the graph's node order (topological, as ONNX requires), each node's
  outputs in output order, graph inputs first; every dump is resolved to a tensor name through the model,
  so node-keyed and tensor-keyed sides can be mixed. Rows exist for tensors that have a dump on either side
  or are fused; dumps whose node or tensor is not in the model come last ("not in the model").
- without (:func:`pair_without_model`): the golden side's timestamps (ties: node name, then output index);
  tensor-keyed goldens keep their file / JSON order; target dumps without a golden come last. Both sides
  must be keyed the same way (else :class:`toolkit.core.errors.UsageError`: give --model).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import onnx

from toolkit.core.errors import UsageError

from .entry import NODE, TENSOR, DumpEntry, DumpSet

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def norm(name: str) -> str:
    """``name`` with every character outside ``A-Za-z0-9_-`` replaced by ``_`` (the dump tools' file-name rule)."""
    return _UNSAFE.sub("_", name)


@dataclass
class Pair:
    """One row to compare (``reason`` preset for rows that are not compared: fused, not in the model).

    ``inputs`` lists the row keys (tensor names) the producing node or fused group reads, for the
    origin/propagated roles; empty without a model.
    """

    op_type: str
    node: str
    tensor: str
    index: int
    golden: DumpEntry | None
    target: DumpEntry | None
    kernel: str = ""
    kernel_op_type: str = ""
    fused: list[str] = field(default_factory=list)
    reason: str = ""
    inputs: tuple[str, ...] = ()


@dataclass
class Pairing:
    """Pairs in order, how the order was decided, and notes for the summary (unused mapping entries...)."""

    pairs: list[Pair]
    order: str
    notes: list[str] = field(default_factory=list)


@dataclass
class _Mapped:
    op: str
    originals: list[str]


def _mapping_index(mapping: dict[str, list[str]] | None) -> tuple[dict[str, _Mapped], dict[str, str]]:
    """({norm(device op): _Mapped}, {norm(non-last original): device op})."""
    ops, fused_into = {}, {}
    for op, originals in (mapping or {}).items():
        ops[norm(op)] = _Mapped(op, list(originals))
        for n in originals[:-1]:
            fused_into[norm(n)] = op
    return ops, fused_into


def _target_info(entry: DumpEntry, ops: dict[str, _Mapped]) -> tuple[str, _Mapped | None]:
    """(node name the target dump stands for, its mapping or None)."""
    if entry.keyed_by != NODE:
        return entry.name, None
    if entry.kernel:  # a raw dump output that records its original op: that op's name is the identity
        return entry.name, ops.get(norm(entry.kernel))
    mapped = ops.get(norm(entry.name))
    return (mapped.originals[-1] if mapped else entry.name), mapped


def _kernel_of(entry: DumpEntry | None) -> tuple[str, str]:
    if entry is None:
        return "", ""
    if entry.keyed_by == NODE:
        return entry.kernel or entry.name, entry.op_type
    return entry.kernel, ""


def _unused_mapping(ops: dict[str, _Mapped], target: DumpSet) -> list[str]:
    seen = {norm(e.kernel or e.name) for e in target.entries if e.keyed_by == NODE}
    unused = [m.op for k, m in ops.items() if k not in seen]
    if not unused:
        return []
    return [f"mapping: {len(unused)} of {len(ops)} device op(s) have no target dump (e.g. '{unused[0]}')"]


# ------------------------------------------------------------------------------------------------ no model
def pair_without_model(golden: DumpSet, target: DumpSet, mapping: dict[str, list[str]] | None = None) -> Pairing:
    """Pairs in golden order (see module docstring). Raises UsageError when the sides are keyed differently."""
    if golden.keyed_by != target.keyed_by:
        raise UsageError(f"GOLDEN ({golden.format}) is keyed by {golden.keyed_by} names and TARGET ({target.format}) "
                         f"by {target.keyed_by} names; pass --model MODEL so op outputs can be matched to tensors")
    ops, fused_into = _mapping_index(mapping)
    by_key: dict[tuple[str, int], tuple[DumpEntry, _Mapped | None]] = {}
    for e in sorted(target.entries, key=_order_key):
        name, mapped = _target_info(e, ops)
        key = _key(name, e)
        if key not in by_key or (by_key[key][1] is not None and mapped is None):  # a direct dump wins
            by_key[key] = (e, mapped)
    pairs = []
    for g in sorted(golden.entries, key=_order_key):
        hit = by_key.pop(_key(g.name, g), None)
        t, mapped = hit if hit else (None, None)
        reason = ""
        if t is None and g.keyed_by == NODE and norm(g.name) in fused_into:
            reason = f"fused into {fused_into[norm(g.name)]}"
        pairs.append(_loose_pair(g, t, mapped, reason))
    for t, mapped in by_key.values():
        pairs.append(_loose_pair(None, t, mapped, ""))
    order = ("golden timestamps (ties: node name, output index)" if golden.keyed_by == NODE
             else f"golden {'JSON' if golden.format == 'polygraphy' else 'file'} order")
    notes = _unused_mapping(ops, target) if target.keyed_by == NODE else (
        ["mapping ignored: the target is keyed by tensor names"] if mapping else [])
    return Pairing(pairs, order, notes)


def _order_key(e: DumpEntry):
    return (e.timestamp if e.timestamp is not None else 0, e.order if e.keyed_by == TENSOR else 0, e.name, e.index)


def _key(name: str, e: DumpEntry) -> tuple[str, int]:
    return (norm(name), e.index) if e.keyed_by == NODE else (name, 0)


def _loose_pair(g: DumpEntry | None, t: DumpEntry | None, mapped: _Mapped | None, reason: str) -> Pair:
    """A row without a model: node-keyed rows name their tensor '<node>:<output index>'; tensor-keyed rows use
    the tensor name as NodeName too (no node is known)."""
    ref = g if g is not None else t
    if ref.keyed_by == NODE:
        node = ref.name if g is not None or ref.kernel else (mapped.originals[-1] if mapped else ref.name)
        tensor = f"{node}:{ref.index}"
    else:
        node = tensor = ref.name
    kernel, kernel_type = _kernel_of(t)
    op_type = (g.op_type if g is not None else "") or (kernel_type if mapped is None else "")
    return Pair(op_type, node, tensor, ref.index, g, t, kernel, kernel_type,
                list(mapped.originals) if mapped else [], reason)


# ---------------------------------------------------------------------------------------------- with model
class _ModelIndex:
    """Name lookups over a model's top-level graph."""

    def __init__(self, model: onnx.ModelProto):
        self.nodes = list(model.graph.node)
        self.by_norm: dict[str, onnx.NodeProto] = {}
        clash: dict[str, list[str]] = {}
        for n in self.nodes:
            self.by_norm.setdefault(norm(n.name), n)
            clash.setdefault(norm(n.name), []).append(n.name)
        #: file-name forms shared by several nodes ('a/b' and 'a.b' both dump as 'a_b'): {form: node names}
        self.ambiguous = {k: v for k, v in clash.items() if len(v) > 1}
        self.by_name = {n.name: n for n in self.nodes}
        self.producer = {t: n for n in self.nodes for t in n.output if t}
        inits = {i.name for i in model.graph.initializer}
        self.inputs = [i.name for i in model.graph.input if i.name not in inits]

    def node(self, name: str) -> onnx.NodeProto | None:
        """The node called ``name``, else the one whose file-name form (:func:`norm`) it is; None when no node,
        or several, have that form (their dumps cannot be told apart by name)."""
        if name in self.by_name:
            return self.by_name[name]
        return None if norm(name) in self.ambiguous else self.by_norm.get(norm(name))

    def tensor_of(self, name: str, index: int, keyed_by: str) -> str | None:
        if keyed_by == TENSOR:
            return name if (name in self.producer or name in self.inputs) else None
        n = self.node(name)
        return n.output[index] if n is not None and index < len(n.output) and n.output[index] else None


def pair_with_model(model: onnx.ModelProto, golden: DumpSet, target: DumpSet,
                    mapping: dict[str, list[str]] | None = None) -> Pairing:
    """Pairs in the model's topological order (see module docstring)."""
    idx = _ModelIndex(model)
    ops, _ = _mapping_index(mapping)
    g_by, g_extra = _resolve_golden(idx, golden)
    t_by, t_extra = _resolve_target(idx, target, ops)
    fused, group_of, notes = _fused_tensors(idx, ops)
    kept, kernel_groups = _kernel_fused_tensors(idx, t_by)
    fused = {**kept, **fused}  # a mapping's word wins over what a kernel name implies
    # a golden that is an npuscope dump folder (a force_fp32 run) kept its kernels' inner tensors on chip too
    golden_fused, _ = _kernel_fused_tensors(idx, {t: (e, None) for t, e in g_by.items()})
    pairs = [_model_pair("Input", name, name, 0, g_by.get(name), t_by.get(name), "", ())
             for name in idx.inputs if name in g_by or name in t_by]
    clashed = {n: names for names in idx.ambiguous.values() for n in names} if target.keyed_by == NODE \
        else {}
    for n in idx.nodes:
        for i, t in enumerate(n.output):
            if not t or not (t in g_by or t in t_by or t in fused or n.name in clashed):
                continue
            hit = t_by.get(t)
            mapped = hit[1] if hit else None
            kernel_group = kernel_groups.get(hit[0].kernel, []) if hit and mapped is None else []
            group = group_of.get(mapped.op, [n]) if mapped else (kernel_group or [n])
            inputs = _group_inputs(idx, group)
            reason = fused.get(t, "") if not hit else \
                (f"{golden_fused[t]} in the golden run" if t not in g_by and t in golden_fused else "")
            if not hit and not reason and n.name in clashed:
                reason = (f"target dump ambiguous: nodes {', '.join(repr(x) for x in clashed[n.name])} all dump as "
                          f"'{norm(n.name)}' (the dump tools' file-name rule); rename them or give --mapping")
            pairs.append(_model_pair(n.op_type, n.name, t, i, g_by.get(t), hit, reason, inputs,
                                     [k.name for k in kernel_group] if len(kernel_group) > 1 else []))
    if clashed:
        notes.append("nodes whose dump file names coincide were not paired by name: "
                     + "; ".join(" / ".join(repr(x) for x in names) + f" -> '{form}'"
                                 for form, names in list(idx.ambiguous.items())[:5]))
    pairs += [_extra_pair(e, None, "golden") for e in g_extra]
    pairs += [_extra_pair(None, e, "target") for e in t_extra]
    if target.keyed_by == NODE:
        notes += _unused_mapping(ops, target)
    elif mapping:
        notes.append("mapping ignored: the target is keyed by tensor names")
    return Pairing(pairs, "model topological order (each node's outputs in output order)", notes)


def target_tensors(model: onnx.ModelProto, target: DumpSet,
                   mapping: dict[str, list[str]] | None = None) -> tuple[dict[str, DumpEntry], list[DumpEntry]]:
    """({ONNX tensor name: the target entry standing for it}, entries that name nothing of ``model``): the target
    side resolved through the model as :func:`pair_with_model` resolves it (recorded original_op first, then
    the mapping's last original, then the op name itself)."""
    by, extra = _resolve_target(_ModelIndex(model), target, _mapping_index(mapping)[0])
    return {t: e for t, (e, _) in by.items()}, extra


def _resolve_golden(idx: _ModelIndex, golden: DumpSet):
    by, extra = {}, []
    for e in sorted(golden.entries, key=_order_key):
        t = idx.tensor_of(e.name, e.index, e.keyed_by)
        if t is None:
            extra.append(e)
        else:
            by.setdefault(t, e)
    return by, extra


def _resolve_target(idx: _ModelIndex, target: DumpSet, ops: dict[str, _Mapped]):
    """{tensor: (entry, mapping or None)}; a direct dump of a tensor wins over a fused op standing for it."""
    by, extra = {}, []
    for e in sorted(target.entries, key=_order_key):
        name, mapped = _target_info(e, ops)
        t = idx.tensor_of(name, e.index, e.keyed_by)
        if t is None:
            extra.append(e)
        elif t not in by or (by[t][1] is not None and mapped is None):
            by[t] = (e, mapped)
    return by, extra


def _fused_tensors(idx: _ModelIndex, ops: dict[str, _Mapped]):
    """({tensor: "fused into <op>"} for non-last originals, {op: [NodeProto of its originals]}, notes)."""
    fused, groups, missing = {}, {}, []
    for m in ops.values():
        nodes = [idx.node(n) for n in m.originals]
        missing += [n for n, node in zip(m.originals, nodes) if node is None]
        groups[m.op] = [node for node in nodes if node is not None]
        for node in nodes[:-1]:
            for t in (node.output if node is not None else []):
                if t:
                    fused[t] = f"fused into {m.op}"
    notes = [f"mapping: {len(missing)} original node(s) not in the model (e.g. '{missing[0]}')"] if missing else []
    return fused, groups, notes


def _group_inputs(idx: _ModelIndex, nodes: list[onnx.NodeProto]) -> tuple[str, ...]:
    produced = {t for n in nodes for t in n.output}
    return tuple(dict.fromkeys(i for n in nodes for i in n.input if i and i not in produced))


def _model_pair(op_type, node, tensor, index, g, hit, reason, inputs, group=()) -> Pair:
    t, mapped = hit if hit else (None, None)
    kernel, kernel_type = _kernel_of(t)
    return Pair(op_type, node, tensor, index, g, t, kernel, kernel_type,
                list(mapped.originals) if mapped else list(group), reason, inputs)


def _kernel_fused_tensors(idx: _ModelIndex, t_by: dict) -> tuple[dict[str, str], dict[str, list]]:
    """({tensor: "fused into <kernel>"}, {kernel: [NodeProto of its group, in graph order]}) from the kernel
    each tensor-keyed target dump records (``npuscope run --dump``'s index.json: ``kernel`` = the fused
    kernel's anchor node). A kernel's group is every node on a path from its anchor node to the producer of a
    tensor it wrote (anchor and producers included); outputs of the group's nodes that the target did not dump
    were kept on chip by that kernel. A kernel that names no node of the model implies nothing."""
    wrote: dict[str, set[str]] = {}
    for tensor, (e, mapped) in t_by.items():
        if e.keyed_by == TENSOR and e.kernel and mapped is None and tensor in idx.producer:
            wrote.setdefault(e.kernel, set()).add(idx.producer[tensor].name)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in idx.nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    fused, groups = {}, {}
    for kernel, producers in wrote.items():
        anchor = idx.node(kernel)
        if anchor is None:
            continue
        below = _reachable([anchor], lambda n: [c for t in n.output for c in consumers.get(t, [])])
        above = _reachable([idx.by_name[p] for p in producers],
                           lambda n: [idx.producer[t] for t in n.input if t in idx.producer])
        groups[kernel] = [n for n in idx.nodes if n.name in below and n.name in above]
        for n in groups[kernel]:
            for t in n.output:
                if t and t not in t_by:
                    fused.setdefault(t, f"fused into {kernel}")
    return fused, groups


def _reachable(start: list, step) -> set[str]:
    """Names of the nodes reachable from ``start`` (included) by ``step(node) -> [nodes]``."""
    seen, todo = set(), list(start)
    while todo:
        n = todo.pop()
        if n.name not in seen:
            seen.add(n.name)
            todo += step(n)
    return seen


def _extra_pair(g: DumpEntry | None, t: DumpEntry | None, side: str) -> Pair:
    e = g if g is not None else t
    node = e.name if e.keyed_by == NODE else ""
    tensor = f"{e.name}:{e.index}" if e.keyed_by == NODE else e.name
    kernel, kernel_type = _kernel_of(t)
    return Pair(e.op_type, node or tensor, tensor, e.index, g, t, kernel, kernel_type,
                reason=f"{side} dump not in the model")
