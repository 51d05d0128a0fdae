"""Buffer fusion (toolkit/compiler/passes/buffer_fusion.py): epilogues fused into cube kernels, and the cases
that must stay apart.

Numerical checks compare the engine (force_fp32, so only the pass under test can change the result) with
onnxruntime running the original, unfused model. Structural checks read the compiled plan."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest

from tests.graphs import N, make_model
from toolkit.config import Config
from toolkit.engine import Session

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


def all_node_names(model):
    return [n.name for n in model.graph.node]


def rng(seed=0):
    return np.random.default_rng(seed)


SQRT2 = math.sqrt(2.0)


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
