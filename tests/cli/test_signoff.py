"""``npuscope signoff`` in a subprocess: exit codes, policy errors (typos, task metrics, devices, unknown
outputs, exact-match metrics on float outputs) before any run, gear configs, and messages that print limits
as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper

from tests.dataset.helpers import _GEARS, FP16, tiny_model, write_inputs
from tests.graphs import N, make_model
from toolkit.config.schema import Config
from tests.cli.helpers import cli, TIMEOUT_S, STRICT, LENIENT, save_checked, conv_relu, npz, write_utf8, signoff_fp16, cli_plain, policy_text, conv_runs, C08
from tests.signoff.helpers import case, PASSING, write, signoff, SEQ


def npuscope(*args, cwd: Path, **kw):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"), **kw)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_signoff_gear_config_stops_before_the_output_folder(case, tmp_path):
    (tmp_path / "c.json").write_text(_GEARS)
    (tmp_path / "p.toml").write_text('[policy]\nname = "tiny"\n[outputs."*"]\nCosineSimilarity = 0.99\n')
    proc = npuscope("signoff", case["model"], "--policy", tmp_path / "p.toml", "--config", tmp_path / "c.json",
                    "--inputs", case["inputs"], "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2 and "-1 dims" in proc.stderr and not (tmp_path / "out").exists(), proc.stderr


ENV = dict(os.environ, PYTHONWARNINGS="ignore")


def one_line_error(res: subprocess.CompletedProcess, code: int) -> str:
    """The error line of a run that must fail with ``code`` and a one-line message (no traceback)."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def _policy(tmp_path, text: str) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_signoff_policy_op_typo_exit_2(tmp_path):
    _policy(tmp_path, '[placement]\nallowed_cpu_ops = ["Sofmax"]\n')
    line = one_line_error(cli("signoff", "resnet_small", "--policy", "p.toml", "--out", "o", cwd=tmp_path), 2)
    assert "policy 'p.toml'" in line and "'Softmax'" in line


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_signoff_policy_task_metric_exit_2(tmp_path):
    _policy(tmp_path, '[tasks]\nmetrics = ["nomod:fn"]\n')
    line = one_line_error(cli("signoff", "resnet_small", "--policy", "p.toml", "--out", "o", cwd=tmp_path), 2)
    assert "policy 'p.toml': [tasks] metrics entry 'nomod:fn'" in line and "--task-metric" not in line


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_star_exact_match_on_float_only_model_is_refused_by_cli(conv_runs, tmp_path):
    pol = write_utf8(tmp_path / "kl.toml", '[outputs."*"]\nKullbackLeiblerDivergence = 0\nExactMatchRate = 0.5\n')
    r = cli_plain("signoff", conv_runs["model"], "--policy", pol, "--inputs", conv_runs["inputs"], "--out", tmp_path / "o",
            "--no-html")
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "ExactMatchRate" in err[0] and "'y' float32" in err[0], r.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_named_exact_match_on_float_output_is_refused_by_cli(conv_runs, tmp_path):
    pol = write_utf8(tmp_path / "p.toml", '[outputs.y]\nExactMatchRate = 1.0\n')
    r = cli_plain("signoff", conv_runs["model"], "--policy", pol, "--inputs", conv_runs["inputs"], "--out", tmp_path / "o",
            "--no-html")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "output 'y' is float32" in r.stderr and "ExactMatchRate" in r.stderr, r.stderr


NUM = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"


def _m1(folder: Path) -> tuple[Path, Path]:
    """The tester's m1: x[4,8] -> y = 3x + 1 (Mul 'mul', Add 'add'), z = exp(x) (Exp 'exp')."""
    from tests.graphs import affine_and

    m = affine_and("Exp")
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(m, folder / "m1.onnx")
    np.savez(folder / "in.npz", x=np.random.default_rng(9).uniform(-1, 6, (4, 8)).astype(np.float32))
    return folder / "m1.onnx", folder / "in.npz"


@pytest.mark.slow
def test_cli_bit_exact_run_passes_the_strictest_lines_and_policy(tmp_path):
    import onnxruntime as ort

    mp, ip = _m1(tmp_path)
    ran = npuscope("run", mp, "--precision-mode", "force_fp32", "--inputs", ip, "--out", tmp_path / "run", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    dev = np.load(tmp_path / "run" / "outputs.npz")
    ref = dict(zip(["y", "z"], ort.InferenceSession(str(mp), providers=["CPUExecutionProvider"]).run(
        ["y", "z"], {"x": np.load(ip)["x"]})))
    assert all(np.array_equal(dev[o], ref[o]) for o in ref)  # precondition: bit-identical outputs
    res = npuscope("compare", mp, "--inputs", ip, "--precision-mode", "force_fp32", "--thresholds",
                   "CosineSimilarity<1,MaxAbsoluteError>0,RelativeEuclideanDistance>0,KullbackLeiblerDivergence>0",
                   "--out", tmp_path / "c", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("verdict: PASS"), res.stdout + res.stderr
    pol = tmp_path / "exact.toml"
    pol.write_text('[outputs."*"]\nCosineSimilarity = 1.0\nMaxAbsoluteError = 0.0\n')
    res = npuscope("signoff", mp, "--policy", pol, "--inputs", ip, "--precision-mode", "force_fp32", "--no-html",
                   "--out", tmp_path / "s", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_cli_fp16_user_lines_fail_and_signoff_messages_read_right(tmp_path):
    import onnxruntime as ort

    mp, ip = _m1(tmp_path)
    x = np.load(ip)["x"]
    ref = dict(zip(["y", "z"], ort.InferenceSession(str(mp), providers=["CPUExecutionProvider"]).run(["y", "z"],
                                                                                                       {"x": x})))
    res = npuscope("compare", mp, "--inputs", ip, "--precision-mode", "force_fp16", "--thresholds",
                   "MaxAbsoluteError>1e-3", "--out", tmp_path / "c", cwd=tmp_path)
    assert res.returncode == 1 and res.stdout.startswith("verdict: FAIL"), res.stdout + res.stderr
    table = pd.read_csv(tmp_path / "c" / "result.csv").set_index("TensorName")
    run = npuscope("run", mp, "--precision-mode", "force_fp16", "--inputs", ip, "--out", tmp_path / "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    dev = np.load(tmp_path / "run" / "outputs.npz")
    for o in ("y", "z"):
        err = float(np.abs(dev[o].astype(np.float64) - ref[o].astype(np.float64)).max())
        assert (err > 1e-3) == bool(table.loc[o, "Abnormal"]), (o, err)
        if err > 1e-3:
            assert "MaxAbsoluteError" in str(table.loc[o, "AbnormalMetrics"])
    # a signoff limit between the measured cosine and the next 9-digit decimal: its message must read right
    cos = float(np.dot(dev["y"].astype(np.float64).ravel(), ref["y"].astype(np.float64).ravel())
                / (np.linalg.norm(dev["y"].astype(np.float64)) * np.linalg.norm(ref["y"].astype(np.float64))))
    limit = float(f"{cos:.10g}")
    pol = tmp_path / "p.toml"
    pol.write_text(f'[outputs.y]\nCosineSimilarity = {limit!r}\n')
    res = npuscope("signoff", mp, "--policy", pol, "--inputs", ip, "--precision-mode", "force_fp16", "--no-html",
                   "--out", tmp_path / "s", cwd=tmp_path)
    line = next(ln for ln in res.stdout.splitlines() if "outputs.y.CosineSimilarity" in ln)
    m = re.search(rf"(PASS|FAIL) .* worst {NUM} .*needs >= {NUM}\)", line)
    assert m and float(m.group(3)) == limit, line
    assert (m.group(1) == "PASS") == (float(m.group(2)) >= float(m.group(3))), line


def cli_with_env_extra(*args, cwd, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600, check=False)


def _elt_model(folder: Path) -> tuple[Path, Path]:
    """y = (x*3 + 1000) - 1000: cancellation that FP16 storage of the sum ruins (an abnormal 's' and 'z')."""
    model = make_model([N("Mul", ["x", "a"], ["m"], "mul"), N("Add", ["m", "b"], ["s"], "add"),
                        N("Sub", ["s", "b"], ["z"], "sub")], [("x", [1, 64])], [],
                       {"a": np.array([3.0], np.float32), "b": np.array([1000.0], np.float32)})
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 64]))
    model.ir_version = 8
    onnx.save(model, folder / "elt.onnx")
    x = (np.linspace(-1, 1, 64, dtype=np.float32) + np.float32(1e-4)).reshape(1, 64)
    np.savez(folder / "elt.npz", x=x)
    return folder / "elt.onnx", folder / "elt.npz"


@pytest.mark.slow
def test_signoff_prints_a_minus_zero_limit_as_zero(tmp_path):
    model, inputs = _elt_model(tmp_path)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.npz").write_bytes(inputs.read_bytes())
    (tmp_path / "pol.toml").write_text('[outputs."*"]\nMaxAbsoluteError = -0.0\n')
    p = cli_with_env_extra("signoff", str(model), "--policy", "pol.toml", "--inputs", "in", "--precision-mode", "force_fp16",
            "--out", "so", cwd=tmp_path)
    assert p.returncode == 1, p.stderr[-2000:]  # FP16 storage of x*3+1000 loses the small values of z
    assert "needs <= 0)" in p.stdout and "-0" not in p.stdout.replace("e-0", ""), p.stdout


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_cli_signoff_exit_codes(tmp_path):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    pol = write(tmp_path, "p.toml", PASSING)
    cfg = write(tmp_path, "keep.json", json.dumps({"keep_dtype": ["exp", "add_one", "log"]}))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "toolkit", "signoff", str(C08 / "model.onnx"), "--inputs",
                               str(C08 / "inputs.npz"), "--no-html", *map(str, args)], capture_output=True, text=True,
                              env=env, timeout=300, cwd=tmp_path)

    ok = run("--policy", pol, "--config", cfg, "--precision-mode", "force_fp16", "--out", tmp_path / "a")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run("--policy", pol, "--precision-mode", "force_fp16", "--out", tmp_path / "b")
    assert bad.returncode == 1 and "FAIL fp16_overflow" in bad.stdout
    usage = run("--policy", write(tmp_path, "x.toml", "[latncy]\nmax_ms=1\n"), "--out", tmp_path / "c")
    assert usage.returncode == 2 and "did you mean 'latency'" in usage.stderr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_cli_bad_policy_device_exits_2_before_running(tmp_path):
    pol = write(tmp_path, "p.toml", "[latency]\nmax_ms = 1\ndevice = 'atlas300'\n")
    r = subprocess.run([sys.executable, "-m", "toolkit", "signoff", SEQ, "--policy", str(pol), "--no-html", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 2 and "[latency] device = 'atlas300'" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_cli_unknown_output_is_a_policy_error_not_a_failing_criterion(tmp_path):
    pol = write(tmp_path, "p.toml", "[outputs.nosuchout]\nCosineSimilarity = 0.9\n")
    r = subprocess.run([sys.executable, "-m", "toolkit", "signoff", SEQ, "--policy", str(pol), "--no-html", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 2 and '[outputs."nosuchout"] names no output' in r.stderr, r.stdout + r.stderr
