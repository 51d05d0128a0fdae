"""BatchNorm folding (toolkit/compiler/passes/fold_batchnorm.py), against onnxruntime on the unfused model."""

from __future__ import annotations

import pytest

from tests.compiler.helpers import (
    BN,
    BN_RULE,
    EPS,
    _bn_case,
    assert_matches_ort,
    bn_params,
    compile_run,
    f32,
    fusion_json,
    kernels,
    pass_log,
    rng,
)
from tests.graphs import N, make_model


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
