"""Padding sensitivity: does padding an input to a gear change the valid region of any tensor?

The same input runs twice through the FP32 onnxruntime reference (:class:`toolkit.ort.reference.ReferenceRunner`,
every tensor exposed): once at its exact shape, once padded to the gear (:func:`toolkit.gears.session.pad_feeds`,
pad values per input). The reference is used, not the NPU plan, so that the only difference between the two
runs is the padding (no FP16 rounding, every ONNX tensor present even where the NPU fuses it away).

For each tensor, in graph (topological) order, the axes whose size differs between the two runs are the padded
axes; the valid region of the padded tensor is its leading ``exact-shape`` block. The tensor **leaks** when
that region differs from the exact run beyond ``atol + rtol * max|exact|`` (or a non-finite value appears, or an
integer differs). A leaking tensor whose producing node reads only clean tensors is an **origin**: the op itself
mixes padded positions into valid ones (Softmax or a reduction over the padded axis without a mask, LayerNorm
over it, pooling over it, ...). Each origin becomes a :class:`toolkit.compiler.pipeline.Finding` (kind
``padding_leak``): ``error`` when its leak reaches a graph output through leaking tensors (the outputs of the
padded run are wrong; ``npuscope run`` exits 1), ``warning`` when it dies out before every output. The first
leaking tensor and the leaking graph outputs (``outputs_leak``) are named in the summary.

A tensor whose padded shape cannot hold its exact shape (rank changed, an axis shrank: e.g. a Reshape that
flattens the padded axis into another) is ``unmapped``: not compared, and nodes reading it are not called
origins. Detection is numerical: a leak that the chosen pad values happen to hide (ReduceMax over positive data
padded with 0) is not reported; ``ReducesPaddedAxis`` marks ops that reduce over a padded axis regardless.

Table columns (:data:`COLUMNS`): Index (graph order), Tensor, Node, OpType, ExactShape, PaddedShape,
PaddedAxes (list of ints), Status (clean | leak | unmapped | not_compared), Origin (bool), ReducesPaddedAxis
(bool), MaxAbsDiff (valid region, float64), Tolerance, Reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import pandas as pd

from toolkit.compiler.passes.bind_shapes import bind_input_shapes
from toolkit.core.errors import InputError
from toolkit.core.records import Finding
from toolkit.gears.session import pad_feeds
from toolkit.ort.reference import ReferenceRunner

COLUMNS = ["Index", "Tensor", "Node", "OpType", "ExactShape", "PaddedShape", "PaddedAxes", "Status", "Origin",
           "ReducesPaddedAxis", "MaxAbsDiff", "Tolerance", "Reason"]
#: Default tolerance: FP32 summation-order noise between two shapes, not a padding effect.
RTOL, ATOL = 1e-4, 1e-6
_POOLS = {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "AveragePool", "MaxPool", "LpPool"}
_RECOMMEND = {
    "Softmax": "mask the padded positions before the Softmax (an additive -10000 bias from a 0/1 mask input padded "
               "with 0), or compile this length exactly",
    "LayerNormalization": "normalise over an axis that is not padded, or compile this length exactly",
    "Conv": "its window at the valid edge reaches padded positions that earlier layers made non-zero (a bias, a "
            "normalisation); the edge outputs differ from an exact-size run: check the task metric on padded inputs, "
            "or compile the sizes that matter exactly",
    "pool": "pool over the valid region only (mask, or divide by the valid length), or compile this size exactly",
    "reduce": "reduce over the valid region only (multiply by a 0/1 mask and divide by the valid count), or "
              "compile this length exactly",
    "other": "this op mixes padded positions into valid ones; mask its input, choose a pad value it ignores, or "
             "compile this shape exactly",
}


@dataclass
class PaddingReport:
    """``table`` (:data:`COLUMNS`), ``findings`` (one per origin), ``summary`` dict (gear shapes, counts,
    ``first_leak`` {tensor, node, op_type} or None, ``outputs_leak`` list of graph outputs that leak)."""

    table: pd.DataFrame
    findings: list[Finding] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


def _bound(model: onnx.ModelProto, shapes: dict) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    bind_input_shapes(m, dict(shapes), where="inputs", error=InputError)
    return m


def _reduced_axes(node: onnx.NodeProto, rank: int) -> set[int] | None:
    """Axes ``node`` reduces over (normalised), None when it reduces nothing we know of."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    op = node.op_type
    if op in _POOLS:
        return set(range(2, rank))
    if op.startswith("Reduce"):
        axes = attrs.get("axes")
        if axes is None:
            return set(range(rank)) if len(node.input) < 2 or not node.input[1] else None
        return {a % rank for a in axes}
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        return {attrs.get("axis", -1) % rank}
    if op == "LayerNormalization":
        return set(range(attrs.get("axis", -1) % rank, rank))
    if op in ("ArgMax", "ArgMin"):
        return {attrs.get("axis", 0) % rank}
    return None


def _compare(exact: np.ndarray, padded: np.ndarray, rtol: float, atol: float):
    """(status, padded axes, max abs diff, tolerance, reason) for one tensor pair."""
    if exact.ndim != padded.ndim or any(p < e for p, e in zip(padded.shape, exact.shape)):
        return "unmapped", [], np.nan, np.nan, "the padded shape cannot hold the exact shape (axis merged or shrunk)"
    axes = [i for i, (p, e) in enumerate(zip(padded.shape, exact.shape)) if p != e]
    valid = padded[tuple(slice(0, n) for n in exact.shape)]
    if exact.dtype.kind not in "fc":
        same = bool(np.array_equal(valid, exact))
        return ("clean" if same else "leak"), axes, float(not same), 0.0, ""
    e64, v64 = exact.astype(np.float64), valid.astype(np.float64)
    fin = np.isfinite(e64)
    if not np.array_equal(fin, np.isfinite(v64)) or not np.array_equal(np.isnan(e64), np.isnan(v64)):
        return "leak", axes, np.inf, np.nan, "non-finite values differ in the valid region"
    diff = float(np.abs(v64[fin] - e64[fin]).max()) if fin.any() else 0.0
    tol = atol + rtol * (float(np.abs(e64[fin]).max()) if fin.any() else 0.0)
    return ("leak" if diff > tol else "clean"), axes, diff, tol, ""


def _recommendation(op: str) -> str:
    if op == "ConvTranspose":
        op = "Conv"
    if op in _RECOMMEND:
        return _RECOMMEND[op]
    if op in _POOLS:
        return _RECOMMEND["pool"]
    if op.startswith("Reduce"):
        return _RECOMMEND["reduce"]
    return _RECOMMEND["other"]


def padding_sensitivity(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target: dict[str, tuple[int, ...]],
                        pad_values: dict[str, float] | None = None, *, rtol: float = RTOL,
                        atol: float = ATOL) -> PaddingReport:
    """Compare the exact run of ``feeds`` with the run padded to ``target`` (module docstring).

    Args:
        model: the model (gear dims dynamic, or matching ``target``); not modified.
        feeds: {input name: array} at their exact shapes.
        target: {input name: gear shape} (inputs not named are not padded).
        pad_values: {input name: fill} (default 0).
        rtol, atol: the leak line ``|padded - exact| > atol + rtol * max|exact|`` over the valid region.

    Returns:
        PaddingReport (table, findings, summary).

    Raises:
        InputError: a feed does not fit ``target``; ModelError/InputError from binding the shapes.
    """
    padded_feeds = pad_feeds(feeds, target, pad_values or {})
    exact_shapes = {k: tuple(np.shape(v)) for k, v in feeds.items() if isinstance(v, np.ndarray)}
    padded_shapes = {k: tuple(np.shape(v)) for k, v in padded_feeds.items() if isinstance(v, np.ndarray)}
    exact = ReferenceRunner(_bound(model, exact_shapes)).run(feeds)
    padded = ReferenceRunner(_bound(model, padded_shapes)).run(padded_feeds)
    rows, status = [], {}
    for k in feeds:
        if k in padded_feeds and isinstance(feeds[k], np.ndarray):
            status[k] = "clean"
    inits = {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        for out in node.output:
            if not out:
                continue
            if out not in exact or out not in padded:
                status[out] = "not_compared"
                rows.append(_row(len(rows), out, node, None, None, "not_compared", [], False, False, np.nan, np.nan,
                                 "tensor not exposed by the reference run"))
                continue
            e, p = np.asarray(exact[out]), np.asarray(padded[out])
            st, axes, diff, tol, reason = _compare(e, p, rtol, atol)
            status[out] = st
            ins = [i for i in node.input if i and i not in inits]
            origin = st == "leak" and all(status.get(i, "clean") == "clean" for i in ins)
            reduces = _reduces_padded(node, ins, exact, padded)
            rows.append(_row(len(rows), out, node, e.shape, p.shape, st, axes, origin, reduces, diff, tol, reason))
    table = pd.DataFrame(rows, columns=COLUMNS)
    return PaddingReport(table, _findings(model, table), _summary(model, table, exact_shapes, padded_shapes))


def _reduces_padded(node, ins, exact, padded) -> bool:
    if not ins or ins[0] not in exact or ins[0] not in padded:
        return False
    e, p = np.asarray(exact[ins[0]]), np.asarray(padded[ins[0]])
    if e.ndim != p.ndim:
        return False
    pad_axes = {i for i, (a, b) in enumerate(zip(e.shape, p.shape)) if a != b}
    red = _reduced_axes(node, e.ndim)
    return bool(red and red & pad_axes)


def _row(index, tensor, node, eshape, pshape, status, axes, origin, reduces, diff, tol, reason) -> dict:
    return {"Index": index, "Tensor": tensor, "Node": node.name, "OpType": node.op_type,
            "ExactShape": list(eshape) if eshape is not None else None,
            "PaddedShape": list(pshape) if pshape is not None else None, "PaddedAxes": list(axes),
            "Status": status, "Origin": bool(origin), "ReducesPaddedAxis": bool(reduces),
            "MaxAbsDiff": float(diff), "Tolerance": float(tol), "Reason": reason}


def _reached_outputs(model: onnx.ModelProto, table: pd.DataFrame) -> dict[str, list[str]]:
    """{origin tensor: graph outputs its leak reaches}: outputs reachable from the origin through tensors
    that leak (or could not be compared: unmapped / not_compared), in graph order."""
    status = dict(zip(table["Tensor"], table["Status"]))
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    outputs = [o.name for o in model.graph.output]
    out = {}
    for origin in table.loc[table["Origin"], "Tensor"]:
        seen, todo = {origin}, [origin]
        while todo:
            for node in consumers.get(todo.pop(), []):
                for t in node.output:
                    if t and t not in seen and status.get(t) in ("leak", "unmapped", "not_compared"):
                        seen.add(t)
                        todo.append(t)
        out[origin] = [o for o in outputs if o in seen and status.get(o) == "leak"]
    return out


def _findings(model: onnx.ModelProto, table: pd.DataFrame) -> list[Finding]:
    """One Finding per origin: ``error`` when its leak reaches a graph output (the outputs are wrong), else
    ``warning`` (the leak dies out before any output, e.g. a masked or sliced path)."""
    leaks = table[table["Status"] == "leak"]
    reached = _reached_outputs(model, table)
    out = []
    for _, r in table[table["Origin"]].iterrows():
        downstream = leaks[leaks["Index"] > r["Index"]]
        hits = reached.get(r["Tensor"], [])
        effect = (f"; it reaches output(s) {', '.join(hits)}, which differ from an exact-shape run" if hits else
                  "; it does not reach any graph output")
        out.append(Finding(
            "error" if hits else "warning", "padding_leak", r["Node"],
            {"op_type": r["OpType"], "tensor": r["Tensor"], "padded_axes": r["PaddedAxes"],
             "reduces_padded_axis": r["ReducesPaddedAxis"], "max_abs_diff": r["MaxAbsDiff"],
             "tolerance": r["Tolerance"], "first": bool(r["Index"] == leaks["Index"].min()),
             "downstream_leaks": int(len(downstream)), "reaches_outputs": hits},
            f"padding changes the valid region of '{r['Tensor']}' ({r['OpType']}){effect}: "
            + _recommendation(r["OpType"])))
    return out


def _summary(model, table, exact_shapes, padded_shapes) -> dict:
    leaks = table[table["Status"] == "leak"]
    first = None
    if len(leaks):
        r = leaks.iloc[0]
        first = {"tensor": r["Tensor"], "node": r["Node"], "op_type": r["OpType"]}
    outputs = {o.name for o in model.graph.output}
    return {"exact_shapes": {k: list(v) for k, v in exact_shapes.items()},
            "padded_shapes": {k: list(v) for k, v in padded_shapes.items()},
            "tensors": int(len(table)), "leaks": int(len(leaks)), "origins": int(table["Origin"].sum()),
            "unmapped": int((table["Status"] == "unmapped").sum()), "first_leak": first,
            "outputs_leak": [t for t in leaks["Tensor"] if t in outputs]}
