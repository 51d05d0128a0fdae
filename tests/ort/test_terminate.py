"""toolkit.ort.terminate: the shared RunOptions a signal terminates, per-caller RunOptions, and the signal
watcher (a signal's number written to the wakeup socket terminates runs inside onnxruntime)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

from tests.cli.helpers import loop_forever_model
from toolkit.ort import terminate
from toolkit.ort.reference import ReferenceRunner


@pytest.fixture(autouse=True)
def _fresh():
    terminate.reset()
    yield
    terminate.reset()


def _loop_session():
    return ort.InferenceSession(loop_forever_model().SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGALRM])
def test_terminate_runs_stops_a_run_that_never_ends(signum):
    sess = _loop_session()
    out = {}

    def work():
        try:
            sess.run(None, {"x": np.zeros(1, np.float32)}, terminate.run_options())
        except Exception as exc:  # noqa: BLE001 - the terminated run's error is what we look at
            out["error"] = str(exc)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(0.5)
    assert t.is_alive()  # still looping
    terminate.terminate_runs(signum)
    t.join(60)
    assert not t.is_alive() and "terminate flag" in out["error"]
    assert terminate.terminated_by() == signum
    with pytest.raises(KeyboardInterrupt):
        terminate.reraise_if_terminated(RuntimeError(out["error"]))


def test_own_run_options_stop_alone_and_with_the_shared_ones():
    runner = ReferenceRunner(loop_forever_model(), expose=False)
    feeds = {"x": np.zeros(1, np.float32)}
    with terminate.own_run_options() as mine:
        mine.terminate = True  # alone: the shared options are untouched
        with pytest.raises(Exception, match="terminate flag"):
            runner.run(feeds, mine)
        assert not terminate.run_options().terminate and terminate.terminated_by() is None
    with terminate.own_run_options() as mine:
        terminate.terminate_runs()
        assert mine.terminate and terminate.run_options().terminate
    terminate.reset()
    assert not terminate.run_options().terminate
    terminate.reraise_if_terminated(RuntimeError("not terminated"))  # returns: not the signal's doing


_WATCHED = textwrap.dedent("""
    import signal, sys
    import numpy as np
    from tests.cli.helpers import loop_forever_model
    from toolkit.ort import terminate
    from toolkit.ort.reference import ReferenceRunner
    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    terminate.watch_signals()
    runner = ReferenceRunner(loop_forever_model(), expose=False)
    print("running", flush=True)
    try:
        try:
            runner.run({"x": np.zeros(1, np.float32)})
        except Exception as exc:  # the terminated run's error: the signal's doing (as the CLI's callers do)
            terminate.reraise_if_terminated(exc)
            raise
    except KeyboardInterrupt:
        sys.exit(128 + terminate.terminated_by())
""")


def test_a_watched_signal_terminates_the_main_threads_run():
    """The main thread inside onnxruntime: the Python handler alone would wait for the run to return."""
    proc = subprocess.Popen([sys.executable, "-c", _WATCHED], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.stdout.readline().strip() == "running"
    threading.Event().wait(3.0)  # inside the Loop
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)  # without the watcher: never (the Loop has no end)
    print(f"ended {time.perf_counter() - sent:.2f} s after SIGTERM")
    assert proc.returncode == 143, err


def test_shared_run_options_name_no_graph_capture():
    """onnxruntime's Python run wrappers read the ``gpu_graph_id`` entry on every call; unset, each read raises
    and catches a RuntimeError. The shared options set it to -1 (no capture), which a CPU run ignores."""
    assert terminate.run_options().get_run_config_entry("gpu_graph_id") == "-1"
