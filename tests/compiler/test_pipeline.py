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

from tests.graphs import N, make_model
from toolkit.compiler import pipeline
from toolkit.compiler.pipeline import PASSES, _load_passes, compile_model, recompile_precision
from toolkit.config import Config
from toolkit.engine import Session, simulate
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
    _load_passes()
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
OPTIONAL = [name for name in pipeline.PASS_ORDER
            if (pipeline._load_passes() or True) and pipeline.PASSES[name].optional]


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
        ctx.findings.append(pipeline.Finding("error", "bogus", "x", {}, ""))
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


def all_node_names(model):
    return [n.name for n in model.graph.node]


def rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------- BN folding
def bn_params(c, r):
    return {"bn_s": f32(r.uniform(0.5, 2.0, c)), "bn_b": f32(r.standard_normal(c)),
            "bn_m": f32(r.standard_normal(c)), "bn_v": f32(r.uniform(0.1, 2.0, c))}


BN = ["bn_s", "bn_b", "bn_m", "bn_v"]
EPS = 1e-3  # not the default 1e-5: a fold that ignored the attribute would be visible


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


# --------------------------------------------------------------------- fusion levels and the switch file
def _mixed_model():
    """Conv -> BN -> Relu -> decomposed LayerNorm (last axis) -> SiLU: one candidate for every fusion kind."""
    r = rng(14)
    ln, _ = layernorm_model(8, affine=True, square="pow")
    nodes = [N("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]),
             N("BatchNormalization", ["c"] + BN, ["bn_out"], "bn", epsilon=EPS),
             N("Relu", ["bn_out"], ["x_ln"], "relu")]
    for n in ln.graph.node:
        n2 = helper.make_node(n.op_type, [("x_ln" if i == "x" else i) for i in n.input], list(n.output), name=n.name)
        n2.attribute.extend(n.attribute)
        nodes.append(n2)
    nodes += [N("Sigmoid", ["y"], ["sg"], "silu_sig"), N("Mul", ["y", "sg"], ["out"], "silu_mul")]
    inits = {i.name: numpy_helper.to_array(i) for i in ln.graph.initializer}
    inits.update({"w": f32(r.standard_normal((4, 3, 3, 3))), **bn_params(4, r)})
    model = make_model(nodes, [("x", [1, 3, 8, 8])], ["out"], inits)
    return model, {"x": f32(r.standard_normal((1, 3, 8, 8)))}


LN_NODES = ["ln_mean", "ln_sub", "ln_pow", "ln_var", "ln_addeps", "ln_sqrt", "ln_div", "ln_gamma", "ln_beta"]


def _groups(sess):
    return {k.rule: k.nodes for k in kernels(sess) if k.rule}


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
