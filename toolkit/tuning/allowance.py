"""The element-wise FP16 rounding allowance of a ``MaxAbsoluteError<=A|fp16`` target condition (tune's default
target, toolkit.tuning.tune.DEFAULT_TARGET).

Element i of an output may differ from the FP32 reference y by

    max(A, FP16_ROUNDING · sqrt(L) · max(|y_i|, rms(y)))

where L >= 1 is the output's rounding depth (:func:`rounding_depths`): the most FP16 roundings on one path of
the compiled plan from the graph inputs to that output. One FP16 kernel (L = 1) gets FP16_ROUNDING; a chain of L
roundings gets sqrt(L) times as much, the growth of independent rounding errors of random sign (the
probabilistic bound of Higham & Mary, "A New Approach to Probabilistic Rounding Error Analysis", SIAM J. Sci.
Comput. 41(5), 2019: with high probability the error of n roundings grows like sqrt(n)·u, not n·u). A fault (a
constant FP16 flushes or overflows, a cancellation, an eps lost) exceeds it by orders of magnitude; a deep
network computed correctly in FP16 does not.
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.precision.contract import DATA_MOVEMENT

#: Relative FP16 rounding allowed per element by a ``MaxAbsoluteError<=A|fp16`` condition for one rounding
#: (rounding depth 1; a deeper output gets sqrt(depth) times as much, module docstring).
#:
#: FP16_ROUNDING = 2^-10 = 2·u, u = 2^-11 the unit roundoff of IEEE binary16 (11-bit significand; round to
#: nearest moves a value by at most half an ulp, |fl(y) - y| <= u·|y|: Higham, Accuracy and Stability of
#: Numerical Algorithms, 2nd ed., §2.1, Table 2.1). One u covers only the rounding of the final result; the op
#: that produced it rounded its FP16 operands too (a cube op: inputs and weights, each <= u, then the result),
#: so 2·u: the result's rounding and as much again from its operands. Measured with the simulator: a 3-MatMul
#: FP16 chain on positive data (no cancellation), outputs up to 2.7e3: max |x - y| / max(|y|, rms) = 1.13·u;
#: a 16-MatMul chain of orthogonal layers (outputs ~1e3) with every layer in FP16: 7.7·u = 1.9·sqrt(16)·u.
#: The factor is floored at the output's RMS magnitude as in toolkit.compare.metrics.reductions.noise_scale (a
#: value that cancels to near zero carries the rounding of the operands that produced it, whose size the RMS
#: stands for). With A = 1e-2 and depth 1 the allowance exceeds A only where max(|y_i|, rms) > 10.24, so an
#: output whose values all stay within ±10.24 (probability maps, most logits, normalised features) of a
#: one-kernel model is judged exactly as by ``MaxAbsoluteError<=1e-2``.
FP16_ROUNDING = 2.0 ** -10


def rounding_depths(plan) -> dict[str, int]:
    """{graph output: rounding depth L >= 1} of a compiled plan (toolkit.compiler.plan.Plan): along every path
    of kernels from the graph inputs, the number of kernels that round to FP16 — those storing an output as
    float16 that are not data movement (bit-exact on FP16 data, toolkit.precision.contract.DATA_MOVEMENT): an
    FP16 compute kernel rounds once at its output, an inserted Cast to float16 once — and the largest such count
    over the paths reaching the output. FP32 kernels and host-device copies add none. An output no FP16
    rounding reaches has depth 1 (the allowance of one rounding, as without a plan)."""
    depth: dict[str, int] = {}
    for k in plan.kernels:
        start = max((depth.get(t, 0) for t in k.inputs), default=0)
        stored16 = any(getattr(plan.tensors.get(t), "dtype", "") == "float16" for t in k.outputs)
        rounds = stored16 and k.op_class != DATA_MOVEMENT.name and k.fusion != "copy"
        for t in k.outputs:
            depth[t] = max(depth.get(t, 0), start + int(rounds))
    return {o: max(1, depth.get(o, 0)) for o in plan.graph_outputs}


def fp16_allowance(golden: np.ndarray, atol: float, depth: int = 1) -> np.ndarray:
    """The per-element bound of ``MaxAbsoluteError<=atol|fp16`` on an output of rounding depth ``depth``
    (:func:`rounding_depths`; default 1): max(atol, :data:`FP16_ROUNDING`·sqrt(depth)·max(|y_i|, rms(y))) over
    the finite reference values (float64, flat; rms over the finite values)."""
    y = np.abs(np.asarray(golden, np.float64).reshape(-1))
    fin = np.isfinite(y)
    rms = math.sqrt(float(np.mean(np.square(y[fin])))) if fin.any() else 0.0
    return np.maximum(atol, FP16_ROUNDING * math.sqrt(max(1, int(depth))) * np.maximum(y, rms))


_NP_OPS = {"<=": np.less_equal, "<": np.less}


def fp16_check(npu, golden, op: str, atol: float, depth: int = 1) -> tuple[bool, float]:
    """(holds, share) of ``MaxAbsoluteError OP atol|fp16`` on one output of rounding depth ``depth``: holds when
    every element where both sides are finite has |x_i - y_i| OP :func:`fp16_allowance` (non-finite values are
    check_outputs' "finite outputs" condition); share = max |x_i - y_i| / allowance_i (<= 1 within it; 0 for no
    element, inf where an allowance of 0 is exceeded). A shape mismatch holds nothing (NaN share)."""
    x = np.asarray(npu, np.float64).reshape(-1)
    y = np.asarray(golden, np.float64).reshape(-1)
    if x.shape != y.shape:
        return False, math.nan
    both = np.isfinite(x) & np.isfinite(y)
    d = np.abs(x[both] - y[both])  # only finite pairs: inf - inf would warn
    if not d.size:
        return True, 0.0
    allow = fp16_allowance(y, atol, depth)[both]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = float(np.where(d == 0.0, 0.0, d / allow).max())
    return bool(_NP_OPS[op](d, allow).all()), share
