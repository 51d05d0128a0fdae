"""Pass ``check_constants``: float32 constants read by FP16 kernels are converted once at compile time;
report by name those whose FP16 value differs *materially* from the FP32 one. Parameters that are not data
(Resize roi/scales) are not converted and not checked.

The rule, measured by effect (:func:`material_issues`; ``a`` the float32 constant, ``h`` = FP16(``a``) read
back in float32, relative changes over the finite values that do not overflow):

=====================  ============================================================================  ========
clause (evidence key)  reported when                                                                 severity
=====================  ============================================================================  ========
``overflow``           a finite |value| > 65504 (becomes ±inf)                                       error
``underflow_to_zero``  *every* non-zero value rounds to 0 (an eps of 1e-12, a scale)                 error
``integer_inexact``    integers > 2048 change, in a small constant (≤ :data:`SMALL_CONSTANT`         warning
                       elements) or one whose finite values are all integers (indices, sizes)
``value_change``       small constant (≤ :data:`SMALL_CONSTANT` elements: eps, scale, bias, clip     warning
                       bound), judged value by value: max |h - a| / |a| > tolerance
``norm_change``        larger tensor (weights, bias vectors), judged as a whole: relative L2         warning
                       change ||h - a||₂ / ||a||₂ > tolerance
=====================  ============================================================================  ========

The tolerance follows the constant's role in the node that reads it (its effect on that node's output):

- it scales the result (Mul, Div, MatMul/Conv/Gemm weights, Pow, normalisation scale/variance, every role
  not listed below): :data:`REL_TOL` = 1e-3, the output moves by the same relative amount. FP16 rounds a
  normal value (|v| in [6.1e-5, 65504]) by at most its unit roundoff 2**-11 ≈ 4.9e-4 relative (IEEE 754
  binary16), so ordinary rounding never crosses the line; only precision lost in the subnormal range or
  flushing to zero does.
- it is added (:data:`ADDITIVE_INPUTS`: Add/Sub/Sum operands, biases, BatchNorm mean): :data:`ADDITIVE_REL_TOL`
  = 2**-4 (6.25%, FP16 keeps fewer than 4 significant bits of it). An added value below 6.1e-5 moves by at
  most 2**-25 ≈ 3e-8 absolute in FP16, invisible in the FP16 output unless the sum itself is near 0 (an eps
  before a sqrt or a division); there the constant matters once it no longer means what it says: an eps of
  3e-8 becomes 5.96e-8 (+99%), 1e-7 becomes 1.19e-7 (+19%), while 1e-5 (+0.14%), 1e-6 (+1.3%) or PP-OCRv4's
  activation biases of -2.65e-6 (-1.1%) are not reported.

A handful of denormal weights among thousands (1 of 57361 values at 3e-39) moves the tensor by far less
than 1e-3 and is not reported (the count of flushed values is in the ``norm_change`` evidence when a tensor
is reported). :func:`fp16_constant_issues` gives the raw facts (any overflow, any flush to zero, any integer
losing exactness) the clauses start from.

A constant a compile pass computed (fold_batchnorm's ``<node>__bnfold_W`` / ``__bnfold_B``; fold_constants'
outputs of nodes computed from constants; recorded in the compiled model: toolkit.compiler.derived) is named
with where it comes from in the model (the node, its weight, the BatchNormalization and the range of
scale/sqrt(var+epsilon); the node computed away and its inputs); its evidence holds that record as
``folded_from`` and the advice says what to change in the model (the BN's running_var / scale, or the fusion
off; the constants the node computes it from) instead of the computed constant.
"""

from __future__ import annotations

import weakref

import numpy as np

from toolkit.compiler import derived
from toolkit.compiler.context import PassResult
from toolkit.compiler.registry import register_pass
from toolkit.core.records import Finding
from toolkit.core.text import show
from toolkit.ir.weights import array_of, release_pages
from toolkit.precision.contract import FP16_INT_EXACT, FP16_MAX, FP16_MIN_NORMAL

#: Relative change of a constant (per value for small constants, L2 for larger tensors) that is material:
#: above FP16's unit roundoff 2**-11 ≈ 4.9e-4, so only subnormal precision loss or flushing crosses it.
REL_TOL = 1e-3
#: Constants of at most this many elements (scalars, eps, scales, short per-channel vectors) are judged value
#: by value; larger ones (weights) by the relative L2 change of the whole tensor.
SMALL_CONSTANT = 16
#: Relative change that is material for a constant that is *added* (see the module docstring): 2**-4.
ADDITIVE_REL_TOL = 2.0 ** -4
#: (op_type, input index or None for every input) of the inputs whose constant is added to the data.
ADDITIVE_INPUTS = {("Add", None), ("Sub", None), ("Sum", None), ("Conv", 2), ("ConvTranspose", 2), ("Gemm", 2),
                   ("BatchNormalization", 2), ("BatchNormalization", 3), ("LayerNormalization", 2),
                   ("InstanceNormalization", 2), ("GroupNormalization", 2)}


def is_additive(op_type: str, index: int) -> bool:
    """Whether input ``index`` of an ``op_type`` node is added to the data (:data:`ADDITIVE_INPUTS`)."""
    return (op_type, None) in ADDITIVE_INPUTS or (op_type, index) in ADDITIVE_INPUTS


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


def _finite_change(a: np.ndarray) -> dict:
    """{max_rel, rel_l2, value, fp16} of the finite, non-overflowing values of float32 ``a``: the largest relative change |h - a| / |a| over non-zero values, the
    value that has it and its FP16 form, and the relative L2 change ||h - a||₂ / ||a||₂ (0 when ||a|| = 0)."""
    with np.errstate(over="ignore"):
        h = a.astype(np.float16).astype(np.float32)
    keep = np.isfinite(a) & (np.abs(a) <= FP16_MAX)
    a64, h64 = a[keep].astype(np.float64), h[keep].astype(np.float64)
    nz = a64 != 0
    out = {"max_rel": 0.0, "rel_l2": 0.0, "value": None, "fp16": None}
    if nz.any():
        rel = np.abs(h64[nz] - a64[nz]) / np.abs(a64[nz])
        i = int(np.argmax(rel))
        out.update(max_rel=float(rel[i]), value=float(a64[nz][i]), fp16=float(h64[nz][i]))
        out["rel_l2"] = float(np.linalg.norm(h64 - a64) / np.linalg.norm(a64))
    return out


def _l2_change_bound(a: np.ndarray, tiny: int) -> float:
    """An upper bound of the relative L2 change ||h - a||₂ / ||a||₂ that FP16 conversion makes to a finite
    float32 tensor ``a`` with every |value| <= 2048, ``tiny`` of them non-zero below FP16's smallest normal
    (2**-14): a normal value moves by at most its unit roundoff 2**-11 relative, a smaller one by at most
    2**-25 absolute (half the subnormal spacing, or itself when it flushes to zero; IEEE 754 binary16). Costs
    one dot product instead of the conversion; inf when ||a|| is 0 (no bound)."""
    flat = a.reshape(-1)
    norm2 = 0.0
    for i in range(0, flat.size, CHUNK):  # in chunks: a float64 copy of a 1 GiB weight would take 2 GiB
        c = flat[i:i + CHUNK].astype(np.float64)
        norm2 += float(np.dot(c, c))
    if norm2 <= 0.0:
        return float("inf")
    return float(np.sqrt(2.0 ** -22 + tiny * 2.0 ** -50 / norm2))


#: Elements per chunk of the fast-path screens (4 Mi: 16 MiB of float32): large weights (memory-mapped,
#: toolkit.ir.weights) are screened without whole-tensor temporaries.
CHUNK = 1 << 22


def _screen(a: np.ndarray) -> tuple[bool, float, int]:
    """(every value finite, largest |value| (nan when not all finite), count of non-zero |value| below FP16's
    smallest normal) of float32 ``a``, chunk by chunk."""
    flat = a.reshape(-1)
    finite, absmax, tiny = True, 0.0, 0
    for i in range(0, flat.size, CHUNK):
        mag = np.abs(flat[i:i + CHUNK])
        finite = finite and bool(np.isfinite(mag).all())
        absmax = max(absmax, float(mag.max()))
        tiny += int(np.count_nonzero((mag > 0) & (mag < FP16_MIN_NORMAL)))
    return finite, absmax, tiny


def material_issues(arr: np.ndarray, additive: bool = False) -> dict:
    """The evidence to report for float32 constant ``arr`` under the module's rule (empty when FP16
    conversion changes nothing material); ``additive``: the reading node adds it to the data (tolerance
    :data:`ADDITIVE_REL_TOL` instead of :data:`REL_TOL`, see :func:`is_additive`). The raw facts of
    :func:`fp16_constant_issues` whose clause holds, plus ``value_change`` (small constants) or
    ``norm_change`` (larger tensors) with {max_rel, rel_l2, value, fp16, tolerance} and, for ``norm_change``,
    the counts of values flushed to zero and of non-zero values. Fast paths: every finite |value| within
    [6.1e-5, 2048] or 0 (normal FP16 range, exact integers) reports nothing, and neither does a larger tensor
    whose relative L2 change is bounded by REL_TOL without converting it (:func:`_l2_change_bound`)."""
    a = np.asarray(arr, dtype=np.float32)
    if not a.size:
        return {}
    finite, absmax, tiny = _screen(a)
    if finite and absmax <= FP16_INT_EXACT:
        if not tiny or (a.size > SMALL_CONSTANT and _l2_change_bound(a, tiny) <= REL_TOL):
            return {}
    raw = fp16_constant_issues(a)
    ev = {}
    if "overflow" in raw:
        ev["overflow"] = raw["overflow"]
    under = raw.get("underflow_to_zero")
    if under is not None and under["count"] == under["nonzero"]:
        ev["underflow_to_zero"] = under
    small = a.size <= SMALL_CONSTANT
    fin = a[np.isfinite(a)]
    if "integer_inexact" in raw and (small or bool((fin == np.round(fin)).all())):
        ev["integer_inexact"] = raw["integer_inexact"]
    if "underflow_to_zero" in ev:
        return ev
    change = {**_finite_change(a), "tolerance": ADDITIVE_REL_TOL if additive else REL_TOL}
    if small and change["max_rel"] > change["tolerance"]:
        ev["value_change"] = change
    elif not small and change["rel_l2"] > change["tolerance"]:
        ev["norm_change"] = {**change, "flushed_to_zero": under["count"] if under else 0,
                             "nonzero": int((np.isfinite(a) & (a != 0)).sum())}
    return ev


def describe(ev: dict) -> str:
    """What FP16 conversion does to a constant, in words, from :func:`material_issues` evidence."""
    parts = []
    if "overflow" in ev:
        parts.append(f"{ev['overflow']['count']} value(s) above FP16 max 65504 become inf")
    if "underflow_to_zero" in ev:
        parts.append(f"every non-zero value (|v| >= {show(ev['underflow_to_zero']['absmin'], digits=3)}) "
                     "rounds to 0")
    if "integer_inexact" in ev:
        parts.append(f"{ev['integer_inexact']['count']} integer(s) above 2048 lose exactness "
                     f"(e.g. {ev['integer_inexact']['example']:.0f})")
    for key, what in (("value_change", "its value changes"), ("norm_change", "the tensor changes")):
        c = ev.get(key)
        if c is not None:
            how = (f"{show(c['value'], digits=3)} becomes {show(c['fp16'], c['value'], digits=3)}, "
                   f"{(c['fp16'] - c['value']) / c['value'] * 100:+.3g}%" if key == "value_change" else
                   f"relative L2 change {c['rel_l2']:.2g}; {c['flushed_to_zero']} of {c['nonzero']} non-zero "
                   "values round to 0")
            parts.append(f"{what} by more than {c['tolerance']:g} relative ({how})")
    return "; ".join(parts)


def _advice(ev: dict) -> str:
    if "overflow" in ev:
        return "or clamp the constant into the FP16 range"
    if "underflow_to_zero" in ev or "value_change" in ev or "norm_change" in ev:
        return "or raise the constant into the FP16 normal range (|v| >= 6.1e-5)"
    return "or store the integers in an integer tensor"


def constant_reads(by_name: dict, is_f32_const, k):
    """(constant name, reading node name, whether the node adds it: :func:`is_additive`) of the float32
    data constants kernel ``k`` reads.

    ``by_name``: the graph's {node name: NodeProto}; ``is_f32_const(name)``: whether tensor ``name`` is a
    float32 constant of the graph."""
    for nname in k.nodes:
        node = by_name.get(nname)
        if node is None:
            continue
        for idx, i in enumerate(node.input):
            if (node.op_type, idx) not in FP32_PARAMETERS and is_f32_const(i):
                yield i, nname, is_additive(node.op_type, idx)


def folded_phrase(src: dict) -> str:
    """Where a constant a compile pass computed comes from, in words (``src``: its toolkit.compiler.derived
    record)."""
    if src.get("rule") != "ConvBatchnormFusionPass":
        return (f"the output of {src.get('op_type')} '{src.get('node')}', computed at compile time from "
                f"{', '.join(map(repr, src.get('inputs', [])))}")
    f = src.get("factor") or {}
    if f.get("absmax") is None:
        rng = ""
    elif f["absmin"] >= f["absmax"] * (1 - 1e-6):
        rng = f": scale/sqrt(var+epsilon) = {show(f['absmax'], digits=3)}"
    else:
        rng = f": scale/sqrt(var+epsilon) from {show(f['absmin'], digits=3)} up to {show(f['absmax'], digits=3)}"
    what = (f"weight '{src['weight']}'" if src.get("role") == "weight" else
            f"bias '{src['bias']}'" if src.get("bias") else "bias (none in the model: 0)")
    return f"{src['op_type']} '{src['node']}''s {what} with BatchNormalization '{src['batchnorm']}' folded in{rng}"


def _folded_advice(src: dict, ev: dict) -> str:
    """What to change in the model so that a constant a compile pass computed fits FP16 (``src``: its
    toolkit.compiler.derived record, ``ev``: :func:`material_issues` evidence)."""
    if src.get("rule") != "ConvBatchnormFusionPass":
        return (f"or change the constants {src.get('op_type')} '{src.get('node')}' computes it from "
                f"({', '.join(map(repr, src.get('inputs', [])))}) in the model")
    bn, ins, f = src["batchnorm"], src.get("batchnorm_inputs", {}), src.get("factor") or {}
    var, scale = ins.get("var"), ins.get("scale")
    if "overflow" in ev:
        how = (f"its factor scale/sqrt(var+epsilon) reaches {show(f.get('absmax'), digits=3)}: raise its running_var "
               f"'{var}' (or epsilon) or lower its scale '{scale}'")
        if src.get("role") == "bias":
            how += f", or its mean '{ins.get('mean')}' / B '{ins.get('B')}'"
    elif "integer_inexact" in ev and len(ev) == 1:
        how = f"its scale '{scale}', running_var '{var}' and epsilon give the weight integers above 2048"
    else:
        how = (f"its factor scale/sqrt(var+epsilon) falls to {show(f.get('absmin'), digits=3)}: lower its running_var "
               f"'{var}' or raise its scale '{scale}'")
    return (f"or change BatchNormalization '{bn}' in the model ({how}), or turn the fusion off "
            f"({src['rule']} off in fusion_switch_file, or fusion_level 0: the BatchNormalization then runs as its "
            "own kernel)")


def _findings(by_name, is_f32_const, kernels, issues, sources=None) -> tuple[list[Finding], list[str]]:
    """(findings, log lines) over the float32 constants FP16 ``kernels`` read, each constant once, in kernel
    order; ``issues(name, additive)`` gives its evidence (:func:`material_issues`). ``sources``: {constant name:
    toolkit.compiler.derived record} of constants a compile pass computed (a BN folded into a Conv's weight):
    their finding says where they come from in the model (evidence ``folded_from``) and what to change there."""
    sources = sources or {}
    seen, found, log = set(), [], []
    for k in kernels:
        if k.precision != "fp16":
            continue
        for cname, reader, additive in constant_reads(by_name, is_f32_const, k):
            if cname in seen:
                continue
            seen.add(cname)
            ev = issues(cname, additive)
            if not ev:
                continue
            kinds = ", ".join(ev)
            src = sources.get(cname)
            origin = f" ({folded_phrase(src)})" if src else ""
            found.append(Finding(
                severity(ev), "fp16_constant", cname,
                {**ev, "reader": reader, "kernel": k.name, "keep_dtype": [reader],
                 **({"folded_from": src} if src else {})},
                f"constant '{cname}'{origin} read by '{reader}' changes in FP16 ({describe(ev)}): keep '{reader}' "
                f"in FP32 (keep_dtype) {_folded_advice(src, ev) if src else _advice(ev)}"))
            log.append(f"constant {cname} ({kinds}) read by {reader}")
    return found, log


def _summary(log: list[str]) -> list[str]:
    return log or ["no FP16 constant changes materially (overflow, flush to zero, integer exactness, "
                   f"relative change > {REL_TOL:g}, > {ADDITIVE_REL_TOL:g} if added)"]


#: {(id of a constant's array, additive): (weak reference to the array, material_issues evidence)}: precision-only
#: recompiles (tuning trials, stage triage) share the structure stage's graph and its constant arrays, so each
#: constant is screened once per array, not once per trial. Constants are replaced, never changed in place
#: (fold_batchnorm, toolkit.cache.patch); an entry leaves with its array.
_ISSUES: dict[tuple[int, bool], tuple[weakref.ref, dict]] = {}


def cached_material_issues(arr: np.ndarray, additive: bool = False) -> dict:
    """:func:`material_issues` of ``arr``, computed once per array object (see :data:`_ISSUES`). A weight left
    on disk has its pages released from the process once screened (toolkit.ir.weights.release_pages): the
    screen reads every value, a run may read few (an embedding table's Gather)."""
    key = (id(arr), additive)
    hit = _ISSUES.get(key)
    if hit is not None and hit[0]() is arr:
        return hit[1]
    ev = material_issues(arr, additive)
    release_pages(arr)
    try:
        ref = weakref.ref(arr, lambda _r, k=key: _ISSUES.pop(k, None))
    except TypeError:  # an object without weak references: not cached
        return ev
    _ISSUES[key] = (ref, ev)
    return ev


@register_pass("check_constants", requires=("casts",))
def run(ctx) -> PassResult:
    g = ctx.graph

    def is_f32_const(name: str) -> bool:
        c = g.const(name)
        return c is not None and c.dtype == np.float32

    found, log = _findings(g.by_name, is_f32_const, ctx.kernels,
                           lambda c, add: cached_material_issues(g.const(c), add), derived.sources(g.model))
    ctx.findings.extend(found)
    return PassResult(len(log), _summary(log))


_EVIDENCE_KEYS = ("overflow", "underflow_to_zero", "integer_inexact", "value_change", "norm_change")


def recheck(result, edited: set[str]) -> None:
    """Bring the ``fp16_constant`` findings and the ``check_constants`` log of ``result`` (a CompileResult
    whose compiled graph ``result.model`` already holds the new values) up to date after an edit of the
    values of constants ``edited`` only: those are checked again, the evidence of the others is kept. The
    result equals a fresh run of this pass (the only precision pass that reads constant values), in the same
    order: this pass adds the last findings of a compile (toolkit.cache.patch uses it). The constants of a
    compiled graph are its initializers (toolkit.ir.graph.Graph.sync); only the edited ones are decoded."""
    import time

    from onnx import TensorProto

    t0 = time.perf_counter()
    g = result.model.graph
    inits = {t.name: t for t in g.initializer}
    old = {f.subject: {k: f.evidence[k] for k in _EVIDENCE_KEYS if k in f.evidence}
           for f in result.findings if f.kind == "fp16_constant"}
    found, log = _findings({n.name: n for n in g.node},
                           lambda c: c in inits and inits[c].data_type == TensorProto.FLOAT, result.plan.kernels,
                           lambda c, add: material_issues(array_of(inits[c]), add) if c in edited
                           else old.get(c, {}), derived.sources(result.model))
    result.findings = [f for f in result.findings if f.kind != "fp16_constant"] + found
    for p in result.passes:
        if p.name == "check_constants" and p.ran:
            p.changed, p.log, p.ms = len(log), _summary(log), (time.perf_counter() - t0) * 1e3
