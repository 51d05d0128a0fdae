"""Pass ``check_constants``: float32 constants read by FP16 kernels are converted once at compile time;
report by name those that overflow (|v| > 65504 → ±inf), underflow to zero (non-zero, rounds to 0) or lose
integer exactness (integers above 2048 that change). Parameters that are not data (Resize roi/scales) are
not converted and not checked.
"""

from __future__ import annotations

import numpy as np

from toolkit.compiler.pipeline import Finding, PassResult, register_pass
from toolkit.precision.contract import FP16_MAX

#: (op_type, input index) pairs whose float constant is a parameter kept in FP32, not data.
FP32_PARAMETERS = {("Resize", 1), ("Resize", 2), ("Upsample", 1)}


def fp16_constant_issues(arr: np.ndarray) -> dict:
    """Evidence dict of what FP16 conversion does to float32 ``arr`` (empty if harmless).

    Computed in float32 (every float16 value is exact in float32), with one early exit: when every finite
    |value| is at most 2048 and no non-zero one is below 2**-25 (half the smallest FP16 subnormal), nothing
    can overflow, round to zero or lose integer exactness."""
    a = np.asarray(arr, dtype=np.float32)
    mag = np.abs(a)
    fin = np.isfinite(a)
    if fin.all():
        if not a.size or (mag.max() <= 2048 and not ((mag > 0) & (mag <= 2.0 ** -25)).any()):
            return {}
    with np.errstate(over="ignore"):  # overflow to inf is what we measure below, not a warning for the user
        h = a.astype(np.float16).astype(np.float32)
    ev = {}
    over = fin & (mag > FP16_MAX)
    if over.any():
        ev["overflow"] = {"count": int(over.sum()), "absmax": float(mag[over].max())}
    under = fin & (a != 0) & (h == 0)
    if under.any():
        ev["underflow_to_zero"] = {"count": int(under.sum()), "absmin": float(mag[under].min()),
                                   "nonzero": int((fin & (a != 0)).sum())}
    ints = fin & (a == np.round(a)) & (mag > 2048) & (h != a) & ~over
    if ints.any():
        ev["integer_inexact"] = {"count": int(ints.sum()), "example": float(a[ints].flat[0])}
    return ev


def severity(ev: dict) -> str:
    """``error`` when FP16 changes what the constant means: a value overflows to inf, or every non-zero value
    rounds to zero (an eps of 1e-12 becomes 0, a scale becomes 0); ``warning`` when only some values of a
    tensor flush to zero (each moves by less than 2**-25, below FP16's own resolution near them) or integers
    lose exactness."""
    under = ev.get("underflow_to_zero")
    if "overflow" in ev or (under is not None and under["count"] == under["nonzero"]):
        return "error"
    return "warning"


def constant_reads(by_name: dict, is_f32_const, k):
    """(constant name, reading node name) pairs of the float32 data constants kernel ``k`` reads.

    ``by_name``: the graph's {node name: NodeProto}; ``is_f32_const(name)``: whether tensor ``name`` is a
    float32 constant of the graph."""
    for nname in k.nodes:
        node = by_name.get(nname)
        if node is None:
            continue
        for idx, i in enumerate(node.input):
            if (node.op_type, idx) not in FP32_PARAMETERS and is_f32_const(i):
                yield i, nname


def _findings(by_name, is_f32_const, kernels, issues) -> tuple[list[Finding], list[str]]:
    """(findings, log lines) over the float32 constants FP16 ``kernels`` read, each constant once, in kernel
    order; ``issues(name)`` gives its evidence (:func:`fp16_constant_issues`)."""
    seen, found, log = set(), [], []
    for k in kernels:
        if k.precision != "fp16":
            continue
        for cname, reader in constant_reads(by_name, is_f32_const, k):
            if cname in seen:
                continue
            seen.add(cname)
            ev = issues(cname)
            if not ev:
                continue
            kinds = ", ".join(ev)
            found.append(Finding(
                severity(ev), "fp16_constant", cname,
                {**ev, "reader": reader, "kernel": k.name},
                f"constant '{cname}' read by '{reader}' is not representable in FP16 ({kinds}): keep '{reader}' "
                "in FP32 (keep_dtype) or clamp the constant into the FP16 range"))
            log.append(f"constant {cname} ({kinds}) read by {reader}")
    return found, log


def _summary(log: list[str]) -> list[str]:
    return log or ["all FP16 constants representable"]


@register_pass("check_constants", requires=("casts",))
def run(ctx) -> PassResult:
    g = ctx.graph

    def is_f32_const(name: str) -> bool:
        c = g.const(name)
        return c is not None and c.dtype == np.float32

    found, log = _findings(g.by_name, is_f32_const, ctx.kernels, lambda c: fp16_constant_issues(g.const(c)))
    ctx.findings.extend(found)
    return PassResult(len(log), _summary(log))


_EVIDENCE_KEYS = ("overflow", "underflow_to_zero", "integer_inexact")


def recheck(result, edited: set[str]) -> None:
    """Bring the ``fp16_constant`` findings and the ``check_constants`` log of ``result`` (a CompileResult
    whose compiled graph ``result.model`` already holds the new values) up to date after an edit of the
    values of constants ``edited`` only: those are checked again, the evidence of the others is kept. The
    result equals a fresh run of this pass (the only precision pass that reads constant values), in the same
    order: this pass adds the last findings of a compile (toolkit.cache.patch uses it). The constants of a
    compiled graph are its initializers (toolkit.ir.graph.Graph.sync); only the edited ones are decoded."""
    import time

    from onnx import TensorProto, numpy_helper

    t0 = time.perf_counter()
    g = result.model.graph
    inits = {t.name: t for t in g.initializer}
    old = {f.subject: {k: f.evidence[k] for k in _EVIDENCE_KEYS if k in f.evidence}
           for f in result.findings if f.kind == "fp16_constant"}
    found, log = _findings({n.name: n for n in g.node},
                           lambda c: c in inits and inits[c].data_type == TensorProto.FLOAT, result.plan.kernels,
                           lambda c: fp16_constant_issues(numpy_helper.to_array(inits[c])) if c in edited
                           else old.get(c, {}))
    result.findings = [f for f in result.findings if f.kind != "fp16_constant"] + found
    for p in result.passes:
        if p.name == "check_constants" and p.ran:
            p.changed, p.log, p.ms = len(log), _summary(log), (time.perf_counter() - t0) * 1e3
