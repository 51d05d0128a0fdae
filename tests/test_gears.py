"""Shape gears: config parsing, gear runs against onnxruntime on the exact input, output slicing, padding
sensitivity (unmasked Softmax named, masked variant clean), and the compile/run CLI with gears."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from toolkit import samples
from toolkit.config import Config
from toolkit.errors import ConfigError, InputError, ModelError
from toolkit.gears.padding import padding_sensitivity
from toolkit.gears.session import GearSession, pad_feeds
from toolkit.gears.spec import parse_gears

MASKED_CFG = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32;64,64"}


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# ----------------------------------------------------------------------------------------------- gear runs
@pytest.fixture(scope="module")
def masked_model():
    return samples.build_transformer_seq_masked()


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _flatten_model(transpose: bool):
    shape = helper.make_tensor("flat", TensorProto.INT64, [2], [1, -1])
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="swap", perm=[0, 2, 1])] if transpose else []
    nodes.append(helper.make_node("Reshape", ["xt" if transpose else "x", "flat"], ["y"], name="flatten"))
    return _model(nodes, [("x", [1, "seq", 4])], [("y", [1, "seq_x_4"])], [shape])


# ----------------------------------------------------------------------------------------------- sensitivity
def _target(feeds, n):
    return {k: v.shape[:1] + (n,) + v.shape[2:] for k, v in feeds.items()}


# ----------------------------------------------------------------------------------------------- CLI
def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True, cwd=cwd)


def test_compile_and_run_cli_with_gears(tmp_path):
    cfg = tmp_path / "gears.json"
    cfg.write_text(json.dumps({**MASKED_CFG, "pad_value": "mask:0"}))
    r = _cli("compile", "transformer_seq_masked", "--config", cfg, "--out", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "c" / "gears.json").read_text())
    assert [g["label"] for g in meta["gears"]] == ["16x16", "32x32", "64x64"]
    for g in meta["gears"]:
        plan = json.loads((tmp_path / "c" / g["folder"] / "plan.json").read_text())
        assert plan["config"]["input_shape"] == g["input_shape"]
    feeds = samples.transformer_seq_masked_inputs(2, 20)
    np.savez(tmp_path / "in.npz", **feeds)
    r = _cli("run", "transformer_seq_masked", "--config", cfg, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    assert "gear 32x32" in r.stdout and "padding is safe" in r.stdout
    with np.load(tmp_path / "r" / "outputs.npz") as z:
        y = z["y"]
    ref = _ort(samples.build_transformer_seq_masked(), feeds)[0]
    np.testing.assert_allclose(y, ref, rtol=0, atol=2e-3 * np.abs(ref).max())
    assert json.loads((tmp_path / "r" / "gear.json").read_text())["padded"] is True
    big = samples.transformer_seq_masked_inputs(2, 70)
    np.savez(tmp_path / "big.npz", **big)
    r = _cli("run", "transformer_seq_masked", "--config", cfg, "--inputs", tmp_path / "big.npz", "--out", tmp_path / "b")
    assert r.returncode == 1 and 'gears are dynamic_dims "16,16;32,32;64,64"' in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


def test_run_cli_reports_the_unmasked_softmax(tmp_path):
    cfg = tmp_path / "gears.json"
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64", "dynamic_dims": "16;32"}))
    r = _cli("run", "transformer_seq", "--config", cfg, "--out", tmp_path / "r")
    # the leak reaches the output y: the outputs are wrong, so exit 1, but everything is still written
    assert r.returncode == 1, r.stderr
    assert "first at 'attn_softmax' (Softmax)" in r.stdout and "FAILED: padding to gear 32 changes output(s) y" in r.stdout
    rep = json.loads((tmp_path / "r" / "padding.json").read_text())
    assert [(f["subject"], f["severity"]) for f in rep["findings"]] == [("attn_softmax", "error")]
    assert rep["outputs_leak"] == ["y"] and (tmp_path / "r" / "outputs.npz").is_file()
    bad = _cli("diagnose", "transformer_seq", "--config", cfg, "--out", tmp_path / "d")
    assert bad.returncode == 2 and "only 'compile' and 'run' choose a gear" in bad.stderr


