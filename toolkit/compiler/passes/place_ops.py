"""Pass ``place_ops``: decide for every kernel whether it runs on the NPU or on the host CPU (AI_CPU).

Runs right after ``partition`` (and is the first pass :func:`toolkit.compiler.pipeline.recompile_precision`
re-runs, so changing ``Config.op_placement`` needs no full compile). Per node, in this order:

1. the simulated NPU does not support it (toolkit.precision.support: control flow, sequences, data-dependent
   output shapes, strings, random ops; or it touches a non-tensor / string value) → CPU, reported as a
   ``cpu_fallback`` warning finding (also when ``op_placement`` asks for NPU);
2. an ``op_placement`` entry naming the node (its name, or an original node name it was folded from) →
   that placement; else an entry naming its op type → that placement (logged at info level);
3. otherwise NPU.

A fused kernel with a CPU-placed node is dissolved into single-node kernels (AI_CPU ops are not fused), in
the same order. CPU kernels are always FP32 (``assign_precision``); ``insert_copies`` later puts host-device
copies around them.

Raises:
    ConfigError: an ``op_placement`` key that is neither a node of the model nor an ONNX op type.
"""

from __future__ import annotations

import logging

import numpy as np

from toolkit.compiler.context import PassResult
from toolkit.compiler.passes.partition import _kernel
from toolkit.compiler.registry import register_pass
from toolkit.core.errors import ConfigError
from toolkit.core.records import Finding
from toolkit.core.text import suggest
from toolkit.ir.graph import node_reads
from toolkit.precision.contract import op_class
from toolkit.precision.support import unsupported_reason

_log = logging.getLogger("npuscope.compiler")


def is_host_value(g, name: str) -> bool:
    """A value that lives in host memory whatever reads it: non-tensor (sequence, optional; no tensor type
    known) or a string tensor."""
    if not name or name in g.consts:
        return False
    vt = g.vtype(name)
    return vt is None or vt.np_dtype == np.dtype(object)


def _touches_host_values(g, node) -> bool:
    return any(is_host_value(g, t) for t in list(node_reads(node)) + [o for o in node.output if o])


def _originals(ctx, node) -> list[str]:
    return ctx.provenance.get(node.name, (None, [node.name]))[1]


def decide(ctx, node, entries: dict) -> tuple[str, str, str | None, object]:
    """(placement, how, matched op_placement key or None, Unsupported or None) of one compiled-graph node;
    how is ``unsupported`` | ``op_placement`` | ``default``."""
    names = [node.name, *_originals(ctx, node)]
    key = next((n for n in names if n in entries), None)
    if key is None and node.op_type in entries:
        key = node.op_type
    key_memo = ("place_ops", node.name)
    if key_memo not in ctx.memo:  # the graph no longer changes here (CompileContext.memo)
        ctx.memo[key_memo] = unsupported_reason(node, _touches_host_values(ctx.graph, node))
    why = ctx.memo[key_memo]
    if why is not None:
        return "CPU", "unsupported", key, why
    if key is not None:
        return entries[key], "op_placement", key, None
    return "NPU", "default", None, None


def check_keys(ctx, entries: dict) -> list[str]:
    """Raise ConfigError for a key that names neither a node of the model nor an ONNX op type; returns log
    lines for op types this model does not use."""
    import onnx

    nodes = {n.name for n in ctx.graph.nodes} | {o for n in ctx.graph.nodes for o in _originals(ctx, n)}
    used_types = {n.op_type for n in ctx.graph.nodes}
    log = []
    for key in entries:
        if key in nodes or key in used_types:
            continue
        if key in {s.name for s in onnx.defs.get_all_schemas()}:
            log.append(f"op_placement entry '{key}' matches no node of this model (ignored)")
            continue
        raise ConfigError(f"{ctx.config.where('op_placement')} names '{key}', which is neither a node of the model "
                          "nor an ONNX op type"
                          f"{suggest(key, nodes | used_types)}; op types are case-sensitive ('Relu'), node names "
                          "are those of the .onnx file")
    return log


def _single(ctx, node):
    return _kernel(ctx, node.name, [node], node.op_type, None, "none", op_class(node.op_type).name)


def _finding(node, kernel, why, key, entries) -> Finding:
    ev = {"op_type": node.op_type, "reason": why.reason, "category": why.category, "kernel": kernel}
    if key is not None:
        ev["requested"] = entries[key]
    return Finding("warning", "cpu_fallback", node.name, ev,
                   f"'{node.name}' ({node.op_type}) runs on the host CPU in FP32 with host-device copies around it "
                   f"({why.reason}); {why.fix}")


def _place(ctx, k, node, entries, log, counts) -> None:
    placement, how, key, why = decide(ctx, node, entries)
    k.placement = placement
    counts[placement] += 1
    if how == "unsupported":
        counts["fallback"] += 1
        ctx.findings.append(_finding(node, k.name, why, key, entries))
        asked = f"; op_placement['{key}'] = {entries[key]} overridden" if key and entries[key] == "NPU" else ""
        log.append(f"{k.name} ({node.op_type}): CPU, not supported on the NPU: {why.reason}{asked}")
    elif how == "op_placement":
        counts["explicit"] += placement == "CPU"
        line = f"{k.name} ({node.op_type}): {placement}, op_placement['{key}']"
        _log.info("placement: %s", line)
        log.append(line)


@register_pass("place_ops", requires=("kernels",), provides=("placement",))
def run(ctx) -> PassResult:
    entries = dict(ctx.config.op_placement or {})
    notes = check_keys(ctx, entries)
    by_name = ctx.graph.by_name
    counts = {"CPU": 0, "NPU": 0, "explicit": 0, "fallback": 0}
    log, out, dissolved = [], [], 0
    for k in ctx.kernels:
        nodes = [by_name[n] for n in k.exec_nodes]
        if len(nodes) > 1 and any(decide(ctx, n, entries)[0] == "CPU" for n in nodes):
            dissolved += 1
            cpu = [n.name for n in nodes if decide(ctx, n, entries)[0] == "CPU"]
            log.append(f"dissolved {k.rule or k.fusion} kernel {k.name}: {', '.join(cpu)} placed on the CPU")
            for n in nodes:
                kk = _single(ctx, n)
                _place(ctx, kk, n, entries, log, counts)
                out.append(kk)
            continue
        if len(nodes) == 1:
            _place(ctx, k, nodes[0], entries, log, counts)
        else:  # no node to decide on (not produced by partition): keep what it has
            counts[k.placement] = counts.get(k.placement, 0) + 1
        out.append(k)
    ctx.kernels = out
    head = (f"{counts['NPU']} kernels on the NPU, {counts['CPU']} on the CPU ({counts['fallback']} unsupported "
            f"on the NPU, {counts['explicit']} by op_placement)")
    return PassResult(counts["fallback"] + counts["explicit"] + dissolved, [head, *notes, *log])
