"""Round-4 fixes (black-box tester): signoff policies and regress, compare-dumps without a model.

Fault kinds covered, one section each:

1. ``regress`` between two signoffs judged by different policies: the policy change is listed first, with a
   warning; verdict / criterion changes for the better are listed as improvements.
2. ``[outputs."*"]`` and ``[outputs.NAME]`` bounding the same metric: the named output overrides "*" (one
   criterion per output and metric); duplicate criterion names are an internal error.
3. A metric that cannot be computed on an output's dtype (ExactMatchRate on a float output, a float metric on
   an integer output) is refused at policy validation (exit 2), naming the output, its dtype and the metric.
4. ``compare-dumps`` without ``--model``: the first divergence is the first abnormal tensor in dump order, its
   inputs cannot be checked, and the advice is to pass --model (no keep_dtype advice).

Models, inputs and dumps are built here; expected values (limits, sha256 of the policy files, which tensor
diverges) come from what this file writes, not from npuscope's output.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.config import Config
from toolkit.errors import ConfigError
from toolkit.signoff.criteria import Result, check_unique
from toolkit.signoff.policy import check_policy_model, output_limits, policy_from_dict
from toolkit.signoff.regress import policy_changes, regress

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TIMEOUT_S = 300
FP16 = {"precision_mode": "force_fp16"}
STRICT = 0.99999999999  # a cosine an FP16 plan cannot reach on random data
LENIENT = 0.5


# ------------------------------------------------------------------------------------------------ fixtures
def save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def conv_relu(path: Path) -> Path:
    """x [1,3,8,8] -> Conv (4 filters, pad 1) -> Relu -> y float32 [1,4,8,8]."""
    from tests.graphs import conv_relu as build

    return save(build(1), path)


def mixed(path: Path) -> Path:
    """x [2,16] -> MatMul -> y float32 [2,8] -> ArgMax -> idx int64 [2]: one float and one integer output."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
                           helper.make_node("ArgMax", ["y"], ["idx"], name="am", axis=-1, keepdims=0)], "mix",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
                           helper.make_tensor_value_info("idx", TensorProto.INT64, [2])], [w])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def signoff(model: Path, policy: Path, inputs: Path, out: Path, cfg: dict = FP16):
    from toolkit import api

    return api.signoff_command(str(model), str(policy), Config.from_dict(cfg), inputs=str(inputs), out=str(out),
                               html=False)


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=cwd)


def policy_text(limit: float) -> str:
    return f'[policy]\nname = "p"\n[outputs."*"]\nCosineSimilarity = {limit!r}\n'


@pytest.fixture(scope="module")
def conv_runs(tmp_path_factory):
    """Two signoffs of one model, config and input, judged by a lenient and a strict policy."""
    tmp = tmp_path_factory.mktemp("r4s")
    model = conv_relu(tmp / "cr.onnx")
    inputs = npz(tmp / "in.npz", x=np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32))
    pols = {"ok": write(tmp / "ok.toml", policy_text(LENIENT)), "strict": write(tmp / "strict.toml", policy_text(STRICT))}
    for name, pol in pols.items():
        signoff(model, pol, inputs, tmp / f"so_{name}")
    # the same policy text under another file name
    pols["ok_copy"] = write(tmp / "ok_copy.toml", policy_text(LENIENT))
    signoff(model, pols["ok_copy"], inputs, tmp / "so_ok_copy")
    return {"tmp": tmp, "model": model, "inputs": inputs, "policies": pols,
            **{n: tmp / f"so_{n}" for n in ("ok", "strict", "ok_copy")}}


def verdict(folder: Path) -> str:
    return json.loads((folder / "summary.json").read_text())["verdict"]


def test_regress_cli_prints_policy_change_and_improvement(conv_runs, tmp_path):
    r = cli("regress", conv_runs["ok"], conv_runs["strict"], "--out", tmp_path / "a", "--no-html")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    changed = [ln.strip() for ln in lines if ln.strip().startswith("changed ")]
    assert changed[0] == f"changed policy.outputs.*.CosineSimilarity: {LENIENT!r} -> {STRICT!r}", r.stdout
    assert any(ln.startswith("WARNING:") and "different policies" in ln for ln in lines), r.stdout
    r = cli("regress", conv_runs["strict"], conv_runs["ok"], "--out", tmp_path / "b", "--no-html")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "regress: NO REGRESSION" in r.stdout
    assert "  + improved verdict: FAIL -> PASS" in r.stdout.splitlines(), r.stdout


def test_star_exact_match_on_float_only_model_is_refused_by_cli(conv_runs, tmp_path):
    pol = write(tmp_path / "kl.toml", '[outputs."*"]\nKullbackLeiblerDivergence = 0\nExactMatchRate = 0.5\n')
    r = cli("signoff", conv_runs["model"], "--policy", pol, "--inputs", conv_runs["inputs"], "--out", tmp_path / "o",
            "--no-html")
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "ExactMatchRate" in err[0] and "'y' float32" in err[0], r.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_named_exact_match_on_float_output_is_refused_by_cli(conv_runs, tmp_path):
    pol = write(tmp_path / "p.toml", '[outputs.y]\nExactMatchRate = 1.0\n')
    r = cli("signoff", conv_runs["model"], "--policy", pol, "--inputs", conv_runs["inputs"], "--out", tmp_path / "o",
            "--no-html")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "output 'y' is float32" in r.stderr and "ExactMatchRate" in r.stderr, r.stderr


# -------------------------------------------------------------- 4. compare-dumps without a model
T0 = 1_700_000_000_000_000
DUMP_NODES = [("mm", "MatMul", "t_mm"), ("relu", "Relu", "y")]


def dump_model(path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(5).standard_normal((8, 6)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t_mm"], name="mm"),
                           helper.make_node("Relu", ["t_mm"], ["y"], name="relu")], "d",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])], [w])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def write_dumps(tmp: Path) -> tuple[Path, Path]:
    """Golden (ONNX Runtime naming: node.output.timestamp.npy) and device (Op.node.task.stream.timestamp.output.
    N.npy) dumps; the device's 'relu' output has a planted fault (half its values negated), 'mm' is exact."""
    x = np.random.default_rng(6).standard_normal((4, 8)).astype(np.float32)
    w = np.random.default_rng(5).standard_normal((8, 6)).astype(np.float32)
    mm = x @ w
    gold = {"t_mm": mm, "y": np.maximum(mm, 0)}
    dev = {"t_mm": mm.copy(), "y": gold["y"].copy()}
    dev["y"][:, :3] *= -1.0
    g, t = tmp / "golden", tmp / "device"
    g.mkdir()
    t.mkdir()
    for i, (node, op, tensor) in enumerate(DUMP_NODES):
        np.save(g / f"{node}.0.{T0 + i}.npy", gold[tensor])
        np.save(t / f"{op}.{node}.{i + 1}.2.{T0 + 100 + i}.output.0.npy", dev[tensor])
    return g, t


def test_compare_dumps_without_model_does_not_claim_the_origin(tmp_path):
    g, t = write_dumps(tmp_path)
    r = cli("compare-dumps", g, t, "--out", tmp_path / "rep", "--no-html")
    assert r.returncode == 1, r.stdout + r.stderr  # an abnormal tensor without a model: FAIL
    fd_line = [ln for ln in r.stdout.splitlines() if ln.startswith("ERROR   first_divergence")]
    assert len(fd_line) == 1 and "relu" in fd_line[0], r.stdout
    assert "first abnormal tensor in dump order" in fd_line[0]
    assert "inputs cannot be checked" in fd_line[0] and "pass --model" in fd_line[0]
    assert "keep_dtype" not in fd_line[0] and "is where the error starts" not in fd_line[0]
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["first_divergence"]["node"] == "relu"
    assert summary["first_divergence"]["basis"].startswith("dump order")
    findings = json.loads((tmp_path / "rep" / "findings.json").read_text())
    first = [f for f in (findings if isinstance(findings, list) else findings["findings"])
             if f["kind"] == "first_divergence"]
    assert len(first) == 1 and "pass --model" in first[0]["recommendation"]


def test_compare_dumps_with_model_keeps_the_origin_wording(tmp_path):
    g, t = write_dumps(tmp_path)
    model = dump_model(tmp_path / "m.onnx")
    r = cli("compare-dumps", g, t, "--model", model, "--out", tmp_path / "rep", "--no-html")
    assert r.returncode == 1, r.stdout + r.stderr  # the graph output y is abnormal
    fd_line = [ln for ln in r.stdout.splitlines() if ln.startswith("ERROR   first_divergence")]
    assert len(fd_line) == 1, r.stdout
    assert "is where the error starts; its inputs are normal" in fd_line[0]
    assert "keep 'relu' in FP32 (keep_dtype)" in fd_line[0]
    assert "dump order" not in fd_line[0]
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["first_divergence"]["basis"] == "graph"
