"""The engine's own memory plans have no static conflict on the real models under every reuse policy:
PP-OCRv4 det/rec/cls and the onnx "light" model zoo (issue 6). Static check only (no run), so it is cheap
enough for every model; the dynamic and differential checks run on the samples in test_memcheck.py."""

from __future__ import annotations

import pytest

from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.memory.planner import POLICIES
from toolkit.memcheck.static_check import static_conflicts

pytestmark = pytest.mark.slow


def _plan_ok(model, shapes, policy):
    plan = compile_model(model, Config(memory_reuse=policy), input_shapes=shapes).plan
    assert static_conflicts(plan) == []
    arena = [t for t in plan.tensors.values() if t.storage == "arena"]
    assert all(0 <= t.offset and t.offset + t.nbytes <= plan.arena_bytes for t in arena)
    assert plan.arena_bytes >= plan.lower_bound_bytes
    return plan


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
    from conformance import light_models

    return light_models()


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
