"""Resumed trials (toolkit/tuning/resume.py): a plan run from a stored run's prefix gives the same outputs, bit for
bit, as the same config compiled from scratch and run whole; kernels reused across trial runtimes compute what
fresh ones do; and the tune search's shortcut over the candidates without cube ops keeps its answer."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.compiler.pipeline import recompile_precision
from toolkit.config.schema import Config
from toolkit.engine import Session, compile_model, npu_runtime, shapes_of
from toolkit.runtime.npu import NpuRuntime
from toolkit.tuning.resume import KernelMemo, ResumeCache, common_prefix, plan_signatures
from toolkit.tuning.tune import keep_config, search_cheapest

NODES = ["mm1", "add1", "r1", "mm2", "skip", "mul", "mm3", "ex"]


def _chain(seed: int = 0):
    """x -> MatMul mm1 -> Add add1 -> Relu r1 -> MatMul mm2 -> Add skip (+ add1's output) -> Mul mul -> MatMul mm3
    -> y, and Exp ex of mul's output -> z: two float outputs, a skip connection (a value live across kernels)."""
    rng = np.random.default_rng(seed)
    w = {k: rng.normal(0, 0.4, (32, 32)).astype(np.float32) for k in ("W1", "W2", "W3")}
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    inits += [numpy_helper.from_array(rng.normal(0, 1, (32,)).astype(np.float32), "b"),
              numpy_helper.from_array(np.float32(0.37), "s")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["a"], name="mm1"),
             helper.make_node("Add", ["a", "b"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r"], name="r1"),
             helper.make_node("MatMul", ["r", "W2"], ["m2"], name="mm2"),
             helper.make_node("Add", ["m2", "a1"], ["sk"], name="skip"),
             helper.make_node("Mul", ["sk", "s"], ["mu"], name="mul"),
             helper.make_node("MatMul", ["mu", "W3"], ["y"], name="mm3"),
             helper.make_node("Exp", ["mu"], ["z"], name="ex")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 32])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m, {"x": rng.normal(0, 1, (8, 32)).astype(np.float32)}


CFG = Config(precision_mode="force_fp16", fusion_level=0)
#: keep sets in an order that makes later ones share prefixes of different lengths with earlier ones
KEEPS = [(), ("ex",), ("mm3",), ("mm3", "ex"), ("mul",), ("mm2",), ("mm2", "mm3"), ("mm1",), ("skip", "ex"),
         ("add1", "mm3"), ("mm2",)]


def _scratch(model, feed, keep) -> dict:
    """The outputs of ``keep`` compiled from scratch (toolkit.engine.Session, no reuse) and run whole."""
    return Session(model, keep_config(CFG, keep), input_shapes=shapes_of(feed)).run(feed).outputs


def _same_bits(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k  # bit for bit (NaN/inf included)


@pytest.mark.parametrize("every", [1, 2, 3, 100])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_resumed_runs_equal_whole_runs_compiled_from_scratch_bit_for_bit(every):
    model, feed = _chain()
    base = compile_model(model, CFG, input_shapes=shapes_of(feed))
    memo, cache = KernelMemo(), ResumeCache([("x", feed)], every=every)
    resumed_from, stored_sigs, wholes = [], [], {}
    for keep in KEEPS:
        rt = memo.runtime(recompile_precision(base, keep_config(CFG, keep)))
        sigs = plan_signatures(rt.plan)
        prefix = max((common_prefix(s, sigs) for s in stored_sigs[-4:]), default=0)
        before = cache.kernels_skipped
        res = cache.run(rt, 0)
        skipped = cache.kernels_skipped - before
        resumed_from.append(skipped)
        stored_sigs.append(sigs)
        _same_bits(res.outputs, _scratch(model, feed, keep))
        # resumed at the differing kernel or at a kept boundary before it, never after it
        assert skipped <= prefix and (skipped == prefix or skipped % every == 0), (keep, skipped, prefix)
        # every value the store keeps of the run is what a whole run of this plan computes
        whole = npu_runtime(recompile_precision(base, keep_config(CFG, keep))).run(feed, dump=True).dumps
        assert res.dumps and set(res.dumps) <= set(whole)
        for t, v in res.dumps.items():
            assert np.array_equal(np.asarray(v).view(np.uint8), np.asarray(whole[t]).view(np.uint8)), (keep, t)
        wholes[id(res.dumps)] = (keep, whole)
    # the copies of dropped runs were reused for later ones, and never while a stored run still held them: every
    # run the store holds now still has its own plan's values
    assert cache.buffers.recycled > 0
    for key, stored in cache.stored[0].items():
        keep, whole = wholes[key]
        for t, v in stored.dumps.items():
            assert np.array_equal(np.asarray(v).view(np.uint8), np.asarray(whole[t]).view(np.uint8)), (keep, t)
    assert resumed_from[0] == 0  # nothing stored yet: a whole run
    if every == 1:  # each later trial skipped a shared prefix, but the one keeping the first kernel in FP32
        assert all(n > 0 for k, n in zip(KEEPS[1:], resumed_from[1:]) if k != ("mm1",)), resumed_from
    else:
        assert any(resumed_from) or every > len(base.plan.kernels)
    assert memo.reused > 0
    # the same plan as a stored run: nothing to run, the outputs read back from the restored values
    again = ResumeCache([("x", feed)], every=every)
    again.add(0, base.plan, npu_runtime(base).run(feed, dump=True).dumps)
    res = again.run(memo.runtime(recompile_precision(base, CFG)), 0)
    assert again.kernels_run == 0 and again.kernels_skipped == len(base.plan.kernels)
    _same_bits(res.outputs, _scratch(model, feed, ()))


def test_a_boundary_keeps_fewer_values_than_every_kernel_output():
    model, feed = _chain(2)
    base = compile_model(model, CFG, input_shapes=shapes_of(feed))
    rt = npu_runtime(base)
    whole = rt.run(feed, dump=True).dumps
    for every in (2, 3):
        res = ResumeCache([("x", feed)], every=every).run(npu_runtime(base), 0)
        n = len(rt.kernels)
        # independently: the values written before boundary k and read at or after it, k = every, 2*every, ..., n
        live = set().union(*(rt.live_at(k) for k in [*range(every, n, every), n])) - set(feed)
        assert set(res.dumps) == live and len(live) < len(whole), (every, sorted(live))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_stored_run_missing_a_needed_value_resumes_from_an_earlier_boundary_or_whole():
    model, feed = _chain(1)
    base = compile_model(model, CFG, input_shapes=shapes_of(feed))
    dumps = npu_runtime(base).run(feed, dump=True).dumps
    rt = npu_runtime(recompile_precision(base, keep_config(CFG, ["mm3"])))
    start = common_prefix(plan_signatures(base.plan), plan_signatures(rt.plan))
    needed = [t for t in rt.live_at(start) if t not in feed]
    assert start > 0 and needed
    for every in (1, 2):
        cache = ResumeCache([("x", feed)], every=every)
        cache.add(0, base.plan, {k: v for k, v in dumps.items() if k != needed[0]})  # a subset, as a diagnosis keeps
        res = cache.run(rt, 0)
        assert cache.kernels_skipped < start and cache.kernels_run + cache.kernels_skipped == len(rt.kernels)
        # whatever boundary it resumed from, the values it restored did not include the missing one
        assert all(needed[0] not in rt.live_at(k) for k in [cache.kernels_skipped] if k > 0)
        _same_bits(res.outputs, _scratch(model, feed, ["mm3"]))


def test_plan_signatures_change_only_from_the_first_changed_kernel():
    model, feed = _chain()
    base = compile_model(model, CFG, input_shapes=shapes_of(feed))
    s0 = plan_signatures(base.plan)
    s1 = plan_signatures(recompile_precision(base, keep_config(CFG, ["mm3"])).plan)
    first = next(i for i, (a, b) in enumerate(zip(s0, s1)) if a != b)
    names = [k.name for k in base.plan.kernels]
    assert first <= names.index("mm3") and first > names.index("mul") - 1
    assert s0 == plan_signatures(recompile_precision(base, CFG).plan)  # same config: same signatures


def _smallest(ranked, meets, cost):
    """Brute force: the sets of least (cube FLOPs, size) that meet the target, over every subset."""
    best, sets = None, []
    for n in range(len(ranked) + 1):
        for c in itertools.combinations(ranked, n):
            if meets(list(c)):
                key = (sum(cost.get(x, 0.0) for x in c), len(c))
                if best is None or key < best:
                    best, sets = key, [sorted(c)]
                elif key == best:
                    sets.append(sorted(c))
    return sets


@pytest.mark.parametrize("need", [{"mm"}, {"mm", "a3"}, {"a1", "a2"}, {"a4"}])
def test_cheap_candidates_tried_together_first(need):
    """When every candidate without cube ops in FP32 misses the target (monotone targets: more FP32 never
    hurts), their prefixes are not tried one power of two at a time; the answer is the brute-force one."""
    ranked = ["a1", "mm", "a2", "a3", "mm2", "a4", "a5"]
    cost = {"mm": 1e6, "mm2": 1e6}
    calls = []

    def meets(keep):
        calls.append(tuple(keep))
        return need <= set(keep)

    chosen, ok = search_cheapest(ranked, meets, [], cost, {"mm": ["a2", "a3"], "mm2": []})
    assert ok and sorted(chosen) in _smallest(ranked, lambda k: need <= set(k), cost)
    cheap = [n for n in ranked if n not in cost]
    if not need <= set(cheap):  # the cheap phase is one try, all of them; then the whole ranking's search, which
        # runs no prefix of only cheap candidates (their miss is implied)
        assert calls[:2] == [(), tuple(cheap)], calls
        assert not any(set(c) <= set(cheap) for c in calls[2:]), calls


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_gone_runtimes_arena_is_reused_dirty_and_a_live_ones_never():
    import gc

    model, feed = _chain(3)
    base = compile_model(model, CFG, input_shapes=shapes_of(feed))
    memo = KernelMemo()
    a = memo.runtime(base)
    a.run(feed)
    live = memo.runtime(recompile_precision(base, keep_config(CFG, ["mm2"])))
    assert not np.shares_memory(a.arena, live.arena)  # both alive: each has its own
    buf = a.arena.base if a.arena.base is not None else a.arena
    del a
    gc.collect()
    for keep in ([], ["mm3"], ["mm1", "ex"]):  # the dirty buffer of the last trial, for plans of other sizes too
        rt = memo.runtime(recompile_precision(base, keep_config(CFG, keep)))
        if rt.plan.arena_bytes <= buf.size:
            assert np.shares_memory(rt.arena, buf)
        _same_bits(rt.run(feed).outputs, _scratch(model, feed, keep))
        buf = rt.arena.base if rt.arena.base is not None else rt.arena
        del rt
        gc.collect()
    with pytest.raises(ValueError, match="arena must be"):
        NpuRuntime(base, arena=np.zeros(1, np.uint8))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64, np.bool_, np.uint8])
def test_store_copies_share_buffers_across_shapes_and_keep_every_value(dtype):
    """A buffer a dropped run released is reused for a later value of any shape and dtype of a nearby byte size;
    every copy equals its value bit for bit while its run is held (0-d and empty values included)."""
    from toolkit.tuning.resume import _Buffers

    rng = np.random.default_rng(1)
    bufs = _Buffers()
    shapes = [(3, 50, 50), (50, 3, 50), (7500,), (), (0, 4), (2, 1, 3751)]
    first = [bufs.copy(rng.standard_normal(s).astype(dtype)) for s in shapes]
    bufs.hold(first)
    bufs.release(first)  # every buffer free again
    fresh = bufs.fresh
    later = [(s, rng.standard_normal(s).astype(dtype)) for s in reversed(shapes)]
    copies = [bufs.copy(v) for _, v in later]
    bufs.hold(copies)
    assert bufs.fresh == fresh, "a value of a released size class got a new buffer"
    for (s, v), c in zip(later, copies):
        assert c.shape == s and c.dtype == v.dtype
        assert np.array_equal(c.reshape(-1).view(np.uint8), v.reshape(-1).view(np.uint8))
    assert len({id(c.base) for c in copies if c.size}) == sum(1 for c in copies if c.size)  # no two share memory
