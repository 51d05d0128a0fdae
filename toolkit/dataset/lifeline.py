"""Worker processes end when the process that started them dies (even by SIGKILL, which runs no cleanup).

A ``--jobs N`` worker is a ``spawn`` child of the CLI. If the CLI is killed with SIGKILL nothing tells the
workers (concurrent.futures only notices a dead *worker*), so they would keep evaluating inputs nobody reads,
reparented to init; multiprocessing's resource_tracker then stays too, since the workers hold its pipe open.
:func:`exit_with_parent`, called first thing in each worker, makes sure they go:

- Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (prctl(2)): the kernel kills the worker when the thread that
  started it exits. The pool is started and consumed by the thread that calls
  :func:`toolkit.dataset.runner.run_inputs`, which outlives the pool.
- Everywhere (also the fallback when prctl is missing): a daemon thread compares ``os.getppid()`` with the
  parent's pid every :data:`POLL_S` seconds and ends the process with ``os._exit`` once the parent is gone
  (an orphan is reparented, so its parent pid changes).

Once no worker holds the resource_tracker's pipe, the tracker reads end-of-file and exits by itself.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

#: Seconds between two parent checks of the watchdog thread.
POLL_S = 0.5
#: Exit status of a worker whose parent died (never seen by anyone: the parent is gone).
ORPHAN_EXIT = 70
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _set_pdeathsig() -> bool:
    """Ask the Linux kernel for SIGKILL when the parent dies; False when not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent_pid: int, poll_s: float) -> None:
    stop = threading.Event()
    while not stop.wait(poll_s):
        if os.getppid() != parent_pid:
            os._exit(ORPHAN_EXIT)


def exit_with_parent(parent_pid: int, poll_s: float = POLL_S) -> None:
    """End this process when process ``parent_pid`` (the pid the parent passed down, not ``os.getppid()``
    read here, which may already be init's) is no longer its parent. Exits at once when that is already so.
    Returns after starting the watchdog thread (daemon, named ``npuscope-parent-watch``)."""
    _set_pdeathsig()
    if os.getppid() != parent_pid:  # died before the prctl took effect
        os._exit(ORPHAN_EXIT)
    threading.Thread(target=_watch, args=(parent_pid, poll_s), daemon=True, name="npuscope-parent-watch").start()
