"""NpuRuntime: execute a compiled Plan kernel by kernel over one preallocated device arena.

Every arena tensor is a numpy view at its planned byte offset in a single ``uint8`` buffer, so a wrong memory
plan really corrupts data. Tensors with data-dependent shapes live outside the arena (``dynamic``), as do host
values (``host``: outputs of CPU-placed kernels, which run in FP32 through their onnxruntime sessions, and
non-tensor or string values). Host-device copy kernels (MemcpyH2D / MemcpyD2H) really copy between host
storage and the arena; they are dumped under their own names (``<tensor>::h2d`` / ``::d2h``). Float32 graph outputs stored in FP16 are returned converted (exactly) to
float32.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from toolkit.compiler.context import CompileResult
from toolkit.compiler.passes.bind_shapes import raise_if_reference_fails
from toolkit.core.errors import InputError, ModelError, UserError
from toolkit.ir.weights import array_of, mapped_initializers
from toolkit.ort import ort_values
from toolkit.ort.terminate import reraise_if_terminated, run_options
from toolkit.runtime.canonical import named_back
from toolkit.runtime.host_memory import check_host_memory
from toolkit.runtime.kernels import bound_values, build_kernels


class KernelRuntimeError(RuntimeError):
    """A kernel failed or wrote a tensor whose shape/dtype differs from the plan."""


@dataclass
class RunResult:
    """outputs: graph outputs (declared dtype); dumps: tensor -> array in storage dtype (when requested);
    kernel_ms: per-kernel host wall time in ms, in plan order; total_ms: wall time of the whole run in ms."""

    outputs: dict[str, np.ndarray]
    dumps: dict[str, np.ndarray] = field(default_factory=dict)
    kernel_ms: list[float] = field(default_factory=list)
    total_ms: float = 0.0


#: bytes of a mapped weight from which an FP16 kernel reading it shrinks the arena after its run (64 MiB)
SHRINK_MIN_BYTES = 64 << 20


class NpuRuntime:
    """Run a :class:`CompileResult` in simulated NPU mode.

    Args:
        compiled: the compiler's result (plan + compiled graph).
        progress: optional callable(i, n) called while kernels are built.
        sessions: optional factory ``sessions(plan, cache_record, overflow_mode) -> SessionSource | None``
            (toolkit.runtime.kernels.SessionSource) giving the kernels' sessions; ``cache_record`` is
            ``compiled.cache`` (None when absent). toolkit.engine.npu_runtime passes the compile cache's.
        arena: optional flat C-contiguous uint8 buffer of at least ``plan.arena_bytes`` bytes to use as the
            arena instead of a new zeroed one (its first ``arena_bytes`` bytes; their contents are overwritten
            by the runs, which write every tensor before reading it). A tune hands a finished trial's buffer to
            the next trial (toolkit.tuning.resume.KernelMemo): its pages are already mapped, where a fresh
            arena faults its pages in on its first run (11 MiB on PP-OCRv4 det). Default None.

    Raises:
        ModelError: a kernel cannot be built by onnxruntime, or the plan's arena would take more than 80% of
            this machine's memory (toolkit.engine.check_host_memory; checked before anything is allocated).
        ValueError: ``arena`` is not such a buffer.
    """

    def __init__(self, compiled: CompileResult, progress=None, sessions=None, arena: np.ndarray | None = None):
        self.compiled = compiled
        self.plan = compiled.plan
        overflow = self.plan.config.get("overflow_mode", "inf_nan")
        t0 = time.perf_counter()
        record = getattr(compiled, "cache", None)
        record = record if record is not None and record.get("model") is compiled.model else None
        source = sessions(self.plan, record, overflow) if sessions is not None else None
        self.kernels = build_kernels(self.plan, compiled.model, overflow, source=source)
        self.build_ms = (time.perf_counter() - t0) * 1e3

        check_host_memory(self.plan)  # every path that executes a plan (run, memcheck --plan, ...) checks first
        # weights left on disk (toolkit.ir.weights): kernels take them as inputs, read from their maps in place
        self.weights = mapped_initializers(compiled.model)
        # constants bound at run time (toolkit.runtime.kernels.bound_values): identical layers share sessions
        self.weights.update(bound_values(self.kernels, compiled.model, overflow))
        size = max(self.plan.arena_bytes, 1)
        if arena is None:
            self.arena = np.zeros(size, dtype=np.uint8)
        elif arena.dtype != np.uint8 or arena.ndim != 1 or not arena.flags.c_contiguous or arena.size < size:
            raise ValueError(f"arena must be a flat C-contiguous uint8 buffer of at least {size} bytes, got "
                             f"{arena.dtype}{list(arena.shape)}")
        else:
            self.arena = arena[:size]
        self.views: dict[str, np.ndarray] = {}
        for t in self.plan.tensors.values():
            if t.storage == "arena":
                raw = self.arena[t.offset:t.offset + t.nbytes]
                self.views[t.name] = raw.view(np.dtype(t.dtype)).reshape(t.shape)
        self.bindings = self._bind_arena()
        # FP16 kernels reading a large weight left on disk round it in onnxruntime's shared arena on every run:
        # they give those buffers back after their run (toolkit.ort.terminate.run_options(shrink_arena=True))
        self.shrink = {i for i, ek in enumerate(self.kernels) if ek.spec.precision == "fp16" and any(
            isinstance(w := self.weights.get(t), np.memmap) and w.nbytes >= SHRINK_MIN_BYTES for _, t in ek.feeds)}
        self._heap: dict[str, object] = {}  # the host values of the run in progress (or the last one)
        for ek in self.kernels:  # dtypes onnxruntime's run() cannot exchange (bfloat16, float8, int4...)
            ek.ortvalues = ek.session is not None and any(
                t in self.plan.tensors and ort_values.exotic_code(self.plan.tensors[t].dtype) is not None
                for _, t in ek.feeds + ek.fetches)
        import onnx

        # graph outputs the compiler computed at compile time (folded constants): no kernel writes them
        outs = set(self.plan.graph_outputs)
        self.const_outputs = {i.name: array_of(i) for i in compiled.model.graph.initializer
                              if i.name in outs}
        types = {v.name: v.type.tensor_type.elem_type for v in compiled.model.graph.output}
        self.out_dtypes = {n: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(e)) for n, e in types.items() if e}

    def _bind_arena(self) -> dict[int, object]:
        """onnxruntime IO bindings that read and write arena views in place, for every session kernel whose
        inputs and outputs all live in the arena: no per-run copies or allocations, and the kernel really
        writes at its planned offset. Others (numpy kernels, dynamic or host values) use ``run``."""
        bound = {}
        for idx, ek in enumerate(self.kernels):
            if ek.session is None:
                continue
            tensors = [t for _, t in ek.feeds] + [t for _, t in ek.fetches]
            views = [self.views[t] if t in self.views else self.weights.get(t) for t in tensors]
            if any(v is None or v.size == 0 or v.dtype.kind not in "fiub" or v.dtype.names for v in views):
                continue
            try:
                io = ek.session.io_binding()
                for (kname, t), v in zip(ek.feeds, views):
                    io.bind_input(kname, "cpu", 0, v.dtype, list(v.shape), v.ctypes.data)
                for (kname, t) in ek.fetches:
                    v = self.views[t]
                    io.bind_output(kname, "cpu", 0, v.dtype, list(v.shape), v.ctypes.data)
            except Exception:  # a dtype the binding API does not take (e.g. bfloat16): fall back to run()
                continue
            bound[idx] = io
        return bound

    # ------------------------------------------------------------------ storage
    def _write(self, name: str, arr, kernel: str, heap: dict) -> None:
        view = self.views.get(name)
        if view is None:
            heap[name] = arr
            return
        arr = np.asarray(arr)
        if arr.shape != view.shape or arr.dtype != view.dtype:
            got, planned = f"{arr.dtype}{list(arr.shape)}", f"{view.dtype}{list(view.shape)}"
            declared = self._declared_as(name)
            if declared is not None:  # the plan took the model's own declaration, which the model's ops contradict
                raise ModelError(f"the model declares {declared} '{name}' as {planned[planned.index('['):]} but its "
                                 f"producer (kernel '{kernel}') writes {got}; fix "
                                 f"or remove the declared shape of '{name}' in the model and compile again")
            raise KernelRuntimeError(f"kernel '{kernel}' wrote '{name}' as {got} but the plan has {planned}; shape "
                                     "inference disagrees with the runtime")
        np.copyto(view, arr)

    def _declared_as(self, name: str) -> str | None:
        """"output" when ``name`` is a graph output the model declares with a static shape (which shape inference
        keeps, and the plan with it), else None. value_info is not counted: the compiler's inference writes there."""
        graph = self.compiled.model.graph
        for kind, infos in (("output", graph.output),):
            for vi in infos:
                if vi.name == name and vi.type.tensor_type.HasField("shape") and \
                        all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
                    return kind
        return None

    def _read(self, name: str, heap: dict):
        view = self.views.get(name)
        if view is not None:
            return view
        return heap[name] if name in heap or name not in self.weights else self.weights[name]

    # ------------------------------------------------------------------ run
    def _loop(self, heap: dict, start: int, stop: int, res: RunResult, dump: bool, on_kernel, before_kernel) -> None:
        """Kernels ``start`` to ``stop`` (exclusive), in plan order, over the arena and ``heap``."""
        for i in range(start, stop):
            ek = self.kernels[i]
            if before_kernel is not None:
                before_kernel(i, ek.spec)
            io = self.bindings.get(i)
            values = [] if io is not None else [self._read(t, heap) for _, t in ek.feeds]
            t0 = time.perf_counter()
            try:
                if io is not None:
                    ek.session.run_with_iobinding(io, run_options(i in self.shrink))
                    outs = None
                else:
                    outs = ek(values)
            except UserError:
                raise
            except Exception as exc:
                reraise_if_terminated(exc)
                msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
                msg = named_back(msg, ek.node_names)
                raise KernelRuntimeError(f"kernel '{ek.spec.name}' ({ek.spec.op_type}) failed: {msg}") from exc
            res.kernel_ms.append((time.perf_counter() - t0) * 1e3)
            for j, (_, t) in enumerate(ek.fetches):
                if outs is not None:
                    self._write(t, outs[j], ek.spec.name, heap)
                if dump:  # a copy: the arena is overwritten later; sequences (lists) copied element by element
                    v = self._read(t, heap)
                    res.dumps[t] = [np.array(x, copy=True) for x in v] if isinstance(v, list) else \
                        np.array(v, copy=True)
            if on_kernel is not None:
                on_kernel(i, ek.spec, {t: self._read(t, heap) for _, t in ek.fetches})

    def live_at(self, index: int) -> list[str]:
        """The tensors kernel ``index`` onwards (and the graph outputs read back after the last kernel) read that
        earlier kernels or the graph inputs wrote, in plan order: what :meth:`run_range` needs restored to start
        at ``index``. Weights and folded constants are not among them (the plan holds them)."""
        written = {t: -1 for t in self.plan.graph_inputs}
        for i, ek in enumerate(self.kernels[:index]):
            for _, t in ek.fetches:
                written.setdefault(t, i)
        needed: dict[str, None] = {}
        for ek in self.kernels[index:]:
            for _, t in ek.feeds:
                if t in written:
                    needed.setdefault(t)
        for t in self.plan.graph_outputs:
            if t in written:
                needed.setdefault(t)
        return list(needed)

    def read(self, name: str):
        """The value of ``name`` as the arena (or the current run's host values) holds it now: a view, not a
        copy (valid until a later kernel overwrites it)."""
        return self._read(name, self._heap)

    def run_range(self, restore: dict, start: int, stop: int, dump: bool = True, on_kernel=None) -> RunResult:
        """Kernels ``start`` to ``stop`` (exclusive) of the plan, after writing ``restore`` ({tensor: value}, at
        least :meth:`live_at` ``(start)``, as a full run held them before kernel ``start``) back to their arena
        places (host values to the heap). The kernels compute what a full run computes from those values, bit
        for bit (toolkit.stream recomputes a segment's tensors from its stored boundary this way).
        ``RunResult.outputs`` stays empty; ``dumps`` holds copies of the kernels' outputs with ``dump``.

        Raises:
            KernelRuntimeError: a kernel failed at run time."""
        heap: dict[str, object] = {}
        self._heap = heap
        for name, val in restore.items():
            view = self.views.get(name)
            if view is None or val is None or isinstance(val, list):
                heap[name] = val
            else:
                np.copyto(view, np.asarray(val).astype(view.dtype, copy=False))
        return self._range(heap, start, stop, dump, on_kernel)

    def continue_range(self, start: int, stop: int, on_kernel=None) -> RunResult:
        """Kernels ``start`` to ``stop`` (exclusive) of the run in progress: over the arena and the host values
        the last :meth:`run_range` / :meth:`continue_range` left, so that ``run_range(feeds, 0, a)`` then
        ``continue_range(a, b)``, ``continue_range(b, n)`` computes what one run does, bit for bit. No dumps;
        ``RunResult.outputs`` stays empty.

        Raises:
            KernelRuntimeError: a kernel failed at run time."""
        return self._range(self._heap, start, stop, False, on_kernel)

    def _range(self, heap: dict, start: int, stop: int, dump: bool, on_kernel) -> RunResult:
        res = RunResult({})
        t_all = time.perf_counter()
        self._loop(heap, start, stop, res, dump, on_kernel, None)
        res.total_ms = (time.perf_counter() - t_all) * 1e3
        return res

    def run(self, feeds: dict[str, np.ndarray], dump: bool = False, on_kernel=None,
            before_kernel=None) -> RunResult:
        """Execute the plan once.

        Args:
            feeds: {graph input name: array} with the planned shapes and declared dtypes.
            dump: keep a copy of every kernel output (storage dtype) in ``RunResult.dumps``, and of every graph
                output folded to a constant at compile time.
            on_kernel: optional callable(index, kernel_spec, outputs dict) after each kernel.
            before_kernel: optional callable(index, kernel_spec) before each kernel reads its inputs
                (toolkit.memory.dynamic: ownership checks), and once with (len(kernels), None) before the
                graph outputs are read back.

        Raises:
            InputError: a missing input or one whose shape differs from the compiled shape.
            ModelError: a kernel failed and the FP32 onnxruntime reference fails on these inputs too (ids past a
                table, shapes a Reshape cannot take: toolkit.compiler.passes.bind_shapes.raise_if_reference_fails).
            KernelRuntimeError: a kernel failed at run time (the reference runs these inputs).
        """
        heap: dict[str, object] = {}
        self._heap = heap
        for name in self.plan.graph_inputs:
            if name not in feeds:
                raise InputError(f"input '{name}' is missing; the model needs {self.plan.graph_inputs}")
            val = feeds[name]
            view = self.views.get(name)
            if val is None or isinstance(val, list):
                # sequences (lists) and empty optionals (None) are host values: keep them as given
                heap[name] = val
                continue
            arr = np.asarray(val)
            if view is None:
                heap[name] = arr
                continue
            if arr.shape != view.shape:
                raise InputError(f"input '{name}' has shape {arr.shape} but the plan was compiled for "
                                 f"{view.shape}; recompile with --input-shape or pass matching inputs")
            np.copyto(view, arr.astype(view.dtype, copy=False))
        res = RunResult({})
        t_all = time.perf_counter()
        try:
            self._loop(heap, 0, len(self.kernels), res, dump, on_kernel, before_kernel)
        except KernelRuntimeError as exc:
            if exc.__cause__ is not None:  # onnxruntime failed in a kernel: the inputs' fault if the reference fails too
                raise_if_reference_fails(self.compiled.model, feeds, exc)
            raise
        res.total_ms = (time.perf_counter() - t_all) * 1e3
        if dump:  # graph outputs folded at compile time: no kernel wrote them, the plan carries their value
            for name, val in self.const_outputs.items():
                res.dumps.setdefault(name, np.array(val, copy=True))
        if before_kernel is not None:
            before_kernel(len(self.kernels), None)
        res.outputs = self.read_outputs(feeds)
        return res

    def read_outputs(self, feeds: dict) -> dict:
        """{graph output: copy} as the run in progress (or the last one) holds them now, as :meth:`run` returns
        them: graph inputs from ``feeds``, folded constants from the plan, the rest from the arena or the run's
        host values; a float32 output stored in FP16 is converted back (exactly); sequences element by element."""
        out = {}
        for name in self.plan.graph_outputs:
            if name in self.plan.graph_inputs:
                val = feeds[name]
            elif name in self.const_outputs:
                val = self.const_outputs[name]
            else:
                val = self.read(name)
            if val is None or isinstance(val, list):  # optional / sequence values: no array conversion
                out[name] = None if val is None else [np.array(v, copy=True) for v in val]
                continue
            arr = np.array(val, copy=True)
            want = self.out_dtypes.get(name)
            if want is not None and arr.dtype != want and arr.dtype == np.float16:
                arr = arr.astype(want)
            out[name] = arr
        return out
