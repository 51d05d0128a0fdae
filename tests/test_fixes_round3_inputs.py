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

from toolkit.core.errors import InputError, ModelError, UserError

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


@pytest.mark.parametrize("dtype, limits", [
    (np.float16, (-F16_MAX, F16_MAX)), (np.float32, (-F32_MAX, F32_MAX)),
    (np.float64, (-1.7976931348623157e308, 1.7976931348623157e308)), (ml_dtypes.bfloat16, (-BF16_MAX, BF16_MAX)),
    (np.complex64, (-F32_MAX, F32_MAX)), (np.int8, (-128, 127)), (np.uint8, (0, 255)), (np.int16, (-32768, 32767)),
    (np.uint16, (0, 65535)), (np.int32, (-2**31, 2**31 - 1)), (np.int64, (-2**63, 2**63 - 1)),
    (np.uint32, (0, 2**32 - 1)), (np.bool_, None)])
def test_finite_limits_of_every_dtype(dtype, limits):
    from toolkit.inputs.synthetic import finite_limits

    assert finite_limits(np.dtype(dtype)) == limits


def _spec(name, dtype, shape=(4, 8)):
    from toolkit.inputs.spec import InputSpec

    return InputSpec(name, np.dtype(dtype), shape)


@pytest.mark.parametrize("dtype, bad", [
    (np.float16, (-1e6, 1e6)), (np.float16, (0.0, 65520.0)), (ml_dtypes.bfloat16, (0.0, 1e39)),
    (np.float32, (-1e39, 0.0)), (np.int8, (-129.0, 0.0)), (np.uint8, (-1.0, 10.0)), (np.uint8, (0.0, 256.0)),
    (np.int16, (0.0, 40000.0))])
def test_random_data_refuses_a_range_outside_the_dtype(dtype, bad):
    from toolkit.inputs.synthetic import random_inputs

    with pytest.raises(InputError) as err:
        random_inputs([_spec("x", dtype)], val_ranges={"x": bad})
    msg = str(err.value)
    assert "'x'" in msg and np.dtype(dtype).name in msg and "\n" not in msg
    with pytest.raises(InputError):  # a bare range (every input) is checked the same way
        random_inputs([_spec("x", dtype)], val_ranges={"*": bad})


@pytest.mark.parametrize("dtype, edge", [
    (np.float16, (-F16_MAX, F16_MAX)), (ml_dtypes.bfloat16, (-BF16_MAX, BF16_MAX)), (np.float32, (-F32_MAX, F32_MAX)),
    (np.float64, (-1e300, 1e300)), (np.int8, (-128.0, 127.0)), (np.uint8, (-0.5, 255.5)), (np.bool_, (-5.0, 5.0))])
def test_random_data_at_the_dtype_limits_is_finite_and_in_range(dtype, edge):
    from toolkit.inputs.synthetic import random_inputs

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow in the cast
        x = random_inputs([_spec("x", dtype, (64, 64))], seed=1, val_ranges={"x": edge})["x"]
    assert x.dtype == np.dtype(dtype)
    wide = x.astype(np.float64)
    assert np.isfinite(wide).all()
    if np.dtype(dtype).kind != "b":
        assert wide.min() >= edge[0] and wide.max() <= edge[1]


@pytest.mark.parametrize("elem, dtype, op, rng, limits", [
    (TensorProto.FLOAT16, "float16", "Neg", "x:[-1e6,1e6]", "[-65504, 65504]"),
    (TensorProto.FLOAT16, "float16", "Neg", "[0,7e4]", "[-65504, 65504]"),  # a bare range applies to x too
    (TensorProto.INT8, "int8", "Identity", "x:[-1000,0]", "[-128, 127]"),
    (TensorProto.UINT8, "uint8", "Identity", "x:[-1,10]", "[0, 255]"),
    (TensorProto.FLOAT, "float32", "Neg", "x:[0,1e39]", "3.4028235e+38"),
])
def test_cli_val_range_outside_the_dtype_is_a_usage_error(tmp_path, elem, dtype, op, rng, limits):
    model = save_model(tmp_path / "m.onnx", elem, op)
    for cmd in ("run", "diagnose") if dtype == "float16" and rng.startswith("x") else ("run",):
        res = cli(cmd, model, "--val-range", rng, "--out", tmp_path / f"o_{cmd}")
        line = one_line_error(res, 2)
        assert "--val-range" in line and "'x'" in line and dtype in line and limits in line, line
        assert "NaN" not in line and "inputs" not in line.split("--val-range", 1)[0]
        assert not (tmp_path / f"o_{cmd}").exists()


def test_cli_float64_input_may_use_the_float64_range(tmp_path):
    model = save_model(tmp_path / "m.onnx", TensorProto.DOUBLE, "Neg")
    res = cli("run", model, "--val-range", "x:[-1e300,1e300]", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    with np.load(tmp_path / "o" / "outputs.npz") as z:
        y = z["y"]
    assert y.dtype == np.float64 and np.isfinite(y).all() and np.abs(y).max() <= 1e300
    assert np.abs(y).max() > 1e200  # really drawn from the wide range (8 uniform values: P(all < 1e200) ~ 0)


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


def test_dynamic_dims_message_format():
    from toolkit.compiler.passes.bind_shapes import dynamic_dims_message

    fix = 'give its shape with --input-shape "{example}"'
    assert dynamic_dims_message("x", [None, "seq", 8], fix) == (
        "input 'x' has dynamic dims: declared shape (?, seq, 8) (? = unnamed); "
        'give its shape with --input-shape "x:N,N,8"')
    assert dynamic_dims_message("m", ["b", 16], fix) == (
        "input 'm' has dynamic dims: declared shape (b, 16); give its shape with --input-shape \"m:N,16\"")
    assert dynamic_dims_message("z", None, fix).startswith("input 'z' has no declared rank; ")


def _options_in_help(cmd: str) -> set[str]:
    res = cli(cmd, "--help")
    assert res.returncode == 0, res.stderr
    return set(re.findall(r"--[a-z][a-z-]*", res.stdout))


@pytest.mark.parametrize("cmd", ["compile", "run", "compare", "memcheck", "profile", "tune"])
def test_unbound_dims_message_is_one_format_and_suggests_own_options(tmp_path, cmd):
    model = dyn_model(tmp_path / "dyn.onnx")
    extra = ["--no-html"] if cmd in ("memcheck", "profile", "tune") else []
    line = one_line_error(cli(cmd, model, *extra, "--out", tmp_path / "o"), 2)
    assert "input 'x' has dynamic dims: declared shape (?, seq, 8) (? = unnamed)" in line, line
    assert '"x:N,N,8"' in line, line
    suggested = set(re.findall(r"--[a-z][a-z-]*", line))
    assert suggested, line
    assert suggested <= _options_in_help(cmd), (cmd, suggested)
    if cmd == "compile":
        assert "--inputs" not in line and "pass inputs" not in line
    if cmd == "memcheck":  # memcheck takes --input-shape too now
        assert "--input-shape" in line and "--inputs" in line


def test_compile_binds_a_dynamic_sample_to_its_generator_shapes(tmp_path):
    from toolkit import samples

    want = samples.sample("transformer_seq").make_inputs(0)["x"].shape
    assert want[1] > 1  # the sample's seq dim is dynamic and the generator picks a real length
    res = cli("compile", "transformer_seq", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    x = next(t for t in plan["tensors"] if t["name"] == "x")
    assert tuple(x["shape"]) == tuple(want)
    # --input-shape still wins
    res = cli("compile", "transformer_seq", "--input-shape", "x:1,5,64", "--out", tmp_path / "o2")
    assert res.returncode == 0, res.stderr
    plan = json.loads((tmp_path / "o2" / "plan.json").read_text())
    assert next(t for t in plan["tensors"] if t["name"] == "x")["shape"] == [1, 5, 64]


@pytest.mark.slow
def test_compile_zoo_model_uses_its_registered_input_shape(tmp_path):
    res = cli("compile", "ppocr_cls", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    x = next(t for t in plan["tensors"] if t["name"] == "x")
    assert x["shape"] == [1, 3, 48, 192]  # PaddleOCR's cls input: 3 x 48 x 192
    assert "(1, 3, 48, 192)" in res.stdout


# ================================================================== 3. plan tensor fields named

@pytest.fixture(scope="module")
def compiled_resnet():
    from toolkit import samples
    from toolkit.engine import compile_model
    from toolkit.config.schema import Config
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
    from toolkit.memcheck.planio import attach_plan, load_plan

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
    from toolkit.memcheck.planio import attach_plan, load_plan

    path, _, _ = _edited_plan(compiled_resnet, tmp_path, {})
    d = json.loads(path.read_text())
    d["tensors"] = [t for t in d["tensors"] if t["name"] != "stem_relu"]
    path.write_text(json.dumps(d))
    with pytest.raises(InputError, match="tensor 'stem_relu' is missing"):
        attach_plan(compiled_resnet, load_plan(path))


def test_cli_run_plan_with_edited_nbytes_names_the_field(tmp_path):
    assert cli("compile", "resnet_small", "--out", tmp_path / "c").returncode == 0
    d = json.loads((tmp_path / "c" / "plan.json").read_text())
    t = next(t for t in d["tensors"] if t["name"] == "stem_relu")
    old, t["nbytes"] = t["nbytes"], t["nbytes"] - 1
    (tmp_path / "p.json").write_text(json.dumps(d))
    line = one_line_error(cli("run", "resnet_small", "--plan", tmp_path / "p.json", "--out", tmp_path / "o"), 2)
    assert f"nbytes {old - 1} but the compiled model has {old}" in line, line


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


def test_model_path_kinds_in_process(tmp_path):
    from toolkit.source import resolve_model

    for arg, text in _model_path_cases(tmp_path):
        with pytest.raises(UserError) as err:
            resolve_model(arg)
        assert text in str(err.value) and arg in str(err.value), (arg, str(err.value))
        assert err.value.exit_code == 2
    with pytest.raises(ModelError, match="is not an ONNX model"):
        resolve_model("/proc/self/status")


def test_cli_model_path_kinds(tmp_path):
    for arg, text in _model_path_cases(tmp_path):
        line = one_line_error(cli("compile", arg, "--out", tmp_path / "o"), 2)
        assert text in line, (arg, line)
        assert "neither a zoo name" not in line
    # an empty regular file is still reported as empty
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert "is empty" in one_line_error(cli("compile", tmp_path / "empty.onnx", "--out", tmp_path / "o"), 2)


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


@pytest.mark.parametrize("side", ["golden", "target"])
@pytest.mark.parametrize("how", ["pickled", "truncated", "garbage"])
def test_compare_dumps_advice_matches_the_unreadable_reason(tmp_path, side, how):
    from toolkit.commands.compare_dumps import compare_dumps
    from toolkit.dumps.readers import SideSpec

    g, t = _dump_sides(tmp_path, side, how)
    diag = compare_dumps(SideSpec(str(g), "golden"), SideSpec(str(t), "target"))
    found = [f for f in diag.findings if f.kind == f"{side}_dump_unreadable"]
    assert len(found) == 1, [f.kind for f in diag.findings]
    rec = found[0].recommendation
    assert ADVICE_WORDS[how] in rec, rec
    for other, word in ADVICE_WORDS.items():
        if other != how:
            assert word not in rec, (how, rec)


def test_cli_compare_dumps_pickled_recommendation(tmp_path):
    g, t = _dump_sides(tmp_path, "target", "pickled")
    res = cli("compare-dumps", g, t, "--no-html", "--out", tmp_path / "o")
    assert res.returncode in (0, 1), res.stderr
    findings = json.loads((tmp_path / "o" / "findings.json").read_text())
    rows = findings if isinstance(findings, list) else findings.get("findings", [])
    rec = next(f["recommendation"] for f in rows if f["kind"] == "target_dump_unreadable")
    assert "pickled" in rec and "truncated" not in rec, rec


# ================================================================== 4c. tune's Cast count reads as what happened

def test_count_change_wording():
    from toolkit.commands.common import count_change

    assert count_change("Casts", 2) == "Casts added 2"
    assert count_change("Casts", -1) == "Casts removed 1"
    assert count_change("Casts", 0) == "Casts unchanged"


def test_cli_tune_prints_casts_removed(tmp_path):
    """x * 1e5 / 1e5 overflows in FP16: tune keeps both nodes in FP32, so the input Cast to FP16 disappears."""
    w = numpy_helper.from_array(np.full(8, 1e5, np.float32), "w")
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"], name="mul"),
                           helper.make_node("Div", ["t", "w"], ["y"], name="div")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "ov.onnx")
    res = cli("tune", tmp_path / "ov.onnx", "--precision-mode", "force_fp16", "--no-html", "--out", tmp_path / "o")
    assert res.returncode in (0, 1), res.stderr
    delta = json.loads((tmp_path / "o" / "summary.json").read_text())["cost"]["casts_added"]
    assert delta < 0  # every node back in FP32: fewer Casts than the all-FP16 plan
    assert f"Casts removed {-delta}" in res.stdout and "added -" not in res.stdout, res.stdout


# ================================================================== 4d. SIGTERM: 143 (or 0 when done), never -15

def _diagnose(out: Path, *flags) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "toolkit", *flags, "diagnose", "resnet_small", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def _finish(p: subprocess.Popen) -> int:
    p.communicate(timeout=300)
    return p.returncode


@pytest.mark.parametrize("delay", [0.0, 0.003, 0.01, 0.03])
def test_sigterm_after_the_report_line_exits_143_or_0(tmp_path, delay):
    p = _diagnose(tmp_path / "o", "-q")
    for line in p.stdout:
        if line.startswith("report:"):
            break
    time.sleep(delay)
    p.send_signal(signal.SIGTERM)
    assert _finish(p) in (0, 143)


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05])
def test_sigterm_while_working_exits_143_or_0(tmp_path, delay):
    p = _diagnose(tmp_path / "o", "-v")  # progress on stderr: the first line means main() runs
    p.stderr.readline()
    time.sleep(delay)
    p.send_signal(signal.SIGTERM)
    code = _finish(p)
    assert code in (0, 143)  # never -15 (default action) or -6 (runtime torn down under a working thread)
    if code == 143:
        assert not (tmp_path / "o").exists() or (tmp_path / "o" / "index.html").exists()
