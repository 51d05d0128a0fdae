"""The attention rule (toolkit/compiler/rules/attention.py), against onnxruntime on the unfused model."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.graphs import N, make_model
from toolkit.config import Config
from toolkit.engine import Session


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
