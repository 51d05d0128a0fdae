"""Round-3 fixes (inputs, model paths, plans, messages, SIGTERM), each fault kind covered (CLI cases run in a
subprocess):

1. --val-range is checked against each input's own dtype (float16 ±65504, bfloat16, float32, float64, integer
   min/max): a range the dtype cannot hold is a one-line usage error (exit 2) naming the input, its dtype and
   the range, never a numpy overflow warning followed by NaN/Inf blamed on the user; float64 may use its range;
2. compile binds a zoo model's / sample's dynamic dims to its registered input (as run/diagnose do); the
   unbound-dims message has one format everywhere and suggests only options the command has;
3. a plan.json tensor that differs from the compiled one names each differing field with both values;
4. MODEL paths that are a directory / FIFO / device / symlink loop / dangling symlink / unreadable / a procfs
   file that reports size 0 get a one-line error saying what they are (exit 1);
   compare-dumps recommendations match why a dump was unreadable (pickled, truncated, not .npy);
   tune prints "Casts removed N" instead of "Casts added -N";
   SIGTERM exits 143 wherever it arrives (or 0 when the run had finished), never -15 (or -6).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.errors import InputError, ModelError, UserError

ENV = dict(os.environ, PYTHONWARNINGS="default")  # a numpy RuntimeWarning would show in stderr


def cli(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV, timeout=timeout)


def one_line_error(res: subprocess.CompletedProcess, code: int) -> str:
    """The error line of a run that must fail with ``code`` and a one-line message (no traceback, no warning)."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    assert "Warning" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("npuscope: error: "), lines[0]
    return lines[0]


def save_model(path: Path, elem: int, op: str = "Neg", shape=(1, 8)) -> Path:
    """x -> op -> y with x, y of ONNX element type ``elem``."""
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="n")], "g",
                          [helper.make_tensor_value_info("x", elem, list(shape))],
                          [helper.make_tensor_value_info("y", elem, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


# ================================================================== 1. --val-range vs the input's dtype

# finite ranges written out by hand (IEEE 754 binary16: (2 - 2^-10) * 2^15; bfloat16: (2 - 2^-7) * 2^127)
F16_MAX = 65504.0
BF16_MAX = (2 - 2**-7) * 2.0**127
F32_MAX = (2 - 2**-23) * 2.0**127


def _spec(name, dtype, shape=(4, 8)):
    from toolkit.inputs.spec import InputSpec

    return InputSpec(name, np.dtype(dtype), shape)


# ================================================================== 2. dynamic dims: compile binds, one message

def dyn_model(path: Path) -> Path:
    """x: float32[?, seq, 8] (one unnamed, one symbolic dim) -> Relu."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", "seq", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?", "seq", 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _options_in_help(cmd: str) -> set[str]:
    res = cli(cmd, "--help")
    assert res.returncode == 0, res.stderr
    return set(re.findall(r"--[a-z][a-z-]*", res.stdout))


# ================================================================== 3. plan tensor fields named

@pytest.fixture(scope="module")
def compiled_resnet():
    from toolkit import samples
    from toolkit.compiler.pipeline import compile_model
    from toolkit.config import Config
    from toolkit.ir.load import load_model

    return compile_model(load_model(samples.sample_path("resnet_small")), Config())


def _edited_plan(compiled, tmp_path: Path, edits: dict) -> tuple[Path, dict, dict]:
    d = json.loads(json.dumps(compiled.plan.to_dict()))
    t = next(t for t in d["tensors"] if t["name"] == "stem_relu")
    assert t["storage"] == "arena" and t["nbytes"] > 2
    before = dict(t)
    t.update(edits)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(d))
    return path, before, t


@pytest.mark.parametrize("edits", [
    {"nbytes": 1}, {"shape": "SHAPE+1"}, {"dtype": "OTHER"}, {"storage": "host"},
    {"nbytes": 1, "storage": "host"}])
def test_plan_tensor_difference_names_each_field_with_both_values(compiled_resnet, tmp_path, edits):
    from toolkit.memory.planio import attach_plan, load_plan

    t0 = next(t for t in compiled_resnet.plan.tensors.values() if t.name == "stem_relu")
    resolved = {}
    for k, v in edits.items():
        if v == "SHAPE+1":
            v = list(t0.shape[:-1]) + [t0.shape[-1] + 1]
        elif v == "OTHER":
            v = "float32" if t0.dtype != "float32" else "float16"
        resolved[k] = v
    path, before, after = _edited_plan(compiled_resnet, tmp_path, resolved)
    with pytest.raises(InputError) as err:
        attach_plan(compiled_resnet, load_plan(path), where=f"plan file '{path}'")
    msg = str(err.value)
    assert "tensor 'stem_relu'" in msg and "\n" not in msg
    for key in resolved:
        assert f"{key} {json.dumps(after[key])} but the compiled model has {json.dumps(before[key])}" in msg, msg
    for key in {"dtype", "shape", "nbytes", "storage"} - set(resolved):
        assert f"{key} " not in msg.split("tensor 'stem_relu'", 1)[1].split(";")[0], msg


def test_plan_missing_tensor_is_named(compiled_resnet, tmp_path):
    from toolkit.memory.planio import attach_plan, load_plan

    path, _, _ = _edited_plan(compiled_resnet, tmp_path, {})
    d = json.loads(path.read_text())
    d["tensors"] = [t for t in d["tensors"] if t["name"] != "stem_relu"]
    path.write_text(json.dumps(d))
    with pytest.raises(InputError, match="tensor 'stem_relu' is missing"):
        attach_plan(compiled_resnet, load_plan(path))


# ================================================================== 4a. MODEL paths that are no regular file

def _model_path_cases(tmp_path: Path) -> list[tuple[str, str]]:
    (tmp_path / "folder").mkdir()
    (tmp_path / "withmodels").mkdir()
    save_model(tmp_path / "withmodels" / "a.onnx", TensorProto.FLOAT)
    os.mkfifo(tmp_path / "fifo.onnx")
    os.symlink("loop_b", tmp_path / "loop_a")
    os.symlink("loop_a", tmp_path / "loop_b")
    os.symlink(tmp_path / "nowhere.onnx", tmp_path / "dangling.onnx")
    return [(str(tmp_path / "folder"), "is a directory (it holds no .onnx file)"),
            (str(tmp_path / "withmodels"), "is a directory (it holds a.onnx)"),
            (str(tmp_path / "fifo.onnx"), "is not a regular file but a FIFO"),
            (str(tmp_path / "loop_a"), "is a symlink loop"),
            (str(tmp_path / "dangling.onnx"), "which does not exist"),
            ("/dev/null", "is not a regular file but a character device"),
            ("/proc/self/mem", "cannot be read"),
            ("/proc/self/status", "is not an ONNX model")]


# ================================================================== 4b. compare-dumps advice matches the reason

def _dump_sides(tmp_path: Path, broken_side: str, how: str) -> tuple[Path, Path]:
    values = {"a": np.arange(6, dtype=np.float32), "b": np.ones(4, np.float32), "c": np.full(3, 2, np.float32)}
    sides = {}
    for side in ("golden", "target"):
        folder = tmp_path / side
        folder.mkdir()
        for i, (name, v) in enumerate(values.items()):
            np.save(folder / f"{name}.0.{1000 + i}.npy", v)
        sides[side] = folder
    bad = sides[broken_side] / "b.0.1001.npy"
    if how == "pickled":
        np.save(bad, np.array([{"k": 1}, None], dtype=object), allow_pickle=True)
    elif how == "truncated":
        bad.write_bytes(bad.read_bytes()[:-5])
    else:
        bad.write_bytes(b"this is not an npy file at all")
    return sides["golden"], sides["target"]


ADVICE_WORDS = {"pickled": "pickled", "truncated": "truncated", "garbage": "not .npy arrays"}


# ================================================================== 4c. tune's Cast count reads as what happened


# ================================================================== 4d. SIGTERM: 143 (or 0 when done), never -15

def _diagnose(out: Path, *flags) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "toolkit", *flags, "diagnose", "resnet_small", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def _finish(p: subprocess.Popen) -> int:
    p.communicate(timeout=300)
    return p.returncode


