"""The converter's fusion switch file (toolkit/compiler/fusion_switch.py): single passes turned off, the pass
table, passes under the wrong level, and unknown pass names."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from tests.graphs import N, make_model
from toolkit.config import Config
from toolkit.engine import Session
from toolkit.errors import ConfigError


def test_graph_pass_under_ub_fusion_says_where_it_belongs():
    with pytest.raises(ConfigError, match='is a GraphFusion pass; move it under "GraphFusion"'):
        Config.from_dict({"fusion_switch_file": {"Switch": {"UBFusion": {"LayerNormFusionPass": "off"}}}})


def test_converter_pass_list_is_one_documented_table():
    from toolkit.compiler import fusion_switch as fs

    for level in fs.FUSION_LEVELS:
        assert not fs.CONVERTER_PASSES[level] & set(fs.simulated_passes(level))
    assert not fs.CONVERTER_PASSES["GraphFusion"] & fs.CONVERTER_PASSES["UBFusion"]
    assert "Source" in fs.__doc__
    lines, finds = fs.findings(Config.from_dict({"fusion_switch_file": {"Switch": {
        "UBFusion": {"TbeEltwiseFusionPass": "off"}, "GraphFusion": {"LayerNormFusionPass": "off"}}}}))
    assert [(f.kind, f.subject, f.severity) for f in finds] == [("fusion_switch_ignored", "TbeEltwiseFusionPass",
                                                                 "warning")]
    assert len(lines) == 1 and "not simulated; ignored" in lines[0]


@pytest.mark.parametrize("name,close", [("LayerNormFusionPas", "LayerNormFusionPass"),
                                        ("Xyzzy", None), ("MyOwnFusionPass", None)])
def test_unknown_pass_suggests_only_close_names(name, close):
    with pytest.raises(ConfigError) as exc:
        Config.from_dict({"fusion_switch_file": {"Switch": {"GraphFusion": {name: "off"}}}})
    msg = str(exc.value)
    assert f"unknown GraphFusion pass '{name}'" in msg
    if close:
        assert f"did you mean '{close}'" in msg
    else:
        assert "did you mean" not in msg and "LayerNormFusionPass" in msg  # lists the simulated passes


BN_RULE = "ConvBatchnormFusionPass"
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


def _groups(sess):
    return {k.rule: k.nodes for k in kernels(sess) if k.rule}


def test_fusion_switch_file_turns_single_passes_off(tmp_path):
    model, feeds = _mixed_model()
    switch = {"Switch": {"GraphFusion": {"LayerNormFusionPass": "off"}, "UBFusion": {"ALL": "off"}}}
    (tmp_path / "fusion_switch.json").write_text(json.dumps(switch))
    (tmp_path / "config.json").write_text(json.dumps({"precision_mode": "force_fp32",
                                                      "fusion_switch_file": "fusion_switch.json"}))
    cfg = Config.load(tmp_path / "config.json")  # the switch file path resolves next to the config
    assert cfg.fusion_switch_file == switch
    sess = Session(model, cfg)
    assert_matches_ort(model, feeds, sess.run(feeds).outputs)
    # BN folding is a GraphFusion pass that stays on; LayerNorm and every UB fusion are off; SiLU stays on.
    # (With LayerNorm off, the tail Pow..Div*gamma is an RMSNorm of the centred tensor and may fuse as such.)
    groups = _groups(sess)
    assert groups[BN_RULE] == ["conv", "bn"] and groups["SwishFusionPass"] == ["silu_sig", "silu_mul"]
    assert "LayerNormFusionPass" not in groups and UB_RULE not in groups
    assert set(groups) <= {BN_RULE, "SwishFusionPass", "RMSNormFusionPass"}
    assert not any(n in ("ln_mean", "ln_sub", "ln_beta") for k in kernels(sess) if k.rule for n in k.nodes)
    assert "LayerNormFusionPass: off in fusion switch file" in pass_log(sess, "graph_fusion").log
    ub = pass_log(sess, "buffer_fusion")
    assert not ub.ran and "fusion switch" in ub.reason


def test_fusion_switch_bn_folding_off():
    model, feeds = _mixed_model()
    switch = {"Switch": {"GraphFusion": {BN_RULE: "off"}}}
    sess, outs = compile_run(model, feeds, fusion_switch_file=switch)
    assert_matches_ort(model, feeds, outs)
    assert "bn" not in {n for k in kernels(sess) for n in k.nodes if k.rule}
    assert any(k.op_type == "BatchNormalization" for k in kernels(sess))
    assert "LayerNormFusionPass" in _groups(sess)
