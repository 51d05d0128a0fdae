"""``npuscope regress`` in a subprocess: exit codes and HTML, runs on different inputs, policy changes,
damaged folders, folders of other commands or other models, and tensors compared in one run only."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx import helper as h

from tests.dataset.helpers import FP16
from toolkit import samples
from toolkit.config.schema import Config
from tests.cli.helpers import npuscope_with_path, vi, save, relu_model, npuscope_error_line, ENV, TB, cli_no_warnings, refusal_line, _npz_folder
from tests.cli.helpers import cli, TIMEOUT_S, STRICT, LENIENT, save_checked, conv_relu, npz, write_utf8, signoff_fp16, cli_plain, policy_text, conv_runs, C08
from tests.signoff.helpers import V, IR, write_model, report, damaged_copy, KEEP, NO_KEEP


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_regress_compare_runs_different_inputs(tmp_path):
    assert cli("compare", "transformer_block", "--out", "c", cwd=tmp_path).returncode in (0, 1)
    assert cli("compare", "transformer_block", "--seed", "0", "--val-range", "x:[0,100]", "--out", "c2",
               cwd=tmp_path).returncode in (0, 1)
    res = subprocess.run([sys.executable, "-m", "toolkit", "regress", "c", "c2", "--out", "o"], capture_output=True,
                         text=True, cwd=tmp_path, env=ENV, timeout=600)
    assert res.returncode in (0, 1), res.stderr
    assert "WARNING: the two runs used different inputs" in res.stdout
    rep = json.loads((tmp_path / "o" / "regress.json").read_text())
    assert any("different inputs" in w for w in rep["warnings"])


def _digest(a: np.ndarray) -> str:
    """sha256 over dtype text, shape text and bytes, written out here as documented."""
    a = np.ascontiguousarray(a)
    return hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_compares_input_data_not_paths(tmp_path):
    model = relu_model(tmp_path / "relu.onnx")
    data = {"A": np.arange(8, dtype=np.float32).reshape(1, 8) - 3, "B": np.ones((1, 8), np.float32)}
    for d, x in data.items():
        (tmp_path / d / "in").mkdir(parents=True)
        np.savez(tmp_path / d / "in" / "x.npz", x=x)
    # the same relative path from two folders, different data
    assert npuscope_with_path("compare", model, "--inputs", "in/x.npz", "--out", tmp_path / "ra", cwd=tmp_path / "A").returncode == 0
    assert npuscope_with_path("compare", model, "--inputs", "in/x.npz", "--out", tmp_path / "rb", cwd=tmp_path / "B").returncode == 0
    # the same file by its absolute path
    assert npuscope_with_path("compare", model, "--inputs", tmp_path / "A" / "in" / "x.npz", "--out", "ra2",
                    cwd=tmp_path).returncode == 0
    sa = json.loads((tmp_path / "ra" / "summary.json").read_text())
    sb = json.loads((tmp_path / "rb" / "summary.json").read_text())
    assert sa["inputs"] == sb["inputs"]  # the path text alone cannot tell them apart
    assert sa["inputs_sha256"] == {"x": _digest(data["A"])} and sb["inputs_sha256"] == {"x": _digest(data["B"])}

    diff = npuscope_with_path("regress", "ra", "rb", "--out", "g1", "--no-html", cwd=tmp_path)
    assert diff.returncode in (0, 1), diff.stderr
    rep = json.loads((tmp_path / "g1" / "regress.json").read_text())
    assert any("different inputs" in w and "inputs_sha256.x" in w for w in rep["warnings"])
    assert {"key": "inputs_sha256.x", "baseline": _digest(data["A"]), "new": _digest(data["B"])} \
        in rep["environment_changes"]
    assert "WARNING: the two runs used different inputs" in diff.stdout

    same = npuscope_with_path("regress", "ra", "ra2", "--out", "g2", "--no-html", cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    rep = json.loads((tmp_path / "g2" / "regress.json").read_text())
    assert rep["warnings"] == [] and rep["notes"] == []
    assert not any(c["key"].startswith("inputs") for c in rep["environment_changes"])
    assert "different inputs" not in same.stdout


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_cli_prints_policy_change_and_improvement(conv_runs, tmp_path):
    r = cli_plain("regress", conv_runs["ok"], conv_runs["strict"], "--out", tmp_path / "a", "--no-html")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    changed = [ln.strip() for ln in lines if ln.strip().startswith("changed ")]
    assert changed[0] == f"changed policy.outputs.*.CosineSimilarity: {LENIENT!r} -> {STRICT!r}", r.stdout
    assert any(ln.startswith("WARNING:") and "different policies" in ln for ln in lines), r.stdout
    r = cli_plain("regress", conv_runs["strict"], conv_runs["ok"], "--out", tmp_path / "b", "--no-html")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "regress: NO REGRESSION" in r.stdout
    assert "  + improved verdict: FAIL -> PASS" in r.stdout.splitlines(), r.stdout


def cli_with_warnings(*args, cwd=None, warn="default"):
    env = dict(os.environ, PYTHONWARNINGS=warn)
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600, check=False)


def test_regress_cli_damaged_folder_is_one_line_exit_1(report, tmp_path):
    for name, content in [("result.csv", 'garbage,"\n'), ("plan.json", '{"kernels": 5}'),
                          ("summary.json", '{"verdict": 5}'), ("summary.json", "[1, 2]")]:
        work = tmp_path / f"w{abs(hash((name, content)))}"
        work.mkdir()
        bad = damaged_copy(report, work, name, content)
        line = npuscope_error_line(cli_with_warnings("regress", str(report), str(bad), "--out", str(work / "o"), "--no-html"))
        assert name in line and "compile result" not in line, line


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=300)


def test_regress_lists_tensors_compared_in_one_run_only(tmp_path):
    cfg = tmp_path / "fl0.toml"
    cfg.write_text("fusion_level = 0\n")
    for name, extra in (("fused", []), ("unfused", ["--config", cfg])):
        r = _cli("compare", "transformer_block", *extra, "--out", tmp_path / name)
        assert r.returncode in (0, 1), r.stderr
    import pandas as pd

    fused = pd.read_csv(tmp_path / "fused" / "result.csv", keep_default_na=False).set_index("TensorName")
    unfused = pd.read_csv(tmp_path / "unfused" / "result.csv", keep_default_na=False).set_index("TensorName")
    only_new = {t for t in fused.index if t in unfused.index and fused.at[t, "CompareFailReason"]
                and not unfused.at[t, "CompareFailReason"]}
    assert only_new  # fusion off makes tensors comparable (computed here from the two tables)
    for a, b, side in (("fused", "unfused", "new"), ("unfused", "fused", "baseline")):
        r = _cli("regress", tmp_path / a, tmp_path / b, "--out", tmp_path / f"rg_{a}")
        rep = json.loads((tmp_path / f"rg_{a}" / "regress.json").read_text())
        assert not {d["TensorName"] for d in rep["layer_deltas"]} & only_new, rep["layer_deltas"][:3]
        listed = {c["TensorName"] for c in rep["tensor_changes"] if c["change"].startswith(f"compared only in {side}")}
        assert listed == only_new
        assert r.returncode == (1 if rep["regressed"] else 0)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("regress")
    runs = {"tb": ("compare", "transformer_block"), "tb2": ("compare", "transformer_block"),
            "rs": ("compare", "resnet_small"), "tune": ("tune", "resnet_small"),
            "mc": ("memcheck", "resnet_small")}
    for name, (cmd, model) in runs.items():
        r = cli_no_warnings(cmd, model, *([] if cmd == "compare" else ["--no-html"]), "--out", tmp / name)
        assert r.returncode in (0, 1), r.stderr
    ds = _npz_folder(tmp / "inputs", 3)
    r = cli_no_warnings("compare", "transformer_block", "--inputs", ds, "--out", tmp / "ds")
    assert r.returncode == 0, r.stderr
    return tmp


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_same_model_still_works(folders):
    r = cli_no_warnings("regress", folders / "tb", folders / "tb2", "--no-html", "--out", folders / "r-same")
    assert r.returncode == 0 and "NO REGRESSION" in r.stdout, r.stdout + r.stderr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_refuses_different_models_unless_allowed(folders):
    r = cli_no_warnings("regress", folders / "rs", folders / "tb", "--no-html", "--out", folders / "r-diff")
    assert r.returncode == 2
    line = refusal_line(r)
    assert "different models" in line and "--allow-different-models" in line
    assert str(folders / "rs") in line and str(folders / "tb") in line
    assert not (folders / "r-diff").exists()
    ok = cli_no_warnings("regress", folders / "rs", folders / "tb", "--allow-different-models", "--no-html",
             "--out", folders / "r-diff2")
    assert ok.returncode in (0, 1), ok.stderr
    assert ok.stdout.splitlines()[0].startswith("WARNING: DIFFERENT MODELS")
    rep = json.loads((folders / "r-diff2" / "regress.json").read_text())
    assert rep["warnings"] and "DIFFERENT MODELS" in rep["warnings"][0]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("other,what", [("tune", "tune"), ("mc", "memcheck")])
def test_regress_refuses_folders_of_other_commands(folders, other, what):
    for a, b in ((folders / "tb", folders / other), (folders / other, folders / "tb")):
        r = cli_no_warnings("regress", a, b, "--no-html", "--out", folders / f"r-{other}")
        assert r.returncode == 2
        line = refusal_line(r)
        assert f"'{folders / other}'" in line and what in line
        assert not (folders / f"r-{other}").exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_refuses_dataset_against_single_input(folders):
    for a, b in ((folders / "ds", folders / "tb"), (folders / "tb", folders / "ds")):
        r = cli_no_warnings("regress", a, b, "--no-html", "--out", folders / "r-ds")
        assert r.returncode == 2
        line = refusal_line(r)
        assert f"'{folders / 'ds'}' is a dataset run" in line and str(folders / "tb") in line


def compare_run(tmp: Path, name: str, cfg: dict) -> Path:
    from toolkit import api

    api.diagnose_command(str(C08 / "model.onnx"), Config.from_dict(cfg), inputs=str(C08 / "inputs.npz"),
                         out=str(tmp / name), html=False)
    return tmp / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("regress")
    return {"base": compare_run(tmp, "base", KEEP), "same": compare_run(tmp, "same", KEEP),
            "fp16": compare_run(tmp, "fp16", NO_KEEP), "tmp": tmp}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_cli_regress_exit_codes_and_html(runs):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    tmp = runs["tmp"]

    def run(a, b, out):
        return subprocess.run([sys.executable, "-m", "toolkit", "regress", str(a), str(b), "--out", str(tmp / out)],
                              capture_output=True, text=True, env=env, timeout=300)

    bad = run(runs["base"], runs["fp16"], "r1")
    assert bad.returncode == 1 and "REGRESSION" in bad.stdout, bad.stdout + bad.stderr
    assert bad.stdout.index("changed config.keep_dtype") < bad.stdout.index("newly abnormal")
    html = (tmp / "r1" / "regress.html").read_text()
    assert "Environment changes" in html and "exp" in html
    assert json.loads((tmp / "r1" / "regress.json").read_text())["regressed"] is True
    ok = run(runs["base"], runs["same"], "r2")
    assert ok.returncode == 0 and "NO REGRESSION" in ok.stdout
