"""Builders for the FP16 / fusion / memory fault kinds of /work/shared/cases/fp16 (c01..c10).

Each builder makes a graph EQUIVALENT to one shared case (same node names and topology, so a diagnosis can
be checked by name) but with its parameters — shapes, hidden sizes, value scales, constants, variants of the
pattern (Pow vs. Mul for a square, Mul vs. Div for a scale, ReduceMean vs. GlobalAveragePool) — and its
inputs generated here, from a seed. Tests sweep the parameters so they cover the fault kind, not one instance.

A builder returns :class:`Built`: the FP32 ONNX model (opset 17), a feed {input name: float32 array}, the
node names a correct diagnosis may name as the origin (``culprits``) and the node chains a fix keeps in
FP32 (``keep``). Inputs are rounded to FP16-representable values where the fault kind is not about the input
(so the only FP16 effect is the one the case is about).

:func:`reference` runs the model in plain onnxruntime with every intermediate tensor exposed, so tests can
assert the fault's precondition (e.g. "the reference value at the culprit passes 65504") independently of
the toolkit.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

FP16_MAX = 65504.0
OPSET = 17
F = TensorProto.FLOAT


@dataclass
class Built:
    """A generated fault-kind instance (see module docstring)."""

    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    culprits: list[str]
    keep: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def save(self, folder: Path, stem: str = "model") -> tuple[Path, Path]:
        """Write ``<stem>.onnx`` and ``<stem>.npz`` into ``folder``; returns both paths."""
        folder.mkdir(parents=True, exist_ok=True)
        mp, ip = folder / f"{stem}.onnx", folder / f"{stem}.npz"
        onnx.save(self.model, mp)
        np.savez(ip, **self.feeds)
        return mp, ip


# ------------------------------------------------------------------ helpers
def _c(name, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _model(nodes, inputs, outputs, inits, name) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def fp16_exact(a: np.ndarray) -> np.ndarray:
    """float32 array of FP16-representable values (so reading it as FP16 is exact)."""
    return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float32)


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of ``model`` (inputs, intermediates, outputs) from plain onnxruntime in FP32."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m = onnx.shape_inference.infer_shapes(m)
    have = {o.name for o in m.graph.output}
    known = {v.name: v for v in m.graph.value_info}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(known[o] if o in known else helper.make_empty_tensor_value_info(o))
                have.add(o)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    out = dict(zip(names, sess.run(names, feeds)))
    out.update(feeds)
    return out


def _outliers(rng, shape, base: float, peak: float, count: int) -> np.ndarray:
    """N(0, base) data with ``count`` entries per row set to ±peak (signs random)."""
    x = rng.standard_normal(shape).astype(np.float32) * base
    rows = x.reshape(-1, shape[-1])
    for r in rows:
        idx = rng.choice(shape[-1], size=count, replace=False)
        r[idx] = peak * rng.choice([-1.0, 1.0], size=count)
    return fp16_exact(rows.reshape(shape))


# ------------------------------------------------------------------ c01 RMSNorm sum of squares
RMS_CHAIN = ["pow_sq", "mean_sq", "add_eps", "sqrt_rms", "div_rms"]


def rmsnorm(hidden: int = 256, rows: int = 4, peak: float = 400.0, base: float = 1.0, square: str = "pow",
            eps: float = 1e-6, seed: int = 0) -> Built:
    """y = x / sqrt(mean(x**2) + eps) * gamma over the last axis; some |x| = ``peak`` (> 256 overflows x**2)."""
    rng = np.random.default_rng(seed)
    x = _outliers(rng, (1, rows, hidden), base, peak, count=max(1, hidden // 64))
    gamma = fp16_exact(1.0 + 0.1 * rng.standard_normal(hidden))
    if square == "pow":
        sq = helper.make_node("Pow", ["x", "two"], ["sq"], name="pow_sq")
    elif square == "mul":
        sq = helper.make_node("Mul", ["x", "x"], ["sq"], name="pow_sq")
    else:
        raise ValueError(square)
    nodes = [
        sq,
        helper.make_node("ReduceMean", ["sq"], ["ms"], name="mean_sq", axes=[-1], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["ms_eps"], name="add_eps"),
        helper.make_node("Sqrt", ["ms_eps"], ["rms"], name="sqrt_rms"),
        helper.make_node("Div", ["x", "rms"], ["normed"], name="div_rms"),
        helper.make_node("Mul", ["normed", "gamma"], ["y"], name="mul_gamma"),
    ]
    inits = [_c("eps", eps), _c("gamma", gamma)] + ([_c("two", 2.0)] if square == "pow" else [])
    shape = (1, rows, hidden)
    m = _model(nodes, [_vi("x", shape)], [_vi("y", shape)], inits, "rmsnorm")
    return Built(m, {"x": x}, ["pow_sq"], keep=list(RMS_CHAIN), meta={"square_tensor": "sq"})


# ------------------------------------------------------------------ c02 decomposed LayerNorm
LN_CHAIN = ["ln_sq", "ln_var", "ln_var_eps", "ln_std"]


def layernorm(hidden: int = 256, rows: int = 64, peak: float = 500.0, base: float = 1.0, square: str = "pow",
              affine: bool = True, eps: float = 1e-5, seed: int = 0) -> Built:
    """Decomposed LayerNorm (ReduceMean→Sub→Pow→ReduceMean→Add→Sqrt→Div[→Mul→Add]) over the last axis,
    with outliers |x| = ``peak`` so (x - mean)**2 passes 65504 in FP16."""
    rng = np.random.default_rng(seed)
    x = _outliers(rng, (1, rows, hidden), base, peak, count=max(1, hidden // 128))
    if square == "pow":
        sq = helper.make_node("Pow", ["centered", "two"], ["sq"], name="ln_sq")
    elif square == "mul":
        sq = helper.make_node("Mul", ["centered", "centered"], ["sq"], name="ln_sq")
    else:
        raise ValueError(square)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], name="ln_mean", axes=[-1], keepdims=1),
        helper.make_node("Sub", ["x", "mean"], ["centered"], name="ln_centered"),
        sq,
        helper.make_node("ReduceMean", ["sq"], ["var"], name="ln_var", axes=[-1], keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["var_eps"], name="ln_var_eps"),
        helper.make_node("Sqrt", ["var_eps"], ["std"], name="ln_std"),
        helper.make_node("Div", ["centered", "std"], ["normed" if affine else "y"], name="ln_normed"),
    ]
    inits = [_c("eps", eps)] + ([_c("two", 2.0)] if square == "pow" else [])
    if affine:
        nodes += [helper.make_node("Mul", ["normed", "gamma"], ["scaled"], name="ln_scaled"),
                  helper.make_node("Add", ["scaled", "beta"], ["y"], name="ln_y")]
        inits += [_c("gamma", fp16_exact(1.0 + 0.1 * rng.standard_normal(hidden))),
                  _c("beta", fp16_exact(0.1 * rng.standard_normal(hidden)))]
    shape = (1, rows, hidden)
    m = _model(nodes, [_vi("x", shape)], [_vi("y", shape)], inits, "layernorm")
    return Built(m, {"x": x}, ["ln_sq"], keep=list(LN_CHAIN), meta={"square_tensor": "sq"})


# ------------------------------------------------------------------ c03 SE block pooling
def se_block(channels: int = 32, hw: int = 64, level: float = 20.0, pool: str = "reducemean", seed: int = 0) -> Built:
    """Squeeze-excitation: pool over H,W → 1x1 Conv → Sigmoid → scale x. Inputs are positive around
    ``level`` so the spatial sum (hw*hw*level) passes 65504 when accumulated in FP16."""
    rng = np.random.default_rng(seed)
    x = fp16_exact(level * (0.75 + 0.25 * rng.random((1, channels, hw, hw))))
    w = fp16_exact(rng.standard_normal((channels, channels, 1, 1)) * (1.0 / channels) / level)
    if pool == "reducemean":
        p = helper.make_node("ReduceMean", ["x"], ["pooled"], name="se_pool", axes=[2, 3], keepdims=1)
    elif pool == "gap":
        p = helper.make_node("GlobalAveragePool", ["x"], ["pooled"], name="se_pool")
    else:
        raise ValueError(pool)
    nodes = [
        p,
        helper.make_node("Conv", ["pooled", "w"], ["gate_logits"], name="se_fc"),
        helper.make_node("Sigmoid", ["gate_logits"], ["gate"], name="se_sigmoid"),
        helper.make_node("Mul", ["x", "gate"], ["y"], name="se_scale"),
    ]
    shape = (1, channels, hw, hw)
    m = _model(nodes, [_vi("x", shape)], [_vi("y", shape)], [_c("w", w)], "se_block")
    return Built(m, {"x": x}, ["se_pool"], keep=["se_pool"])


# ------------------------------------------------------------------ c04 attention mask constant
def attention_mask(heads: int = 4, seq: int = 16, big_neg: float = -1e12, masked: int = 4, seed: int = 0) -> Built:
    """probs = Softmax(scores + (1 - mask) * big_neg); the last ``masked`` key positions are masked."""
    rng = np.random.default_rng(seed)
    scores = fp16_exact(rng.standard_normal((1, heads, seq, seq)))
    mask = np.ones((1, 1, 1, seq), np.float32)
    mask[..., seq - masked:] = 0.0
    nodes = [
        helper.make_node("Sub", ["one", "mask"], ["inv_mask"], name="mask_invert"),
        helper.make_node("Mul", ["inv_mask", "big_neg"], ["bias"], name="mask_scale"),
        helper.make_node("Add", ["scores", "bias"], ["masked"], name="mask_add"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="softmax", axis=-1),
    ]
    m = _model(nodes, [_vi("scores", (1, heads, seq, seq)), _vi("mask", (1, 1, 1, seq))],
               [_vi("probs", (1, heads, seq, seq))], [_c("one", 1.0), _c("big_neg", big_neg)], "attention_mask")
    return Built(m, {"scores": scores, "mask": mask}, ["mask_scale"], keep=["mask_scale"],
                 meta={"constant": "big_neg"})


# ------------------------------------------------------------------ c05 QK^T overflow
def attention_scores(heads: int = 2, seq: int = 128, dim: int = 64, level: float = 40.0, scale_op: str = "mul",
                     seed: int = 0) -> Built:
    """Transpose(K) → MatMul(Q, K^T) → scale (Mul 1/sqrt(d) or Div sqrt(d)) → Softmax → MatMul(·, V).
    Q and K are ``level`` ± noise, so q·k ≈ dim * level**2 passes 65504 before the scale."""
    rng = np.random.default_rng(seed)
    shape = (1, heads, seq, dim)
    q = fp16_exact(level + rng.uniform(-1.0, 1.0, shape))
    k = fp16_exact(level + rng.uniform(-1.0, 1.0, shape))
    v = fp16_exact(rng.standard_normal(shape))
    if scale_op == "mul":
        sc = helper.make_node("Mul", ["qk", "scale"], ["qk_scaled"], name="qk_scale")
        sval = 1.0 / np.sqrt(dim)
    elif scale_op == "div":
        sc = helper.make_node("Div", ["qk", "scale"], ["qk_scaled"], name="qk_scale")
        sval = np.sqrt(dim)
    else:
        raise ValueError(scale_op)
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], name="k_transpose", perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"], name="qk_matmul"),
        sc,
        helper.make_node("Softmax", ["qk_scaled"], ["probs"], name="attn_softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["y"], name="pv_matmul"),
    ]
    m = _model(nodes, [_vi("q", shape), _vi("k", shape), _vi("v", shape)], [_vi("y", shape)],
               [_c("scale", sval)], "attention_scores")
    return Built(m, {"q": q, "k": k, "v": v}, ["qk_matmul"], keep=["qk_matmul", "qk_scale"],
                 meta={"attention_nodes": ["qk_matmul", "qk_scale", "attn_softmax", "pv_matmul"]})


# ------------------------------------------------------------------ c06 eps underflow
def normalize_eps(rows: int = 4, dim: int = 128, eps: float = 1e-12, zero_row: int = 0, seed: int = 0) -> Built:
    """y = x / (ReduceL2(x, axis 1) + eps) with row ``zero_row`` all zeros (0/0 once eps rounds to 0)."""
    rng = np.random.default_rng(seed)
    x = fp16_exact(rng.standard_normal((rows, dim)))
    x[zero_row] = 0.0
    nodes = [
        helper.make_node("ReduceL2", ["x"], ["norm"], name="l2_norm", axes=[1], keepdims=1),
        helper.make_node("Add", ["norm", "eps"], ["norm_eps"], name="add_eps"),
        helper.make_node("Div", ["x", "norm_eps"], ["y"], name="normalize"),
    ]
    m = _model(nodes, [_vi("x", (rows, dim))], [_vi("y", (rows, dim))], [_c("eps", eps)], "normalize")
    return Built(m, {"x": x}, ["add_eps", "normalize"], keep=["add_eps", "normalize"],
                 meta={"constant": "eps", "zero_row": zero_row})


# ------------------------------------------------------------------ c07 / c09 Conv + BatchNorm
def conv_bn(channels_in: int = 1, channels: int = 8, hw: int = 32, ksize: int = 3, relu_between: bool = True,
            negative_scale: bool = True, seed: int = 0) -> Built:
    """Conv → [Relu →] BatchNormalization. With ``relu_between`` and negative BN scales, folding the BN
    into the Conv across the Relu would be wrong (c07); without the Relu, folding is legal."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, channels_in, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((channels, channels_in, ksize, ksize)) / np.sqrt(channels_in * ksize * ksize)).astype(np.float32)
    s = (rng.uniform(0.8, 1.3, channels) * (-1.0 if negative_scale else 1.0)).astype(np.float32)
    b = np.full(channels, 0.5, np.float32)
    mean = (0.1 * rng.standard_normal(channels)).astype(np.float32)
    var = rng.uniform(0.5, 1.3, channels).astype(np.float32)
    pad = ksize // 2
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], name="conv", pads=[pad] * 4)]
    bn_in = "conv"
    if relu_between:
        nodes.append(helper.make_node("Relu", ["conv"], ["act"], name="relu"))
        bn_in = "act"
    nodes.append(helper.make_node("BatchNormalization", [bn_in, "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["y"],
                                  name="bn"))
    inits = [_c("w", w), _c("bn_scale", s), _c("bn_bias", b), _c("bn_mean", mean), _c("bn_var", var)]
    m = _model(nodes, [_vi("x", (1, channels_in, hw, hw))], [_vi("y", (1, channels, hw, hw))], inits, "conv_bn")
    return Built(m, {"x": x}, [], meta={"w": w, "s": s, "b": b, "mean": mean, "var": var, "pad": pad})


def bn_variance(channels: int = 4, hw: int = 16, big_var: float = 1e5, tiny_var: float = 6e-8,
                eps: float = 1e-8, seed: int = 0) -> Built:
    """Conv(1x1) → BatchNormalization whose running variance holds ``big_var`` (FP16 inf when > 65504) and
    ``tiny_var`` (FP16 subnormal or zero). The BN scales are chosen so the folded weights stay moderate."""
    rng = np.random.default_rng(seed)
    x = fp16_exact(rng.standard_normal((1, channels, hw, hw)))
    w = fp16_exact(rng.standard_normal((channels, channels, 1, 1)) / np.sqrt(channels))
    var = np.ones(channels, np.float32)
    big_c, tiny_c = int(rng.integers(channels)), None
    var[big_c] = big_var
    if tiny_var is not None:
        tiny_c = (big_c + 1) % channels
        var[tiny_c] = tiny_var
    s = (np.sqrt(var.astype(np.float64) + eps) * rng.uniform(0.5, 2.0, channels)).astype(np.float32)
    b = (0.1 * rng.standard_normal(channels)).astype(np.float32)
    m = np.zeros(channels, np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv"], name="conv"),
        helper.make_node("BatchNormalization", ["conv", "s", "b", "m", "v"], ["y"], name="bn", epsilon=eps),
    ]
    inits = [_c("w", w), _c("s", s), _c("b", b), _c("m", m), _c("v", var)]
    shape = (1, channels, hw, hw)
    model = _model(nodes, [_vi("x", shape)], [_vi("y", shape)], inits, "bn_variance")
    return Built(model, {"x": x}, ["bn"], keep=["bn"],
                 meta={"constant": "v", "big_channel": big_c, "tiny_channel": tiny_c})


# ------------------------------------------------------------------ c08 softplus
def softplus(width: int = 64, xmax: float = 30.0, xmin: float = -10.0, seed: int = 0) -> Built:
    """y = Log(Exp(x) + 1) over x in [xmin, xmax]; exp passes 65504 above x ≈ 11.09."""
    rng = np.random.default_rng(seed)
    x = np.linspace(xmin, xmax, width, dtype=np.float32)
    rng.shuffle(x)
    x = fp16_exact(x.reshape(1, width))
    nodes = [
        helper.make_node("Exp", ["x"], ["e"], name="exp"),
        helper.make_node("Add", ["e", "one"], ["e1"], name="add_one"),
        helper.make_node("Log", ["e1"], ["y"], name="log"),
    ]
    m = _model(nodes, [_vi("x", (1, width))], [_vi("y", (1, width))], [_c("one", 1.0)], "softplus")
    return Built(m, {"x": x}, ["exp"], keep=["exp", "add_one", "log"])


# ------------------------------------------------------------------ c10 repeated runs
def transpose_layernorm(channels: int = 192, width: int = 197, seed: int = 0) -> Built:
    """NCHW → NHWC Transpose → LayerNormalization(last axis) → NCHW Transpose (a ViT-style block edge)."""
    rng = np.random.default_rng(seed)
    x = fp16_exact(rng.standard_normal((1, channels, 1, width)) * 3.0)
    g = fp16_exact(1.0 + 0.1 * rng.standard_normal(channels))
    b = fp16_exact(0.1 * rng.standard_normal(channels))
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], name="to_nhwc", perm=[0, 2, 3, 1]),
        helper.make_node("LayerNormalization", ["xt", "g", "b"], ["ln"], name="layernorm", axis=-1),
        helper.make_node("Transpose", ["ln"], ["y"], name="to_nchw", perm=[0, 3, 1, 2]),
    ]
    shape = (1, channels, 1, width)
    m = _model(nodes, [_vi("x", shape)], [_vi("y", shape)], [_c("g", g), _c("b", b)], "transpose_layernorm")
    return Built(m, {"x": x}, [])


# ------------------------------------------------------------------ a planted compile-stage fault
@contextlib.contextmanager
def planted_pass(target: str, factor: float):
    """Register (for the with-block only) a compiler pass after graph_fusion that rescales the constant read by
    node ``target`` at compile time."""
    from toolkit.compiler import registry, stages
    from toolkit.compiler.context import PassResult

    def run(ctx):
        node = ctx.graph.by_name[target]
        cname = next(i for i in node.input if ctx.graph.const(i) is not None)
        ctx.graph.consts[cname] = (ctx.graph.consts[cname] * np.float32(factor)).astype(np.float32)
        return PassResult(1, [f"rescaled {cname} of {target} by {factor}"])

    old_order, had = stages.STRUCTURE, "planted_rescale" in registry.PASSES
    registry.register_pass("planted_rescale", requires=("shapes",))(run)
    i = old_order.index("graph_fusion") + 1
    stages.STRUCTURE = old_order[:i] + ("planted_rescale",) + old_order[i:]
    try:
        yield
    finally:
        stages.STRUCTURE = old_order
        if not had:
            registry.PASSES.pop("planted_rescale", None)
