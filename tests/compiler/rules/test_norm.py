"""The LayerNorm / RMSNorm rules (toolkit/compiler/rules/norm.py), against onnxruntime on the unfused model."""

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
