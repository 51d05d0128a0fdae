"""The pass pipeline (toolkit/compiler/pipeline.py): fusion levels, dead nodes, recompiles, and an optional pass
that raises after changing the graph (the compile goes on from the state before it, as if it were disabled,
and says so in the pass log)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.compiler.helpers import (
    LN_NODES,
    UB_RULE,
    _groups,
    _mixed_model,
    all_node_names,
    assert_matches_ort,
    compile_run,
    kernels,
)
from tests.graphs import N, make_model
from toolkit.compiler import pipeline
from toolkit.compiler.registry import PASSES
from toolkit.compiler import stages
from toolkit.compiler.pipeline import recompile_precision
from toolkit.core.records import Finding
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.engine import simulate
from toolkit.runtime.npu import NpuRuntime

FP32_CONFIG = Config(precision_mode="force_fp32")


def _model(nodes, inputs, outputs, inits=(), opset=17, ir_version=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model


def _vi(name, elem=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


def test_dead_node_is_dropped_not_built():
    c = numpy_helper.from_array(np.float32([1]), "c")
    m = _model([helper.make_node("Constant", [], ["dead"], value=c), helper.make_node("Relu", ["x"], ["y"])],
               [_vi("x")], [_vi("y")])
    res = compile_model(m, FP32_CONFIG, input_shapes={"x": (2, 3)}, disabled=("fold_constants",))
    assert [k.op_type for k in res.plan.kernels] == ["Relu"]


@pytest.mark.parametrize("name", ["fold_constants", "fold_batchnorm", "graph_fusion", "buffer_fusion"])
def test_failing_optimisation_degrades(monkeypatch, name):
    """An optimisation that raises (even after editing the graph) is undone and logged; the compile goes on."""
    info = PASSES[name]

    def broken(ctx, _fn=info.fn):
        _fn(ctx)
        ctx.graph.nodes.clear()  # leave a wrecked graph behind
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(info, "fn", broken)
    w = numpy_helper.from_array(np.ones((3, 3), np.float32), "w")
    m = _model([helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
               [_vi("x")], [_vi("y")], inits=[w])
    res = compile_model(m, FP32_CONFIG, input_shapes={"x": (2, 3)})
    log = next(p for p in res.passes if p.name == name)
    assert any("FAILED" in ln and "simulated failure" in ln for ln in log.log)
    np.testing.assert_allclose(simulate(m, {"x": X}, FP32_CONFIG).outputs["y"], np.maximum(X @ np.ones((3, 3)), 0))


SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"
OPTIONAL = [name for name in stages.PASS_ORDER if pipeline.PASSES[name].optional]


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 2 for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        out[i.name] = (rng.random(shape) if dtype.kind == "f" else rng.integers(0, 2, shape)).astype(dtype)
    return out


def _plan(cr) -> dict:
    d = cr.plan.to_dict()
    d.pop("config", None)
    return d


def test_every_optimisation_pass_is_covered():
    assert set(OPTIONAL) >= {"fold_constants", "fold_batchnorm", "graph_fusion", "buffer_fusion"}


@pytest.mark.parametrize("sample", ["resnet_small", "transformer_block"])
@pytest.mark.parametrize("name", OPTIONAL)
def test_failing_optimisation_pass_leaves_the_compile_as_if_disabled(monkeypatch, sample, name):
    model = onnx.load(str(SAMPLES / f"{sample}.onnx"))
    feeds = _feeds(model)
    shapes = {k: v.shape for k, v in feeds.items()}
    cfg = Config(precision_mode="force_fp32", op_compiler_cache_mode="disable")
    ref = pipeline.compile_model(model, cfg, input_shapes=shapes, disabled=(name,))

    info = pipeline.PASSES[name]

    def runs_then_raises(ctx):
        res = info.fn(ctx)  # the real pass changes the graph and the context ...
        ctx.graph.nodes.reverse()  # ... and more damage, so that a half-restored state shows
        ctx.graph.consts.clear()
        ctx.findings.append(Finding("error", "bogus", "x", {}, ""))
        raise ValueError(f"planted failure after {res.changed} change(s)")

    monkeypatch.setitem(pipeline.PASSES, name, dataclasses.replace(info, fn=runs_then_raises))
    got = pipeline.compile_model(model, cfg, input_shapes=shapes)
    log = {p.name: p for p in got.passes}[name]
    assert log.log and log.log[0].startswith("FAILED (ValueError: planted failure")
    assert _plan(got) == _plan(ref)
    assert [f.to_dict() for f in got.findings] == [f.to_dict() for f in ref.findings]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    outs = NpuRuntime(got).run(feeds).outputs
    for o, w in zip(model.graph.output, want):
        np.testing.assert_allclose(outs[o.name], w, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(w).max())))


def test_fusion_level_0_fuses_nothing():
    model, feeds = _mixed_model()
    sess, outs = compile_run(model, feeds, fusion_level=0)
    assert_matches_ort(model, feeds, outs)
    assert [k.nodes for k in kernels(sess)] == [[n] for n in all_node_names(model)]
    assert {p.name: p.ran for p in sess.compiled.passes}["buffer_fusion"] is False


def test_fusion_level_1_folds_bn_and_buffer_fuses_only():
    model, feeds = _mixed_model()
    sess, outs = compile_run(model, feeds, fusion_level=1)
    assert_matches_ort(model, feeds, outs)
    assert _groups(sess) == {UB_RULE: ["conv", "bn", "relu"]}
    assert len(kernels(sess)) == 1 + len(LN_NODES) + 2


def test_fusion_level_2_applies_everything():
    model, feeds = _mixed_model()
    sess, outs = compile_run(model, feeds, fusion_level=2)
    assert_matches_ort(model, feeds, outs)
    assert _groups(sess) == {UB_RULE: ["conv", "bn", "relu"], "LayerNormFusionPass": LN_NODES,
                             "SwishFusionPass": ["silu_sig", "silu_mul"]}
    assert len(kernels(sess)) == 3


R = np.random.default_rng(11)
W = (R.standard_normal((16, 16)) * 0.3).astype(np.float32)


def mlp():
    """mm (MatMul, FP16) -> tanh -> mm2 (MatMul, FP16) -> tanh2 -> y."""
    return make_model([N("MatMul", ["x", "W"], ["a"], "mm"), N("Tanh", ["a"], ["t"], "tanh"),
                       N("MatMul", ["t", "W"], ["b"], "mm2"), N("Tanh", ["b"], ["y"], "tanh2")],
                      [("x", [4, 16])], ["y"], {"W": W})


def test_recompile_changes_placement_without_a_full_compile():
    base = compile_model(mlp(), Config())
    cfg = Config(op_placement={"Tanh": "CPU"})
    again = recompile_precision(base, cfg)
    fresh = compile_model(mlp(), cfg)
    assert [(k.name, k.placement, k.precision, k.inputs) for k in again.plan.kernels] == \
        [(k.name, k.placement, k.precision, k.inputs) for k in fresh.plan.kernels]
    assert recompile_precision(again, Config()).plan.placement_counts()["CPU"] == 0
