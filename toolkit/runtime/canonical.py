"""Kernel models with positional names, so that identical layers share one onnxruntime session.

A transformer's layers compile to kernels that differ only in names (``/layers.3/mlp/MatMul`` reading
``/layers.3/.../Add_output_0``) and in the weights they read. Weights left on disk are kernel inputs
(toolkit.runtime.kernels: ``<name>__w``), not initializers, so once every name is replaced by its position (graph
inputs ``i0, i1, ...``, outputs ``o0, ...``, other values ``v0, ...``, initializers ``c0, ...``, nodes ``n0, ...``)
the serialised kernel models of two such layers are the same bytes, and the session cache (keyed by their
sha256) builds one session per distinct kernel structure and shape instead of one per layer. The caller's feeds
and fetches are renamed with the same map, so the runtime binds each layer's own tensors and weights.

Names inside a subgraph body (If/Loop/Scan) may refer to the outer graph, so kernels holding a subgraph are left
as they are; so are names a model-local function could see (none: a function only sees its parameters).
"""

from __future__ import annotations

import re

import onnx


def _has_subgraph(model: onnx.ModelProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for n in model.graph.node for a in n.attribute)


def canonical_kernel(model: onnx.ModelProto, feeds: list[tuple[str, str]], fetches: list[tuple[str, str]]):
    """(model, feeds, fetches) with every value and node of ``model``'s graph renamed by position (module
    docstring); ``feeds`` / ``fetches``: [(kernel input or output name, plan tensor)] renamed alike. ``model`` is
    changed in place. A model holding a subgraph is returned unchanged. The graph's own name is cleared (it names
    the kernel), and so is every ``doc_string``."""
    if _has_subgraph(model):
        return model, feeds, fetches
    g = model.graph
    names: dict[str, str] = {"": ""}
    for i, vi in enumerate(g.input):
        names[vi.name] = f"i{i}"
    for i, vi in enumerate(g.output):
        names.setdefault(vi.name, f"o{i}")
    for i, t in enumerate(g.initializer):
        names.setdefault(t.name, f"c{i}")
    count = 0
    for n in g.node:
        for o in n.output:
            if o not in names:
                names[o] = f"v{count}"
                count += 1
    for n in g.node:  # a name read but never defined (cannot happen in a checked kernel): kept distinct
        for x in n.input:
            names.setdefault(x, x)
    for i, n in enumerate(g.node):
        n.name = f"n{i}"
        n.doc_string = ""
        n.input[:] = [names[x] for x in n.input]
        n.output[:] = [names[x] for x in n.output]
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = names.get(vi.name, vi.name)
        vi.doc_string = ""
    for t in g.initializer:
        t.name = names[t.name]
        t.doc_string = ""
    g.name = "kernel"
    g.doc_string = ""
    return model, [(names[a], b) for a, b in feeds], [(names[a], b) for a, b in fetches]


def named_back(message: str, node_names: dict) -> str:
    """``message`` (an onnxruntime error) with each positional node name it quotes (``'n3'``) replaced by the
    kernel model's own name (``node_names``: {positional: original}, as ExecKernel.node_names holds them)."""
    if not node_names:
        return message
    return re.sub(r"'(n\d+)'", lambda m: f"'{node_names.get(m.group(1), m.group(1))}'", message)
