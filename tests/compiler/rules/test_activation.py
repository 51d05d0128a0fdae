"""The activation rules (toolkit/compiler/rules/activation.py): activation and GELU fusion, refusals explained,
and the numeric probe memoised by region signature (equal regions under other tensor names are probed once
and fused alike; a region that differs only in a constant is probed on its own)."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.graphs import N, make_model
from toolkit.compiler.rules import activation
from toolkit.config import Config
from toolkit.engine import Session


def hardswish_chain(divisors):
    """x -> HardSwish-like regions in sequence, each `t * clip(t + 3, 0, 6) / d` with its own tensor names."""
    nodes, inits, t = [], [], "x"
    for k, d in enumerate(divisors):
        nodes += [helper.make_node("Add", [t, f"three{k}"], [f"a{k}"], name=f"add{k}"),
                  helper.make_node("Clip", [f"a{k}", f"lo{k}", f"hi{k}"], [f"c{k}"], name=f"clip{k}"),
                  helper.make_node("Mul", [t, f"c{k}"], [f"m{k}"], name=f"mul{k}"),
                  helper.make_node("Div", [f"m{k}", f"d{k}"], [f"h{k}"], name=f"div{k}"),
                  helper.make_node("Sin", [f"h{k}"], [f"s{k}"], name=f"sin{k}")]
        inits += [numpy_helper.from_array(np.array(v, np.float32), f"{n}{k}")
                  for n, v in (("three", 3.0), ("lo", 0.0), ("hi", 6.0), ("d", d))]
        t = f"s{k}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info(t, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def probes_for(monkeypatch, divisors):
    calls = []
    real = activation._evaluate_probe
    monkeypatch.setattr(activation, "_evaluate_probe", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(activation, "_PROBED", {})
    sess = Session(hardswish_chain(divisors), Config(precision_mode="force_fp32"))
    return len(calls), sess


def test_equal_regions_are_probed_once_and_a_different_constant_separately(monkeypatch):
    one, _ = probes_for(monkeypatch, [6.0, 7.0])
    three, sess = probes_for(monkeypatch, [6.0, 6.0, 6.0, 7.0])
    assert three == one  # two more equal regions under other names: no more probes
    fused = [k for k in sess.plan.kernels if k.rule == "HardSwishFusionPass"]
    assert sorted(k.nodes[0] for k in fused) == ["add0", "add1", "add2"]  # /7 is not HardSwish
    x = np.random.default_rng(0).uniform(-6, 6, (4, 8)).astype(np.float32)
    want = x
    for d in (6.0, 6.0, 6.0, 7.0):
        want = np.sin(want * np.clip(want + 3, 0, 6) / np.float32(d))
    np.testing.assert_allclose(sess.run({"x": x}).outputs["s3"], want, rtol=1e-5, atol=1e-6)


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


def assert_single_fusion(sess, model, rule, op_type):
    ks = kernels(sess)
    assert len(ks) == 1, [(k.name, k.nodes) for k in ks]
    k = ks[0]
    assert k.rule == rule and k.op_type == op_type and k.fusion == "graph"
    assert sorted(k.nodes) == sorted(all_node_names(model))
    assert fusion_json(sess)[rule] == {"match_times": "1", "effect_times": "1"}


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


def _groups(sess):
    return {k.rule: k.nodes for k in kernels(sess) if k.rule}
