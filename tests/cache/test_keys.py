"""Compile-cache keys (toolkit/cache/keys.py): every key ingredient invalidates, cache settings are not
ingredients, and fusion rules or passes changed at run time invalidate."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.cache import keys, store
from toolkit.compiler.pipeline import compile_model
from toolkit.config import Config
from toolkit.runtime import kernels
from toolkit.runtime.npu import NpuRuntime

RNG = np.random.default_rng(7)
W1 = RNG.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
B1 = RNG.normal(0, 0.1, (4,)).astype(np.float32)
W2 = RNG.normal(0, 0.3, (4, 4, 1, 1)).astype(np.float32)
X = RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)


def make_model(w1=W1, w2=W2, alpha=0.2, dil2=(1, 1)) -> onnx.ModelProto:
    """x -> Conv(w1 initializer, pads 1) -> Relu -> Conv(w2 from a Constant node, 1x1) -> HardSigmoid -> y."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Constant", [], ["w2"], name="w2_const", value=numpy_helper.from_array(w2, "w2")),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", dilations=list(dil2)),
             helper.make_node("HardSigmoid", ["c2"], ["y"], name="hsig", alpha=alpha)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(B1, "b1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cfg(folder, **kw) -> Config:
    base = {"precision_mode": "force_fp16", "op_compiler_cache_mode": "enable", "op_compiler_cache_dir": str(folder)}
    base.update(kw)
    return Config(**base)


def build(model, config, shape=(1, 3, 8, 8)):
    """(CompileResult, NpuRuntime) as a new process would get them (in-memory kernel sessions dropped)."""
    kernels._SESSIONS.clear()
    cr = compile_model(model, config, input_shapes={"x": shape})
    rt = NpuRuntime(cr)
    store.flush()
    return cr, rt


def n_sessions(rt) -> int:
    return sum(1 for ek in rt.kernels if ek.session is not None)


def plan_dict(cr) -> dict:
    d = cr.plan.to_dict()
    d["config"] = {k: v for k, v in d["config"].items() if k not in keys.NON_CODE_FIELDS}
    return d


def run(rt, shape=(1, 3, 8, 8)):
    x = np.resize(X, shape).astype(np.float32)
    return rt.run({"x": x}).outputs["y"]


def fresh(model, config, shape=(1, 3, 8, 8)):
    """A compile with the cache disabled (what every cached result must equal)."""
    return build(model, dataclasses.replace(config, op_compiler_cache_mode="disable"), shape)


def test_cache_settings_are_not_key_ingredients(tmp_path):
    c = cfg(tmp_path)
    cold, _ = build(make_model(), c)
    other_path = compile_model(make_model(), c, input_shapes={"x": (1, 3, 8, 8)}, model_path="elsewhere.onnx")
    assert other_path.cache["status"] == "hit" and other_path.plan.model == "elsewhere.onnx"


# ---------------------------------------------------------------------------------------------- key ingredients
def _orig_versions():
    return dict(keys._versions())


INGREDIENTS = {
    "weights": lambda: (make_model(w1=W1 * 1.5), {}, (1, 3, 8, 8), None),
    "attribute": lambda: (make_model(alpha=0.25), {}, (1, 3, 8, 8), None),
    "shape": lambda: (make_model(), {}, (1, 3, 16, 16), None),
    "precision_mode": lambda: (make_model(), {"precision_mode": "force_fp32"}, (1, 3, 8, 8), None),
    "op_select_implmode": lambda: (make_model(), {"op_select_implmode": "high_precision"}, (1, 3, 8, 8), None),
    "overflow_mode": lambda: (make_model(), {"overflow_mode": "saturation"}, (1, 3, 8, 8), None),
    "fusion_level": lambda: (make_model(), {"fusion_level": 0}, (1, 3, 8, 8), None),
    "fusion_switch_file": lambda: (make_model(), {"fusion_switch_file": {"Switch": {"UBFusion": {
        "TbeCubeElemwiseFusionPass": "off"}}}}, (1, 3, 8, 8), None),
    "toolkit_version": lambda: (make_model(), {}, (1, 3, 8, 8), {"npuscope": "9.9.9+other"}),
    "onnxruntime_version": lambda: (make_model(), {}, (1, 3, 8, 8), {"onnxruntime": "0.0.1"}),
}


@pytest.mark.parametrize("ingredient", sorted(INGREDIENTS))
def test_each_key_ingredient_invalidates(tmp_path, monkeypatch, ingredient):
    c = cfg(tmp_path)
    base, _ = build(make_model(), c)
    model, overrides, shape, versions = INGREDIENTS[ingredient]()
    if versions:
        monkeypatch.setattr(keys, "versions", lambda: {**_orig_versions(), **versions})
    c2 = dataclasses.replace(c, **overrides)
    got, rt = build(model, c2, shape)
    assert got.cache["key"] != base.cache["key"]
    assert got.cache["status"] in ("miss", "patched")
    if versions:  # kernel entries are keyed by the versions too
        assert got.cache["kernel_misses"] == n_sessions(rt)
    ref, rt_ref = fresh(model, c2, shape)
    assert plan_dict(got) == plan_dict(ref)
    np.testing.assert_array_equal(run(rt, shape), run(rt_ref, shape))


@pytest.mark.parametrize("change", ["rule_registered", "pass_replaced"])
def test_rules_and_passes_changed_at_run_time_invalidate(tmp_path, monkeypatch, change):
    """A fusion rule registered (or a pass replaced) in this process after import, as a test or a plugin
    does, must not be served an entry compiled without it: the registry is a key ingredient."""
    from toolkit.compiler import pipeline, rules

    c = cfg(tmp_path)
    base, _ = build(make_model(), c)
    if change == "rule_registered":
        rules.load_rules()
        monkeypatch.setattr(rules, "RULES", rules.RULES + [rules.Rule("TestOnlyFusionPass", frozenset({"Relu"}),
                                                                      lambda g, n: None)])
    else:
        info = pipeline.PASSES["check_constants"]
        monkeypatch.setitem(pipeline.PASSES, "check_constants",
                            dataclasses.replace(info, fn=lambda ctx: pipeline.PassResult(0, ["replaced"])))
    got, _ = build(make_model(), c)
    assert got.cache["key"] != base.cache["key"]
    assert got.cache["status"] == "miss"
