"""Stopping onnxruntime runs from a signal: one process-wide ``RunOptions`` passed to every ``run`` of npuscope,
whose ``terminate`` flag a watcher thread sets as soon as SIGINT, SIGTERM or SIGALRM (``--timeout``) arrives.

Python runs a signal handler only in the main thread, between bytecodes: while the main thread is inside one
onnxruntime call (``InferenceSession.run``: a Loop without a trip count whose condition stays true never
returns) the handler waits. :func:`watch_signals` registers a socket with :func:`signal.set_wakeup_fd`, to which
the interpreter's C-level handler writes the signal number at once, whatever the main thread is doing; a daemon
thread reading it sets ``terminate`` on :func:`run_options`. onnxruntime checks the flag before every node
(inside Loop / Scan / If bodies too) and fails the run ("Exiting due to terminate flag being set to true"); the
main thread is then back in Python, where the signal's own handler raises KeyboardInterrupt. Code that turns
onnxruntime errors into one-line model errors calls :func:`reraise_if_terminated` first, so a terminated run
is never reported as a model error.

Only the CLI watches signals (``toolkit.cli``); library callers may call :func:`watch_signals` from their main
thread, or :func:`terminate_runs` themselves, and :func:`reset` afterwards to run again.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading

import onnxruntime as ort

_STATE: dict = {"options": None, "shrink": None, "terminated": None, "watcher": None, "lock": threading.Lock(),
                "own": []}


def run_options(shrink_arena: bool = False) -> ort.RunOptions:
    """The process-wide ``onnxruntime.RunOptions`` to pass to every ``run`` / ``run_with_iobinding`` /
    ``run_with_ort_values`` (created on first use; log severity 4 = fatal only, as our session options: a
    terminated run's error line is not printed; run config ``gpu_graph_id`` = -1: no CUDA/WebGPU graph
    capture). Its ``terminate`` is True once :func:`terminate_runs` ran.

    ``shrink_arena``: the second shared RunOptions, which also sets ``memory.enable_memory_arena_shrinkage`` =
    ``cpu:0``: after the run, onnxruntime gives the CPU arena's unused extensions back to the system. For runs
    with large transient buffers only (a kernel rounding a mapped weight of hundreds of MiB to FP16): kept, a
    later kernel splits such a buffer and the next run extends the arena again (Llama 2-layer: +400 MiB on the
    second run); on every kernel it costs ~50% of the run time."""
    key = "shrink" if shrink_arena else "options"
    opts = _STATE[key]
    if opts is None:
        with _STATE["lock"]:
            if _STATE[key] is None:
                opts = ort.RunOptions()
                opts.log_severity_level = 4
                opts.terminate = _STATE["terminated"] is not None
                # no graph capture (a CPU run has none): set, the entry is read without the RuntimeError its
                # absence raises in onnxruntime's Python run wrappers (~50 µs a kernel call, 5% of a PP-OCRv4
                # det run)
                opts.add_run_config_entry("gpu_graph_id", "-1")
                if shrink_arena:
                    opts.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
                _STATE[key] = opts
            opts = _STATE[key]
    return opts


@contextlib.contextmanager
def own_run_options():
    """Yield a RunOptions of the caller's own (log severity 4), terminated with the shared one by
    :func:`terminate_runs` while the ``with`` lasts, and which the caller may terminate alone (``terminate =
    True``): e.g. to stop a background reference run whose result is no longer wanted."""
    opts = ort.RunOptions()
    opts.log_severity_level = 4
    with _STATE["lock"]:
        opts.terminate = _STATE["terminated"] is not None
        _STATE["own"].append(opts)
    try:
        yield opts
    finally:
        with _STATE["lock"]:
            _STATE["own"] = [o for o in _STATE["own"] if o is not opts]


def terminate_runs(signum: int = signal.SIGTERM) -> None:
    """Make every onnxruntime run that uses :func:`run_options` fail at its next node, now and from now on.
    ``signum``: the signal that asked for it (recorded, :func:`terminated_by`)."""
    with _STATE["lock"]:
        if _STATE["terminated"] is None:
            _STATE["terminated"] = signum
        for opts in [_STATE["options"], _STATE["shrink"], *_STATE["own"]]:
            if opts is not None:
                opts.terminate = True


def terminated_by() -> int | None:
    """The signal number that terminated the runs (SIGINT 2, SIGTERM 15, SIGALRM 14), None when none did."""
    return _STATE["terminated"]


def reset() -> None:
    """Let runs go on again after :func:`terminate_runs` (library callers and tests)."""
    with _STATE["lock"]:
        _STATE["terminated"] = None
        for key in ("options", "shrink"):
            if _STATE[key] is not None:
                _STATE[key].terminate = False


def reraise_if_terminated(exc: BaseException) -> None:
    """Raise KeyboardInterrupt (from ``exc``) when the runs were terminated: ``exc``, an onnxruntime error
    caught where it would become a model or kernel error, is then the signal's doing, not the model's."""
    if _STATE["terminated"] is not None:
        raise KeyboardInterrupt from exc


def watch_signals() -> None:
    """Start the watcher (once per process, from the main thread): the interpreter writes every signal that has
    a Python handler (SIGINT, SIGTERM, SIGALRM as the CLI installs them) to a socket, and a daemon thread reading
    it calls :func:`terminate_runs` for SIGINT, SIGTERM and SIGALRM. The Python handlers still run as before.

    Raises:
        ValueError: called from another thread than the main thread (:func:`signal.set_wakeup_fd`).
    """
    if _STATE["watcher"] is not None:
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    thread = threading.Thread(target=_watch, args=(reader,), name="npuscope-signal-watcher", daemon=True)
    _STATE["watcher"] = (thread, reader, writer)
    thread.start()


_STOPPING = {signal.SIGINT, signal.SIGTERM, signal.SIGALRM}


def _watch(reader: socket.socket) -> None:
    while True:
        try:
            data = reader.recv(64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum in _STOPPING:
                terminate_runs(signum)


__all__ = ["own_run_options", "reraise_if_terminated", "reset", "run_options", "terminate_runs", "terminated_by", "watch_signals"]
