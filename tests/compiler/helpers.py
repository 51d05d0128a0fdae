"""Helpers of the compiler tests (not a test module): model builders and the comparison of a compiled model with
onnxruntime running the original, unfused one."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

from tests.graphs import N, make_model
from toolkit.config.schema import Config
from toolkit.engine import Session

BN_RULE = "ConvBatchnormFusionPass"
UB_RULE = "TbeCubeElemwiseFusionPass"


def f32(a):
    return np.asarray(a, np.float32)


def compile_run(model, feeds=None, **cfg):
    """(Session, outputs or None); force_fp32 unless the config says otherwise."""
    cfg.setdefault("precision_mode", "force_fp32")
    sess = Session(model, Config(**cfg))
    return sess, (sess.run(feeds).outputs if feeds is not None else None)


def ort_outputs(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def assert_matches_ort(model, feeds, outs, rtol=1e-5):
    """Every output within ``rtol`` of onnxruntime, relative to the output's scale (max |ref|)."""
    ref = ort_outputs(model, feeds)
    assert set(ref) == set(outs)
    for name, want in ref.items():
        got = outs[name]
        assert got.shape == want.shape and got.dtype == want.dtype
        scale = float(np.max(np.abs(want))) or 1.0
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=name)


def kernels(sess, include_casts=False):
    return [k for k in sess.plan.kernels if include_casts or k.fusion != "cast"]


def fusion_json(sess, level="graph_fusion"):
    return sess.compiled.fusion_result_json()["0_0"][level]


def pass_log(sess, name):
    return next(p for p in sess.compiled.passes if p.name == name)


def all_node_names(model):
    return [n.name for n in model.graph.node]


def rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------- BN folding
def bn_params(c, r):
    return {"bn_s": f32(r.uniform(0.5, 2.0, c)), "bn_b": f32(r.standard_normal(c)),
            "bn_m": f32(r.standard_normal(c)), "bn_v": f32(r.uniform(0.1, 2.0, c))}


BN = ["bn_s", "bn_b", "bn_m", "bn_v"]
EPS = 1e-3  # not the default 1e-5: a fold that ignored the attribute would be visible


def _bn_case(kind, r):
    """(model, feeds) for a producer kind (conv*, convT_g*, gemm_tb*) followed by BatchNormalization."""
    if kind.startswith("convT"):
        group = 2 if kind.endswith("g2") else 1
        w = f32(r.standard_normal((4, 6 // group, 3, 3)))
        inits = {"w": w, "b": f32(r.standard_normal(6)), **bn_params(6, r)}
        nodes = [N("ConvTranspose", ["x", "w", "b"], ["c"], "conv", strides=[2, 2], group=group)]
        shape = [2, 4, 5, 5]
    elif kind.startswith("conv"):
        group = 2 if kind.endswith("g2") else 1
        w = f32(r.standard_normal((6, 4 // group, 3, 3)))
        bias = kind.startswith("conv_bias")
        inits = {"w": w, **({"b": f32(r.standard_normal(6))} if bias else {}), **bn_params(6, r)}
        nodes = [N("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], "conv", pads=[1, 1, 1, 1], group=group)]
        shape = [2, 4, 7, 7]
    else:  # gemm_tb0 / gemm_tb1
        tb = int(kind[-1])
        w = f32(r.standard_normal((5, 16) if tb else (16, 5)))
        inits = {"w": w, "b": f32(r.standard_normal(5)), **bn_params(5, r)}
        nodes = [N("Gemm", ["x", "w", "b"], ["c"], "conv", transB=tb, alpha=0.7, beta=1.3)]
        shape = [3, 16]
    nodes.append(N("BatchNormalization", ["c"] + BN, ["y"], "bn", epsilon=EPS))
    model = make_model(nodes, [("x", shape)], ["y"], inits)
    return model, {"x": f32(r.standard_normal(shape))}


# -------------------------------------------------------------------------------------- graph fusions
def layernorm_model(hidden, affine=True, square="pow", axis=-1, opset=17, eps=1e-5, rows=(2, 3), recip=False):
    def rmean(i, o, name):
        if opset >= 18:
            return N("ReduceMean", [i, "axes"], [o], name)
        return N("ReduceMean", [i], [o], name, axes=[axis])
    nodes = [rmean("x", "mu", "ln_mean"), N("Sub", ["x", "mu"], ["d"], "ln_sub"),
             N("Pow", ["d", "two"], ["sq"], "ln_pow") if square == "pow" else N("Mul", ["d", "d"], ["sq"], "ln_sq"),
             rmean("sq", "var", "ln_var"), N("Add", ["var", "eps"], ["ve"], "ln_addeps"),
             N("Sqrt", ["ve"], ["sd"], "ln_sqrt")]
    if recip:
        nodes += [N("Reciprocal", ["sd"], ["inv"], "ln_recip"), N("Mul", ["d", "inv"], ["n"], "ln_div")]
    else:
        nodes.append(N("Div", ["d", "sd"], ["n"], "ln_div"))
    r = rng(hidden)
    inits = {"two": f32(2.0), "eps": f32(eps)}
    if opset >= 18:
        inits["axes"] = np.array([axis], np.int64)
    out = "n"
    if affine:
        nodes += [N("Mul", ["n", "gamma"], ["ng"], "ln_gamma"), N("Add", ["ng", "beta"], ["y"], "ln_beta")]
        inits.update(gamma=f32(r.uniform(0.5, 1.5, hidden)), beta=f32(r.standard_normal(hidden)))
        out = "y"
    shape = list(rows) + [hidden]
    model = make_model(nodes, [("x", shape)], [out], inits, opset)
    return model, {"x": f32(r.standard_normal(shape) * 3 + 1)}


def assert_single_fusion(sess, model, rule, op_type):
    ks = kernels(sess)
    assert len(ks) == 1, [(k.name, k.nodes) for k in ks]
    k = ks[0]
    assert k.rule == rule and k.op_type == op_type and k.fusion == "graph"
    assert sorted(k.nodes) == sorted(all_node_names(model))
    assert fusion_json(sess)[rule] == {"match_times": "1", "effect_times": "1"}


def rmsnorm_model(square="pow", recip=False, gamma=True, hidden=16):
    nodes = [N("Pow", ["x", "two"], ["sq"], "rms_pow") if square == "pow" else N("Mul", ["x", "x"], ["sq"], "rms_sq"),
             N("ReduceMean", ["sq"], ["ms"], "rms_mean", axes=[-1]), N("Add", ["ms", "eps"], ["ve"], "rms_addeps"),
             N("Sqrt", ["ve"], ["sd"], "rms_sqrt")]
    if recip:
        nodes += [N("Reciprocal", ["sd"], ["inv"], "rms_recip"), N("Mul", ["x", "inv"], ["n"], "rms_mul")]
    else:
        nodes += [N("Div", ["x", "sd"], ["n"], "rms_div")]
    r = rng(4)
    inits = {"two": f32(2.0), "eps": f32(1e-6)}
    out = "n"
    if gamma:
        nodes.append(N("Mul", ["n", "gamma"], ["y"], "rms_gamma"))
        inits["gamma"] = f32(r.uniform(0.5, 1.5, hidden))
        out = "y"
    model = make_model(nodes, [("x", [2, 3, hidden])], [out], inits)
    return model, {"x": f32(r.standard_normal((2, 3, hidden)) * 2)}


SQRT2 = math.sqrt(2.0)


def gelu_erf_model(order, one=1.0, sqrt2=SQRT2):
    if order == "half_x_first":  # (0.5 * x) * (1 + erf(x / sqrt2))
        nodes = [N("Mul", ["x", "half"], ["hx"], "g_half"), N("Div", ["x", "s2"], ["d"], "g_div"),
                 N("Erf", ["d"], ["e"], "g_erf"), N("Add", ["e", "one"], ["e1"], "g_add"),
                 N("Mul", ["hx", "e1"], ["y"], "g_mul")]
    else:  # x * (0.5 * (1 + erf(x / sqrt2)))
        nodes = [N("Div", ["x", "s2"], ["d"], "g_div"), N("Erf", ["d"], ["e"], "g_erf"),
                 N("Add", ["e", "one"], ["e1"], "g_add"), N("Mul", ["e1", "half"], ["h1"], "g_half"),
                 N("Mul", ["x", "h1"], ["y"], "g_mul")]
    model = make_model(nodes, [("x", [4, 32])], ["y"], {"half": f32(0.5), "s2": f32(sqrt2), "one": f32(one)})
    return model, {"x": f32(rng(5).standard_normal((4, 32)) * 3)}


def gelu_tanh_model():
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), as PyTorch/HF export it."""
    nodes = [N("Pow", ["x", "three"], ["p3"], "gt_pow"), N("Mul", ["p3", "c"], ["cp"], "gt_mulc"),
             N("Add", ["x", "cp"], ["inner"], "gt_add"), N("Mul", ["inner", "k"], ["ki"], "gt_mulk"),
             N("Tanh", ["ki"], ["t"], "gt_tanh"), N("Add", ["t", "one"], ["t1"], "gt_add1"),
             N("Mul", ["x", "t1"], ["xt"], "gt_mulx"), N("Mul", ["xt", "half"], ["y"], "gt_half")]
    model = make_model(nodes, [("x", [4, 32])], ["y"], {"three": f32(3.0), "c": f32(0.044715),
                                                        "k": f32(math.sqrt(2 / math.pi)), "one": f32(1.0),
                                                        "half": f32(0.5)})
    return model, {"x": f32(rng(6).standard_normal((4, 32)) * 3)}


def silu_model():
    model = make_model([N("Sigmoid", ["x"], ["s"], "silu_sig"), N("Mul", ["x", "s"], ["y"], "silu_mul")],
                       [("x", [4, 32])], ["y"])
    return model, {"x": f32(rng(7).standard_normal((4, 32)) * 4)}


def hardswish_model(form):
    if form == "hardsigmoid":
        nodes = [N("HardSigmoid", ["x"], ["s"], "hs_hsig", alpha=1 / 6, beta=0.5), N("Mul", ["x", "s"], ["y"], "hs_mul")]
        inits = {}
    else:  # x * Clip(x + 3, 0, 6) / 6
        nodes = [N("Add", ["x", "three"], ["a"], "hs_add"), N("Clip", ["a", "zero", "six"], ["c"], "hs_clip"),
                 N("Mul", ["x", "c"], ["m"], "hs_mul"), N("Div", ["m", "six"], ["y"], "hs_div")]
        inits = {"three": f32(3.0), "zero": f32(0.0), "six": f32(6.0)}
    model = make_model(nodes, [("x", [4, 32])], ["y"], inits)
    return model, {"x": f32(rng(8).standard_normal((4, 32)) * 4)}


ACTIVATIONS = {
    "gelu_erf_half_x_first": (lambda: gelu_erf_model("half_x_first"), "GeluFusionPass", "Gelu"),
    "gelu_erf_half_inner": (lambda: gelu_erf_model("half_inner"), "GeluFusionPass", "Gelu"),
    "silu": (silu_model, "SwishFusionPass", "Swish"),
    "hardswish_hardsigmoid": (lambda: hardswish_model("hardsigmoid"), "HardSwishFusionPass", "HardSwish"),
    "hardswish_clip": (lambda: hardswish_model("clip"), "HardSwishFusionPass", "HardSwish"),
}


def attention_model(scale="mul", mask=True, axis=-1):
    nodes = [N("MatMul", ["q", "kt"], ["s"], "att_qk")]
    t, inits = "s", {}
    if scale:
        op, c = ("Mul", 0.125) if scale == "mul" else ("Div", 8.0)
        nodes.append(N(op, [t, "sc"], ["ss"], "att_scale"))
        inits["sc"], t = f32(c), "ss"
    if mask:
        nodes.append(N("Add", [t, "mask"], ["sm"], "att_mask"))
        t = "sm"
    nodes += [N("Softmax", [t], ["p"], "att_softmax", axis=axis), N("MatMul", ["p", "v"], ["y"], "att_pv")]
    shapes = [("q", [1, 2, 8, 16]), ("kt", [1, 2, 16, 8]), ("v", [1, 2, 8, 16])] + ([("mask", [1, 1, 8, 8])] if mask else [])
    r = rng(9)
    feeds = {n: f32(r.standard_normal(s)) for n, s in shapes}
    if mask:
        feeds["mask"] = f32(np.where(np.tril(np.ones((8, 8))) > 0, 0.0, -1e4)[None, None])
    return make_model(nodes, shapes, ["y"], inits), feeds


# --------------------------------------------------------------------- fusion levels and the switch file
def _mixed_model():
    """Conv -> BN -> Relu -> decomposed LayerNorm (last axis) -> SiLU: one candidate for every fusion kind."""
    r = rng(14)
    ln, _ = layernorm_model(8, affine=True, square="pow")
    nodes = [N("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]),
             N("BatchNormalization", ["c"] + BN, ["bn_out"], "bn", epsilon=EPS),
             N("Relu", ["bn_out"], ["x_ln"], "relu")]
    for n in ln.graph.node:
        n2 = helper.make_node(n.op_type, [("x_ln" if i == "x" else i) for i in n.input], list(n.output), name=n.name)
        n2.attribute.extend(n.attribute)
        nodes.append(n2)
    nodes += [N("Sigmoid", ["y"], ["sg"], "silu_sig"), N("Mul", ["y", "sg"], ["out"], "silu_mul")]
    inits = {i.name: numpy_helper.to_array(i) for i in ln.graph.initializer}
    inits.update({"w": f32(r.standard_normal((4, 3, 3, 3))), **bn_params(4, r)})
    model = make_model(nodes, [("x", [1, 3, 8, 8])], ["out"], inits)
    return model, {"x": f32(r.standard_normal((1, 3, 8, 8)))}


LN_NODES = ["ln_mean", "ln_sub", "ln_pow", "ln_var", "ln_addeps", "ln_sqrt", "ln_div", "ln_gamma", "ln_beta"]


def _groups(sess):
    return {k.rule: k.nodes for k in kernels(sess) if k.rule}


# ----------------------------------------------------------------------------------- precision modes
def _precision_model():
    """x -> MatMul (white) -> Relu (gray) -> Softmax (black) -> Mul (gray) -> Exp (black) -> y."""
    r = rng(15)
    nodes = [N("MatMul", ["x", "w"], ["mm"], "matmul"), N("Relu", ["mm"], ["r"], "relu"),
             N("Softmax", ["r"], ["sm"], "softmax"), N("Mul", ["sm", "c"], ["m"], "mul"), N("Exp", ["m"], ["y"], "exp")]
    model = make_model(nodes, [("x", [4, 16])], ["y"], {"w": f32(r.standard_normal((16, 8))), "c": f32(3.0)})
    return model, {"x": f32(r.standard_normal((4, 16)))}


ORDER = ["matmul", "relu", "softmax", "mul", "exp"]
PRECISION_CASES = {  # config -> (precision per node in ORDER, cast kernels as (source tensor, target))
    "force_fp32": (dict(precision_mode="force_fp32"), "32 32 32 32 32", []),
    "must_keep_origin_dtype": (dict(precision_mode="must_keep_origin_dtype"), "32 32 32 32 32", []),
    "force_fp16": (dict(precision_mode="force_fp16"), "16 16 16 16 16", [("x", "fp16")]),
    "allow_fp32_to_fp16": (dict(precision_mode="allow_fp32_to_fp16"), "16 32 32 32 32",
                           [("x", "fp16"), ("mm", "fp32")]),
    "allow_mix_precision": (dict(precision_mode="allow_mix_precision"), "16 16 32 32 32",
                            [("x", "fp16"), ("r", "fp32")]),
    "keep_dtype_name": (dict(precision_mode="force_fp16", keep_dtype=["relu"]), "16 32 16 16 16",
                        [("x", "fp16"), ("mm", "fp32"), ("r", "fp16")]),
    "keep_dtype_optype": (dict(precision_mode="force_fp16", keep_dtype=["OpType::Softmax"]), "16 16 32 16 16",
                          [("x", "fp16"), ("r", "fp32"), ("sm", "fp16")]),
    "mixlist_black_remove": (dict(modify_mixlist={"black-list": {"to-remove": ["Softmax"]}}), "16 16 16 16 32",
                             [("x", "fp16"), ("m", "fp32")]),
    "mixlist_white_add": (dict(modify_mixlist={"white-list": {"to-add": ["Softmax"]}}), "16 16 16 16 32",
                          [("x", "fp16"), ("m", "fp32")]),
    "mixlist_black_add": (dict(modify_mixlist={"black-list": {"to-add": ["Relu"]}}), "16 32 32 32 32",
                          [("x", "fp16"), ("mm", "fp32")]),
    "mixlist_white_remove": (dict(modify_mixlist={"white-list": {"to-remove": ["MatMul"]}}), "32 32 32 32 32", []),
}
