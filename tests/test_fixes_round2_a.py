"""Round-2 fixes: output paths of `run`, hand-edited plan.json validation, `run --plan` with the plan's own
config, unwritable model/compile caches, a closed stdout, broken .npz inputs, doctor on a model without
graph outputs. Every CLI call runs in a subprocess (the CLI sets up onnxruntime's global thread pool)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.test_memcheck import FP32, N, make_model

REPO = Path(__file__).resolve().parents[1]
X = np.random.default_rng(11).standard_normal((16, 64)).astype(np.float32)


def _cli(argv, env=None, cwd=None, timeout=300):
    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *argv], cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=timeout, env=full)


def _one_error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """y = 2x + 3x, a model file, an input npz, an FP32 config and the plan compiled with it."""
    d = tmp_path_factory.mktemp("tiny")
    model = make_model([N("Mul", ["x", "two"], ["a"], "mul_a"), N("Mul", ["x", "three"], ["b"], "mul_b"),
                        N("Add", ["a", "b"], ["y"], "add")], [("x", [16, 64])], ["y"],
                       {"two": np.float32(2.0), "three": np.float32(3.0)})
    for size in (16, 64):
        model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = size
    onnx.save(model, str(d / "m.onnx"))
    np.savez(d / "x.npz", x=X)
    (d / "fp32.json").write_text(json.dumps(FP32))
    proc = _cli(["-q", "compile", str(d / "m.onnx"), "--config", str(d / "fp32.json"), "--out", str(d / "c")])
    assert proc.returncode == 0, proc.stderr
    return d


def _expected_y():
    return X * np.float32(2.0) + X * np.float32(3.0)  # by hand: the model's arithmetic in float32


# ------------------------------------------------------------------------- 1. run: --output vs --dump / --out
@pytest.mark.parametrize("output, dump, out", [
    ("same", "same", "o"),                 # the same new path for the npz file and the dump folder
    ("same.npz", "same.npz", "o"),
    ("d/x.npz", "d", "o"),                 # the npz inside the dump folder (which must be new or empty)
    ("o", None, "o"),                      # the npz file is the --out folder
])
def test_output_paths_that_collide_are_a_usage_error_before_anything_is_written(tiny, tmp_path, output, dump, out):
    argv = ["-q", "run", str(tiny / "m.onnx"), "--inputs", str(tiny / "x.npz"), "--output", output, "--out", out]
    if dump:
        argv += ["--dump", dump]
    proc = _cli(argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--save-outputs" in _one_error_line(proc)  # --output is its older (hidden) name
    assert list(tmp_path.iterdir()) == []  # nothing written: not the npz, not the dumps, not --out


def test_existing_output_file_is_refused_before_running(tiny, tmp_path):
    (tmp_path / "taken.npz").write_bytes(b"keep me")
    proc = _cli(["-q", "run", str(tiny / "m.onnx"), "--output", "taken.npz", "--out", "o"], cwd=tmp_path)
    assert proc.returncode == 2 and "already exists" in _one_error_line(proc)
    assert (tmp_path / "taken.npz").read_bytes() == b"keep me" and not (tmp_path / "o").exists()


def test_distinct_output_and_dump_still_work(tiny, tmp_path):
    proc = _cli(["-q", "run", str(tiny / "m.onnx"), "--config", str(tiny / "fp32.json"), "--inputs",
                 str(tiny / "x.npz"), "--output", "y.npz", "--dump", "d", "--out", "o"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], _expected_y(), rtol=1e-6)
    assert (tmp_path / "d").is_dir() and any((tmp_path / "d").iterdir())


# ---------------------------------------------------------------------- 2. hand-edited plan.json is validated
def _set_kernel(field, value, i=0):
    def edit(d):
        d["kernels"][i][field] = value
    return edit


def _set_tensor(field, value, i=0):
    def edit(d):
        d["tensors"][i][field] = value
    return edit


EDITS = {
    "arena_bytes-str": (lambda d: d.update(arena_bytes="big"), "'arena_bytes'"),
    "arena_bytes-negative": (lambda d: d.update(arena_bytes=-5), "'arena_bytes'"),
    "version-99": (lambda d: d.update(version=99), "'version'"),
    "alignment-float": (lambda d: d.update(alignment=1.5), "'alignment'"),
    "kernels-not-list": (lambda d: d.update(kernels=5), "'kernels'"),
    "unknown-top-field": (lambda d: d.update(extra=1), "'extra'"),
    "precision-fp8": (_set_kernel("precision", "fp8"), "'precision'"),
    "placement-GPU": (_set_kernel("placement", "GPU"), "'placement'"),
    "kernel-inputs-str": (_set_kernel("inputs", "x"), "'inputs'"),
    "tensor-offset-bool": (_set_tensor("offset", True), "'offset'"),
    "tensor-nbytes-str": (_set_tensor("nbytes", "64"), "'nbytes'"),
    "tensor-storage": (_set_tensor("storage", "disk"), "'storage'"),
    "tensor-shape": (_set_tensor("shape", ["16", 64]), "'shape'"),
    # well-typed edits of fields that are not editable: compared with the recompiled plan
    "precision-fp16": (_set_kernel("precision", "fp16"), "precision 'fp16'"),
    "placement-CPU": (_set_kernel("placement", "CPU"), "placement 'CPU'"),
    "implmode": (_set_kernel("implmode", "high_precision"), "implmode 'high_precision'"),
}


@pytest.mark.parametrize("command", ["run", "memcheck"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_bad_plan_field_is_exit_1_naming_file_and_field(tiny, tmp_path, command, edit):
    fn, named = EDITS[edit]
    d = json.loads((tiny / "c" / "plan.json").read_text())
    fn(d)
    bad = tmp_path / "edited_plan.json"
    bad.write_text(json.dumps(d))
    proc = _cli(["-q", command, str(tiny / "m.onnx"), "--plan", str(bad), "--out", str(tmp_path / "o")])
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc)
    assert "edited_plan.json" in line and named in line, line
    assert not (tmp_path / "o").exists()


def test_offset_edit_is_still_accepted(tiny, tmp_path):
    d = json.loads((tiny / "c" / "plan.json").read_text())
    t = next(t for t in d["tensors"] if t["name"] == "a")
    t["offset"] = d["arena_bytes"]  # its own range after the arena
    d["arena_bytes"] += t["nbytes"]
    p = tmp_path / "moved.json"
    p.write_text(json.dumps(d))
    proc = _cli(["-q", "run", str(tiny / "m.onnx"), "--plan", str(p), "--inputs", str(tiny / "x.npz"),
                 "--output", str(tmp_path / "y.npz"), "--out", str(tmp_path / "o")])
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], _expected_y(), rtol=1e-6)


# --------------------------------------------------------------------------- 3. run --plan: the plan's config
def test_run_plan_uses_the_plans_own_config(tiny, tmp_path):
    # the plan was compiled with force_fp32 / fusion 0; the defaults (mixed precision) give other kernels
    proc = _cli(["-q", "run", "--plan", str(tiny / "c" / "plan.json"), "--inputs", str(tiny / "x.npz"),
                 "--output", str(tmp_path / "y.npz"), "--out", str(tmp_path / "o")])
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], _expected_y(), rtol=1e-6)
    ran = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert ran["config"]["precision_mode"] == "force_fp32"
    assert {k["precision"] for k in ran["kernels"]} == {"fp32"}


@pytest.mark.parametrize("command", ["run", "memcheck"])
def test_plan_with_invalid_recorded_config_is_exit_2(tiny, tmp_path, command):
    d = json.loads((tiny / "c" / "plan.json").read_text())
    d["config"]["precision_mode"] = "bogus"
    p = tmp_path / "bogus.json"
    p.write_text(json.dumps(d))
    proc = _cli(["-q", command, "--plan", str(p), "--out", str(tmp_path / "o")])
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc)
    assert "bogus.json" in line and "precision_mode" in line


def test_run_plan_with_explicit_config_uses_that_config(tiny, tmp_path):
    # --precision-mode given: the plan is checked against that compile (mixed precision differs from the plan)
    proc = _cli(["-q", "run", str(tiny / "m.onnx"), "--plan", str(tiny / "c" / "plan.json"), "--precision-mode",
                 "force_fp16", "--out", str(tmp_path / "o")])
    assert proc.returncode == 2 and "plan.json" in _one_error_line(proc)


# ------------------------------------------------------------------------------------- 4. unwritable caches
def _unwritable_dir(tmp_path) -> Path:
    """A folder that exists and cannot be written: chmod 0o500 for a normal user; root ignores permissions,
    so a folder under /proc (a virtual file system refusing new files)."""
    if os.geteuid() == 0:
        return Path("/proc/1")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    return d


def test_unwritable_model_cache_is_config_error_before_download(tmp_path):
    ro = _unwritable_dir(tmp_path)
    # PIP_NO_INDEX makes a download fail at once (exit 1): exit 2 shows the cache was checked first
    env = {"NPUSCOPE_MODEL_CACHE": str(ro), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path)}
    proc = _cli(["-q", "compile", "ppocr_cls", "--out", str(tmp_path / "o")], env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc)
    assert str(ro) in line and "not writable" in line and "NPUSCOPE_MODEL_CACHE" in line
    assert not (tmp_path / "o").exists()


def test_unwritable_compile_cache_is_reported_by_info_and_refused_by_clear(tmp_path):
    ro = _unwritable_dir(tmp_path)
    env = {"NPUSCOPE_COMPILE_CACHE": str(ro)}
    info = _cli(["cache", "info"], env=env)
    assert info.returncode == 0, info.stderr
    warn = [ln for ln in info.stdout.splitlines() if "not writable" in ln]
    assert len(warn) == 1 and str(ro) in warn[0]
    clear = _cli(["cache", "clear"], env=env)
    assert clear.returncode == 2
    assert "not writable" in _one_error_line(clear)
    ok = _cli(["cache", "info", "--dir", str(tmp_path / "fresh")])  # a new folder that can be created
    assert ok.returncode == 0 and "not writable" not in ok.stdout
    assert not (tmp_path / "fresh").exists()  # info creates nothing


def test_compile_with_unwritable_compile_cache_still_works(tiny, tmp_path):
    env = {"NPUSCOPE_COMPILE_CACHE": str(_unwritable_dir(tmp_path)), "NPUSCOPE_COMPILE_CACHE_MODE": "enable"}
    proc = _cli(["-q", "compile", str(tiny / "m.onnx"), "--out", str(tmp_path / "o")], env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "o" / "plan.json").is_file()


# ---------------------------------------------------------------------------------------- 5. closed stdout
def _with_closed_stdout(argv, env=None):
    full = dict(os.environ, **(env or {}))
    p = subprocess.Popen([sys.executable, "-m", "toolkit", *argv], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=full)
    p.stdout.close()  # the reader goes away before anything is written (like `| true`)
    err = p.stderr.read().decode()
    return p.wait(timeout=300), err


@pytest.mark.parametrize("env", [{}, {"NPUSCOPE_LOG_LEVEL": "0", "NPUSCOPE_LOG_TO_STDOUT": "1"}])
def test_closed_stdout_exits_141_quietly(tiny, tmp_path, env):
    argv = ["-q", "compare", str(tiny / "m.onnx"), "--inputs", str(tiny / "x.npz"), "--config",
            str(tiny / "fp32.json")]
    control = _cli(argv + ["--out", str(tmp_path / "open")], env=env)
    assert control.returncode == 0, control.stderr  # the same run with a reader: PASS
    code, err = _with_closed_stdout(argv + ["--out", str(tmp_path / "closed")], env=env)
    assert code == 141, err
    assert "Logging error" not in err and "Traceback" not in err and "BrokenPipe" not in err, err


# ---------------------------------------------------------------------------------------------- 6. npz input
def test_npz_member_that_is_not_npy_is_named(tiny, tmp_path):
    bad = tmp_path / "garbage.npz"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("x.npy", b"garbage bytes!!")
    proc = _cli(["-q", "run", str(tiny / "m.onnx"), "--inputs", str(bad), "--out", str(tmp_path / "o")])
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert "'x.npy' is not a valid .npy array" in line and "dtype" not in line


def test_npz_path_that_is_not_a_regular_file(tiny, tmp_path):
    proc = _cli(["-q", "run", str(tiny / "m.onnx"), "--inputs", os.devnull, "--out", str(tmp_path / "o")])
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert "not a regular file" in line and "character device" in line and "does not exist" not in line
    missing = _cli(["-q", "run", str(tiny / "m.onnx"), "--inputs", str(tmp_path / "nope.npz"), "--out",
                    str(tmp_path / "o")])
    assert missing.returncode == 2 and "does not exist" in _one_error_line(missing)


# -------------------------------------------------------------------------------- 7. doctor: no graph outputs
def _relu_model(path: Path, with_output: bool) -> None:
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])] if with_output else []
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], outs)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_doctor_fails_a_model_without_graph_outputs(tmp_path):
    _relu_model(tmp_path / "noout.onnx", with_output=False)
    _relu_model(tmp_path / "without.onnx", with_output=True)
    ok = _cli(["doctor", str(tmp_path / "without.onnx")])
    assert ok.returncode == 0 and "doctor: OK" in ok.stdout, ok.stdout
    bad = _cli(["doctor", str(tmp_path / "noout.onnx")])
    assert bad.returncode == 1
    assert any(ln.startswith("BAD") and "0 graph output(s)" in ln for ln in bad.stdout.splitlines()), bad.stdout
    js = _cli(["doctor", "--json", str(tmp_path / "noout.onnx")])
    rep = json.loads(js.stdout)
    assert js.returncode == 1 and rep["ok"] is False
    (check,) = [c for c in rep["checks"] if c["name"] == "noout outputs"]
    assert check["passed"] is False and check["found"] == "0"
