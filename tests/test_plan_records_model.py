"""Every command that writes plan.json records the model file in it (compile did; compare and diagnose wrote
''), so `memcheck --plan` / `run --plan` work on any of them without MODEL."""

import json
import subprocess
import sys

import pytest

from toolkit import samples


def cli(*args):
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          check=False)


@pytest.mark.parametrize("writer", ["compare", "compile"])
def test_plan_records_the_model_and_memcheck_needs_no_model_argument(tmp_path, writer):
    r = cli(writer, "transformer_block", "--out", tmp_path / "w")
    assert r.returncode in (0, 1), r.stderr  # compare's exit code is its verdict
    plan = json.loads((tmp_path / "w" / "plan.json").read_text())
    assert plan["model"] == str(samples.sample_path("transformer_block"))
    r = cli("memcheck", "--plan", tmp_path / "w" / "plan.json", "--out", tmp_path / "mc")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "mc" / "memory.html").exists()
