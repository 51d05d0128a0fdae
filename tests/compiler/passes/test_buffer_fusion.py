"""Buffer fusion (toolkit/compiler/passes/buffer_fusion.py): epilogues fused into cube kernels, and the cases
that must stay apart.

Numerical checks compare the engine (force_fp32, so only the pass under test can change the result) with
onnxruntime running the original, unfused model. Structural checks read the compiled plan."""

from __future__ import annotations

import pytest

from tests.compiler.helpers import (
    SQRT2,
    UB_RULE,
    all_node_names,
    assert_matches_ort,
    compile_run,
    f32,
    fusion_json,
    kernels,
    rng,
)
from tests.graphs import N, make_model


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
