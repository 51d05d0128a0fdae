"""One onnxruntime environment for the process: a global intra-op thread pool and one CPU arena allocator
shared by every session.

Per-kernel sessions with their own thread pools cost ~15 ms each to build; sharing the global pool makes a
session cost ~2 ms (GUIDE §2 measurement). Call :func:`session_options` for every session we create.
"""

from __future__ import annotations

import os
import threading

import onnxruntime as ort

from toolkit.core.errors import ConfigError

#: onnxruntime's own error types (a session it refuses to build, a run that fails), to catch by kind
ORT_ERRORS = tuple(getattr(ort.capi.onnxruntime_pybind11_state, n) for n in (
    "Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException", "InvalidProtobuf",
    "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail") if hasattr(ort.capi.onnxruntime_pybind11_state, n))

_STATE = {"global": None, "allocator": None, "wanted": os.environ.get("NPUSCOPE_GLOBAL_POOL", "0") == "1"}
#: Held while the process-wide pool or allocator is created: the reference runs in a thread of its own while
#: kernels build, and a second caller's "environment already exists" must not record "no global pool" after
#: the first caller created it (its sessions would then ask for per-session threads, which onnxruntime refuses).
_INIT_LOCK = threading.Lock()


def max_threads() -> int:
    """The largest NPUSCOPE_THREADS accepted: 4 x ``os.cpu_count()`` (4 when the count is unknown).

    Intra-op threads beyond the logical CPU count only add contention (onnxruntime's pool threads spin while
    waiting); 4x leaves room for oversubscription experiments, while a typo such as 99999 would otherwise
    create ~100k spinning threads, exhaust memory and make the process ignore SIGTERM for minutes."""
    return 4 * (os.cpu_count() or 1)


def intra_op_threads() -> int:
    """The intra-op thread count of the global pool from the environment variable NPUSCOPE_THREADS: an
    integer in 0..:func:`max_threads` (4 x the logical CPU count); 0 or unset (or empty) = onnxruntime's
    default (one per physical core).

    Raises:
        ConfigError: any other value (``abc``, ``-2``, ``1.5``, ``99999``), exit code 2.
    """
    text = os.environ.get("NPUSCOPE_THREADS", "").strip()
    if not text:
        return 0
    limit = max_threads()
    if not (text.isascii() and text.isdigit()) or int(text) > limit:
        raise ConfigError(f"NPUSCOPE_THREADS='{text[:40]}' is not a non-negative integer in 0..{limit} (at most 4 x "
                          f"the {os.cpu_count() or 1} CPUs); set it to the number of onnxruntime intra-op threads (e.g. 2), 0 for "
                          "onnxruntime's default, or unset it")
    return int(text)


def enable_global_thread_pool() -> None:
    """Share one process-wide thread pool between all our sessions (fast kernel builds).

    Side effect: afterwards every onnxruntime session in this process must set
    ``use_per_session_threads = False`` (onnxruntime refuses others), so the CLI enables it and library users
    opt in (or set NPUSCOPE_GLOBAL_POOL=1). Use :func:`session_options` for sessions of your own.

    Raises:
        ConfigError: NPUSCOPE_THREADS is set to something else than an integer in 0..max_threads()
            (:func:`intra_op_threads`); checked here, once, before any session exists.
    """
    intra_op_threads()
    _STATE["wanted"] = True


def _init_global_pool() -> bool:
    if not _STATE["wanted"]:
        return False
    with _INIT_LOCK:
        return _init_global_pool_locked()


def _init_global_pool_locked() -> bool:
    if _STATE["global"] is None:
        threads = intra_op_threads()
        try:
            ort.set_global_thread_pool_sizes(threads, 1)
            _STATE["global"] = True
        except Exception:  # the environment already exists (a session was made elsewhere first)
            _STATE["global"] = False
    return bool(_STATE["global"])


#: onnxruntime's ArenaExtendStrategy kSameAsRequested (0 is kNextPowerOfTwo).
ARENA_SAME_AS_REQUESTED = 1


def _init_env_allocator() -> bool:
    """Register one CPU arena allocator with onnxruntime's environment (once), for sessions to share.

    Every kernel session otherwise keeps its own arena for its intermediate tensors (NCHWc reorders, the
    FP32 values between a kernel's boundary Casts): ~90 arenas on PP-OCRv4 det, whose buffers are cold in the
    CPU caches when the next kernel runs. One shared arena reuses the same hot buffers from kernel to kernel,
    as a whole-model session does: det 45 → 38 ms, rec 11.3 → 9.9 ms in force_fp16 (bench/bench_engine.py),
    outputs bit-identical. Only with the global thread pool (same opt-in, same process-wide side effect)."""
    with _INIT_LOCK:
        return _init_env_allocator_locked()


def _init_env_allocator_locked() -> bool:
    if _STATE["allocator"] is None:
        try:
            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            # grown by what is requested, not to the next power of two: one mapped weight's FP16 rounding
            # (a few hundred MiB in a Llama LM head) would otherwise reserve twice that for the process' life
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, ARENA_SAME_AS_REQUESTED, -1, -1))
            _STATE["allocator"] = True
        except Exception:  # an allocator is already registered, or this onnxruntime cannot: per-session arenas
            _STATE["allocator"] = False
    return bool(_STATE["allocator"])


def session_options(optimize: bool | str = True) -> ort.SessionOptions:
    """SessionOptions using the global thread pool.

    ``optimize``: True or "basic" → ORT_ENABLE_BASIC (constant folding, semantics-preserving fusions; FP32
    kernels use it so their summation order stays the reference's, NCHW); "all" → ORT_ENABLE_ALL (adds the
    NCHWc layout and extended fusions: FP16 kernels use it, whose FP16-rounded outputs do not see the FP32
    summation order; ~25% faster convolutions); False → no graph optimisation (names survive)."""
    so = ort.SessionOptions()
    if _init_global_pool():
        so.use_per_session_threads = False
        if _init_env_allocator():
            so.add_session_config_entry("session.use_env_allocators", "1")
    so.log_severity_level = 4  # fatal only: onnxruntime's own error lines would precede our one-line error
    levels = {True: "ORT_ENABLE_BASIC", "basic": "ORT_ENABLE_BASIC", "all": "ORT_ENABLE_ALL",
              False: "ORT_DISABLE_ALL"}
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, levels[optimize])
    return so


#: onnxruntime rewrites that match across our FP16 Cast boundaries and then fail type checks.
DISABLED_OPTIMIZERS = ["LayerNormFusion", "SimplifiedLayerNormFusion", "GeluFusion", "BiasGeluFusion",
                       "FastGeluFusion", "QuickGeluFusion", "AttentionFusion"]


def make_session(model_bytes: bytes, optimize: bool | str = True, external: dict | None = None,
                 folder: str | None = None, shared: dict | None = None) -> ort.InferenceSession:
    """A CPU session of ``model_bytes``. ``folder``: the folder the model's external data locations are relative
    to (onnxruntime maps or reads the files itself). ``shared``: {initializer name: C-contiguous array}, with
    ``folder``: external initializers onnxruntime uses in place of reading their data
    (``SessionOptions.add_initializer``: the arrays' own memory, not copied; our memory maps of the weights,
    so that the pages are mapped once in the process). ``external``: {initializer name: array} given with
    ``SessionOptions.add_external_initializers`` instead (onnxruntime copies them when it builds the session).
    Weight prepacking is off in all three cases, so no packed copy of the weights is made."""
    so = session_options(optimize)
    if folder:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
        so.add_session_config_entry("session.disable_prepacking", "1")
        if shared:
            names = list(shared)
            values = [ort.OrtValue.ortvalue_from_numpy(shared[n]) for n in names]
            for n, v in zip(names, values):
                so.add_initializer(n, v)
            return _keep(ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"],
                                              disabled_optimizers=DISABLED_OPTIMIZERS), values)
    if external:
        names = list(external)
        values = [ort.OrtValue.ortvalue_from_numpy(external[n]) for n in names]
        so.add_external_initializers(names, values)
        so.add_session_config_entry("session.disable_prepacking", "1")
        return _keep(ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"],
                                          disabled_optimizers=DISABLED_OPTIMIZERS), values)
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"],
                                disabled_optimizers=DISABLED_OPTIMIZERS)


def _keep(session: ort.InferenceSession, values: list) -> ort.InferenceSession:
    """``session`` holding references to the OrtValues whose buffers it reads (they must outlive it)."""
    session._npuscope_external = values
    return session
