"""The static check (toolkit/memcheck/static_check.py): misaligned arena tensors, disable_reuse ranges, and the
engine's own plans on the real models (PP-OCRv4 det/rec/cls and the onnx "light" model zoo, slow) under every
reuse policy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.engine import Session
from toolkit.memcheck.planio import load_plan
from toolkit.memory.planner import POLICIES
from toolkit.memcheck.static_check import static_conflicts


def _cli_with_env(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    """plan.json of resnet_small as `npuscope compile` writes it (parsed dict, path)."""
    out = tmp_path_factory.mktemp("plan") / "c"
    r = _cli_with_env("compile", "resnet_small", "--out", out)
    assert r.returncode == 0, r.stderr
    path = out / "plan.json"
    return json.loads(path.read_text()), path


def test_static_check_flags_every_misaligned_arena_tensor(plan_json, tmp_path):
    plan, path = plan_json
    p = load_plan(path)
    assert static_conflicts(p) == []
    arena = [t for t in p.tensors.values() if t.storage == "arena" and t.nbytes > 0]
    p.alignment = 7  # the compiled offsets are multiples of 512; those that are not multiples of 7 break it
    want = sorted(t.name for t in arena if t.offset % 7)
    got = sorted(c.victim for c in static_conflicts(p) if c.kind == "misaligned")
    assert want and got == want


FP32_UNFUSED = dict(precision_mode="force_fp32", fusion_level=0)


def test_disable_reuse_gives_exclusive_ranges():
    model = make_model([N("Relu", ["x"], ["r"], "relu"), N("Sigmoid", ["r"], ["s"], "sig"),
                        N("Tanh", ["s"], ["y"], "tanh")], [("x", [16, 64])], ["y"])
    plan = Session(model, Config(**FP32_UNFUSED)).plan
    assert plan.tensors["s"].alias_of == "r"  # in place by default
    plan2 = Session(model, Config(disable_reuse=["sig"], **FP32_UNFUSED)).plan
    s = plan2.tensors["s"]
    assert s.alias_of is None
    others = [t for t in plan2.tensors.values() if t.storage == "arena" and t.name != "s"]
    assert all(t.offset + t.nbytes <= s.offset or s.offset + s.nbytes <= t.offset for t in others)
    assert static_conflicts(plan2) == []


def _plan_ok(model, shapes, policy):
    plan = compile_model(model, Config(memory_reuse=policy), input_shapes=shapes).plan
    assert static_conflicts(plan) == []
    arena = [t for t in plan.tensors.values() if t.storage == "arena"]
    assert all(0 <= t.offset and t.offset + t.nbytes <= plan.arena_bytes for t in arena)
    assert plan.arena_bytes >= plan.lower_bound_bytes
    return plan


@pytest.mark.slow
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("name", ["ppocr_det", "ppocr_rec", "ppocr_cls"])
def test_ppocr_plans_have_no_conflicts(name, policy):
    from toolkit import zoo
    from toolkit.inputs import realistic_inputs
    from toolkit.ir.load import load_model

    feeds = realistic_inputs(name)
    plan = _plan_ok(load_model(zoo.fetch(name)), {k: v.shape for k, v in feeds.items()}, policy)
    assert plan.arena_bytes > 0


def _light():
    from tests.conformance.cases import light_models

    return light_models()


@pytest.mark.slow
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_light_zoo_plans_have_no_conflicts(policy):
    from toolkit.ir.load import load_model

    models = _light()
    if not models:
        pytest.skip("onnx light model zoo not shipped with this onnx build")
    for name, lm in models.items():
        model = load_model(lm.path)
        inits = {i.name for i in model.graph.initializer}
        shapes = {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
                  for i in model.graph.input if i.name not in inits}
        _plan_ok(model, shapes, policy)
