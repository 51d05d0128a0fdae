"""npuscope memcheck: planted conflicts, each built here by hand-editing a plan the engine made, must be found
statically and dynamically with the right writer, victim and late reader; the differential run must point at
the same conflict; the disable_reuse fix must verify. The engine's own plans must be clean under every policy.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.graphs import N, make_model
from toolkit.config import Config
from toolkit.engine import Session
from toolkit.memory.dynamic_check import OwnerMap, dynamic_check
from toolkit.memory.memcheck import memcheck
from toolkit.memory.planio import attach_plan
from toolkit.memory.static_check import static_conflicts
from toolkit.runtime.npu import NpuRuntime

POLICIES = ("off", "conservative", "aggressive")


FP32 = dict(precision_mode="force_fp32", fusion_level=0)
X = np.random.default_rng(3).standard_normal((16, 64)).astype(np.float32)


def step_of(plan, kernel):
    return [k.name for k in plan.kernels].index(kernel)


def assert_found(plan, compiled, feeds, writer, victim, reader, kind=None):
    """static and dynamic both name (writer, victim, reader); the differential blames that conflict; the fix
    verifies."""
    static = static_conflicts(plan)
    keys = {(c.writer, c.victim, c.reader) for c in static}
    assert (writer, victim, reader) in keys, static
    if kind:
        assert kind in {c.kind for c in static if (c.writer, c.victim, c.reader) == (writer, victim, reader)}
    _, events = dynamic_check(NpuRuntime(attach_plan(compiled, plan)), feeds)
    assert (writer, victim, reader) in {(e.writer, e.tensor, e.reader) for e in events}, events
    res = memcheck(compiled, plan, feeds)
    assert res.check.divergence is not None
    assert res.check.divergence["conflict"]["victim"] == victim
    assert victim in res.fix["disable_reuse"] and res.fix["verified"] is True, res.fix
    return res


# ------------------------------------------------------------------------------------------ planted conflicts
def test_two_overlapping_tensors_in_a_hand_edited_plan():
    # a = 2x, b = 3x both live at Add; b is moved onto a's bytes: mul_b overwrites a, which add still reads
    model = make_model([N("Mul", ["x", "two"], ["a"], "mul_a"), N("Mul", ["x", "three"], ["b"], "mul_b"),
                        N("Add", ["a", "b"], ["y"], "add")], [("x", [16, 64])], ["y"],
                       {"two": np.float32(2.0), "three": np.float32(3.0)})
    sess = Session(model, Config(**FP32))
    assert static_conflicts(sess.plan) == []
    plan = copy.deepcopy(sess.plan)
    plan.tensors["b"].offset = plan.tensors["a"].offset
    res = assert_found(plan, sess.compiled, {"x": X}, "mul_b", "a", "add", "overlap")
    assert res.check.divergence["kernel"] == "add"


def test_inplace_kernel_whose_input_has_a_later_reader():
    # r = relu(x); s = sigmoid(r); y = s + r. Putting s on r's bytes is an in-place Sigmoid over an input
    # that Add still reads.
    model = make_model([N("Relu", ["x"], ["r"], "relu"), N("Sigmoid", ["r"], ["s"], "sig"),
                        N("Add", ["s", "r"], ["y"], "add")], [("x", [16, 64])], ["y"])
    sess = Session(model, Config(**FP32))
    assert static_conflicts(sess.plan) == []
    assert sess.plan.tensors["s"].offset != sess.plan.tensors["r"].offset  # the planner refused it
    plan = copy.deepcopy(sess.plan)
    plan.tensors["s"].offset = plan.tensors["r"].offset
    assert_found(plan, sess.compiled, {"x": X}, "sig", "r", "add", "inplace_with_later_reader")


def test_view_outliving_its_base():
    # v = reshape(x*2) is a view of m; a planner that frees m at the Reshape (kernel order, no alias
    # extension) lets t = tanh(x) take those bytes while v is still read by the last Add.
    model = make_model([N("Mul", ["x", "two"], ["m"], "mul"), N("Reshape", ["m", "shape"], ["v"], "reshape"),
                        N("Tanh", ["x"], ["t"], "tanh"), N("Reshape", ["t", "shape"], ["tv"], "reshape_t"),
                        N("Add", ["v", "tv"], ["y"], "add")], [("x", [16, 64])], ["y"],
                       {"two": np.float32(2.0), "shape": np.array([64, 16], np.int64)})
    sess = Session(model, Config(**FP32))
    plan = sess.plan
    assert plan.tensors["v"].alias_of == "m" and plan.tensors["v"].offset == plan.tensors["m"].offset
    assert static_conflicts(plan) == []
    bad = copy.deepcopy(plan)
    bad.tensors["t"].offset = bad.tensors["m"].offset  # t reuses the base's bytes after the Reshape
    bad.tensors["tv"].offset = bad.tensors["t"].offset
    assert_found(bad, sess.compiled, {"x": X}, "tanh", "v", "add", "view_outlives_base")


def cpu_model():
    """e = exp(x) is read by an RNN, a CPU-placed (AI_CPU) op, through a MemcpyD2H copy (CPU stream); the copy's
    read of 'e' lasts until the NPU stream syncs with the CPU stream (at MemcpyH2D_h, which brings the RNN's
    result to 'use'), while 'neg' and 'abs' run on the NPU stream in between."""
    r = np.random.default_rng(5)
    return make_model([N("Exp", ["x"], ["e"], "exp"), N("RNN", ["e", "W", "R"], ["Y", "h"], "rnn", hidden_size=8),
                       N("Neg", ["x"], ["n"], "neg"), N("Abs", ["n"], ["ab"], "abs"),
                       N("Add", ["h", "ab"], ["y"], "use")], [("x", [4, 16, 8])], ["y"],
                      {"W": (r.standard_normal((1, 8, 8)) * 0.3).astype(np.float32),
                       "R": (r.standard_normal((1, 8, 8)) * 0.3).astype(np.float32)})


XR = np.random.default_rng(4).standard_normal((4, 16, 8)).astype(np.float32)


def test_cpu_read_in_flight_while_npu_reuses_the_block():
    sess = Session(cpu_model(), Config(**FP32))
    plan = sess.plan
    assert plan.kernels[step_of(plan, "rnn")].placement == "CPU"
    assert plan.tensors["e"].last == step_of(plan, "MemcpyH2D_h")  # stream-aware lifetime
    assert static_conflicts(plan) == []
    bad = copy.deepcopy(plan)  # what a planner using kernel order only may do: n takes e's bytes after rnn
    bad.tensors["n"].offset = bad.tensors["e"].offset
    static = static_conflicts(bad)
    assert ("neg", "e", "MemcpyD2H_e", "stream_read_in_flight") in {(c.writer, c.victim, c.reader, c.kind)
                                                                     for c in static}
    _, events = dynamic_check(NpuRuntime(attach_plan(sess.compiled, bad)), {"x": XR})
    assert ("neg", "e", "MemcpyD2H_e") in {(e.writer, e.tensor, e.reader) for e in events}


# ------------------------------------------------------------------------------------------- clean plans
def _sample_cases():
    from toolkit import samples
    return [(n, samples.sample(n)) for n in samples.SAMPLES]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", ["resnet_small", "transformer_block", "detector_head"])
def test_engine_plans_are_clean_under_every_policy(name, policy):
    from toolkit import samples
    spec = samples.sample(name)
    model, feeds = spec.build(), spec.make_inputs(0)
    sess = Session(model, Config(memory_reuse=policy), input_shapes={k: v.shape for k, v in feeds.items()})
    res = memcheck(sess.compiled, sess.plan, feeds)
    assert res.check.clean, (res.check.conflicts[:3], res.check.events[:3], res.check.divergence, res.check.error)
    assert res.fix == {}


def test_disable_reuse_gives_exclusive_ranges():
    model = make_model([N("Relu", ["x"], ["r"], "relu"), N("Sigmoid", ["r"], ["s"], "sig"),
                        N("Tanh", ["s"], ["y"], "tanh")], [("x", [16, 64])], ["y"])
    plan = Session(model, Config(**FP32)).plan
    assert plan.tensors["s"].alias_of == "r"  # in place by default
    plan2 = Session(model, Config(disable_reuse=["sig"], **FP32)).plan
    s = plan2.tensors["s"]
    assert s.alias_of is None
    others = [t for t in plan2.tensors.values() if t.storage == "arena" and t.name != "s"]
    assert all(t.offset + t.nbytes <= s.offset or s.offset + s.nbytes <= t.offset for t in others)
    assert static_conflicts(plan2) == []


def test_owner_map_intervals():
    m = OwnerMap()
    m.assign(0, 100, "a")
    m.assign(50, 150, "b")
    m.assign(20, 30, None)
    assert m.query(0, 200) == [(0, 20, "a"), (20, 30, None), (30, 50, "a"), (50, 150, "b"), (150, 200, None)]
    assert m.ranges_of("a") == [(0, 20), (30, 50)]


SHARED = sorted(p for p in __import__("pathlib").Path("/work/shared/cases/fp16").glob("c*") if (p / "model.onnx").is_file())


@pytest.mark.parametrize("case", SHARED, ids=[p.name[:3] for p in SHARED])
def test_shared_cases_plans_are_clean(case):
    import onnx
    from toolkit.engine import shapes_of

    model = onnx.load(str(case / "model.onnx"))
    feeds = dict(np.load(case / "inputs.npz"))
    for policy in ("conservative", "aggressive"):
        sess = Session(model, Config(memory_reuse=policy), input_shapes=shapes_of(feeds))
        res = memcheck(sess.compiled, sess.plan, feeds, verify_fix=False)
        assert res.check.clean, (policy, res.check.conflicts[:3], res.check.events[:3], res.check.divergence)
