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


def constant_reads(ctx, k):
    """(constant name, reading node name) pairs of float32 data constants a kernel reads."""
    by_name = {n.name: n for n in ctx.graph.nodes}
    for nname in k.nodes:
        node = by_name.get(nname)
        if node is None:
            continue
        for idx, i in enumerate(node.input):
            c = ctx.graph.const(i)
            if c is not None and c.dtype == np.float32 and (node.op_type, idx) not in FP32_PARAMETERS:
                yield i, nname


@register_pass("check_constants", requires=("casts",))
def run(ctx) -> PassResult:
    seen, log = set(), []
    for k in ctx.kernels:
        if k.precision != "fp16":
            continue
        for cname, reader in constant_reads(ctx, k):
            if cname in seen:
                continue
            seen.add(cname)
            ev = fp16_constant_issues(ctx.graph.const(cname))
            if not ev:
                continue
            kinds = ", ".join(ev)
            ctx.findings.append(Finding(
                severity(ev), "fp16_constant", cname,
                {**ev, "reader": reader, "kernel": k.name},
                f"constant '{cname}' read by '{reader}' is not representable in FP16 ({kinds}): keep '{reader}' "
                "in FP32 (keep_dtype) or clamp the constant into the FP16 range"))
            log.append(f"constant {cname} ({kinds}) read by {reader}")
    return PassResult(len(log), log or ["all FP16 constants representable"])
