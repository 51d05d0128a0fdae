"""Cheaper tune trials: kernels reused across precision configs, and runs resumed from a stored run's prefix.

A tune trial changes the precision of a few kernels of one compiled graph
(toolkit.compiler.pipeline.recompile_precision). Two plans of the same graph then agree kernel by kernel up
to the first kernel whose precision, inputs or tensors differ: every kernel before it computes exactly what it
computed in the earlier run, from the same values. So:

- :class:`KernelMemo` is a session source (toolkit.runtime.kernels.SessionSource) that hands back the kernels
  earlier builds of this tune made, keyed by :func:`kernel_signature` (the KernelSpec and the dtype, shape and
  storage of its tensors, as toolkit.cache.kernel_entries.spec_digest keys a compile's bundle, plus the ONNX
  tensor each input Cast carries): a trial's runtime builds only the kernels no earlier trial had;
- :class:`ResumeCache` stores, for the last few runs per input, the values live at every few kernel boundaries
  (storage dtype) and runs a new plan from the latest such boundary at or before the first kernel where it
  differs from the stored run sharing the longest prefix (toolkit.runtime.npu.NpuRuntime.run_range over the
  values NpuRuntime.live_at names, taken from that run), which gives the same outputs, bit for bit, as a whole
  run (tests/tuning/test_resume.py).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import numpy as np

from toolkit.ort.ort_env import make_session
from toolkit.runtime.npu import NpuRuntime, RunResult


def _frozen(v):
    if v is None or type(v) in (str, int, float, bool):
        return v
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
    # KernelSpec fields are strings, None or lists of strings; tensor shapes lists of ints (None: unknown)
    fields = tuple(tuple(v) if type(v) is list else _frozen(v) for v in vars(spec).values())
    io = tuple((t, tt.dtype, tuple(tt.shape) if type(tt.shape) is list else _frozen(tt.shape), tt.storage)
               if (tt := tensors.get(t)) is not None else (t,) for t in (*spec.inputs, *spec.outputs))
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
        self.spare: list[np.ndarray] = []  # arena buffers of runtimes that are gone, for the next ones

    def source(self, plan, record, overflow_mode: str) -> "_MemoSource":
        make = (lambda: self.inner(plan, record, overflow_mode)) if self.inner is not None else None
        return _MemoSource(self, make, plan, overflow_mode)

    def runtime(self, compiled) -> NpuRuntime:
        """An NpuRuntime of ``compiled`` built through this memo. Its arena is the buffer of an earlier runtime
        of this memo that is gone, when one is large enough (pages already mapped: NpuRuntime's ``arena``); the
        buffer comes back to the memo when the runtime is garbage (at most two kept)."""
        need = max(compiled.plan.arena_bytes, 1)
        buf = next((b for b in self.spare if b.size >= need), None)
        if buf is not None:
            self.spare = [b for b in self.spare if b is not buf]
        rt = NpuRuntime(compiled, sessions=self.source, arena=buf)
        weakref.finalize(rt, self._give_back, rt.arena.base if rt.arena.base is not None else rt.arena)
        return rt

    def _give_back(self, buf: np.ndarray) -> None:
        self.spare = [buf, *self.spare][:2]


class _MemoSource:
    """The SessionSource of one build_kernels call (see :class:`KernelMemo`). The wrapped source (the compile
    cache's, which opens its store) is made only when a kernel is not in the memo."""

    def __init__(self, memo: KernelMemo, make_inner, plan, overflow_mode: str):
        self.memo, self.make_inner, self.plan, self.overflow = memo, make_inner, plan, overflow_mode
        self._inner = None
        self.sigs: list[tuple] | None = None

    @property
    def inner(self):
        if self._inner is None and self.make_inner is not None:
            self._inner = self.make_inner()
            self.make_inner = None
        return self._inner

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
        if self._inner is not None:
            self._inner.finish(kernels)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()


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


def live_sets(rt: NpuRuntime, boundaries) -> dict[int, list[str]]:
    """{k: NpuRuntime.live_at(k)} for every boundary ``k`` of ``boundaries`` (0..len(rt.kernels)), in one pass:
    the tensors written before kernel k (by a kernel or as a graph input) that kernel k onwards, or the graph
    outputs read back after the last kernel, read."""
    n = len(rt.kernels)
    written = {t: -1 for t in rt.plan.graph_inputs}
    for i, ek in enumerate(rt.kernels):
        for _, t in ek.fetches:
            written.setdefault(t, i)
    last: dict[str, int] = {}
    for i, ek in enumerate(rt.kernels):
        for _, t in ek.feeds:
            if t in written:
                last[t] = i
    for t in rt.plan.graph_outputs:
        if t in written:
            last[t] = n
    order = list(last)  # first-read order, as live_at lists them
    return {k: [t for t in order if written[t] < k <= last[t]] for k in boundaries}


def _size_class(nbytes: int) -> int:
    """``nbytes`` (bytes) rounded up to the next of 8 steps per power of two (at most 12.5% larger), and to at
    least 4,096 bytes: the byte size of a store buffer, so that values of nearby sizes share buffers."""
    if nbytes <= 4096:
        return 4096
    step = 1 << max(nbytes.bit_length() - 4, 0)
    return -(-nbytes // step) * step


class _Buffers:
    """Buffers the store copies values into, handed back for new copies once no stored run holds them: a fresh
    allocation of a few MB faults its pages in on first write, which costs more than the copy itself (~1 ms of
    a 3.3 MB copy on PP-OCRv4 det, docs/benchmarks.md); a recycled one is already mapped.

    A buffer is a flat uint8 array of a size class (:func:`_size_class`); a copy is a view of a free buffer of
    its byte size's class (any dtype and shape: tensors of different shapes share buffers). ``held`` counts, per copy made here, the stored runs holding it; a buffer
    no run holds goes to ``free`` (at most ``max_bytes`` in all)."""

    def __init__(self, max_bytes: int = 256 << 20):
        self.max_bytes = max_bytes
        self.held: dict[int, list] = {}  # id(copy) -> [copy, number of stored runs holding it, its buffer]
        self.free: dict[int, list[np.ndarray]] = {}  # size class -> free buffers
        self.free_bytes = 0
        self.recycled = 0  # copies made into a recycled buffer
        self.fresh = 0  # copies made into a new buffer

    def _take(self, nbytes: int) -> np.ndarray:
        size = _size_class(nbytes)
        pool = self.free.get(size)
        if pool:
            self.free_bytes -= size
            self.recycled += 1
            return pool.pop()
        self.fresh += 1
        return np.empty(size, np.uint8)

    def copy(self, v):
        """A copy of ``v`` (a list: element by element), owned by the store."""
        if isinstance(v, list):
            return [np.array(x, copy=True) for x in v]
        v = np.asarray(v)
        if v.dtype.hasobject:
            return np.array(v, copy=True)
        buf = self._take(v.nbytes)
        out = buf[:v.nbytes].view(v.dtype).reshape(v.shape)
        np.copyto(out, v)
        self.held[id(out)] = [out, 0, buf]
        return out

    def hold(self, values) -> None:
        for v in values:
            got = self.held.get(id(v))
            if got is not None and got[0] is v:
                got[1] += 1

    def release(self, values) -> None:
        for v in values:
            got = self.held.get(id(v))
            if got is None or got[0] is not v:
                continue
            got[1] -= 1
            if got[1] <= 0:
                del self.held[id(v)]
                buf = got[2]
                if self.free_bytes + buf.size <= self.max_bytes:
                    self.free.setdefault(buf.size, []).append(buf)
                    self.free_bytes += buf.size


class ResumeCache:
    """The last ``keep`` runs per input and resumed runs from them (module docstring).

    A stored run keeps, by tensor name, the values live at every ``every``-th kernel boundary (each copied once,
    when the run reaches the first such boundary it is live at; values a resumed run took from its donor are
    shared, not copied), or every kernel output for a run given to :meth:`add`. A new plan resumes from the
    latest boundary, at or before its first differing kernel, whose live values the stored run holds: at most
    ``every`` - 1 kernels more than resuming at the differing kernel itself, for a copy of a fraction of the
    kernel outputs (copies of every output cost ~25% of a run of PP-OCRv4 det: docs/benchmarks.md).

    Args:
        feeds: [(label, {input: array})], the inputs runs are made on (by index).
        keep: stored runs per input (least recently used dropped first).
        every: boundaries kept, in kernels (1: every boundary, i.e. every kernel output a later kernel or the
            graph outputs read).
    """

    def __init__(self, feeds, keep: int = 4, every: int = 4):
        if every < 1:
            raise ValueError(f"ResumeCache(every={every}): the boundary step must be 1 or more")
        self.feeds, self.keep, self.every = feeds, keep, every
        self.stored: dict[int, OrderedDict] = {}
        self.buffers = _Buffers()  # the store's copies, recycled once no stored run holds them
        self.kernels_run = 0  # kernels executed by run()
        self.kernels_skipped = 0  # kernels whose outputs were taken from a stored run

    def add(self, i: int, plan, dumps: dict, sigs: list | None = None) -> None:
        """Store a run of ``plan`` on input ``i``: ``dumps`` {tensor: value} holds every kernel output
        (RunResult.dumps of a run with dump=True) or the values live at this cache's boundaries."""
        sigs = plan_signatures(plan) if sigs is None else sigs
        runs = self.stored.setdefault(i, OrderedDict())
        runs[id(dumps)] = _Stored(sigs, dumps)
        self.buffers.hold(dumps.values())
        while len(runs) > self.keep:
            self.buffers.release(runs.popitem(last=False)[1].dumps.values())

    def _donor(self, i: int, sigs: list) -> tuple[int, _Stored | None]:
        best, donor = 0, None
        for key, s in reversed(self.stored.get(i, {}).items()):
            p = common_prefix(s.sigs, sigs)
            if p > best:
                best, donor = p, s
        if donor is not None:
            self.stored[i].move_to_end(next(k for k, s in self.stored[i].items() if s is donor))
        return best, donor

    def _restore(self, rt: NpuRuntime, feed: dict, donor: _Stored, prefix: int) -> tuple[int, dict | None]:
        """(start, {tensor: value}): the latest boundary at or before ``prefix`` (``prefix`` itself, then the
        multiples of ``every`` below it) whose live values ``donor`` holds (graph inputs from ``feed``), else
        (0, None)."""
        for k in dict.fromkeys([prefix, *range(prefix - prefix % self.every, 0, -self.every)]):
            if k <= 0:
                continue
            restore = {}
            for t in rt.live_at(k):
                if t in rt.plan.graph_inputs and t in feed:
                    restore[t] = feed[t]
                elif t in donor.dumps:
                    restore[t] = donor.dumps[t]
                else:
                    restore = None
                    break
            if restore is not None:
                return k, restore
        return 0, None

    def run(self, rt: NpuRuntime, i: int) -> RunResult:
        """Run ``rt``'s plan on input ``i``: from the latest kept boundary at or before the first kernel where
        it differs from the stored run sharing the longest prefix with it (class docstring), or whole when none
        does. The result's ``outputs`` are what NpuRuntime.run returns (same values, bit for bit); its ``dumps``
        are what the store keeps of this run (class docstring), not every kernel output, valid while the run is
        stored: the store copies later values into those arrays once it drops the run (after ``keep`` later runs
        on this input), so copy them to keep them longer. The run is stored.
        Raises what NpuRuntime.run raises."""
        feed = self.feeds[i][1]
        sigs = plan_signatures(rt.plan)
        prefix, donor = self._donor(i, sigs)
        start, restore = self._restore(rt, feed, donor, prefix) if donor is not None else (0, None)
        n = len(rt.kernels)
        ks = [*range(self.every * (start // self.every + 1), n, self.every), n]
        lives = live_sets(rt, ks)
        kept: dict[str, object] = {}
        if restore is not None:
            written = {t for k in rt.plan.kernels[:start] for t in k.outputs}
            kept = {t: v for t, v in donor.dumps.items() if t in written}

        def at_boundary(j, _spec, _outs):
            for t in lives.get(j + 1, ()):
                if t not in kept and t not in rt.plan.graph_inputs:
                    kept[t] = self.buffers.copy(rt.read(t))

        if restore is None:
            res = rt.run(feed, on_kernel=at_boundary)
            self.kernels_run += n
        else:
            res = rt.run_range(restore, start, n, dump=False, on_kernel=at_boundary)
            res.outputs = rt.read_outputs(feed)
            self.kernels_run += n - start
            self.kernels_skipped += start
        res.dumps = kept
        self.add(i, rt.plan, kept, sigs)
        return res
