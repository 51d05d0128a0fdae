"""Static memory planning (toolkit/memory/planner.py, passes/plan_memory.py) and the arena it drives.

Every property is checked with code of its own here: an O(n^2) pairwise overlap check, a per-step live-bytes
lower bound, the lifetimes recomputed from the kernel list. The last test corrupts a plan by hand and shows
the run's output changes, which proves tensors really live at their planned offsets in one arena.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.graphs import N, make_model
from toolkit.commands.common import config_from_dict, load_config
from toolkit.config.schema import Config
from toolkit.engine import Session
from toolkit.core.errors import ConfigError
from toolkit.memory.planner import Block, align, find_conflicts, lower_bound, plan_greedy_by_size, plan_no_reuse
from toolkit.runtime.npu import NpuRuntime

ALIGN = 512


# ----------------------------------------------------------------------------------------------- helpers
def brute_conflicts(blocks) -> set[frozenset]:
    """Pairs live at a common step whose byte ranges intersect (both non-empty)."""
    out = set()
    for i, a in enumerate(blocks):
        for b in blocks[i + 1:]:
            live_together = max(a.first, b.first) <= min(a.last, b.last)
            bytes_meet = max(a.offset, b.offset) < min(a.offset + a.size, b.offset + b.size)
            if live_together and bytes_meet:
                out.add(frozenset((a.name, b.name)))
    return out


def brute_lower_bound(blocks) -> int:
    if not blocks:
        return 0
    lo, hi = min(b.first for b in blocks), max(b.last for b in blocks)
    return max(sum(b.size for b in blocks if b.first <= t <= b.last) for t in range(lo, hi + 1))


def random_blocks(r, n, steps, alignment=ALIGN):
    blocks = []
    for i in range(n):
        first = int(r.integers(-1, steps))
        last = int(r.integers(first, steps + 1))
        raw = int(r.choice([1, 7, 100, 513, 2048, 4096, 30000, 100000]) * r.integers(1, 4))
        blocks.append(Block(f"t{i}", align(raw, alignment), first, last))
    return blocks






def alias_root(plan, name):
    while plan.tensors[name].alias_of:
        name = plan.tensors[name].alias_of
    return name


def plan_blocks(plan) -> list[Block]:
    return [Block(t.name, align(max(t.nbytes, 1), plan.alignment), t.first, t.last, t.offset)
            for t in plan.tensors.values() if t.storage == "arena"]


# ------------------------------------------------------------------------------------------- the planner
def test_align():
    assert [align(n, 512) for n in (0, 1, 511, 512, 513, 1024)] == [0, 512, 512, 512, 1024, 1024]
    assert align(100, 64) == 128


@pytest.mark.parametrize("seed", range(6))
def test_greedy_random_lifetimes_never_overlap(seed):
    r = np.random.default_rng(seed)
    for trial in range(60):
        n = int(r.integers(1, 40))
        blocks = random_blocks(r, n, steps=int(r.integers(1, 25)))
        arena = plan_greedy_by_size(blocks)
        assert all(b.offset >= 0 and b.offset % ALIGN == 0 for b in blocks)
        assert brute_conflicts(blocks) == set(), (seed, trial)
        assert find_conflicts(blocks) == []
        assert arena == max(b.offset + b.size for b in blocks)
        lb = brute_lower_bound(blocks)
        assert lower_bound(blocks) == lb
        assert arena >= lb


def test_find_conflicts_agrees_with_brute_force_on_bad_plans():
    r = np.random.default_rng(42)
    found_any = False
    for _ in range(200):
        blocks = random_blocks(r, int(r.integers(2, 20)), steps=10)
        for b in blocks:  # random offsets: many real conflicts
            b.offset = int(r.integers(0, 20)) * ALIGN
        want = brute_conflicts(blocks)
        got = {frozenset(p) for p in find_conflicts(blocks)}
        assert got == want
        found_any |= bool(want)
    assert found_any


@pytest.mark.parametrize("sizes", [[1024] * 8, [8192, 4096, 4096, 2048, 1024, 512, 512], [512, 1024, 2048, 4096]])
def test_arena_equals_lower_bound_on_a_chain(sizes):
    # tensor i is written by kernel i and read by kernel i+1 (a graph input at -1 for i = 0)
    blocks = [Block(f"t{i}", s, i - 1, i) for i, s in enumerate(sizes)]
    arena = plan_greedy_by_size(blocks)
    assert brute_conflicts(blocks) == set()
    assert arena == brute_lower_bound(blocks) == max(a + b for a, b in zip(sizes, sizes[1:]))


def test_no_reuse_is_sum_of_sizes():
    r = np.random.default_rng(7)
    blocks = random_blocks(r, 25, steps=10)
    arena = plan_no_reuse(blocks)
    assert arena == sum(b.size for b in blocks)
    spans = sorted((b.offset, b.offset + b.size) for b in blocks)
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))  # disjoint regardless of lifetime


# ------------------------------------------------------------------------------------- compiled plans
def branchy_model():
    """Branches, a residual, a reduction and a long-lived tensor, so lifetimes interleave."""
    r = np.random.default_rng(0)
    nodes = [N("Conv", ["x", "w1"], ["c1"], "conv1", pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"], "relu1"),
             N("Conv", ["r1", "w2"], ["c2"], "conv2", pads=[1, 1, 1, 1]), N("Sigmoid", ["c2"], ["s2"], "sig2"),
             N("Mul", ["c2", "s2"], ["m2"], "mul2"), N("Add", ["m2", "r1"], ["a2"], "res"),
             N("ReduceMean", ["a2"], ["gap"], "gap", axes=[2, 3], keepdims=1), N("Mul", ["a2", "gap"], ["sc"], "scale"),
             N("Transpose", ["sc"], ["t"], "transpose", perm=[0, 2, 3, 1]), N("Softmax", ["t"], ["y"], "softmax"),
             N("Tanh", ["x"], ["z"], "side")]
    model = make_model(nodes, [("x", [1, 4, 8, 8])], ["y", "z"],
                       {"w1": r.standard_normal((8, 4, 3, 3)).astype(np.float32),
                        "w2": r.standard_normal((8, 8, 3, 3)).astype(np.float32)})
    return model, {"x": r.standard_normal((1, 4, 8, 8)).astype(np.float32)}


def check_plan(plan):
    """Independent checks of a compiled plan's memory (see module docstring)."""
    arena = [t for t in plan.tensors.values() if t.storage == "arena"]
    assert arena
    n = len(plan.kernels)
    for t in arena:
        assert t.offset >= 0 and t.offset % plan.alignment == 0, t.name
        assert t.offset + t.nbytes <= plan.arena_bytes, t.name
        assert t.nbytes == int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize, t.name
    # lifetimes recomputed from the kernel list: every use lies inside [first, last]
    for i, k in enumerate(plan.kernels):
        for name in k.inputs + k.outputs:
            t = plan.tensors[name]
            assert t.first <= i <= t.last, (name, k.name, t.first, t.last, i)
    for name in plan.graph_inputs:
        assert plan.tensors[name].first == -1
    for name in plan.graph_outputs:
        assert plan.tensors[name].last >= n  # still live when the outputs are read back
    blocks = plan_blocks(plan)
    # tensors sharing bytes on purpose (views, in-place outputs; aggressive policy) sit at their root's offset;
    # the byte-level check of those shares is tests/memcheck/ (static checker)
    for t in arena:
        assert t.offset == plan.tensors[alias_root(plan, t.name)].offset, t.name
    same_group = {frozenset((a.name, b.name)) for a in blocks for b in blocks
                  if a.name != b.name and alias_root(plan, a.name) == alias_root(plan, b.name)}
    assert brute_conflicts(blocks) - same_group == set()
    assert {frozenset(p) for p in find_conflicts(blocks)} <= same_group
    groups = {}
    for b in blocks:  # one buffer per alias group, live over the union of its members' lifetimes
        g = groups.setdefault(alias_root(plan, b.name), Block(b.name, b.size, b.first, b.last, b.offset))
        g.size, g.first, g.last = max(g.size, b.size), min(g.first, b.first), max(g.last, b.last)
    assert plan.lower_bound_bytes == brute_lower_bound(list(groups.values()))
    assert plan.arena_bytes >= plan.lower_bound_bytes


@pytest.mark.parametrize("cfg", [dict(precision_mode="force_fp32", fusion_level=0),
                                 dict(precision_mode="force_fp16", fusion_level=0),
                                 dict(precision_mode="allow_mix_precision", fusion_level=2),
                                 dict(precision_mode="force_fp16", fusion_level=2, memory_alignment=64)])
def test_compiled_plan_has_no_conflicts(cfg):
    model, feeds = branchy_model()
    sess = Session(model, Config(**cfg))
    assert sess.plan.alignment == cfg.get("memory_alignment", ALIGN)
    check_plan(sess.plan)
    assert sess.plan.arena_bytes < sum(align(t.nbytes, sess.plan.alignment)
                                       for t in sess.plan.tensors.values() if t.storage == "arena")  # reuse happened
    # memory reuse must not change a single bit of the results
    plain = Session(model, Config(memory_reuse="off", **cfg))
    got, want = sess.run(feeds).outputs, plain.run(feeds).outputs
    for name in want:
        assert np.array_equal(got[name], want[name], equal_nan=True), name


def test_chain_model_arena_is_lower_bound():
    nodes = [N(op, [f"t{i}"], [f"t{i + 1}"], f"n{i}") for i, op in enumerate(["Relu", "Sigmoid", "Tanh", "Neg", "Abs"])]
    model = make_model(nodes, [("t0", [4, 256])], ["t5"])
    sess = Session(model, Config(precision_mode="force_fp32", memory_reuse="conservative"))
    check_plan(sess.plan)
    assert sess.plan.arena_bytes == sess.plan.lower_bound_bytes == 2 * 4 * 256 * 4
    # aggressive: every op of the chain writes in place, so the whole chain is one buffer
    sess = Session(model, Config(precision_mode="force_fp32"))
    check_plan(sess.plan)
    assert sess.plan.arena_bytes == sess.plan.lower_bound_bytes == 4 * 256 * 4


def test_memory_reuse_off_gives_sum_of_sizes():
    model, _ = branchy_model()
    sess = Session(model, Config(precision_mode="force_fp16", memory_reuse="off"))
    plan = sess.plan
    sizes = [align(max(t.nbytes, 1), plan.alignment) for t in plan.tensors.values() if t.storage == "arena"]
    assert plan.arena_bytes == sum(sizes)
    spans = sorted((t.offset, t.offset + t.nbytes) for t in plan.tensors.values() if t.storage == "arena")
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))


def test_bad_alignment_refused():
    with pytest.raises(ConfigError):
        config_from_dict({"memory_alignment": 48})


def test_corrupted_plan_corrupts_the_run():
    """a = 2x and b = 3x are both live at Add; moving b onto a's bytes makes Add read 3x twice."""
    model = make_model([N("Mul", ["x", "two"], ["a"], "mul_a"), N("Mul", ["x", "three"], ["b"], "mul_b"),
                        N("Add", ["a", "b"], ["y"], "add")], [("x", [16, 64])], ["y"],
                       {"two": np.float32(2.0), "three": np.float32(3.0)})
    x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    sess = Session(model, Config(precision_mode="force_fp32", fusion_level=0))
    plan = sess.plan
    ta, tb = plan.tensors["a"], plan.tensors["b"]
    assert max(ta.first, tb.first) <= min(ta.last, tb.last)  # live together
    assert ta.offset != tb.offset
    two, three = x * np.float32(2), x * np.float32(3)  # float32 numpy, as the kernels compute
    np.testing.assert_array_equal(sess.run({"x": x}).outputs["y"], two + three)
    tb.offset = ta.offset  # hand corruption
    assert {frozenset(p) for p in find_conflicts(plan_blocks(plan))} >= {frozenset(("a", "b"))}
    broken = NpuRuntime(sess.compiled).run({"x": x}).outputs["y"]
    assert not np.allclose(broken, two + three)
    np.testing.assert_array_equal(broken, three + three)


@pytest.mark.parametrize("name", ["resnet_small", "transformer_block", "detector_head"])
def test_sample_model_plans_have_no_conflicts(name):
    from toolkit import samples
    spec = samples.sample(name)
    model, feeds = spec.build(), spec.make_inputs(0)
    sess = Session(model, Config(), input_shapes={k: v.shape for k, v in feeds.items()})
    check_plan(sess.plan)
    plain = Session(model, Config(memory_reuse="off"), input_shapes={k: v.shape for k, v in feeds.items()})
    got, want = sess.run(feeds).outputs, plain.run(feeds).outputs
    for out in want:
        assert np.array_equal(got[out], want[out], equal_nan=True), out
