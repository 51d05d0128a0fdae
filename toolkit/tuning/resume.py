"""Cheaper tune trials: kernels reused across precision configs, and runs resumed from a stored run's prefix.

A tune trial changes the precision of a few kernels of one compiled graph
(toolkit.compiler.pipeline.recompile_precision). Two plans of the same graph then agree kernel by kernel up
to the first kernel whose precision, inputs or tensors differ: every kernel before it computes exactly what it
computed in the earlier run, from the same values. So:

- :class:`KernelMemo` is a session source (toolkit.runtime.kernels.SessionSource) that hands back the kernels
  earlier builds of this tune made, keyed by :func:`kernel_signature` (the KernelSpec and the dtype, shape and
  storage of its tensors, as toolkit.cache.kernel_entries.spec_digest keys a compile's bundle, plus the ONNX
  tensor each input Cast carries): a trial's runtime builds only the kernels no earlier trial had;
- :class:`ResumeCache` stores the dumps of the last few runs per input (every kernel output, storage dtype) and
  runs a new plan from the first kernel where it differs from the stored run sharing the longest prefix
  (toolkit.runtime.npu.NpuRuntime.run_range over the values NpuRuntime.live_at names, taken from that run),
  which gives the same outputs, bit for bit, as a whole run (tests/tuning/test_resume.py).
"""

from __future__ import annotations

from collections import OrderedDict

from toolkit.ort.ort_env import make_session
from toolkit.runtime.npu import NpuRuntime, RunResult


def _frozen(v):
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _frozen(x)) for k, x in v.items()))
    return v


#: the signatures of the last plans asked for, by id (the plan is held, so its id is not reused meanwhile)
_RECENT: OrderedDict = OrderedDict()


def plan_signatures(plan) -> list[tuple]:
    """:func:`kernel_signature` of every kernel of ``plan``, in plan order (kept for the last few plans: a
    trial's runtime build and its run both ask)."""
    got = _RECENT.get(id(plan))
    if got is not None and got[0] is plan:
        return got[1]
    cast_src = {k.outputs[0]: k.cast_of for k in plan.kernels if k.cast_of and k.outputs}
    overflow = plan.config.get("overflow_mode", "inf_nan")
    sigs = [kernel_signature(k, plan, cast_src, overflow) for k in plan.kernels]
    _RECENT[id(plan)] = (plan, sigs)
    while len(_RECENT) > 4:
        _RECENT.popitem(last=False)
    return sigs


def kernel_signature(spec, plan, cast_src: dict, overflow_mode: str) -> tuple:
    """What a kernel computes from its input values, as a hashable tuple: every KernelSpec field, the dtype /
    shape / storage of each tensor it reads or writes (not its arena offset), the ONNX tensor an inserted
    Cast's output carries for each input (``cast_src``), and the overflow mode. Two kernels of plans of one
    compiled graph with equal signatures compute the same outputs from the same inputs."""
    tensors = plan.tensors
    fields = tuple(tuple(v) if isinstance(v, list) else _frozen(v) for v in vars(spec).values())
    io = tuple((t, tt.dtype, _frozen(tt.shape), tt.storage) if (tt := tensors.get(t)) is not None else (t,)
               for t in (*spec.inputs, *spec.outputs))
    return fields, io, tuple(cast_src.get(t) for t in spec.inputs), overflow_mode


class KernelMemo:
    """Kernels built by earlier runtimes of one tune, handed back to later builds (module docstring).

    ``source`` is the factory NpuRuntime takes as ``sessions``: ``source(plan, cache_record, overflow_mode)``;
    ``inner`` is the factory it wraps (toolkit.cache.kernel_entries.session_source, or None) for the kernels
    not seen before. ``reused`` counts kernels handed back."""

    def __init__(self, inner=None):
        self.inner = inner
        self.kernels: dict[tuple, tuple] = {}
        self.reused = 0

    def source(self, plan, record, overflow_mode: str) -> "_MemoSource":
        inner = self.inner(plan, record, overflow_mode) if self.inner is not None else None
        return _MemoSource(self, inner, plan, overflow_mode)

    def runtime(self, compiled) -> NpuRuntime:
        """An NpuRuntime of ``compiled`` built through this memo."""
        return NpuRuntime(compiled, sessions=self.source)


class _MemoSource:
    """The SessionSource of one build_kernels call (see :class:`KernelMemo`)."""

    def __init__(self, memo: KernelMemo, inner, plan, overflow_mode: str):
        self.memo, self.inner, self.plan, self.overflow = memo, inner, plan, overflow_mode
        self.sigs: list[tuple] | None = None

    def _sig(self, i: int) -> tuple:
        if self.sigs is None:
            self.sigs = plan_signatures(self.plan)
        return self.sigs[i]

    def from_recipe(self, i: int, spec, sessions: dict):
        got = self.memo.kernels.get(self._sig(i))
        if got is not None:
            self.memo.reused += 1
            return got
        return self.inner.from_recipe(i, spec, sessions) if self.inner is not None else None

    def session(self, data: bytes, key: str, optimize):
        return self.inner.session(data, key, optimize) if self.inner is not None else \
            make_session(data, optimize=optimize)

    def reused(self, sess, key: str, optimize) -> None:
        if self.inner is not None:
            self.inner.reused(sess, key, optimize)

    def made(self, sess, key: str, optimize) -> None:
        if self.inner is not None:
            self.inner.made(sess, key, optimize)

    def finish(self, kernels: list) -> None:
        for i, ek in enumerate(kernels):
            if ek.session is not None and ek.numpy_fn is None and not ek.ortvalues:
                self.memo.kernels.setdefault(self._sig(i), (ek.session, list(ek.feeds), list(ek.fetches),
                                                            bool(ek.native_fp16), ek.digest))
        if self.inner is not None:
            self.inner.finish(kernels)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


class _Stored:
    __slots__ = ("sigs", "dumps")

    def __init__(self, sigs, dumps):
        self.sigs, self.dumps = sigs, dumps


def common_prefix(a: list, b: list) -> int:
    """Number of leading positions where ``a`` and ``b`` are equal."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class ResumeCache:
    """The last ``keep`` runs per input (signatures and dumps) and resumed runs from them (module docstring).

    Args:
        feeds: [(label, {input: array})], the inputs runs are made on (by index).
        keep: stored runs per input (least recently used dropped first); each holds every kernel output of one
            run, sharing the arrays of the prefix it resumed from.
    """

    def __init__(self, feeds, keep: int = 4):
        self.feeds, self.keep = feeds, keep
        self.stored: dict[int, OrderedDict] = {}
        self.kernels_run = 0  # kernels executed by run()
        self.kernels_skipped = 0  # kernels whose outputs were taken from a stored run

    def add(self, i: int, plan, dumps: dict, sigs: list | None = None) -> None:
        """Store a whole run of ``plan`` on input ``i`` (``dumps``: RunResult.dumps of a run with dump=True)."""
        sigs = plan_signatures(plan) if sigs is None else sigs
        runs = self.stored.setdefault(i, OrderedDict())
        runs[id(dumps)] = _Stored(sigs, dumps)
        while len(runs) > self.keep:
            runs.popitem(last=False)

    def _donor(self, i: int, sigs: list) -> tuple[int, _Stored | None]:
        best, donor = 0, None
        for key, s in reversed(self.stored.get(i, {}).items()):
            p = common_prefix(s.sigs, sigs)
            if p > best:
                best, donor = p, s
        if donor is not None:
            self.stored[i].move_to_end(next(k for k, s in self.stored[i].items() if s is donor))
        return best, donor

    def run(self, rt: NpuRuntime, i: int) -> RunResult:
        """Run ``rt``'s plan on input ``i``: from the first kernel where it differs from the stored run that
        shares the longest prefix with it, or whole when none does (or a value it needs is not stored). The
        result's ``outputs`` are what NpuRuntime.run returns (same values, bit for bit), its ``dumps`` every
        kernel output (this run's or the prefix's). The run is stored. Raises what NpuRuntime.run raises."""
        feed = self.feeds[i][1]
        sigs = plan_signatures(rt.plan)
        start, donor = self._donor(i, sigs)
        restore = None
        if donor is not None:
            restore = {}
            for t in rt.live_at(start):
                if t in rt.plan.graph_inputs and t in feed:
                    restore[t] = feed[t]
                elif t in donor.dumps:
                    restore[t] = donor.dumps[t]
                else:
                    restore = None
                    break
        n = len(rt.kernels)
        if restore is None:
            res = rt.run(feed, dump=True)
            self.kernels_run += n
        else:
            res = rt.run_range(restore, start, n, dump=True)
            res.outputs = rt.read_outputs(feed)
            written = {t for k in rt.plan.kernels[:start] for t in k.outputs}
            res.dumps = {**{t: v for t, v in donor.dumps.items() if t in written}, **res.dumps}
            self.kernels_run += n - start
            self.kernels_skipped += start
        self.add(i, rt.plan, res.dumps, sigs)
        return res
