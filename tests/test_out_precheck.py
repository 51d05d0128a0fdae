"""User mistakes about output paths are refused before any work (the fault kind: an --out / --dump / --output
check that ran only after the model was loaded, compiled and run).

Every subcommand that writes into ``--out`` (and ``run``'s ``--dump`` / ``--output``) is given a taken path
AND a model (or policy, lengths, log, dumps) that is garbage bytes: exit 2 with the output-path message (not
the ModelError exit 1 that reading the model would give) proves the check comes first; the working folder is
byte-for-byte unchanged and the compile cache (enabled, in a temporary folder) holds no entry. The command
list is checked against the CLI's own options, so a new command with --out must be added here. Valid runs into
a new (or existing empty) --out still work, and a dataset run still resumes in its own --out.
Every CLI call runs in a subprocess (the CLI sets up onnxruntime's global thread pool)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
TAKEN = "output folder 'taken' already exists and is not empty; choose a new --out"
TAKEN_DATASET = ("output folder 'taken' already exists and is not empty (no manifest.json of a dataset run to "
                 "resume); choose a new --out")
X = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)


def _cli(argv, cwd, cache):
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(cache), NPUSCOPE_COMPILE_CACHE_MODE="enable")
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, argv)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env, check=False)


def _error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error: "), proc.stderr
    return lines[0][len("npuscope: error: "):]


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` -> its bytes (None for a folder)."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def _tiny_model() -> onnx.ModelProto:
    """y = 2x + 1 on x float32[2, 8]."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="mul"),
             helper.make_node("Add", ["a", "one"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              [numpy_helper.from_array(np.float32(2.0), "two"),
                               numpy_helper.from_array(np.float32(1.0), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture
def work(tmp_path):
    """A working folder: garbage model / npz / policy / plan / lengths / log, empty dump folders, a
    non-empty 'taken' folder (with a sub-folder), a folder of (garbage) inputs and a gears config."""
    garbage = b"\x00\x13not what you think\xff" * 8
    for name in ("bad.onnx", "bad.npz", "bad.toml", "bad.json", "lengths.txt", "bad.log"):
        (tmp_path / name).write_bytes(garbage)
    (tmp_path / "taken" / "sub").mkdir(parents=True)
    (tmp_path / "taken" / "keep.txt").write_text("keep me")
    (tmp_path / "taken" / "sub" / "inner.bin").write_bytes(b"\x01\x02")
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "a.npz").write_bytes(garbage)
    for d in ("golden", "target", "base", "new"):
        (tmp_path / d).mkdir()
    (tmp_path / "gears.json").write_text(json.dumps({"input_shape": "x:-1,8", "dynamic_batch_size": "1,2"}))
    return tmp_path


# (id, command, option checked, argv, expected message)
CASES = [
    ("compile", "compile", "--out", ["compile", "bad.onnx", "--out", "taken"], TAKEN),
    ("compile-gears", "compile", "--out", ["compile", "bad.onnx", "--config", "gears.json", "--out", "taken"], TAKEN),
    ("compile-out-is-file", "compile", "--out", ["compile", "bad.onnx", "--out", "taken/keep.txt"],
     "--out 'taken/keep.txt' is an existing file; give a new folder name"),
    ("compile-out-empty", "compile", "--out", ["compile", "bad.onnx", "--out", ""],
     "--out is empty; give a new folder name"),
    ("run", "run", "--out", ["run", "bad.onnx", "--inputs", "bad.npz", "--out", "taken"], TAKEN),
    ("run-plan", "run", "--out", ["run", "bad.onnx", "--plan", "bad.json", "--out", "taken"], TAKEN),
    ("run-gears", "run", "--out", ["run", "bad.onnx", "--config", "gears.json", "--out", "taken"], TAKEN),
    ("run-dump-taken", "run", "--dump", ["run", "bad.onnx", "--dump", "taken", "--out", "o"],
     "--dump folder 'taken' already exists and is not empty; choose a new --dump"),
    ("run-gears-dump-taken", "run", "--dump",
     ["run", "bad.onnx", "--config", "gears.json", "--dump", "taken", "--out", "o"],
     "--dump folder 'taken' already exists and is not empty; choose a new --dump"),
    ("run-out-inside-dump", "run", "--dump", ["run", "bad.onnx", "--dump", "d", "--out", "d/o"],
     "--out 'd/o' lies inside --dump 'd' (the dump folder must be new or empty); give each its own folder"),
    ("run-output-exists", "run", "--output", ["run", "bad.onnx", "--output", "taken/keep.txt", "--out", "o"],
     "output file 'taken/keep.txt' already exists; choose another --save-outputs"),
    ("run-output-no-folder", "run", "--output", ["run", "bad.onnx", "--output", "nofolder/y.npz", "--out", "o"],
     "--save-outputs 'nofolder/y.npz': folder 'nofolder' does not exist; create it or choose another path"),
    ("memcheck", "memcheck", "--out", ["memcheck", "bad.onnx", "--out", "taken"], TAKEN),
    ("memcheck-plan", "memcheck", "--out", ["memcheck", "--plan", "bad.json", "--out", "taken"], TAKEN),
    ("diagnose", "diagnose", "--out", ["diagnose", "bad.onnx", "--inputs", "bad.npz", "--out", "taken"], TAKEN),
    ("diagnose-dataset", "diagnose", "--out", ["diagnose", "bad.onnx", "--inputs", "inputs", "--out", "taken"],
     TAKEN_DATASET),
    ("compare", "compare", "--out", ["compare", "bad.onnx", "--out", "taken"], TAKEN),
    ("compare-dataset", "compare", "--out", ["compare", "bad.onnx", "--inputs", "inputs", "--out", "taken"],
     TAKEN_DATASET),
    ("signoff", "signoff", "--out", ["signoff", "bad.onnx", "--policy", "bad.toml", "--out", "taken"], TAKEN),
    ("signoff-dataset", "signoff", "--out",
     ["signoff", "bad.onnx", "--policy", "bad.toml", "--inputs", "inputs", "--out", "taken"], TAKEN_DATASET),
    ("regress", "regress", "--out", ["regress", "base", "new", "--out", "taken"], TAKEN),
    ("tune", "tune", "--out", ["tune", "bad.onnx", "--out", "taken"], TAKEN),
    ("gears", "gears", "--out", ["gears", "--lengths", "lengths.txt", "-k", "2", "--out", "taken"], TAKEN),
    ("compare-dumps", "compare-dumps", "--out",
     ["compare-dumps", "golden", "target", "--model", "bad.onnx", "--out", "taken"], TAKEN),
    ("profile", "profile", "--out", ["profile", "bad.onnx", "--out", "taken"], TAKEN),
    ("parse-log", "parse-log", "--out", ["parse-log", "bad.log", "--out", "taken"], TAKEN),
]


@pytest.mark.parametrize("argv, message", [c[3:] for c in CASES], ids=[c[0] for c in CASES])
def test_taken_output_path_is_refused_before_the_model_is_read(work, argv, message):
    before = _snapshot(work)
    proc = _cli(argv, work, work / "cache")
    assert proc.returncode == 2, proc.stderr
    assert _error_line(proc) == message
    assert "Traceback" not in proc.stderr
    assert _snapshot(work) == before  # nothing created, nothing changed (the cache folder included)
    assert not (work / "cache").exists()


def test_the_cases_cover_every_command_that_writes_an_output_path():
    """Each (command, option) of the CLI among --out / --dump / --output has a case above."""
    # importing runs nothing: the group callback (onnxruntime's global thread pool) runs only when invoked
    from toolkit.cli import cli

    options = {"--out", "--dump", "--output"}
    wanted = {(name, opt) for name, cmd in cli.commands.items() for p in cmd.params for opt in p.opts
              if opt in options}
    covered = {(c[1], c[2]) for c in CASES}
    assert {c for c, _ in wanted} >= {"compile", "run", "diagnose", "signoff", "parse-log"}  # the listing works
    assert wanted <= covered, sorted(wanted - covered)


# ------------------------------------------------------------------------------------------ valid runs
@pytest.fixture
def tiny(tmp_path):
    onnx.save(_tiny_model(), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "x.npz", x=X)
    return tmp_path


def test_run_into_a_new_out_still_works_with_output_inside_it(tiny):
    proc = _cli(["run", "m.onnx", "--inputs", "x.npz", "--precision-mode", "force_fp32", "--out", "o",
                 "--output", "o/y.npz", "--dump", "d"], tiny, tiny / "cache")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tiny / "o" / "y.npz")["y"], X * np.float32(2) + np.float32(1), rtol=1e-6)
    assert (tiny / "o" / "plan.json").is_file() and (tiny / "d" / "index.json").is_file()
    assert any(p.is_file() for p in (tiny / "cache").rglob("*"))  # the cache is on: the refusals above prove it


def test_compile_into_an_existing_empty_out_still_works(tiny):
    (tiny / "empty").mkdir()
    proc = _cli(["compile", "m.onnx", "--out", "empty"], tiny, tiny / "cache")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((tiny / "empty" / "plan.json").read_text())
    assert plan["kernels"], plan


def test_a_dataset_run_still_resumes_in_its_own_out(tiny):
    (tiny / "in").mkdir()
    for i in range(2):
        np.savez(tiny / "in" / f"s{i}.npz", x=X + i)
    argv = ["compare", "m.onnx", "--precision-mode", "force_fp32", "--inputs", "in", "--out", "o"]
    first = _cli(argv, tiny, tiny / "cache")
    assert first.returncode == 0, first.stderr
    assert "(2 evaluated now, 0 reused)" in first.stdout, first.stdout
    again = _cli(argv, tiny, tiny / "cache")  # 'o' is not empty: it holds this run's store, so it is resumed
    assert again.returncode == 0, again.stderr
    assert "(0 evaluated now, 2 reused)" in again.stdout, again.stdout
