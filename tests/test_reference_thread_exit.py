"""Fault kind: diagnose runs the FP32 reference on a thread while it compiles; when the compile fails (a user
error, exit 1) while that thread is still inside onnxruntime, the process must still end with its one-line
error and exit code, not abort while the interpreter is torn down under the thread (exit -6, "terminate called
without an active exception")."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import sys, time
    import toolkit.diagnose as D
    from toolkit.core.errors import ModelError
    from toolkit.runtime import reference

    slow_run = reference.ReferenceRunner.run
    def run(self, feeds):
        time.sleep(1.0)  # still running when the compile fails
        return slow_run(self, feeds)
    reference.ReferenceRunner.run = run

    def failing_compile(*a, **k):
        raise ModelError("planted compile failure for the test; nothing to fix")
    D.Session = lambda *a, **k: failing_compile()
    from toolkit.cli import main
    sys.argv = ["npuscope", "diagnose", sys.argv[1], "--out", sys.argv[2]]
    main()
""")


@pytest.mark.parametrize("model", ["resnet_small", "transformer_block"])
def test_compile_error_while_the_reference_runs_exits_cleanly(tmp_path, model):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, model, str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-800:])
    assert "planted compile failure" in proc.stderr
    assert "terminate called" not in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # no partial report left behind
