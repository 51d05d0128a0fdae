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


def _two_views_model(op1: str, op2: str):
    """Relu -> a; ``op1``(a) -> b (a graph output); ``op2``(a) -> c -> Mul -> z: two views of one base alive
    together, every view op type."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def view(op, src, dst, tag):
        extra = {"Reshape": [f"shape_{tag}"], "Squeeze": [f"axes_{tag}"], "Unsqueeze": [f"axes_{tag}"]}.get(op, [])
        attrs = {"axis": 1} if op == "Flatten" else {}
        return helper.make_node(op, [src, *extra], [dst], name=f"{op.lower()}_{tag}", **attrs)

    shape = {"Reshape": [1, 4, 6], "Flatten": [1, 24], "Squeeze": [24], "Unsqueeze": [1, 1, 24], "Identity": [1, 24]}
    inits = []
    for op, tag in ((op1, "1"), (op2, "2")):
        if op == "Reshape":
            inits.append(numpy_helper.from_array(np.array([1, 4, 6], np.int64), f"shape_{tag}"))
        if op in ("Squeeze", "Unsqueeze"):
            inits.append(numpy_helper.from_array(np.array([0], np.int64), f"axes_{tag}"))
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), view(op1, "a", "b", "1"), view(op2, "a", "c", "2"),
             helper.make_node("Mul", ["c", "c"], ["z"], name="mul")]
    g = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape[op2]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, shape[op1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("op1", ["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"])
@pytest.mark.parametrize("op2", ["Reshape", "Identity", "Squeeze"])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_view_kernel_rewriting_its_bases_bytes_meets_no_other_view_of_that_base(op1, op2, policy):
    """A view kernel copies its input onto itself: the bytes it writes are already there, so it overwrites no
    other view of the same base, whatever the policy; the run still equals onnxruntime's (numpy compares)."""
    import numpy as np
    import onnxruntime as ort

    m = _two_views_model(op1, op2)
    x = np.random.default_rng(3).standard_normal((1, 24)).astype(np.float32)
    sess = Session(m, Config(precision_mode="force_fp32", memory_reuse=policy), input_shapes={"x": [1, 24]})
    assert static_conflicts(sess.plan) == []
    got = sess.run({"x": x}).outputs
    want = dict(zip(["z", "b"], ort.InferenceSession(m.SerializeToString()).run(["z", "b"], {"x": x})))
    for k in want:
        assert np.array_equal(np.asarray(got[k]), want[k]), k
