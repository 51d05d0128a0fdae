"""Acceptance bar for the numerics contract (GUIDE §3, toolkit/precision/contract.py):

    In force_fp16 mode, every op class's result equals an independent numpy computation of the contract
    (FP16 inputs, FP32 accumulation for cube ops, rounding at kernel outputs only).

Every expected value here is computed with numpy (float64 math on FP16-rounded inputs and constants, one
rounding to FP16 where the contract rounds), never taken from the engine. Comparison rule
(:func:`assert_fp16_equal`): the engine's output must be exactly representable in FP16, have the same
inf/nan positions as the reference, differ by at most ``max_ulp`` FP16 ulps anywhere, and be equal as FP16
values on at least 99% of the elements. The 1-ulp allowance exists only because the engine computes in FP32
(onnxruntime's summation order for dot products, its FP32 exp/erf/tanh) while the reference uses float64:
an FP32 result that lands within one FP32 ulp of an FP16 rounding boundary may round to the neighbouring
FP16 value. For cube ops one more allowance is needed where the result cancels (|y| much smaller than the
terms summed): there the FP32 summation-order error can exceed one FP16 ulp of the tiny result, so such an
element may also be off by up to the a-priori FP32 dot-product bound gamma_K * sum|a*b|, gamma_K = K*u/(1-K*u),
u = 2**-24 (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., §3.1). The 99%-equal bar still
applies, so an engine that accumulated in FP16 fails it. Data movement and the FP16-accumulation kernels
admit no slack at all. The default mixed-precision lists follow the contract's table."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.graphs import make_model
from toolkit.config.schema import Config
from toolkit.engine import Session

F16 = np.float16
F16_MAX = 65504.0
LANES = 16  # documented in toolkit/runtime/fp16_accum.py


def node(op, ins, outs, name=None, **attrs):
    return helper.make_node(op, ins, outs, name=name or f"{op}_{outs[0]}", **attrs)


def run(model, feeds, **cfg):
    """(Session, RunResult) in force_fp16 unless the config says otherwise."""
    cfg.setdefault("precision_mode", "force_fp16")
    sess = Session(model, Config(**cfg))
    return sess, sess.run(feeds, dump=True)


def r16(a) -> np.ndarray:
    """Round to FP16 (round to nearest even), the contract's storage rounding."""
    with np.errstate(over="ignore"):
        return np.asarray(a).astype(F16)


def w64(a) -> np.ndarray:
    """FP16-rounded values as float64 (exact), for the reference math."""
    return r16(a).astype(np.float64)


def _ordinal(h: np.ndarray) -> np.ndarray:
    """FP16 bit patterns as integers ordered like the values (+0 and -0 both 0)."""
    b = h.view(np.uint16).astype(np.int64)
    return np.where(b & 0x8000, 0x8000 - b, b)


def fp32_dot_bound(k: int, abs_terms_sum) -> np.ndarray:
    """gamma_K * sum|a*b|: the worst-case FP32 error of a K-term dot product (module docstring)."""
    u = 2.0 ** -24
    return k * u / (1 - k * u) * np.asarray(abs_terms_sum, np.float64)


def assert_fp16_equal(got, want, max_ulp: int = 1, min_equal: float = 0.99, what: str = "output", slack=None):
    """``got`` (engine, float32 unless FP16-typed) vs ``want`` (reference, float16); see module docstring.

    ``slack``: optional per-element absolute allowance (float64, broadcastable) for cancelling cube results."""
    got = np.asarray(got)
    want = np.asarray(want)
    assert want.dtype == F16
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    g16 = got.astype(F16)
    assert np.array_equal(g16.astype(got.dtype), got, equal_nan=True), \
        f"{what}: values not representable in FP16 (output was not rounded to FP16)"
    assert np.array_equal(np.isnan(g16), np.isnan(want)), f"{what}: nan positions differ"
    assert np.array_equal(np.isposinf(g16), np.isposinf(want)), \
        f"{what}: +inf at {np.argwhere(np.isposinf(g16) != np.isposinf(want))[:5].tolist()}"
    assert np.array_equal(np.isneginf(g16), np.isneginf(want)), f"{what}: -inf positions differ"
    fin = np.isfinite(want)
    diff = np.abs(_ordinal(g16[fin]) - _ordinal(want[fin]))
    if slack is not None:
        s = np.broadcast_to(np.asarray(slack, np.float64), want.shape)[fin]
        err = np.abs(g16[fin].astype(np.float64) - want[fin].astype(np.float64))
        within = err <= s + np.spacing(np.abs(want[fin])).astype(np.float64)
        diff = np.where(within & (diff > max_ulp), max_ulp, diff)
    if diff.size:
        worst = int(np.argmax(diff))
        assert diff.max() <= max_ulp, (f"{what}: {int(diff.max())} FP16 ulps off at a finite element "
                                       f"(got {g16[fin][worst]}, want {want[fin][worst]})")
        frac = float(np.mean(diff == 0))
        assert frac >= min_equal, f"{what}: only {frac:.2%} of elements equal the reference in FP16"


def rng(seed=0):
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------------------ cube ops
MATMUL_SHAPES = [((16, 64), (64, 32), True), ((2, 3, 16, 40), (40, 24), True), ((64, 1024), (1024, 8), True),
                 ((3, 40, 33), (3, 33, 5), False)]


@pytest.mark.parametrize("a_shape,b_shape,b_const", MATMUL_SHAPES)
def test_cube_matmul(a_shape, b_shape, b_const):
    r = rng(1)
    a = r.standard_normal(a_shape).astype(np.float32)
    b = r.standard_normal(b_shape).astype(np.float32)
    inputs = [("a", list(a_shape))] + ([] if b_const else [("b", list(b_shape))])
    model = make_model([node("MatMul", ["a", "b"], ["y"])], inputs, ["y"], {"b": b} if b_const else {})
    feeds = {"a": a} if b_const else {"a": a, "b": b}
    _, res = run(model, feeds)
    # FP16 inputs (and FP16 weights, rounded at compile time), accumulation wider than FP16, one rounding
    want = r16(np.matmul(w64(a), w64(b)))
    assert res.outputs["y"].dtype == np.float32
    bound = fp32_dot_bound(a_shape[-1], np.matmul(np.abs(w64(a)), np.abs(w64(b))))
    assert_fp16_equal(res.outputs["y"], want, slack=bound)


def test_cube_matmul_accumulates_wider_than_fp16():
    """A dot product whose FP16 running sum would lose the small addends: FP32 accumulation keeps them."""
    k = 2048
    a = np.ones((1, k), np.float32)
    b = np.full((k, 1), 1.0, np.float32)
    b[0, 0] = 2048.0  # FP16 running sum from 2048 on: 2048 + 1 rounds back to 2048
    model = make_model([node("MatMul", ["a", "b"], ["y"])], [("a", [1, k])], ["y"], {"b": b})
    _, res = run(model, {"a": a})
    assert res.outputs["y"][0, 0] == float(r16(2048.0 + (k - 1)))  # 4095 -> 4096 in FP16, not 2048


GEMM_CASES = [  # (M, K, N, transA, transB, alpha, beta, bias shape)
    (32, 32, 16, 0, 0, 1.0, 1.0, "row"),
    (80, 48, 7, 0, 1, 0.5, 2.0, "row"),
    (60, 20, 9, 1, 0, 2.0, 0.25, "full"),
    (48, 64, 12, 1, 1, 1.0, 1.0, "col"),
]


@pytest.mark.parametrize("m,k,n,ta,tb,alpha,beta,bias", GEMM_CASES)
def test_cube_gemm_with_bias(m, k, n, ta, tb, alpha, beta, bias):
    r = rng(2)
    a = r.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = r.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c = r.standard_normal({"row": (n,), "full": (m, n), "col": (m, 1)}[bias]).astype(np.float32) * 3
    model = make_model([node("Gemm", ["a", "b", "c"], ["y"], transA=ta, transB=tb, alpha=alpha, beta=beta)],
                       [("a", list(a.shape))], ["y"], {"b": b, "c": c})
    _, res = run(model, {"a": a})
    A = w64(a).T if ta else w64(a)
    B = w64(b).T if tb else w64(b)
    # alpha/beta are powers of two here, so the FP32-vs-FP16 question for attributes does not arise
    want = r16(alpha * (A @ B) + beta * w64(c))
    bound = fp32_dot_bound(k + 1, alpha * (np.abs(A) @ np.abs(B)) + np.abs(beta * w64(c)))
    assert_fp16_equal(res.outputs["y"], want, slack=bound)


def conv2d_reference(x, w, b, strides, pads, dilations, group):
    """Direct 2-D convolution (NCHW, OIHW) in float64 via einsum over padded windows.

    pads = (top, left, bottom, right) as in ONNX."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, hh, ww = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilations
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    ho = (hh + pads[0] + pads[2] - dh * (kh - 1) - 1) // sh + 1
    wo = (ww + pads[1] + pads[3] - dw * (kw - 1) - 1) // sw + 1
    rows = np.arange(ho)[:, None] * sh + np.arange(kh)[None, :] * dh  # (ho, kh)
    cols = np.arange(wo)[:, None] * sw + np.arange(kw)[None, :] * dw  # (wo, kw)
    win = xp[:, :, rows[:, :, None, None], cols[None, None, :, :]]  # (n, c, ho, kh, wo, kw)
    og = o // group
    out = np.empty((n, o, ho, wo))
    for g in range(group):
        out[:, g * og:(g + 1) * og] = np.einsum("nchiwj,ocij->nohw", win[:, g * cg:(g + 1) * cg],
                                                 w[g * og:(g + 1) * og])
    if b is not None:
        out += np.asarray(b, np.float64)[None, :, None, None]
    return out


CONV_CASES = [  # x shape, w shape, strides, pads (t, l, b, r), dilations, group, bias
    ((1, 3, 9, 9), (8, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, True),
    ((2, 4, 10, 7), (6, 2, 3, 2), (2, 1), (1, 0, 2, 1), (1, 1), 2, True),
    ((2, 8, 12, 12), (8, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 8, False),
    ((2, 4, 13, 13), (4, 4, 3, 3), (1, 1), (0, 0, 0, 0), (2, 2), 1, True),
    ((2, 16, 6, 6), (12, 16, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, True),
    ((2, 64, 8, 8), (8, 64, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 1, False),  # K = 1600 per output
]


@pytest.mark.parametrize("xs,wsh,strides,pads,dil,group,bias", CONV_CASES)
def test_cube_conv2d(xs, wsh, strides, pads, dil, group, bias):
    r = rng(3)
    x = r.standard_normal(xs).astype(np.float32)
    w = (r.standard_normal(wsh) / math.sqrt(np.prod(wsh[1:]))).astype(np.float32)
    b = r.standard_normal(wsh[0]).astype(np.float32) if bias else None
    inits = {"w": w, **({"b": b} if bias else {})}
    model = make_model([node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], strides=list(strides),
                             pads=list(pads), dilations=list(dil), group=group, kernel_shape=list(wsh[2:]))],
                       [("x", list(xs))], ["y"], inits)
    ref = conv2d_reference(w64(x), w64(w), None if b is None else w64(b), strides, pads, dil, group)
    # the numpy convolution itself agrees with onnxruntime (FP32) on the same FP16-rounded operands
    plain = make_model(model.graph.node, [("x", list(xs))], ["y"],
                       {"w": w64(w).astype(np.float32), **({"b": w64(b).astype(np.float32)} if bias else {})})
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ort_y = ort.InferenceSession(plain.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": w64(x).astype(np.float32)})[0]
    np.testing.assert_allclose(ref, ort_y, rtol=1e-4, atol=1e-4)
    _, res = run(model, {"x": x})
    k = int(np.prod(wsh[1:])) + int(bias)
    terms = conv2d_reference(np.abs(w64(x)), np.abs(w64(w)), None if b is None else np.abs(w64(b)), strides, pads,
                             dil, group)
    assert_fp16_equal(res.outputs["y"], r16(ref), slack=fp32_dot_bound(k, terms))


# ----------------------------------------------------------------------------------- vector elementwise
_erf = np.vectorize(math.erf, otypes=[np.float64])
UNARY = {
    "Sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), lambda x: x * 3),
    "Exp": (np.exp, lambda x: x * 3),
    "Erf": (_erf, lambda x: x),
    "Tanh": (np.tanh, lambda x: x * 2),
    "Sqrt": (np.sqrt, lambda x: np.abs(x) * 10),
    "Log": (np.log, lambda x: np.abs(x) + 0.01),
    "Neg": (np.negative, lambda x: x * 100),
    "Relu": (lambda x: np.maximum(x, 0), lambda x: x),
    "Reciprocal": (lambda x: 1.0 / x, lambda x: np.sign(x) * (np.abs(x) + 0.1)),
}
BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
}


@pytest.mark.parametrize("shape", [(4, 33), (2, 3, 17)])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_vector_unary(op, shape):
    fn, prep = UNARY[op]
    x = prep(rng(4).standard_normal(shape)).astype(np.float32)
    model = make_model([node(op, ["x"], ["y"])], [("x", list(shape))], ["y"])
    _, res = run(model, {"x": x})
    with np.errstate(over="ignore"):
        want = r16(fn(w64(x)))
    assert_fp16_equal(res.outputs["y"], want, what=op)


@pytest.mark.parametrize("a_shape,b_shape", [((4, 33), (4, 33)), ((2, 3, 17), (3, 1))])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_vector_binary(op, a_shape, b_shape):
    r = rng(5)
    a = (r.standard_normal(a_shape) * 20).astype(np.float32)
    b = r.standard_normal(b_shape).astype(np.float32)
    if op == "Div":
        b = np.sign(b) * (np.abs(b) + 0.25)
    b = b.astype(np.float32)
    model = make_model([node(op, ["a", "b"], ["y"])], [("a", list(a_shape)), ("b", list(b_shape))], ["y"])
    _, res = run(model, {"a": a, "b": b})
    assert_fp16_equal(res.outputs["y"], r16(BINARY[op](w64(a), w64(b))), what=op)


def test_vector_chain_rounds_at_every_unfused_kernel():
    """Unfused elementwise kernels each round their output: y = f16(f16(x*a) + b), not f16(x*a + b)."""
    r = rng(6)
    x = (r.standard_normal((8, 64)) * 7).astype(np.float32)
    a = r.standard_normal((64,)).astype(np.float32)
    c = r.standard_normal((64,)).astype(np.float32)
    model = make_model([node("Mul", ["x", "a"], ["t"]), node("Add", ["t", "c"], ["y"])], [("x", [8, 64])], ["y"],
                       {"a": a, "c": c})
    _, res = run(model, {"x": x}, fusion_level=0)
    want = r16(w64(r16(w64(x) * w64(a))) + w64(c))
    once = r16(w64(x) * w64(a) + w64(c))
    assert np.any(want != once)  # the model really distinguishes the two
    assert_fp16_equal(res.outputs["y"], want)
    assert res.dumps["t"].dtype == F16


# --------------------------------------------------------------- vector_reduction: high_precision mode
def _hp(**cfg):
    return dict(op_select_implmode="high_precision", **cfg)


def softmax64(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layernorm64(x, scale, bias, eps, axis=-1):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * scale + bias


@pytest.mark.parametrize("shape,axes,keep", [((4, 96), [-1], 1), ((2, 6, 40), [1, 2], 0), ((3, 5, 7), [0], 1)])
def test_reduction_high_precision_reducemean(shape, axes, keep):
    x = (rng(7).standard_normal(shape) * 4 + 1).astype(np.float32)
    model = make_model([node("ReduceMean", ["x"], ["y"], axes=axes, keepdims=keep)], [("x", list(shape))], ["y"])
    _, res = run(model, {"x": x}, **_hp())
    want = r16(w64(x).mean(axis=tuple(axes), keepdims=bool(keep)))
    assert_fp16_equal(res.outputs["y"], want)


@pytest.mark.parametrize("shape,axes", [((4, 96), [-1]), ((2, 6, 40), [1])])
def test_reduction_high_precision_reducesum(shape, axes):
    x = (rng(8).standard_normal(shape) * 4).astype(np.float32)
    model = make_model([node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], [("x", list(shape))], ["y"],
                       {"axes": np.array(axes, np.int64)})
    _, res = run(model, {"x": x}, **_hp())
    assert_fp16_equal(res.outputs["y"], r16(w64(x).sum(axis=tuple(axes), keepdims=True)))


@pytest.mark.parametrize("shape,axis", [((4, 100), -1), ((2, 8, 3), 1), ((2, 3, 257), -1)])
def test_reduction_high_precision_softmax(shape, axis):
    x = (rng(9).standard_normal(shape) * 3).astype(np.float32)
    model = make_model([node("Softmax", ["x"], ["y"], axis=axis)], [("x", list(shape))], ["y"])
    _, res = run(model, {"x": x}, **_hp())
    assert_fp16_equal(res.outputs["y"], r16(softmax64(w64(x), axis)))


@pytest.mark.parametrize("shape", [(4, 64), (2, 5, 768), (3, 33)])
def test_reduction_high_precision_layernorm(shape):
    r = rng(10)
    x = (r.standard_normal(shape) * 3 + 2).astype(np.float32)
    scale = r.uniform(0.5, 1.5, shape[-1]).astype(np.float32)
    bias = r.standard_normal(shape[-1]).astype(np.float32)
    model = make_model([node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1, epsilon=1e-5)],
                       [("x", list(shape))], ["y"], {"scale": scale, "bias": bias})
    _, res = run(model, {"x": x}, **_hp())
    # scale and bias are constants: rounded to FP16 at compile time
    want = r16(layernorm64(w64(x), w64(scale), w64(bias), 1e-5))
    assert_fp16_equal(res.outputs["y"], want)


# ----------------------------------------------------------- vector_reduction: high_performance mode
def add16(a, b) -> F16:
    """One FP16 addition: exact sum (float64 holds any sum of two FP16 values exactly), rounded once."""
    return F16(float(a) + float(b))


def lane_sum16(values) -> F16:
    """The documented FP16 accumulation (toolkit/runtime/fp16_accum.py docstring), with explicit loops:
    element i goes to lane i mod LANES; each lane adds its elements sequentially, every add rounded to FP16;
    then the lanes are summed pairwise (0+1, 2+3, ... repeatedly), every add rounded."""
    lanes = [F16(0.0)] * LANES
    for i, v in enumerate(values):
        lanes[i % LANES] = add16(lanes[i % LANES], v)
    while len(lanes) > 1:
        lanes = [add16(lanes[j], lanes[j + 1]) for j in range(0, len(lanes), 2)]
    return lanes[0]


def rows_last(x, axes):
    """Move ``axes`` last and flatten them: (rows..., n), plus the kept-dims shape."""
    axes = sorted(a % x.ndim for a in axes)
    rest = [a for a in range(x.ndim) if a not in axes]
    n = int(np.prod([x.shape[a] for a in axes]))
    kept = [1 if a in axes else s for a, s in enumerate(x.shape)]
    return np.transpose(x, rest + axes).reshape(-1, n), kept


def hp_reduce_sum(x16, axes):
    flat, kept = rows_last(x16, axes)
    return np.array([lane_sum16(row) for row in flat], F16).reshape(kept)


def hp_reduce_mean(x16, axes):
    flat, kept = rows_last(x16, axes)
    n = flat.shape[1]
    return np.array([F16(float(lane_sum16(row)) / n) for row in flat], F16).reshape(kept)


def hp_softmax(x16, axis=-1):
    """Statistics in FP16: exp values stored as FP16 addends, their sum accumulated in FP16."""
    xt = np.moveaxis(x16, axis, -1)
    out = np.empty_like(xt)
    for idx in np.ndindex(xt.shape[:-1]):
        row = xt[idx].astype(np.float64)
        m = row.max()
        e = [F16(math.exp(float(F16(v - m)))) for v in row]
        s = float(lane_sum16(e))
        out[idx] = [F16(float(v) / s) for v in e]
    return np.moveaxis(out, -1, axis)


def hp_layernorm(x16, scale16, bias16, eps, axis=-1):
    """LayerNormalization over axes [axis, rank): mean and variance accumulated in FP16 (lane sums),
    the centred values and their squares stored as FP16 addends; the normalisation itself in FP32."""
    axis %= x16.ndim
    lead, n = x16.shape[:axis], int(np.prod(x16.shape[axis:]))
    flat = x16.reshape(-1, n)
    sc, bi = scale16.reshape(-1), bias16.reshape(-1)
    out = np.empty_like(flat)
    for r_, row in enumerate(flat):
        mean = F16(float(lane_sum16(row)) / n)
        d = [F16(float(v) - float(mean)) for v in row]
        var = F16(float(lane_sum16([F16(float(v) * float(v)) for v in d])) / n)
        den = math.sqrt(float(var) + eps)
        out[r_] = [F16(float(v) / den * float(s_) + float(b_)) for v, s_, b_ in zip(d, sc, bi)]
    return out.reshape(lead + x16.shape[axis:])


def hp_cumsum(x16, axis, exclusive=False, reverse=False):
    """CumSum accumulated in FP16: one running FP16 sum per line, every add rounded."""
    xt = np.moveaxis(x16, axis, -1)
    out = np.empty_like(xt)
    for idx in np.ndindex(xt.shape[:-1]):
        row = list(xt[idx])
        order = range(len(row) - 1, -1, -1) if reverse else range(len(row))
        acc = F16(0.0)
        for i in order:
            if exclusive:
                out[idx + (i,)] = acc
                acc = add16(acc, row[i])
            else:
                acc = add16(acc, row[i])
                out[idx + (i,)] = acc
    return np.moveaxis(out, -1, axis)


def _perf(**cfg):
    return dict(op_select_implmode="high_performance", **cfg)


@pytest.mark.parametrize("shape,axes", [((4, 100), [-1]), ((2, 3, 40), [1, 2]), ((6, 5), [0]), ((2, 1000), [1])])
def test_reduction_high_performance_reducesum(shape, axes):
    x = (rng(11).standard_normal(shape) * 30 + 10).astype(np.float32)
    if shape == (2, 1000):
        x = (rng(11).standard_normal(shape) * 0.3 + 3).astype(np.float32)
    model = make_model([node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], [("x", list(shape))], ["y"],
                       {"axes": np.array(axes, np.int64)})
    _, res = run(model, {"x": x}, **_perf())
    want = hp_reduce_sum(r16(x), axes)
    fp32 = r16(w64(x).sum(axis=tuple(axes), keepdims=True))
    if shape == (2, 1000):
        assert np.any(want != fp32)  # this case separates FP16 from FP32 accumulation
    assert_fp16_equal(res.outputs["y"], want, max_ulp=0)


@pytest.mark.parametrize("shape,axes", [((4, 96), [-1]), ((3, 2, 50), [1, 2])])
def test_reduction_high_performance_reducemean(shape, axes):
    x = (rng(12).standard_normal(shape) * 50 + 20).astype(np.float32)
    model = make_model([node("ReduceMean", ["x"], ["y"], axes=axes, keepdims=1)], [("x", list(shape))], ["y"])
    _, res = run(model, {"x": x}, **_perf())
    assert_fp16_equal(res.outputs["y"], hp_reduce_mean(r16(x), axes), max_ulp=0)


@pytest.mark.parametrize("shape,axis", [((4, 100), -1), ((2, 3, 33), -1), ((2, 40, 3), 1)])
def test_reduction_high_performance_softmax(shape, axis):
    x = (rng(13).standard_normal(shape) * 3).astype(np.float32)
    model = make_model([node("Softmax", ["x"], ["y"], axis=axis)], [("x", list(shape))], ["y"])
    _, res = run(model, {"x": x}, **_perf())
    # 1 ulp: the exp of each element is an FP32 exp in the engine and float64 here
    assert_fp16_equal(res.outputs["y"], hp_softmax(r16(x), axis))


@pytest.mark.parametrize("shape,axis", [((4, 64), -1), ((2, 3, 200), -1), ((2, 3, 20), 1)])
def test_reduction_high_performance_layernorm(shape, axis):
    r = rng(14)
    x = (r.standard_normal(shape) * 3 + 5).astype(np.float32)
    norm_shape = shape[axis % len(shape):]
    scale = r.uniform(0.5, 1.5, norm_shape).astype(np.float32)
    bias = r.standard_normal(norm_shape).astype(np.float32)
    model = make_model([node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=axis, epsilon=1e-5)],
                       [("x", list(shape))], ["y"], {"scale": scale, "bias": bias})
    _, res = run(model, {"x": x}, **_perf())
    want = hp_layernorm(r16(x), r16(scale), r16(bias), 1e-5, axis)
    assert_fp16_equal(res.outputs["y"], want)


@pytest.mark.parametrize("opset,keep", [(17, 0), (18, 1), (18, 0)])
def test_reduction_high_performance_reducemean_forms(opset, keep):
    """Axes as attribute (opset 17) or as input (opset 18), with and without keepdims."""
    x = (rng(23).standard_normal((3, 4, 50)) * 40 + 30).astype(np.float32)
    if opset >= 18:
        model = make_model([node("ReduceMean", ["x", "ax"], ["y"], keepdims=keep)], [("x", [3, 4, 50])], ["y"],
                           {"ax": np.array([1, 2], np.int64)}, opset=18)
    else:
        model = make_model([node("ReduceMean", ["x"], ["y"], axes=[1, 2], keepdims=keep)], [("x", [3, 4, 50])], ["y"])
    _, res = run(model, {"x": x}, **_perf())
    want = hp_reduce_mean(r16(x), [1, 2])
    assert_fp16_equal(res.outputs["y"], want if keep else want.reshape(3), max_ulp=0)


def test_reduction_high_performance_global_average_pool():
    x = (rng(24).standard_normal((2, 3, 12, 12)) * 20 + 50).astype(np.float32)
    model = make_model([node("GlobalAveragePool", ["x"], ["y"])], [("x", [2, 3, 12, 12])], ["y"])
    _, res = run(model, {"x": x}, **_perf())
    assert_fp16_equal(res.outputs["y"], hp_reduce_mean(r16(x), [2, 3]), max_ulp=0)


def test_reduction_high_performance_sum_square_and_l2():
    x = (rng(25).standard_normal((4, 300)) * 3).astype(np.float32)
    model = make_model([node("ReduceSumSquare", ["x"], ["ss"], axes=[-1], keepdims=1),
                        node("ReduceL2", ["x"], ["l2"], axes=[-1], keepdims=1)], [("x", [4, 300])], ["ss", "l2"])
    _, res = run(model, {"x": x}, **_perf())
    x16 = r16(x)
    squares = np.array([[F16(float(v) * float(v)) for v in row] for row in x16], F16)
    ss = hp_reduce_sum(squares, [-1])
    assert_fp16_equal(res.outputs["ss"], ss, max_ulp=0)
    assert_fp16_equal(res.outputs["l2"], r16(np.sqrt(ss.astype(np.float64))))


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_reduction_high_performance_cumsum(exclusive, reverse):
    x = (rng(26).standard_normal((3, 200)) * 2 + 10).astype(np.float32)
    model = make_model([node("CumSum", ["x", "ax"], ["y"], exclusive=exclusive, reverse=reverse)],
                       [("x", [3, 200])], ["y"], {"ax": np.array(1, np.int64)})
    _, perf = run(model, {"x": x}, **_perf())
    want = hp_cumsum(r16(x), 1, bool(exclusive), bool(reverse))
    assert_fp16_equal(perf.outputs["y"], want, max_ulp=0)
    # high_precision: FP32 running sums, each output rounded once
    _, prec = run(model, {"x": x}, **_hp())
    x64 = w64(x)[:, ::-1] if reverse else w64(x)
    c = np.cumsum(x64, axis=1)
    if exclusive:
        c = np.concatenate([np.zeros((3, 1)), c[:, :-1]], axis=1)
    c = c[:, ::-1] if reverse else c
    assert np.any(r16(c) != want)
    assert_fp16_equal(prec.outputs["y"], r16(c))


def _mean_model(n):
    return make_model([node("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1)], [("x", [2, n])], ["y"])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # FP16 overflow is the point
def test_fp16_accumulation_overflow_property():
    """The mean of 1024 values of 100 is 100, but any FP16 accumulation passes 65504 on the way (102400)."""
    x = np.full((2, 1024), 100.0, np.float32)
    _, perf = run(_mean_model(1024), {"x": x}, **_perf())
    _, prec = run(_mean_model(1024), {"x": x}, **_hp())
    assert np.all(np.isposinf(perf.outputs["y"]))
    assert np.all(prec.outputs["y"] == 100.0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # FP16 overflow is the point
def test_fp16_accumulation_overflow_property_layernorm():
    r = rng(15)
    x = (100.0 + r.standard_normal((2, 1024))).astype(np.float32)
    model = make_model([node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)], [("x", [2, 1024])], ["y"],
                       {"s": np.ones(1024, np.float32), "b": np.zeros(1024, np.float32)})
    _, perf = run(model, {"x": x}, **_perf())
    _, prec = run(model, {"x": x}, **_hp())
    assert not np.isfinite(perf.outputs["y"]).any()  # inf mean -> nan outputs
    assert np.isfinite(prec.outputs["y"]).all()
    assert_fp16_equal(prec.outputs["y"], r16(layernorm64(w64(x), 1.0, 0.0, 1e-5)))


def test_fp16_accumulation_swamps_small_addends():
    """2048 + 1 = 2048 in FP16: a sum of one large value and many ones keeps growing in FP32 only."""
    x = np.ones((1, 16 * 300), np.float32)
    x[0, :16] = 2048.0  # every lane starts at 2048, then each +1 is lost
    model = make_model([node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], [("x", list(x.shape))], ["y"],
                       {"axes": np.array([1], np.int64)})
    _, perf = run(model, {"x": x}, **_perf())
    _, prec = run(model, {"x": x}, **_hp())
    assert float(perf.outputs["y"][0, 0]) == 16 * 2048.0
    assert float(prec.outputs["y"][0, 0]) == float(r16(16 * 2048.0 + 16 * 299))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # FP16 overflow is the point
def test_implmode_per_op_override():
    """optypelist_for_implmode: op_select_implmode applies only to the listed op types; the others keep the
    default, high_performance (the converter's --optypelist_for_implmode)."""
    x = np.full((2, 1024), 100.0, np.float32)
    model = make_model([node("ReduceMean", ["x"], ["m"], axes=[-1], keepdims=1, name="rmean"),
                        node("ReduceSum", ["x", "ax"], ["s"], keepdims=1, name="rsum")],
                       [("x", [2, 1024])], ["m", "s"], {"ax": np.array([-1], np.int64)})
    sess, res = run(model, {"x": x}, op_select_implmode="high_precision", optypelist_for_implmode=["ReduceSum"])
    modes = {k.name: k.implmode for k in sess.plan.kernels if k.fusion != "cast"}
    assert modes == {"rmean": "high_performance", "rsum": "high_precision"}
    assert np.all(np.isposinf(res.outputs["m"]))  # FP16 accumulation passes 65504
    assert np.all(np.isposinf(res.outputs["s"]))  # FP32 sum 102400, rounded once to FP16: inf as well
    model_s = make_model([node("ReduceSum", ["x", "ax"], ["s"], keepdims=1, name="rsum")], [("x", [2, 1024])],
                         ["s"], {"ax": np.array([-1], np.int64)})
    x4 = np.concatenate([x[:, :512], -x[:, 512:]], axis=1)  # +100 x 512 then -100 x 512: FP32 sum 0
    _, on = run(model_s, {"x": x4}, op_select_implmode="high_precision", optypelist_for_implmode=["ReduceMean"])
    _, off = run(model_s, {"x": x4}, op_select_implmode="high_precision", optypelist_for_implmode=["ReduceSum"])
    assert np.all(off.outputs["s"] == 0.0)
    assert np.array_equal(on.outputs["s"], hp_reduce_sum(r16(x4), [-1]).astype(np.float32))


# ------------------------------------------------------------------------------------- data movement
def _bits(a):
    return np.asarray(a).astype(F16).view(np.uint16)


DATA_MOVEMENT = {
    "Transpose": ([node("Transpose", ["x"], ["y"], perm=[2, 0, 1])], {}, lambda x: np.transpose(x, (2, 0, 1))),
    "Reshape": ([node("Reshape", ["x", "shape"], ["y"])], {"shape": np.array([-1, 12], np.int64)},
                lambda x: x.reshape(-1, 12)),
    "Concat": ([node("Concat", ["x", "x2"], ["y"], axis=1)], {}, None),
    "Slice": ([node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
              {"st": np.array([1, 0], np.int64), "en": np.array([3, 12], np.int64),
               "ax": np.array([1, 2], np.int64), "sp": np.array([1, 3], np.int64)}, lambda x: x[:, 1:3, 0:12:3]),
    "Gather": ([node("Gather", ["x", "idx"], ["y"], axis=2)], {"idx": np.array([5, 0, 5, 11], np.int64)},
               lambda x: x[:, :, [5, 0, 5, 11]]),
}


@pytest.mark.parametrize("op", sorted(DATA_MOVEMENT))
def test_data_movement_bit_exact(op):
    nodes, inits, fn = DATA_MOVEMENT[op]
    r = rng(16)
    # values that are not FP16-representable, plus extremes that must survive untouched once rounded
    x = (r.standard_normal((2, 3, 12)) * 1000).astype(np.float32)
    x.flat[:4] = [65504.0, -65504.0, 6e-8, -1e-7]
    x2 = r.standard_normal((2, 5, 12)).astype(np.float32)
    inputs = [("x", [2, 3, 12])] + ([("x2", [2, 5, 12])] if op == "Concat" else [])
    feeds = {"x": x, **({"x2": x2} if op == "Concat" else {})}
    model = make_model(nodes, inputs, ["y"], inits)
    _, res = run(model, feeds)
    want = np.concatenate([r16(x), r16(x2)], axis=1) if op == "Concat" else fn(r16(x))
    assert res.outputs["y"].shape == want.shape
    assert np.array_equal(_bits(res.outputs["y"]), want.view(np.uint16))


# ------------------------------------------------------------------- fusion keeps FP32 intermediates
def _overflowing_chain():
    r = rng(17)
    x = r.uniform(1.0, 2.0, (4, 64)).astype(np.float32)
    w = r.uniform(10.0, 20.0, (64, 8)).astype(np.float32)  # x @ w ~ 1400; * 100 ~ 140000 > 65504
    model = make_model([node("MatMul", ["x", "w"], ["mm"], name="mm"),
                        node("Mul", ["mm", "c100"], ["big"], name="mul100"),
                        node("Mul", ["big", "c001"], ["y"], name="mul001")],
                       [("x", [4, 64])], ["y"], {"w": w, "c100": np.float32(100.0), "c001": np.float32(0.01)})
    return model, x, w


@pytest.mark.parametrize("level", [1, 2])
def test_buffer_fusion_keeps_fp32_intermediates(level):
    model, x, w = _overflowing_chain()
    sess, res = run(model, {"x": x}, fusion_level=level)
    fused = [k for k in sess.plan.kernels if k.fusion != "cast"]
    assert len(fused) == 1 and fused[0].nodes == ["mm", "mul100", "mul001"]
    # FP32 intermediates: the 140000 never meets FP16; constants are FP16-rounded (0.01 -> 0.0100021...)
    want = r16(np.matmul(w64(x), w64(w)) * 100.0 * w64(np.float32(0.01)))
    assert np.isfinite(want).all()
    assert_fp16_equal(res.outputs["y"], want)
    assert "big" not in res.dumps and "mm" not in res.dumps  # never written to the arena


def test_unfused_chain_overflows_at_kernel_outputs():
    model, x, w = _overflowing_chain()
    _, res = run(model, {"x": x}, fusion_level=0)
    assert np.all(np.isposinf(res.dumps["big"]))
    assert np.all(np.isposinf(res.outputs["y"]))


def test_graph_fused_gelu_keeps_fp32_intermediates():
    """A fused GELU kernel computes its formula in FP32 with FP16-rounded constants and rounds once."""
    # |x| <= 3: further into the negative tail 1 + erf(x/sqrt2) cancels in FP32, and onnxruntime's FP32 erf
    # (within one FP32 ulp) then decides many FP16 ulps of the tiny result; no float64 reference can follow
    x = rng(18).uniform(-3.0, 3.0, (4, 256)).astype(np.float32)
    s2 = np.float32(math.sqrt(2.0))  # 1.41421354 -> 1.4140625 in FP16
    nodes = [node("Div", ["x", "s2"], ["d"], name="div"), node("Erf", ["d"], ["e"], name="erf"),
             node("Add", ["e", "one"], ["e1"], name="add"), node("Mul", ["x", "e1"], ["xe"], name="mul"),
             node("Mul", ["xe", "half"], ["y"], name="half")]
    model = make_model(nodes, [("x", [4, 256])], ["y"], {"s2": s2, "one": np.float32(1), "half": np.float32(.5)})
    sess, fused = run(model, {"x": x}, fusion_level=2)
    assert [k.rule for k in sess.plan.kernels if k.fusion != "cast"] == ["GeluFusionPass"]
    xx, c = w64(x), float(r16(s2))
    want_fused = r16(xx * (1.0 + _erf(xx / c)) * 0.5)
    assert_fp16_equal(fused.outputs["y"], want_fused)
    _, unfused = run(model, {"x": x}, fusion_level=0)
    want_unfused = r16(w64(r16(w64(r16(1.0 + w64(r16(_erf(w64(r16(xx / c))))))) * xx)) * 0.5)
    assert np.any(want_unfused != want_fused)
    assert_fp16_equal(unfused.outputs["y"], want_unfused)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf in the unfused Softmax
def test_fused_attention_keeps_scores_fp32():
    """Shared case c05: Q.K^T exceeds 65504 before the 1/64 scale. Fused, the scores stay FP32 and the
    result is finite; unfused, the stored FP16 scores are inf and Softmax gives nan.

    q and k are small integers, so the FP32 dot products (< 2**24) and the power-of-two scale are exact and
    the float64 reference is not blurred by FP32 rounding of scores near 66000."""
    r = rng(27)
    q = (32 + (r.random((1, 2, 8, 64)) < 0.1)).astype(np.float32)
    k = (32 + (r.random((1, 2, 64, 8)) < 0.1)).astype(np.float32)
    v = r.standard_normal((1, 2, 8, 64)).astype(np.float32)
    mask = np.where(np.tril(np.ones((8, 8))) > 0, 0.0, -1e4).astype(np.float32)[None, None]
    nodes = [node("MatMul", ["q", "kt"], ["s"], name="qk"), node("Mul", ["s", "sc"], ["ss"], name="scale"),
             node("Add", ["ss", "mask"], ["sm_in"], name="mask"), node("Softmax", ["sm_in"], ["p"], name="sm"),
             node("MatMul", ["p", "v"], ["y"], name="pv")]
    model = make_model(nodes, [("q", [1, 2, 8, 64]), ("kt", [1, 2, 64, 8]), ("v", [1, 2, 8, 64]),
                               ("mask", [1, 1, 8, 8])], ["y"], {"sc": np.float32(1 / 64)})
    feeds = {"q": q, "kt": k, "v": v, "mask": mask}
    scores = w64(q) @ w64(k)
    assert scores.min() > F16_MAX
    p = softmax64(scores / 64 + w64(mask), -1)
    sess, fused = run(model, feeds, fusion_level=2)
    assert [kk.rule for kk in sess.plan.kernels if kk.fusion != "cast"] == ["AttentionFusionPass"]
    assert_fp16_equal(fused.outputs["y"], r16(p @ w64(v)), slack=fp32_dot_bound(8, p @ np.abs(w64(v))))
    _, unfused = run(model, feeds, fusion_level=0)
    assert np.isposinf(unfused.dumps["s"]).all()
    assert np.isnan(unfused.outputs["y"]).all()


# ---------------------------------------------------------------------------------- overflow mode
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # FP16 overflow is the point
def test_saturation_clamps_instead_of_inf():
    x = (rng(19).standard_normal((4, 50)) * 100).astype(np.float32)
    model = make_model([node("Mul", ["x", "k"], ["y"])], [("x", [4, 50])], ["y"], {"k": np.float32(1000.0)})
    _, sat = run(model, {"x": x}, overflow_mode="saturation")
    _, ieee = run(model, {"x": x}, overflow_mode="inf_nan")
    exact = w64(x) * 1000.0
    assert np.any(exact > F16_MAX) and np.any(exact < -F16_MAX)
    assert_fp16_equal(sat.outputs["y"], r16(np.clip(exact, -F16_MAX, F16_MAX)), max_ulp=0)
    assert_fp16_equal(ieee.outputs["y"], r16(exact), max_ulp=0)
    assert np.isinf(ieee.outputs["y"]).sum() == np.sum(np.abs(exact) > F16_MAX + 16)  # 65520 rounds to inf


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # FP16 overflow is the point
def test_saturation_applies_to_inputs_and_constants():
    x = np.array([[1e5, -1e6, 3.0, 70000.0]], np.float32)
    model = make_model([node("Relu", ["x"], ["r"]), node("Div", ["x", "big"], ["q"])], [("x", [1, 4])],
                       ["r", "q"], {"big": np.float32(1e5)})
    _, sat = run(model, {"x": x}, overflow_mode="saturation")
    _, ieee = run(model, {"x": x}, overflow_mode="inf_nan")
    np.testing.assert_array_equal(sat.outputs["r"], [[65504.0, 0.0, 3.0, 65504.0]])
    np.testing.assert_array_equal(ieee.outputs["r"], [[np.inf, 0.0, 3.0, np.inf]])
    # the constant 1e5 becomes 65504 (saturation) or inf (IEEE) at compile time; inputs clamp / overflow too
    np.testing.assert_array_equal(sat.outputs["q"], r16(np.array([[65504, -65504, 3.0, 65504]]) / 65504.0))
    np.testing.assert_array_equal(ieee.outputs["q"][0, 2], 0.0)  # 3 / inf
    assert np.isnan(ieee.outputs["q"][0, 0]) and np.isnan(ieee.outputs["q"][0, 1])  # inf / inf


@pytest.mark.parametrize("implmode", [
    "high_precision",
    "high_performance",
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # FP16 overflow is the point
def test_saturation_in_reductions(implmode):
    """A sum of 1024 x 100 = 102400: inf under inf_nan, clamped to 65504 under saturation, in either mode."""
    x = np.full((2, 1024), 100.0, np.float32)
    model = make_model([node("ReduceSum", ["x", "ax"], ["y"], keepdims=1)], [("x", [2, 1024])], ["y"],
                       {"ax": np.array([-1], np.int64)})
    _, ieee = run(model, {"x": x}, op_select_implmode=implmode, overflow_mode="inf_nan")
    assert np.isposinf(ieee.outputs["y"]).all()
    _, sat = run(model, {"x": x}, op_select_implmode=implmode, overflow_mode="saturation")
    np.testing.assert_array_equal(sat.outputs["y"], np.full((2, 1), F16_MAX, np.float32))


@pytest.mark.parametrize("implmode", [
    "high_precision",
    "high_performance",
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_saturation_of_constants_in_reductions(implmode):
    x = (rng(28).standard_normal((2, 8))).astype(np.float32)
    scale = np.full(8, 1e5, np.float32)
    model = make_model([node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)], [("x", [2, 8])], ["y"],
                       {"s": scale, "b": np.zeros(8, np.float32)})
    _, sat = run(model, {"x": x}, op_select_implmode=implmode, overflow_mode="saturation")
    assert np.isfinite(sat.outputs["y"]).all() and np.abs(sat.outputs["y"]).max() <= F16_MAX


# --------------------------------------------------------------------------------------- constants
def test_constants_rounded_at_compile_time():
    x = (rng(20).standard_normal((8, 128)) * 50).astype(np.float32)
    c = np.float32(0.1)
    model = make_model([node("Mul", ["x", "c"], ["y"])], [("x", [8, 128])], ["y"], {"c": c})
    _, res = run(model, {"x": x})
    want = r16(w64(x) * w64(c))
    assert np.any(want != r16(w64(x) * float(c)))  # rounding the constant is observable on this data
    assert_fp16_equal(res.outputs["y"], want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # FP16 overflow is the point
def test_constant_overflowing_fp16_becomes_inf():
    x = np.array([[1.0, -2.0, 0.5]], np.float32)
    model = make_model([node("Div", ["x", "c"], ["y"])], [("x", [1, 3])], ["y"], {"c": np.float32(1e5)})
    _, res = run(model, {"x": x})
    # x / f16(1e5) = x / inf = 0, not the representable 1e-5 that an FP32 constant would give
    assert np.array_equal(res.outputs["y"], np.zeros((1, 3), np.float32))
    _, fp32 = run(model, {"x": x}, precision_mode="force_fp32")
    np.testing.assert_allclose(fp32.outputs["y"], x / np.float32(1e5), rtol=1e-6)


# ------------------------------------------------------------------------------ graph input/output types
def test_graph_io_dtypes():
    x = (rng(21).standard_normal((3, 10)) * 10).astype(np.float32)
    model = make_model([node("Mul", ["x", "x"], ["sq"], name="sq"), node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
                        node("Cast", ["sq"], ["sq16"], to=TensorProto.FLOAT16)],
                       [("x", [3, 10])], ["sq", ("am", TensorProto.INT64), ("sq16", TensorProto.FLOAT16)])
    sess, res = run(model, {"x": x})
    plan = sess.plan
    assert plan.tensors["x"].dtype == "float32"  # the feed is stored as given ...
    reader = next(k for k in plan.kernels if k.name == "sq")
    assert [plan.tensors[t].dtype for t in reader.inputs] == ["float16"]  # ... and read as FP16
    assert res.outputs["sq"].dtype == np.float32  # stored FP16, returned as declared float32
    assert plan.tensors["sq"].dtype == "float16" and res.dumps["sq"].dtype == F16
    assert_fp16_equal(res.outputs["sq"], r16(w64(x) ** 2), max_ulp=0)
    assert res.outputs["am"].dtype == np.int64
    np.testing.assert_array_equal(res.outputs["am"], np.argmax(r16(x), axis=1))
    assert res.outputs["sq16"].dtype == F16
    np.testing.assert_array_equal(res.outputs["sq16"], r16(w64(x) ** 2))


def test_fp16_graph_input_kept_fp16():
    x = (rng(22).standard_normal((2, 8)) * 10).astype(F16)
    model = make_model([node("Add", ["x", "x"], ["y"])], [("x", [2, 8], TensorProto.FLOAT16)],
                       [("y", TensorProto.FLOAT16)])
    sess, res = run(model, {"x": x})
    assert not [k for k in sess.plan.kernels if k.fusion == "cast"]
    assert res.outputs["y"].dtype == F16
    np.testing.assert_array_equal(res.outputs["y"], r16(x.astype(np.float64) * 2))


def test_default_mixlists_follow_the_contract():
    from toolkit.precision.contract import default_mixlists, op_class
    lists = default_mixlists()
    assert {"MatMul", "Conv", "Gemm"} <= lists["white-list"]
    assert {"Softmax", "ReduceMean", "LayerNormalization", "Exp", "Log", "Pow"} <= lists["black-list"]
    assert op_class("Relu").default_list == "gray" and op_class("Add").default_list == "gray"
