"""The attention rule (toolkit/compiler/rules/attention.py), against onnxruntime on the unfused model."""

from __future__ import annotations

import pytest

from tests.compiler.helpers import (
    assert_matches_ort,
    assert_single_fusion,
    attention_model,
    compile_run,
    fusion_json,
    kernels,
    pass_log,
)


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
