"""The converter's fusion switch file (toolkit/compiler/fusion_switch.py): single passes turned off, the pass
table, passes under the wrong level, and unknown pass names."""

from __future__ import annotations

import json

import pytest

from tests.compiler.helpers import (
    BN_RULE,
    UB_RULE,
    _groups,
    _mixed_model,
    assert_matches_ort,
    compile_run,
    kernels,
    pass_log,
)
from toolkit.commands.common import config_from_dict, load_config
from toolkit.config.schema import Config
from toolkit.engine import Session
from toolkit.core.errors import ConfigError


def test_graph_pass_under_ub_fusion_says_where_it_belongs():
    with pytest.raises(ConfigError, match='is a GraphFusion pass; move it under "GraphFusion"'):
        config_from_dict({"fusion_switch_file": {"Switch": {"UBFusion": {"LayerNormFusionPass": "off"}}}})


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
                                        ("RMSNormFusionPas", "RMSNormFusionPass"), ("Xyzzy", None),
                                        ("layer norm", None), ("", None), ("ConvFusionPass!", None)])
def test_a_misspelt_simulated_pass_or_a_name_that_is_no_pass_name_is_refused(name, close):
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"fusion_switch_file": {"Switch": {"GraphFusion": {name: "off"}}}})
    msg = str(exc.value)
    assert f"'{name}'" in msg and "\n" not in msg
    if close:
        assert f"did you mean '{close}'" in msg
    else:
        assert "did you mean" not in msg and "LayerNormFusionPass" in msg  # lists the simulated passes


@pytest.mark.parametrize("level,name", [("GraphFusion", "ConvToFullyConnectionFusionPass"),
                                        ("GraphFusion", "SoftmaxFusionPass"), ("GraphFusion", "MatMulBiasAddFusionPass"),
                                        ("GraphFusion", "MyOwnFusionPass"), ("UBFusion", "TbeConv2dAddMulQuantPass"),
                                        ("UBFusion", "AutomaticUbFusion")])
def test_any_converter_pass_name_loads_with_a_warning_and_changes_nothing(level, name, tmp_path):
    """The converter has hundreds of passes: a switch file naming one npuscope does not simulate loads, with a
    warning per pass (saying when the name is not one npuscope knows), and the compile is the one without it."""
    from toolkit.compiler import fusion_switch as fs

    sw = {"Switch": {level: {name: "off", "ALL": "on"}}}
    cfg = config_from_dict({"fusion_switch_file": sw})
    lines, finds = fs.findings(cfg)
    assert [(f.kind, f.subject) for f in finds] == [("fusion_switch_ignored", name)]
    assert "not simulated; ignored" in lines[0]
    assert ("does not know" in lines[0]) == (name not in fs.CONVERTER_PASSES[level])
    model, _ = _mixed_model()
    with_it, _ = compile_run(model, fusion_switch_file=sw)
    without, _ = compile_run(model)
    assert [(k.name, k.nodes) for k in kernels(with_it)] == [(k.name, k.nodes) for k in kernels(without)]


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
