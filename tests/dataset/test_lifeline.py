"""Dataset workers' lifeline (toolkit/dataset/lifeline.py): a worker whose parent died ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TIMEOUT_S = 600


# ------------------------------------------------------------------------ workers die with their parent
def _session_members(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live (not zombie) processes of session ``sid``, from /proc/<pid>/stat."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append((int(d), cmd[:120]))
    return out


def _wait_until_gone(sid: int, deadline_s: float = 60.0) -> list[tuple[int, str]]:
    end = time.monotonic() + deadline_s
    while (left := _session_members(sid)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


_ORPHAN = """
import os, sys, time
from toolkit.dataset import lifeline
lifeline._set_pdeathsig = lambda: False  # the portable watchdog alone
lifeline.exit_with_parent(int(sys.argv[1]), poll_s=0.05)
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(300)
"""
_PARENT = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]])
while not os.path.exists(sys.argv[2]) or not open(sys.argv[2]).read():
    time.sleep(0.01)
os._exit(0)  # dies without waiting for its child
"""


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_watchdog_ends_a_worker_whose_parent_died_without_prctl(tmp_path):
    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _ORPHAN, str(pidfile)], start_new_session=True)
    try:
        assert parent.wait(timeout=TIMEOUT_S) == 0
        assert not _wait_until_gone(parent.pid), "the orphaned child is still running"
    finally:
        for pid, _ in _session_members(parent.pid):
            os.kill(pid, signal.SIGKILL)


def test_worker_whose_parent_is_already_gone_exits_at_once():
    from toolkit.dataset.lifeline import ORPHAN_EXIT

    code = "from toolkit.dataset.lifeline import exit_with_parent; exit_with_parent(1); import time; time.sleep(60)"
    assert subprocess.run([sys.executable, "-c", code], timeout=TIMEOUT_S).returncode == ORPHAN_EXIT
