"""The LayerNorm / RMSNorm rules (toolkit/compiler/rules/norm.py), against onnxruntime on the unfused model."""

from __future__ import annotations

import pytest

from tests.compiler.helpers import (
    assert_matches_ort,
    assert_single_fusion,
    compile_run,
    fusion_json,
    kernels,
    layernorm_model,
    pass_log,
    rmsnorm_model,
)


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


@pytest.mark.parametrize("square,recip,gamma", [("pow", False, True), ("mul", True, True), ("pow", True, False)])
def test_rmsnorm_fusion(square, recip, gamma):
    model, feeds = rmsnorm_model(square, recip, gamma)
    sess, outs = compile_run(model, feeds)
    assert_single_fusion(sess, model, "RMSNormFusionPass", "RMSNorm")
    assert_matches_ort(model, feeds, outs)
