"""onnxruntime settings (toolkit/ort/ort_env.py): NPUSCOPE_THREADS, the process-wide thread pool."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from toolkit.core.errors import ConfigError


# -------------------------------------------------------------------------------------- NPUSCOPE_THREADS
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("value, expected", [(None, 0), ("", 0), ("0", 0), ("3", 3), (" 2 ", 2), ("abc", None),
                                             ("-2", None), ("1.5", None), ("+3", None), ("\u0663", None)])
def test_npuscope_threads_is_a_non_negative_integer(monkeypatch, value, expected):
    from toolkit.core.errors import ConfigError
    from toolkit.ort.ort_env import intra_op_threads

    if value is None:
        monkeypatch.delenv("NPUSCOPE_THREADS", raising=False)
    else:
        monkeypatch.setenv("NPUSCOPE_THREADS", value)
    if expected is None:
        with pytest.raises(ConfigError, match="NPUSCOPE_THREADS=.*non-negative integer") as err:
            intra_op_threads()
        assert err.value.exit_code == 2 and "\n" not in str(err.value)
    else:
        assert intra_op_threads() == expected


def test_threads_upper_bound_is_four_per_cpu(monkeypatch):
    from toolkit.ort.ort_env import intra_op_threads

    limit = 4 * (os.cpu_count() or 1)
    monkeypatch.setenv("NPUSCOPE_THREADS", str(limit))
    assert intra_op_threads() == limit
    for bad in (limit + 1, 99999, 10**40):
        monkeypatch.setenv("NPUSCOPE_THREADS", str(bad))
        with pytest.raises(ConfigError, match=rf"0\.\.{limit}\b"):
            intra_op_threads()


# -------------------------------------------------------------------------------------- global thread pool
_RACE_CHILD = textwrap.dedent('''
    import sys, threading, numpy as np
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython can, to open the window
    from onnx import TensorProto, helper
    from toolkit.ort.ort_env import enable_global_thread_pool, make_session
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    enable_global_thread_pool()
    start, errors, got = threading.Barrier(THREADS), [], []
    def build():
        start.wait()
        try:
            got.append(make_session(data).run(None, {"x": np.array([-1, 2, -3, 4], np.float32)})[0])
        except Exception as e:
            errors.append(repr(e))
    threads = [threading.Thread(target=build) for _ in range(THREADS)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors, errors[0]
    assert len(got) == THREADS and all((y == np.array([0, 2, 0, 4], np.float32)).all() for y in got)
    print("ok")
''')


@pytest.mark.parametrize("threads", [2, 8])
def test_sessions_made_at_once_from_threads_all_share_the_global_pool(threads):
    """The first sessions of a process may be made from several threads at once (the reference runs beside
    the kernel builds): every one is created and runs, none asks for per-session threads after another thread
    created the global pool. Each round is a fresh process (the pool is process-wide); 5 rounds."""
    for _ in range(5):
        proc = subprocess.run([sys.executable, "-c", _RACE_CHILD.replace("THREADS", str(threads))],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "NPUSCOPE_THREADS": "1"})
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
