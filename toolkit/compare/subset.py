"""Which tensors a diagnosis compares and keeps: ``--nodes`` / ``--layers`` / ``--until`` / ``--outputs-only``.

- ``nodes``: comma-separated items, each a node name, a glob pattern (``fnmatch``: ``*/self_attn/*``) or a range
  of node indices in graph order (``10-20``, inclusive; a single ``7``); a name found only inside an If/Loop/Scan
  body selects the top-level control-flow node that holds it (its tensors are compared at that node's outputs);
- ``layers``: comma-separated transformer layer indices or inclusive ranges (``0-1,5``); a node belongs to layer
  N when its name has a path component ``layers.N`` / ``layer.N`` / ``h.N`` / ``blocks.N`` (``.`` or ``_``:
  the names torch's exporter and Hugging Face models give, e.g. ``/model/layers.3/self_attn/MatMul``);
- ``until``: a node name (or the name of a tensor a node produces): that node and every node before it in
  graph order;
- ``outputs_only``: only the graph outputs.

The options narrow together (intersection). Graph inputs and graph outputs are always kept: the verdict rests on
the outputs. :func:`select` returns what is kept and what was left out, for the report.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from dataclasses import dataclass

import onnx

from toolkit.core.errors import ConfigError
from toolkit.ir.graph import enclosing_nodes
from toolkit.ir.load import renamed_twins

#: A layer index in a node name: ``layers.3``, ``layer_3``, ``h.3``, ``blocks.3`` as a path component.
LAYER_RE = re.compile(r"(?:^|[/.])(?:layers?|h|blocks?)[._](\d+)(?=[/._]|$)")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class Subset:
    """The options as given (None / False: not narrowed)."""

    nodes: str | None = None
    layers: str | None = None
    until: str | None = None
    outputs_only: bool = False

    @property
    def active(self) -> bool:
        return bool(self.nodes or self.layers or self.until or self.outputs_only)

    def describe(self) -> str:
        """The options in CLI form, e.g. ``--layers 0-1 --until /layers.1/Add``."""
        parts = [f"--{k.replace('_', '-')} {v}" for k, v in (("nodes", self.nodes), ("layers", self.layers),
                                                             ("until", self.until)) if v]
        return " ".join(parts + (["--outputs-only"] if self.outputs_only else []))


def _ranges(text: str, option: str) -> list[tuple[int, int]]:
    out = []
    for item in (s.strip() for s in text.split(",")):
        m = _RANGE.match(item)
        if not m:
            raise ConfigError(f"{option} '{text}': '{item}' is not an index or an inclusive range like 0-3; "
                              "give e.g. 0-1,5")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ConfigError(f"{option} '{text}': range '{item}' ends before it starts; write it low-high")
        out.append((lo, hi))
    return out


def layer_of(name: str) -> int | None:
    """The transformer layer index in node name ``name`` (the last one, for nested blocks), or None."""
    found = LAYER_RE.findall(name)
    return int(found[-1]) if found else None


def _by_nodes(names: list[str], spec: str, inner: dict[str, str] | None = None) -> set[str]:
    """Top-level node names ``spec`` selects; an item that names (or matches) only nodes inside If/Loop/Scan
    bodies (``inner``: toolkit.ir.graph.enclosing_nodes) selects the top-level nodes that hold them, whose
    outputs are what the two runs both have."""
    keep: set[str] = set()
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        if _RANGE.match(item):
            for lo, hi in _ranges(item, "--nodes"):
                keep.update(names[lo:hi + 1])
            continue
        hit = fnmatch.filter(names, item)
        if not hit and inner:
            hit = sorted({inner[n] for n in fnmatch.filter(list(inner), item)})
        if not hit:
            near = difflib.get_close_matches(item, names, n=1)
            raise ConfigError(f"--nodes: '{item}' matches no node of the model"
                              + (f" (did you mean '{near[0]}'?)" if near else "")
                              + "; give node names, glob patterns (e.g. '*/self_attn/*') or index ranges (10-20)")
        keep.update(hit)
    return keep


def _by_layers(names: list[str], spec: str) -> set[str]:
    ranges = _ranges(spec, "--layers")
    layers = {n: layer_of(n) for n in names}
    if not any(v is not None for v in layers.values()):
        raise ConfigError(f"--layers {spec}: no node name of the model carries a layer index (layers.N, layer.N, "
                          "h.N, blocks.N); select nodes with --nodes instead")
    return {n for n, v in layers.items() if v is not None and any(lo <= v <= hi for lo, hi in ranges)}


def _by_until(model: onnx.ModelProto, names: list[str], until: str) -> set[str]:
    produced = {o: n.name for n in model.graph.node for o in n.output if o}
    target = until if until in names else produced.get(until)
    if target is None and until in {i.name for i in model.graph.input}:
        raise ConfigError(f"--until '{until}' is a graph input, which no node produces: nothing comes before it; "
                          "give a node name or a tensor a node produces")
    if target is None:
        near = difflib.get_close_matches(until, names + list(produced), n=1)
        raise ConfigError(f"--until '{until}' names no node or tensor of the model"
                          + (f" (did you mean '{near[0]}'?)" if near else "") + "; give a node name")
    twins = renamed_twins(model, names, target) if until == target else []  # a tensor names one node
    if twins:
        raise ConfigError(f"--until '{until}' is ambiguous: the model file names {len(twins) + 1} nodes '{target}', "
                          f"loaded as {', '.join(repr(t) for t in [target, *twins])}; give one of those names, or "
                          "the tensor the node produces")
    return set(names[:names.index(target) + 1])


def check_options(subset: Subset) -> None:
    """Raise ConfigError for options that select nothing as given: an empty ``--nodes`` / ``--layers`` /
    ``--until`` (an empty string would otherwise mean "not narrowed", i.e. everything), or ``--outputs-only``
    with any of them (it keeps only the graph outputs, so the others would be ignored)."""
    for option, value in (("--nodes", subset.nodes), ("--layers", subset.layers), ("--until", subset.until)):
        if value is not None and not value.replace(",", " ").strip():
            raise ConfigError(f"{option} {value!r} names nothing; give what to keep (see --help) or leave "
                              f"{option} out to compare every tensor")
    given = [o for o, v in (("--nodes", subset.nodes), ("--layers", subset.layers), ("--until", subset.until)) if v]
    if subset.outputs_only and given:
        raise ConfigError(f"--outputs-only compares the graph outputs only, so {' and '.join(given)} would be "
                          f"ignored; use one or the other")


def select(model: onnx.ModelProto, subset: Subset) -> dict:
    """What ``subset`` keeps of ``model`` (its top-level nodes, graph order):

    Returns:
        {"nodes": set of node names kept, "tensors": set of tensor names kept (the kept nodes' outputs, graph
        inputs and outputs), "left_out_nodes": nodes none of whose outputs is compared, "left_out_tensors": int,
        "options": str}.

    Raises:
        ConfigError: a pattern or name that matches nothing, a malformed range, ``--layers`` on a model
            without layer indices in its node names, a subset that keeps no node (besides outputs-only), an
            empty option or ``--outputs-only`` with another (:func:`check_options`), ``--until`` a graph
            input.
    """
    check_options(subset)
    names = [n.name for n in model.graph.node]
    keep = set(names)
    if subset.nodes:
        keep &= _by_nodes(names, subset.nodes, enclosing_nodes(model.graph))
    if subset.layers:
        keep &= _by_layers(names, subset.layers)
    if subset.until:
        keep &= _by_until(model, names, subset.until)
    outputs = {o.name for o in model.graph.output}
    if subset.outputs_only:
        keep = {n.name for n in model.graph.node if outputs & set(n.output)}
    elif subset.active and not keep:
        raise ConfigError(f"{subset.describe()} keeps no node of the model together; widen the selection")
    all_tensors = {o for n in model.graph.node for o in n.output if o}
    tensors = {o for n in model.graph.node if n.name in keep for o in n.output if o}
    if subset.outputs_only:
        tensors &= outputs
    tensors |= outputs | {i.name for i in model.graph.input}
    # a node counts as left out when none of its outputs is compared (a graph output's node is always compared)
    left_out = sum(1 for n in model.graph.node if not any(o in tensors for o in n.output if o))
    return {"nodes": keep, "tensors": tensors, "left_out_nodes": left_out,
            "left_out_tensors": len(all_tensors - tensors), "options": subset.describe()}
