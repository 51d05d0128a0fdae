"""BatchNorm folding (toolkit/compiler/passes/fold_batchnorm.py), against onnxruntime on the unfused model."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.graphs import N, make_model
from toolkit.config import Config
from toolkit.engine import Session

BN_RULE = "ConvBatchnormFusionPass"


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
