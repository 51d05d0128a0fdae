"""Gear and input-shape validation, one test per fault kind: a symbolic dim shared by several inputs given two
sizes (config, --input-shape, gears, data), -1 on a dim the model keeps static (compile and run agree), padding
leaks reaching an output (run exits 1), numbers in lengths files, config snippets `gears` emits, pad_value and
input_shape config gaps."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit import samples
from toolkit.compiler.passes.bind_shapes import check_input_shapes
from toolkit.compiler.pipeline import compile_model
from toolkit.config import Config
from toolkit.errors import ConfigError, InputError, UsageError
from toolkit.gears import dp
from toolkit.gears.padding import padding_sensitivity
from toolkit.gears.session import GearSession, pad_feeds
from toolkit.gears.spec import MAX_GEARS, MIN_GEARS, parse_gears
from toolkit.gears.workflow import config_snippet, read_lengths, recommend

FP32 = {"precision_mode": "force_fp32"}


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def _error_line(r) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("npuscope: ")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# ------------------------------------------------------------------------------ shared symbolic dims (kind)
def _random_shared_model(rs):
    """2-3 inputs of rank 2-3 whose dims are static ints or the symbols 's'/'t' (one Relu per input), with one
    symbol used at least twice; returns (model, {input: declared dims}, the shared symbol)."""
    while True:
        choices = ["s", "t", 3, 1, 2]
        decl = {f"in{i}": [choices[rs.randint(5)] for _ in range(rs.randint(2, 4))] for i in range(rs.randint(2, 4))}
        uses = [d for v in decl.values() for d in v if isinstance(d, str)]
        shared = [s for s in ("s", "t") if uses.count(s) >= 2 and sum(s in v for v in decl.values()) >= 2]
        if shared:
            break
    nodes = [helper.make_node("Relu", [k], [f"out_{k}"], name=f"relu_{k}") for k in decl]
    m = _model(nodes, list(decl.items()), [(f"out_{k}", v) for k, v in decl.items()])
    return m, decl, shared[0]


def test_shared_dim_cli_paths(tmp_path):
    """The tester's cases: a gear giving x[1] and mask[1] (both 'seq') two sizes, and --input-shape doing the same,
    refused with exit 2 before anything compiles; mismatched data exit 1."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,32;32,16"}))
    feeds = samples.transformer_seq_masked_inputs(0, 16)
    np.savez(tmp_path / "b16.npz", **feeds)
    for cmd in (["compile"], ["run", "--inputs", tmp_path / "b16.npz"]):
        r = _cli(cmd[0], "transformer_seq_masked", "--config", cfg, *cmd[1:], "--out", tmp_path / cmd[0])
        assert r.returncode == 2 and "dim 'seq' is 16 in x but 32 in mask" in _error_line(r)
        assert not (tmp_path / cmd[0]).exists()
    for cmd in ("compile", "run"):
        r = _cli(cmd, "transformer_seq_masked", "--input-shape", "x:1,16,64;mask:1,32", "--out", tmp_path / f"s{cmd}")
        assert r.returncode == 2 and "dim 'seq' is 16 in x but 32 in mask" in _error_line(r)
    np.savez(tmp_path / "skew.npz", x=feeds["x"], mask=np.ones((1, 8), np.float32))
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32"}))
    r = _cli("run", "transformer_seq_masked", "--config", cfg, "--inputs", tmp_path / "skew.npz", "--out", tmp_path / "k")
    assert r.returncode == 1 and "'seq' is 16 in input 'x' but 8 in input 'mask'" in _error_line(r)


def test_compile_and_run_agree_on_a_static_batch(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "x:-1,3,32,32", "dynamic_batch_size": "1,2,4"}))
    for cmd in ("compile", "run"):
        r = _cli(cmd, "resnet_small", "--config", cfg, "--out", tmp_path / cmd)
        assert r.returncode == 2, r.stderr
        assert "-1 marks dim 0 of 'x' as a gear dim, but that dim is static (1)" in _error_line(r)


# ------------------------------------------------------------------------------ padding leaks and exit code (kind)
def _batch_sum_model():
    ax0 = numpy_helper.from_array(np.array([0], np.int64), "ax0")
    return _model([helper.make_node("ReduceSum", ["x", "ax0"], ["s"], name="bsum", keepdims=1),
                   helper.make_node("Add", ["x", "s"], ["y"], name="add")], [("x", ["N", 3])], [("y", ["N", 3])], [ax0])


def _dead_leak_model():
    """ReduceMean over the padded axis whose result is multiplied by 0 before the output: a leak that dies."""
    zero = numpy_helper.from_array(np.zeros((1, 1, 1), np.float32), "zero")
    return _model([helper.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[1], keepdims=1),
                   helper.make_node("Mul", ["mu", "zero"], ["z0"], name="mul0"),
                   helper.make_node("Add", ["x", "z0"], ["y"], name="add")],
                  [("x", [1, "seq", 4])], [("y", [1, "seq", 4])], [zero])


def test_run_exits_1_when_a_leak_reaches_an_output_and_still_writes_everything(tmp_path):
    onnx.save(_batch_sum_model(), tmp_path / "bsum.onnx")
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.savez(tmp_path / "in.npz", x=x)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "x:-1,3", "dynamic_batch_size": "2,4", "pad_value": "x:1", **FP32}))
    r = _cli("run", tmp_path / "bsum.onnx", "--config", cfg, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "r")
    assert r.returncode == 1, r.stderr
    assert "FAILED: padding to gear 4 changes output(s) y" in r.stdout and "ERROR   padding_leak: bsum" in r.stdout
    with np.load(tmp_path / "r" / "outputs.npz") as z:
        y = z["y"]
    np.testing.assert_allclose(y, x + x.sum(0) + 1)  # by hand: the padded row of ones joins the batch sum
    assert not np.allclose(y, x + x.sum(0))
    rep = json.loads((tmp_path / "r" / "padding.json").read_text())
    assert rep["outputs_leak"] == ["y"] and (tmp_path / "r" / "padding.csv").is_file()
    # a leak that dies before the output: warning, exit 0, outputs exact
    onnx.save(_dead_leak_model(), tmp_path / "dead.onnx")
    x = np.random.RandomState(1).rand(1, 5, 4).astype(np.float32)
    np.savez(tmp_path / "s.npz", x=x)
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,4", "dynamic_dims": "4;8", **FP32}))
    r = _cli("run", tmp_path / "dead.onnx", "--config", cfg, "--inputs", tmp_path / "s.npz", "--out", tmp_path / "d")
    assert r.returncode == 0, r.stderr
    assert "WARNING padding_leak: mean" in r.stdout and "FAILED" not in r.stdout
    with np.load(tmp_path / "d" / "outputs.npz") as z:
        np.testing.assert_array_equal(z["y"], x)


# ------------------------------------------------------------------------------ lengths file numbers (kind)
BAD_LENGTHS = ["99999999999999999999999", "1" * 5000, "2147483648", "1e400", "-1e400", "inf", "-inf", "nan", "NaN",
               "-3", "0", "0.0", "4.5", "1e-3", "abc", "0x10", "1_000", "12abc", "--5", "1e", "."]
GOOD_LENGTHS = {"7": 7, "+7": 7, "007": 7, "12.0": 12, "1e3": 1000, "2147483647": 2147483647}


def test_gears_cli_bad_number_exit_1(tmp_path):
    (tmp_path / "l.txt").write_text("5\n99999999999999999999999\n")
    r = _cli("gears", "--lengths", tmp_path / "l.txt", "-k", "2", "--out", tmp_path / "o")
    assert r.returncode == 1 and "line 2" in _error_line(r) and not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------ config snippets of `gears` (kind)
def _random_lengths(rs):
    kind = rs.randint(4)
    if kind == 0:
        return [int(rs.randint(1, 300))] * int(rs.randint(1, 6))  # one distinct length
    if kind == 1:
        return list(rs.randint(1, 400, size=rs.randint(1, 400)))
    if kind == 2:
        return list(range(1, int(rs.randint(2, 220))))  # many distinct lengths
    return list(np.clip(rs.lognormal(3, 0.7, 300).astype(int), 1, 500))


def test_gears_cli_single_length_and_too_many_gears(tmp_path):
    (tmp_path / "five.txt").write_text("5\n5\n5\n")
    r = _cli("gears", "--lengths", tmp_path / "five.txt", "-k", "3", "--no-html", "--input-shape",
             "x:1,-1,64;mask:1,-1", "--out", tmp_path / "g")
    assert r.returncode == 0, r.stderr
    assert "no gears needed" in r.stdout and 'config: input_shape = "x:1,5,64;mask:1,5"' in r.stdout
    snip = json.loads((tmp_path / "g" / "gears.json").read_text())["config_snippet"]
    (tmp_path / "c.json").write_text(json.dumps(snip))
    r = _cli("compile", "transformer_seq_masked", "--config", tmp_path / "c.json", "--out", tmp_path / "c")
    assert r.returncode == 0, r.stderr  # compile takes the snippet
    (tmp_path / "many.txt").write_text("\n".join(str(i) for i in range(1, 160)))
    r = _cli("gears", "--lengths", tmp_path / "many.txt", "-k", "200", "--no-html", "--out", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    assert "-k 200 is above the 100 gears the converter takes; chose 100" in r.stdout
    data = json.loads((tmp_path / "m" / "gears.json").read_text())
    assert len(data["config_snippet"]["dynamic_dims"].split(";")) == 100 and data["k_used"] == 100


# ------------------------------------------------------------------------------ config gaps (kind)
GEARS = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32"}


