"""The activation rules (toolkit/compiler/rules/activation.py): activation and GELU fusion, refusals explained,
and the numeric probe memoised by region signature (equal regions under other tensor names are probed once
and fused alike; a region that differs only in a constant is probed on its own)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.compiler.helpers import (
    ACTIVATIONS,
    SQRT2,
    _groups,
    assert_matches_ort,
    assert_single_fusion,
    compile_run,
    f32,
    fusion_json,
    gelu_erf_model,
    gelu_tanh_model,
    kernels,
    pass_log,
    rng,
)
from tests.graphs import N, make_model
from toolkit.compiler.rules import activation
from toolkit.config.schema import Config
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
