"""npuscope memcheck (toolkit/memcheck/memcheck.py): planted conflicts, each built here by hand-editing a plan
the engine made, must be found statically and dynamically with the right writer, victim and late reader; the
differential run must point at the same conflict. The engine's own plans must be clean under every policy,
with copies too, and shared case c10 (aggressive reuse, the same input run twice in one session) is bitwise
repeatable."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.graphs import N, make_model
from toolkit.config.schema import Config
from toolkit.engine import Session
from toolkit.memcheck.dynamic_check import dynamic_check
from toolkit.memcheck.memcheck import memcheck
from toolkit.memcheck.planio import attach_plan
from toolkit.memcheck.static_check import static_conflicts
from toolkit.runtime.npu import NpuRuntime


def test_memcheck_diff_has_no_warnings():
    from toolkit.memcheck.memcheck import _diff

    nan, inf = np.nan, np.inf
    cases = [([nan, nan], [nan, nan], 0.0), ([nan], [2.0], nan), ([inf, 1], [inf, 3], 2.0), ([inf], [1.0], inf),
             ([], [], 0.0), ([-inf], [inf], inf), ([1.0, 5.0], [1.0, 2.0], 3.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for a, b, want in cases:
            got = _diff(np.array(a, np.float32), np.array(b, np.float32))
            assert (np.isnan(want) and np.isnan(got)) or got == want, (a, b, got)
        assert _diff(np.array([1 + 2j]), np.array([1 + 0j])) == 2.0
        assert np.isnan(_diff(np.array(["a"]), np.array(["b"])))


POLICIES = ("off", "conservative", "aggressive")


FP32_UNFUSED = dict(precision_mode="force_fp32", fusion_level=0)
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
    sess = Session(model, Config(**FP32_UNFUSED))
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
    sess = Session(model, Config(**FP32_UNFUSED))
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
    sess = Session(model, Config(**FP32_UNFUSED))
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
    sess = Session(cpu_model(), Config(**FP32_UNFUSED))
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


C10 = Path("/work/shared/cases/fp16/c10_repeated_runs_bitwise_equal")


@pytest.mark.skipif(not C10.is_dir(), reason="shared case c10 not present")
def test_c10_repeated_runs_bitwise_equal_under_aggressive():
    from toolkit.config.schema import Config
    from toolkit.engine import Session, shapes_of
    from toolkit.memcheck.memcheck import memcheck
    from toolkit.ort.reference import ReferenceRunner  # noqa: F401 (import check only)

    model = onnx.load(str(C10 / "model.onnx"))
    feeds = dict(np.load(C10 / "inputs.npz"))
    json.loads((C10 / "expected.json").read_text())
    sess = Session(model, Config(precision_mode="allow_mix_precision", memory_reuse="aggressive"),
                   input_shapes=shapes_of(feeds))
    a, b = sess.run(feeds).outputs, sess.run(feeds).outputs
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    res = memcheck(sess.compiled, sess.plan, feeds)
    assert res.check.clean, (res.check.conflicts[:3], res.check.events[:3], res.check.divergence)


# ------------------------------------------------------------------------------------- memory
def stream_model():
    """exp's output is copied to the host for the CPU tanh; neg/abs run on the NPU meanwhile; 'use' reads the
    CPU result through a MemcpyH2D."""
    return make_model([N("Exp", ["x"], ["e"], "exp"), N("Tanh", ["e"], ["th"], "tanh"),
                       N("Neg", ["x"], ["n"], "neg"), N("Abs", ["n"], ["ab"], "abs"),
                       N("Add", ["th", "ab"], ["y"], "use")], [("x", [16, 64])], ["y"])


XS = np.random.default_rng(12).standard_normal((16, 64)).astype(np.float32)


@pytest.mark.parametrize("policy", ["off", "conservative", "aggressive"])
def test_memcheck_is_clean_on_plans_with_copies(policy):
    for cfg in (Config(memory_reuse=policy, op_placement={"Tanh": "CPU"}),
                Config(memory_reuse=policy, precision_mode="force_fp16", op_placement={"Tanh": "CPU", "neg": "CPU"})):
        sess = Session(stream_model(), cfg)
        assert any(k.fusion == "copy" for k in sess.plan.kernels)
        res = memcheck(sess.compiled, sess.plan, {"x": XS})
        assert res.check.clean, (res.check.conflicts[:3], res.check.events[:3], res.check.divergence,
                                 res.check.error)
