"""Fault kinds found by the adversarial tester: environment variables, user text files (BOM, encodings),
npz files that are empty or not zip archives, error messages naming their source, silently accepted values.

CLI behaviour runs in a subprocess (the CLI enables a global onnxruntime thread pool)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.config import SUGGEST_MAX_NAMES, Config
from toolkit.errors import ConfigError, InputError, ModelError

BOM = b"\xef\xbb\xbf"


def run_cli(*args, env=None, cwd=None, timeout=240):
    full = dict(os.environ)
    full.pop("NPUSCOPE_THREADS", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=timeout)


def error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npuscope:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture()
def tiny_model(tmp_path):
    """x[1,4] float32 -> MatMul 'mm' (W 4x4) -> Relu 'relu' -> y."""
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16, "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"), helper.make_node("Relu", ["t"], ["y"], name="relu")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("value", ["99999", "100000000000000000000"])
def test_threads_too_many_is_a_config_error_on_the_cli(value):
    proc = run_cli("cache", env={"NPUSCOPE_THREADS": value})
    assert proc.returncode == 2
    line = error_line(proc)
    assert "NPUSCOPE_THREADS" in line and value[:40] in line and f"0..{4 * (os.cpu_count() or 1)}" in line


# ------------------------------------------------------------------------------------ 2. npz files, EOFError
def _bad_npz_files(tmp_path):
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    text = tmp_path / "text.npz"
    text.write_text("hello, not a zip\n")
    pickled = tmp_path / "pk.npz"
    pickled.write_bytes(b"\x80\x04\x95" + b"\x00" * 20)  # a pickle header: numpy would suggest allow_pickle
    npy = tmp_path / "single.npz"
    with open(npy, "wb") as fh:
        np.save(fh, np.zeros((1, 4), np.float32))
    return {"empty (0 bytes)": empty, "not an npz (zip) archive": text, "not an npz (zip) archive ": pickled,
            "single-array .npy": npy}


@pytest.mark.parametrize("command", ["run", "compare"])
def test_bad_npz_is_one_line_exit_1_in_every_command(tmp_path, tiny_model, command):
    for i, (expected, path) in enumerate(_bad_npz_files(tmp_path).items()):
        proc = run_cli(command, str(tiny_model), "--inputs", str(path), "--out", str(tmp_path / f"o{i}"))
        assert proc.returncode == 1, proc.stderr
        line = error_line(proc)
        assert expected.strip() in line and "aborted" not in proc.stderr and "allow_pickle" not in proc.stderr
        assert not (tmp_path / f"o{i}").exists()


_RAISE_IN_COMPILE = """
import os, signal, sys, time
import toolkit.api
from toolkit.cli import main

def boom(*a, **k):
    kind = sys.argv[1]
    if kind == "eof":
        raise EOFError("No data left in file")
    if kind == "int":
        raise KeyboardInterrupt
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)

toolkit.api.compile_command = boom
main(["compile", "resnet_small", "--out", sys.argv[2]])
"""


@pytest.mark.parametrize("kind, code, text", [("eof", 3, "internal error (EOFError"),
                                              ("int", 130, "npuscope: interrupted"),
                                              ("term", 143, "npuscope: interrupted (SIGTERM)")])
def test_eoferror_is_never_reported_as_an_abort(tmp_path, kind, code, text):
    env = dict(os.environ)
    env.pop("NPUSCOPE_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", _RAISE_IN_COMPILE, kind, str(tmp_path / "o")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert text in proc.stderr and "aborted" not in proc.stderr


def test_compare_prints_no_warning_from_check_constants(tmp_path):
    w = numpy_helper.from_array(np.full((1, 4), 1e6, np.float32), "W")
    graph = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"], name="add")], "ovf",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "ovf.onnx")
    proc = run_cli("compare", str(tmp_path / "ovf.onnx"), "--out", str(tmp_path / "o"))
    assert "check_constants.py" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------ 4. BOM / encodings
def _write(path, text, bom=True):
    path.write_bytes((BOM if bom else b"") + text.encode("utf-8"))
    return path


def test_cli_compiles_with_a_bom_config(tmp_path, tiny_model):
    _write(tmp_path / "keep.txt", "mm\n")
    cfg = _write(tmp_path / "c.toml", 'keep_dtype = "keep.txt"\n')
    proc = run_cli("compile", str(tiny_model), "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert plan["config"]["keep_dtype"] == ["mm"]


def test_model_cache_that_is_a_file_is_a_config_error(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    for value in (f, f / "sub"):
        proc = run_cli("compile", "ppocr_cls", "--out", str(tmp_path / "o"), env={"NPUSCOPE_MODEL_CACHE": str(value)})
        assert proc.returncode == 2, proc.stderr
        line = error_line(proc)
        assert "NPUSCOPE_MODEL_CACHE" in line and str(value) in line and "not a folder" in line


def test_gear_errors_name_the_config_file(tmp_path):
    cfg = tmp_path / "g.json"
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,32;32,16"}))
    proc = run_cli("compile", "transformer_seq", "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert f"config '{cfg}'" in error_line(proc)


def test_log_to_stdout_bad_value_on_the_cli():
    proc = run_cli("cache", env={"NPUSCOPE_LOG_TO_STDOUT": "maybe"})
    assert proc.returncode == 2 and "NPUSCOPE_LOG_TO_STDOUT='maybe'" in error_line(proc)


def test_disable_reuse_names_are_checked_against_the_model(tmp_path, tiny_model):
    bad = tmp_path / "bad.toml"
    bad.write_text('disable_reuse = ["rleu"]\n')
    proc = run_cli("compile", str(tiny_model), "--config", str(bad), "--out", str(tmp_path / "o1"))
    assert proc.returncode == 2
    line = error_line(proc)
    assert "'rleu'" in line and "did you mean 'relu'" in line and str(bad) in line
    good = tmp_path / "good.toml"
    good.write_text('disable_reuse = ["relu", "t"]\n')
    proc = run_cli("compile", str(tiny_model), "--config", str(good), "--out", str(tmp_path / "o2"))
    assert proc.returncode == 0, proc.stderr


def test_quiet_and_verbose_together_is_a_usage_error():
    proc = run_cli("-q", "-v", "cache")
    assert proc.returncode == 2 and "-q" in error_line(proc) and "-v" in error_line(proc)


