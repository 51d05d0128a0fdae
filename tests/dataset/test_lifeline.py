"""Dataset workers' lifeline (toolkit/dataset/lifeline.py): a worker whose parent died ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dataset.helpers import _ORPHAN, _PARENT, _session_members, _wait_until_gone

TIMEOUT_S = 600


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
