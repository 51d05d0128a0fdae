"""Fault kind: the CLI ends the process without finalising the interpreter (toolkit.cli._end_process). Whatever
the command queued before it ends must still be complete: every compile-cache entry written whole (none
truncated, no temporary file left), so that the next run is a full hit; the command's exit code kept; its
stdout and stderr delivered whole."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from toolkit.cache import store


#: the CLI with every cache write delayed, so that writes are still queued when the command is done
SLOW_WRITES = """
import sys, time
from toolkit.cache import store
write = store.EntryStore._write
def slow(self, *a, **k):
    time.sleep(0.05)
    return write(self, *a, **k)
store.EntryStore._write = slow
from toolkit.cli import main
main(sys.argv[1:])
"""


def _cli(*args, cache):
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(cache), NPUSCOPE_COMPILE_CACHE_MODE="enable")
    return subprocess.run([sys.executable, "-c", SLOW_WRITES, *args], capture_output=True, text=True, env=env,
                          timeout=600)


def _entries(cache):
    base = cache / store.LAYOUT
    return sorted(p for p in base.rglob("*") if p.is_file())


@pytest.mark.parametrize("model", ["resnet_small", "transformer_block"])
def test_cold_run_leaves_every_cache_entry_whole_and_the_next_run_hits(tmp_path, model):
    cache = tmp_path / "cache"
    cold = _cli("diagnose", model, "--out", str(tmp_path / "cold"), cache=cache)
    assert cold.returncode in (0, 1), cold.stderr
    files = _entries(cache)
    kinds = {p.parent.name for p in files}
    assert {"compile", "family", "bundle"} <= kinds, kinds
    assert not [p for p in files if p.name.startswith(".tmp-")]
    for p in files:  # the header's length and CRC-32 hold for every file
        meta, _ = store.unpack(p.read_bytes())
        assert isinstance(meta, dict)
    warm = _cli("diagnose", model, "--out", str(tmp_path / "warm"), cache=cache)
    assert warm.returncode == cold.returncode, warm.stderr
    log = (tmp_path / "warm" / "compile.log").read_text()
    assert "compile entry hit" in log
    hits = [tuple(map(int, m)) for m in re.findall(r"kernels: (\d+) hits, (\d+) misses", log)]
    assert hits and all(h > 0 and miss == 0 for h, miss in hits), hits


@pytest.mark.parametrize("args, code", [(["compile", "resnet_small"], 0),
                                        (["diagnose", "no-such-model.onnx"], 2),
                                        (["compile", "resnet_small", "--precision-mode", "no_such_mode"], 2)])
def test_exit_code_and_output_are_delivered(tmp_path, args, code):
    proc = _cli(*args, "--out", str(tmp_path / "o"), cache=tmp_path / "cache")
    assert proc.returncode == code, proc.stderr
    if code == 0:  # the summary's last line names the folder written
        assert str((tmp_path / "o").resolve()) in proc.stdout.strip().splitlines()[-1]
    else:
        assert proc.stderr.startswith("npuscope: error:") and proc.stderr.endswith("\n")

