"""A compile entry: a CompileResult as JSON (plan, pass logs, findings, fusion counts, the post-partition
stage) plus the compiled ONNX graph as the payload. No pickling: every field is plain data.

meta format (version 1)::

    {"format": 1, "plan": plan.json dict, "passes": [PassLog fields], "findings": [Finding fields],
     "fusion_stats": {...}, "compile_ms": float, "stage": {groups, node_group, kernels, folded, folded_nodes, findings,
     fusion_stats, provided, provenance, absorbed} or null, "manifest": toolkit.cache.keys.Manifest dict,
     "values": {constant tensor name: array digest}}
"""

from __future__ import annotations

import dataclasses

import onnx

from toolkit.compiler.context import CompileContext, CompileResult, Group
from toolkit.compiler.plan import KernelSpec, Plan
from toolkit.core.records import Finding, PassLog
from toolkit.ir.graph import Graph
from toolkit.ir.weights import array_of, release_pages

FORMAT = 1


def json_safe(obj):
    """``obj`` with JSON types only (numpy scalars → Python, tuples/sets → lists, NaN/inf → None). Kept here
    rather than toolkit.core.csvjson's, whose pandas import would cost a cache hit ~200 ms."""
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:  # numpy scalar
        return json_safe(obj.item())
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist())
    return str(obj)


def _fields(obj) -> dict:
    """A flat dataclass' fields (str, numbers, None, lists of str/int): dataclasses.asdict without its deep
    copy, which costs ~40 ms per PP-OCRv4 det compile."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _stage_dict(stage) -> dict | None:
    if stage is None:
        return None
    return {"groups": [_fields(g) for g in stage.groups.values()], "node_group": stage.node_group,
            "kernels": [_fields(k) for k in stage.kernels], "folded": stage.folded, "folded_nodes": stage.folded_nodes,
            "findings": json_safe([f.to_dict() for f in stage.findings]),
            "fusion_stats": json_safe(stage.fusion_stats), "provided": sorted(stage.provided),
            "provenance": {k: [r, list(n)] for k, (r, n) in stage.provenance.items()}, "absorbed": stage.absorbed}


def _plan_dict(plan: Plan) -> dict:
    d = _fields(plan)
    d["kernels"] = [_fields(k) for k in plan.kernels]
    d["tensors"] = [_fields(t) for t in plan.tensors.values()]
    d["config"] = json_safe(plan.config)
    return d


def to_meta(result: CompileResult, manifest: dict, values: dict) -> dict:
    """The entry meta of ``result`` (see module docstring)."""
    return {"format": FORMAT, "plan": _plan_dict(result.plan), "passes": [_fields(p) for p in result.passes],
            "findings": json_safe([f.to_dict() for f in result.findings]),
            "fusion_stats": json_safe(result.fusion_stats), "compile_ms": result.compile_ms,
            "stage": _stage_dict(result.stage), "manifest": manifest, "values": values}


class LazyGraph(Graph):
    """A :class:`toolkit.ir.graph.Graph` whose tables are built on first use: a cache hit rarely needs the
    stage (only toolkit.compiler.pipeline.recompile_precision reads it), and building the tables costs
    ~3.5 ms on PP-OCRv4 det."""

    def __init__(self, model: onnx.ModelProto):  # noqa: D107 - deliberately does not build the tables
        self.__dict__["model"] = model

    def __getattr__(self, name: str):
        if name.startswith("__") or "nodes" in self.__dict__:
            raise AttributeError(name)
        Graph.__init__(self, self.__dict__["model"])
        return getattr(self, name)


def stage_from(d: dict | None, graph: Graph | None, config, model_path: str):
    """The CompileContext snapshot taken after partition, rebuilt over ``graph``."""
    if d is None or graph is None:
        return None
    ctx = CompileContext(graph, config, model_path)
    for g in d["groups"]:
        ctx.groups[g["name"]] = Group(**g)
    ctx.node_group = dict(d["node_group"])
    ctx.kernels = [KernelSpec(**k) for k in d["kernels"]]
    ctx.folded = list(d["folded"])
    ctx.folded_nodes = list(d.get("folded_nodes", []))
    ctx.findings = [Finding(**f) for f in d["findings"]]
    ctx.fusion_stats = d["fusion_stats"]
    ctx.provided = set(d["provided"])
    ctx.provenance = {k: (r, list(n)) for k, (r, n) in d["provenance"].items()}
    ctx.absorbed = dict(d["absorbed"])
    return ctx


def from_entry(meta: dict, payload: bytes, config, model_path: str) -> CompileResult:
    """The CompileResult stored in an entry. Raises KeyError/TypeError/ValueError on an unknown format."""
    model = onnx.ModelProto()
    model.ParseFromString(payload)
    return result_from(meta, model, config, model_path)


def result_from(meta: dict, model: onnx.ModelProto, config, model_path: str) -> CompileResult:
    """The CompileResult of an entry's meta over compiled graph ``model`` (see :func:`from_entry`)."""
    if meta.get("format") != FORMAT:
        raise ValueError(f"compile entry format {meta.get('format')!r}, expected {FORMAT}")
    plan = Plan.from_dict(meta["plan"])
    plan.model = model_path
    passes = [PassLog(**p) for p in meta["passes"]]
    findings = [Finding(**f) for f in meta["findings"]]
    stage = stage_from(meta["stage"], LazyGraph(model) if meta["stage"] is not None else None, config, model_path)
    return CompileResult(plan, model, passes, findings, meta["fusion_stats"], meta["compile_ms"], stage=stage)


def value_digest(arr) -> str:
    """sha256 over a constant's dtype, shape and bytes (independent of how the TensorProto stores them)."""
    import hashlib

    import numpy as np

    arr = np.ascontiguousarray(arr)
    h = hashlib.sha256(f"{arr.dtype.str}{arr.shape}".encode())
    if arr.dtype != object:
        h.update(arr.reshape(-1).view(np.uint8) if arr.size and arr.dtype.kind in "biufc" else arr.tobytes())  # no copy
    else:
        h.update(repr(arr.tolist()).encode())
    return h.hexdigest()


def constant_values(model: onnx.ModelProto) -> dict[str, str]:
    """{tensor name: value_digest} of the initializers and ``Constant`` (``value``) node outputs of ``model``.
    Weights left on disk are hashed through their maps, whose pages are then released (toolkit.ir.weights.
    release_pages: a run may read few of them)."""
    from onnx import numpy_helper

    out = {}
    for t in model.graph.initializer:
        arr = array_of(t)
        out[t.name] = value_digest(arr)
        release_pages(arr)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.attribute) == 1 \
                and n.attribute[0].name == "value" and n.output:
            out[n.output[0]] = value_digest(numpy_helper.to_array(n.attribute[0].t))
    return out
