"""Compiler passes and fusion rules, each as a unit (toolkit/compiler/passes/*, toolkit/compiler/rules/*).

Numerical checks compare the engine (force_fp32, so only the pass under test can change the result) with
onnxruntime running the original, unfused model. Structural checks read the compiled plan: kernels, their
provenance (original node names), rule names, the converter-format fusion_result.json counts, and the pass
logs, which must give the reason for every refusal.
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.graphs import N, make_model
from toolkit.config import Config
from toolkit.engine import Session
from toolkit.errors import ConfigError

BN_RULE = "ConvBatchnormFusionPass"
UB_RULE = "TbeCubeElemwiseFusionPass"


# ----------------------------------------------------------------------------------------------- helpers


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


@pytest.mark.parametrize("kind", ["conv", "conv_bias", "conv_bias_g2", "convT_g1", "convT_g2", "gemm_tb0", "gemm_tb1"])
def test_bn_folding(kind):
    model, feeds = _bn_case(kind, rng(1))
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs, rtol=1e-5)
    ks = kernels(sess)
    assert len(ks) == 1
    assert ks[0].nodes == ["conv", "bn"] and ks[0].rule == BN_RULE
    assert ks[0].op_type == model.graph.node[0].op_type
    assert "BatchNormalization" not in [n.op_type for n in sess.compiled.model.graph.node]
    assert fusion_json(sess)[BN_RULE] == {"match_times": "1", "effect_times": "1"}


@pytest.mark.parametrize("level", [0, 1, 2])
def test_bn_not_folded_across_relu(level):
    """Shared case c07: Conv -> Relu -> BN must stay unfused (folding would move BN before the Relu)."""
    r = rng(2)
    model = make_model([N("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"], "relu"),
                        N("BatchNormalization", ["r"] + BN, ["y"], "bn", epsilon=EPS)],
                       [("x", [1, 4, 6, 6])], ["y"], {"w": f32(r.standard_normal((6, 4, 3, 3))), **bn_params(6, r)})
    feeds = {"x": f32(r.standard_normal((1, 4, 6, 6)))}
    sess, outs = compile_run(model, feeds, fusion_level=level)
    assert_matches_ort(model, feeds, outs)
    bn_kernels = [k for k in kernels(sess) if "bn" in k.nodes]
    assert len(bn_kernels) == 1 and bn_kernels[0].nodes == ["bn"] and bn_kernels[0].op_type == "BatchNormalization"
    assert all(k.rule != BN_RULE for k in kernels(sess))
    assert "BatchNormalization" in [n.op_type for n in sess.compiled.model.graph.node]


def test_bn_not_folded_when_conv_output_has_second_reader():
    r = rng(3)
    model = make_model([N("Conv", ["x", "w"], ["c"], "conv"), N("BatchNormalization", ["c"] + BN, ["y"], "bn"),
                        N("Sigmoid", ["c"], ["z"], "sig")],
                       [("x", [1, 4, 6, 6])], ["y", "z"], {"w": f32(r.standard_normal((6, 4, 3, 3))), **bn_params(6, r)})
    feeds = {"x": f32(r.standard_normal((1, 4, 6, 6)))}
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert [k.nodes for k in kernels(sess)] == [["conv"], ["bn"], ["sig"]]
    log = pass_log(sess, "fold_batchnorm").log
    assert any("refused" in ln and "conv" in ln and "bn" in ln and "other readers" in ln for ln in log), log
    assert fusion_json(sess)[BN_RULE] == {"match_times": "1", "effect_times": "0"}


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


@pytest.mark.parametrize("hidden,affine,square,opset,recip", [
    (8, True, "pow", 17, False), (64, False, "mul", 17, False), (768, True, "mul", 17, False),
    (32, True, "pow", 18, False), (16, True, "pow", 17, True)])
def test_layernorm_fusion(hidden, affine, square, opset, recip):
    model, feeds = layernorm_model(hidden, affine, square, opset=opset, recip=recip)
    sess, outs = compile_run(model, feeds)
    assert_single_fusion(sess, model, "LayerNormFusionPass", "LayerNorm")
    assert_matches_ort(model, feeds, outs)


def test_layernorm_over_non_last_axis_refused():
    model, feeds = layernorm_model(8, axis=1)
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert all(k.rule is None for k in kernels(sess)) and len(kernels(sess)) == len(model.graph.node)
    assert fusion_json(sess)["LayerNormFusionPass"] == {"match_times": "1", "effect_times": "0"}
    log = pass_log(sess, "graph_fusion").log
    assert any(ln.startswith("LayerNormFusionPass refused at ln_mean") and "last axis" in ln for ln in log), log


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


@pytest.mark.parametrize("square,recip,gamma", [("pow", False, True), ("mul", True, True), ("pow", True, False)])
def test_rmsnorm_fusion(square, recip, gamma):
    model, feeds = rmsnorm_model(square, recip, gamma)
    sess, outs = compile_run(model, feeds)
    assert_single_fusion(sess, model, "RMSNormFusionPass", "RMSNorm")
    assert_matches_ort(model, feeds, outs)


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


@pytest.mark.parametrize("case", sorted(ACTIVATIONS))
def test_activation_fusion(case):
    build, rule, op_type = ACTIVATIONS[case]
    model, feeds = build()
    sess, outs = compile_run(model, feeds)
    assert_single_fusion(sess, model, rule, op_type)
    assert_matches_ort(model, feeds, outs)


@pytest.mark.parametrize("side_first", [
    False,
    True,
])
def test_activation_fusion_with_a_side_reader_of_x(side_first):
    r = rng(16)
    side = N("Conv", ["x", "w"], ["z"], "side_conv")
    act = [N("Sigmoid", ["x"], ["s"], "silu_sig"), N("Mul", ["x", "s"], ["y"], "silu_mul")]
    model = make_model([side] + act if side_first else act + [side], [("x", [1, 4, 5, 5])], ["y", "z"],
                       {"w": f32(r.standard_normal((4, 4, 1, 1)))})
    feeds = {"x": f32(r.standard_normal((1, 4, 5, 5)))}
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert _groups(sess).get("SwishFusionPass") == ["silu_sig", "silu_mul"]


def test_gelu_tanh_fusion():
    model, feeds = gelu_tanh_model()
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert_single_fusion(sess, model, "GeluTanhFusionPass", "GeluTanh")


@pytest.mark.parametrize("one,sqrt2", [(2.0, SQRT2), (1.0, 2.0)])
def test_non_gelu_with_gelu_op_types_not_fused(one, sqrt2):
    model, feeds = gelu_erf_model("half_inner", one=one, sqrt2=sqrt2)
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert all(k.rule is None for k in kernels(sess))
    assert len(kernels(sess)) == len(model.graph.node)
    assert "GeluFusionPass" not in fusion_json(sess) or fusion_json(sess)["GeluFusionPass"]["effect_times"] == "0"


def test_non_gelu_refusal_is_explained():
    model, feeds = gelu_erf_model("half_inner", one=2.0)
    sess, _ = compile_run(model, feeds)
    log = pass_log(sess, "graph_fusion").log
    assert any("GeluFusionPass" in ln and "g_erf" in ln for ln in log), log
    assert fusion_json(sess).get("GeluFusionPass") == {"match_times": "1", "effect_times": "0"}


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


@pytest.mark.parametrize("scale,mask", [("mul", True), ("div", True), ("mul", False), (None, True), (None, False)])
def test_attention_fusion(scale, mask):
    model, feeds = attention_model(scale, mask)
    sess, outs = compile_run(model, feeds)
    assert_single_fusion(sess, model, "AttentionFusionPass", "Attention")
    assert kernels(sess)[0].op_class == "cube"
    assert_matches_ort(model, feeds, outs)


def test_attention_softmax_over_non_last_axis_refused():
    model, feeds = attention_model("mul", True, axis=2)
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert all(k.rule != "AttentionFusionPass" for k in kernels(sess))
    assert fusion_json(sess)["AttentionFusionPass"] == {"match_times": "1", "effect_times": "0"}
    log = pass_log(sess, "graph_fusion").log
    assert any(ln.startswith("AttentionFusionPass refused at att_softmax") and "axis" in ln for ln in log), log


# -------------------------------------------------------------------------------------- buffer fusion
def test_conv_bias_relu_buffer_fusion():
    r = rng(10)
    model = make_model([N("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]), N("Add", ["c", "b"], ["cb"], "bias"),
                        N("Relu", ["cb"], ["y"], "relu")],
                       [("x", [1, 3, 8, 8])], ["y"], {"w": f32(r.standard_normal((5, 3, 3, 3))),
                                                      "b": f32(r.standard_normal((1, 5, 1, 1)))})
    feeds = {"x": f32(r.standard_normal((1, 3, 8, 8)))}
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    ks = kernels(sess)
    assert len(ks) == 1
    assert ks[0].nodes == ["conv", "bias", "relu"] and ks[0].rule == UB_RULE and ks[0].fusion == "ub"
    assert sorted(ks[0].internal) == ["c", "cb"] and ks[0].outputs == ["y"]
    assert fusion_json(sess, "ub_fusion")[UB_RULE] == {"match_times": "1", "effect_times": "1"}


def test_residual_add_of_earlier_tensor_fuses():
    r = rng(11)
    model = make_model([N("Relu", ["x"], ["r0"], "pre"), N("Conv", ["r0", "w"], ["c"], "conv", pads=[1, 1, 1, 1]),
                        N("Add", ["c", "r0"], ["y"], "residual")],
                       [("x", [1, 4, 6, 6])], ["y"], {"w": f32(r.standard_normal((4, 4, 3, 3)))})
    feeds = {"x": f32(r.standard_normal((1, 4, 6, 6)))}
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert [k.nodes for k in kernels(sess)] == [["pre"], ["conv", "residual"]]
    assert kernels(sess)[1].rule == UB_RULE and sorted(kernels(sess)[1].inputs) == ["r0"]


def test_add_of_tensor_produced_after_the_conv_not_fused():
    r = rng(12)
    model = make_model([N("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]), N("Sigmoid", ["x"], ["s"], "late"),
                        N("Add", ["c", "s"], ["y"], "add")],
                       [("x", [1, 4, 6, 6])], ["y"], {"w": f32(r.standard_normal((4, 4, 3, 3)))})
    feeds = {"x": f32(r.standard_normal((1, 4, 6, 6)))}
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert [k.nodes for k in kernels(sess)] == [["conv"], ["late"], ["add"]]


def test_epilogue_not_fused_when_cube_output_has_two_readers():
    r = rng(13)
    model = make_model([N("MatMul", ["x", "w"], ["m"], "mm"), N("Relu", ["m"], ["y"], "relu"),
                        N("Sigmoid", ["m"], ["z"], "sig")],
                       [("x", [4, 8])], ["y", "z"], {"w": f32(r.standard_normal((8, 8)))})
    feeds = {"x": f32(r.standard_normal((4, 8)))}
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert [k.nodes for k in kernels(sess)] == [["mm"], ["relu"], ["sig"]]


@pytest.mark.parametrize("act", ["silu", "gelu"])
def test_cube_takes_fused_activation_group(act):
    r = rng(17)
    if act == "silu":
        tail = [N("Sigmoid", ["c"], ["s"], "act_sig"), N("Mul", ["c", "s"], ["y"], "act_mul")]
        inits = {}
    else:
        tail = [N("Div", ["c", "s2"], ["d"], "act_div"), N("Erf", ["d"], ["e"], "act_erf"),
                N("Add", ["e", "one"], ["e1"], "act_add"), N("Mul", ["c", "e1"], ["ce"], "act_mul"),
                N("Mul", ["ce", "half"], ["y"], "act_half")]
        inits = {"s2": f32(SQRT2), "one": f32(1.0), "half": f32(0.5)}
    model = make_model([N("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1])] + tail, [("x", [1, 4, 6, 6])],
                       ["y"], {"w": f32(r.standard_normal((4, 4, 3, 3))), **inits})
    feeds = {"x": f32(r.standard_normal((1, 4, 6, 6)))}
    sess, outs = compile_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    ks = kernels(sess)
    assert len(ks) == 1 and ks[0].rule == UB_RULE and sorted(ks[0].nodes) == sorted(all_node_names(model))


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


def test_fusion_level_0_fuses_nothing():
    model, feeds = _mixed_model()
    sess, outs = compile_run(model, feeds, fusion_level=0)
    assert_matches_ort(model, feeds, outs)
    assert [k.nodes for k in kernels(sess)] == [[n] for n in all_node_names(model)]
    assert {p.name: p.ran for p in sess.compiled.passes}["buffer_fusion"] is False


def test_fusion_level_1_folds_bn_and_buffer_fuses_only():
    model, feeds = _mixed_model()
    sess, outs = compile_run(model, feeds, fusion_level=1)
    assert_matches_ort(model, feeds, outs)
    assert _groups(sess) == {UB_RULE: ["conv", "bn", "relu"]}
    assert len(kernels(sess)) == 1 + len(LN_NODES) + 2


def test_fusion_level_2_applies_everything():
    model, feeds = _mixed_model()
    sess, outs = compile_run(model, feeds, fusion_level=2)
    assert_matches_ort(model, feeds, outs)
    assert _groups(sess) == {UB_RULE: ["conv", "bn", "relu"], "LayerNormFusionPass": LN_NODES,
                             "SwishFusionPass": ["silu_sig", "silu_mul"]}
    assert len(kernels(sess)) == 3


def test_fusion_switch_file_turns_single_passes_off(tmp_path):
    model, feeds = _mixed_model()
    switch = {"Switch": {"GraphFusion": {"LayerNormFusionPass": "off"}, "UBFusion": {"ALL": "off"}}}
    (tmp_path / "fusion_switch.json").write_text(json.dumps(switch))
    (tmp_path / "config.json").write_text(json.dumps({"precision_mode": "force_fp32",
                                                      "fusion_switch_file": "fusion_switch.json"}))
    cfg = Config.load(tmp_path / "config.json")  # the switch file path resolves next to the config
    assert cfg.fusion_switch_file == switch
    sess = Session(model, cfg)
    assert_matches_ort(model, feeds, sess.run(feeds).outputs)
    # BN folding is a GraphFusion pass that stays on; LayerNorm and every UB fusion are off; SiLU stays on.
    # (With LayerNorm off, the tail Pow..Div*gamma is an RMSNorm of the centred tensor and may fuse as such.)
    groups = _groups(sess)
    assert groups[BN_RULE] == ["conv", "bn"] and groups["SwishFusionPass"] == ["silu_sig", "silu_mul"]
    assert "LayerNormFusionPass" not in groups and UB_RULE not in groups
    assert set(groups) <= {BN_RULE, "SwishFusionPass", "RMSNormFusionPass"}
    assert not any(n in ("ln_mean", "ln_sub", "ln_beta") for k in kernels(sess) if k.rule for n in k.nodes)
    assert "LayerNormFusionPass: off in fusion switch file" in pass_log(sess, "graph_fusion").log
    ub = pass_log(sess, "buffer_fusion")
    assert not ub.ran and "fusion switch" in ub.reason


def test_fusion_switch_bn_folding_off():
    model, feeds = _mixed_model()
    switch = {"Switch": {"GraphFusion": {BN_RULE: "off"}}}
    sess, outs = compile_run(model, feeds, fusion_switch_file=switch)
    assert_matches_ort(model, feeds, outs)
    assert "bn" not in {n for k in kernels(sess) for n in k.nodes if k.rule}
    assert any(k.op_type == "BatchNormalization" for k in kernels(sess))
    assert "LayerNormFusionPass" in _groups(sess)


# ----------------------------------------------------------------------------------- constant folding
def test_shape_subgraph_folded_once_shapes_known():
    nodes = [N("Shape", ["x"], ["shp"], "shape"), N("Gather", ["shp", "i0"], ["d0"], "gather", axis=0),
             N("Unsqueeze", ["d0", "ax0"], ["d0u"], "unsqueeze"),
             N("Concat", ["d0u", "minus1"], ["newshape"], "concat", axis=0),
             N("Reshape", ["x", "newshape"], ["r"], "reshape"), N("Relu", ["r"], ["y"], "relu")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    graph = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for n in (2, 5):
        x = f32(rng(n).standard_normal((n, 3, 4)))
        sess = Session(model, Config(precision_mode="force_fp32"), input_shapes={"x": (n, 3, 4)})
        assert [k.op_type for k in kernels(sess)] == ["Reshape", "Relu"]
        assert {"shp", "d0", "d0u", "newshape"} <= set(sess.plan.folded)
        assert "Shape" not in [nd.op_type for nd in sess.compiled.model.graph.node]
        out = sess.run({"x": x}).outputs["y"]
        np.testing.assert_array_equal(out, np.maximum(x.reshape(n, -1), 0))


@pytest.mark.parametrize("kind", ["all_constant_inputs", "constant_node_inputs", "shape_op", "subgraph"])
def test_folder_runs_whenever_something_is_computable(kind):
    """Kind: a node the folder can compute. Every way a node becomes computable at compile time (constant
    initializers, Constant-node outputs, a shape op, a subgraph holding one) keeps the folder on."""
    from toolkit.compiler.passes.fold_constants import has_foldable_nodes

    c = numpy_helper.from_array(np.ones(4, np.float32), "c")
    nodes = {"all_constant_inputs": [N("Neg", ["c"], ["nc"], "neg"), N("Add", ["x", "nc"], ["y"], "add")],
             "constant_node_inputs": [N("Constant", [], ["k"], "k", value=c), N("Neg", ["k"], ["nk"], "neg"),
                                      N("Add", ["x", "nk"], ["y"], "add")],
             "shape_op": [N("Shape", ["x"], ["s"], "shape"), N("Reshape", ["x", "s"], ["y"], "reshape")],
             "subgraph": [N("If", ["cond"], ["y"], "if",
                            then_branch=helper.make_graph([N("Identity", ["x"], ["t"], "t")], "t", [],
                                                          [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])]),
                            else_branch=helper.make_graph([N("Neg", ["x"], ["e"], "e")], "e", [],
                                                          [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])]))]}
    inputs = [("x", [4])] + ([("cond", [], TensorProto.BOOL)] if kind == "subgraph" else [])
    model = make_model(nodes[kind], inputs, ["y"], {"c": np.ones(4, np.float32)} if kind == "all_constant_inputs" else {})
    assert has_foldable_nodes(model)
    plain = make_model([N("Add", ["x", "c"], ["y"], "add")], [("x", [4])], ["y"], {"c": np.ones(4, np.float32)})
    assert not has_foldable_nodes(plain)


def test_skipping_the_folder_gives_the_plan_the_folder_gives(monkeypatch):
    """With nothing computable, skipping the folder must not change the plan (kernels, folded tensors, arena)."""
    from toolkit import samples
    from toolkit.compiler.passes import fold_constants as fc
    from toolkit.compiler.pipeline import compile_model
    from toolkit.ir.load import load_model

    for name in ("resnet_small", "transformer_block", "detector_head"):
        m = load_model(samples.sample_path(name))
        assert not fc.has_foldable_nodes(m)
        skipped = compile_model(m, Config()).plan
        monkeypatch.setattr(fc, "has_foldable_nodes", lambda model: True)
        folded = compile_model(m, Config()).plan
        monkeypatch.undo()
        assert [(k.name, k.op_type, k.precision, k.nodes) for k in skipped.kernels] == \
               [(k.name, k.op_type, k.precision, k.nodes) for k in folded.kernels]
        assert sorted(skipped.folded) == sorted(folded.folded) and skipped.arena_bytes == folded.arena_bytes


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


@pytest.mark.parametrize("case", sorted(PRECISION_CASES))
def test_precision_modes_and_casts(case):
    cfg, precs, casts = PRECISION_CASES[case]
    model, feeds = _precision_model()
    sess = Session(model, Config(fusion_level=0, **cfg))
    plan = sess.plan
    by_node = {k.nodes[0]: k for k in kernels(sess)}
    assert [by_node[n].precision for n in ORDER] == ["fp" + p for p in precs.split()]
    cast_ks = [k for k in plan.kernels if k.fusion == "cast"]
    assert sorted((k.cast_of, k.precision) for k in cast_ks) == sorted(casts)
    # casts sit exactly at the boundaries: every float input of a kernel is stored in the kernel's precision,
    # and every Cast really changes the dtype
    want_dtype = {"fp16": "float16", "fp32": "float32"}
    for k in kernels(sess):
        for t in k.inputs:
            assert plan.tensors[t].dtype == want_dtype[k.precision], (k.name, t)
    for k in cast_ks:
        assert plan.tensors[k.inputs[0]].dtype != plan.tensors[k.outputs[0]].dtype
    out = sess.run(feeds).outputs["y"]
    ref = ort_outputs(model, feeds)["y"]
    tol = 1e-5 if precs == "32 32 32 32 32" else 2e-2
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


# ------------------------------------------------------------------------------ constant findings
def test_fp16_constant_findings_name_the_initializer():
    nodes = [N("Mul", ["x", "c_over"], ["a"], "mul_over"), N("Add", ["a", "c_under"], ["b"], "add_under"),
             N("Mul", ["b", "c_int"], ["c"], "mul_int"), N("Mul", ["c", "c_ok"], ["y"], "mul_ok")]
    model = make_model(nodes, [("x", [2, 3])], ["y"],
                       {"c_over": f32([1.0, 1e5, 2.0]), "c_under": f32(1e-12), "c_int": f32(4097.0),
                        "c_ok": f32([0.5, 2048.0, 3.0])})
    with np.errstate(over="ignore"):
        sess = Session(model, Config(precision_mode="force_fp16"))
    found = {f.subject: f for f in sess.compiled.findings if f.kind == "fp16_constant"}
    assert set(found) == {"c_over", "c_under", "c_int"}
    assert "overflow" in found["c_over"].evidence and found["c_over"].evidence["overflow"]["count"] == 1
    assert found["c_over"].evidence["reader"] == "mul_over" and found["c_over"].severity == "error"
    assert "underflow_to_zero" in found["c_under"].evidence and found["c_under"].severity == "error"
    assert found["c_int"].evidence["integer_inexact"]["example"] == 4097.0
    for name, f in found.items():
        assert name in f.recommendation
    # read by FP32 kernels, the same constants are harmless
    sess32 = Session(model, Config(precision_mode="force_fp16", keep_dtype=["mul_over", "add_under", "mul_int"]))
    assert not [f for f in sess32.compiled.findings if f.kind == "fp16_constant"]


def test_keep_dtype_unknown_node_suggests():
    model, _ = _precision_model()
    with pytest.raises(ConfigError) as exc:
        Session(model, Config(precision_mode="force_fp16", keep_dtype=["softmaxx"]))
    assert "did you mean 'softmax'" in str(exc.value)
