"""Round 7, defect E: a folder (dataset) run and signoff judge layers with the same analysis as a single-input
compare (toolkit.diagnose.layer_analysis: layer table, single-kernel isolation, FP16 storage origins), so the
abnormal count, the roles and the first divergence of an input agree on every path:

- single-input compare (summary.json counts / first_divergence, result.csv Role);
- the folder run: inputs.csv (Abnormal, OverFlow, FirstDivergence, FirstDivergenceKind), each stored record's
  counts (origins, propagated), dataset.csv AbnormalInputs, and the worst-input section (summary.json);
- signoff's ``[layers] max_abnormal`` over the folder and over the single file.

Cases: FP16 storage rounding destroying an FP32-exact consumer (x*3+1000-1000, the tester's elt.onnx); an FP16
tie flipping an ArgMax (origin moved to the FP16 Add by fp16_input_origins); an FP16 overflow; a clean
force_fp32 run. What each case must show is derived with numpy in the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from tests.graphs import N, make_model

from toolkit.config import Config

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
FP16 = {"precision_mode": "force_fp16"}
FP32 = {"precision_mode": "force_fp32"}


def _save(model, path: Path, out_type=onnx.TensorProto.FLOAT, out_shape=(1, 64)) -> Path:
    name = model.graph.output[0].name
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info(name, out_type, list(out_shape)))
    model.ir_version = 8
    onnx.save(model, path)
    return path


def elt_model(path: Path) -> Path:
    """z = (x*3 + 1000) - 1000 on a 1x64 input (the tester's elt.onnx)."""
    nodes = [N("Mul", ["x", "a"], ["m"], "mul"), N("Add", ["m", "b"], ["s"], "add"), N("Sub", ["s", "b"], ["z"], "sub")]
    return _save(make_model(nodes, [("x", [1, 64])], ["z"], {"a": np.array([3.0], np.float32),
                                                             "b": np.array([1000.0], np.float32)}), path)


def argmax_model(path: Path) -> Path:
    """y = ArgMax(x + 1000, axis 1) on a 4x16 input."""
    nodes = [N("Add", ["x", "b"], ["s"], "add"), N("ArgMax", ["s"], ["y"], "argmax", axis=1, keepdims=0)]
    return _save(make_model(nodes, [("x", [4, 16])], [("y", onnx.TensorProto.INT64)],
                            {"b": np.array([1000.0], np.float32)}), path, onnx.TensorProto.INT64, (4,))


def overflow_model(path: Path) -> Path:
    """y = (x * 30000) * 1e-4 on a 1x64 input."""
    nodes = [N("Mul", ["x", "a"], ["m"], "mul"), N("Mul", ["m", "c"], ["y"], "scale")]
    return _save(make_model(nodes, [("x", [1, 64])], ["y"], {"a": np.array([30000.0], np.float32),
                                                             "c": np.array([1e-4], np.float32)}), path)


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def f16(v):
    return np.asarray(v, np.float32).astype(np.float16)


# ------------------------------------------------------------------------------------------------ helpers
def single(model: Path, npz: Path, out: Path, config: dict):
    from toolkit import api

    res = api.diagnose_command(str(model), Config.from_dict(config), inputs=str(npz), out=str(out), html=False)
    return res["diagnosis"]


def folder_run(model: Path, folder: Path, out: Path, config: dict) -> dict:
    from toolkit import api

    return api.diagnose_command(str(model), Config.from_dict(config), inputs=str(folder), out=str(out), html=False)


def signoff(model: Path, inputs: Path, out: Path, config: dict, tmp: Path):
    from toolkit import api

    policy = tmp / "pol.toml"
    policy.write_text("[layers]\nmax_abnormal = 0\n")
    res = api.signoff_command(str(model), str(policy), Config.from_dict(config), inputs=str(inputs), out=str(out),
                              html=False)
    return next(r for r in res["run"].results if r.name == "layers.max_abnormal")


def record_metas(out: Path) -> dict:
    metas = {}
    for f in sorted((out / "results").glob("*.npz")):
        with np.load(f) as z:
            m = json.loads(str(z["meta"]))
        metas[m["input"]] = m
    return metas


def abnormal_names(diag) -> list[str]:
    t = diag.table
    return t.loc[t["Abnormal"] | t["OverFlow"], "TensorName"].astype(str).tolist()


def check_agreement(tmp: Path, model: Path, inputs: dict[str, np.ndarray], config: dict) -> dict:
    """Run every path on ``inputs`` ({file name: x}) and assert they agree; returns the single diagnoses."""
    folder = tmp / "in"
    folder.mkdir()
    for name, x in inputs.items():
        np.savez(folder / name, x=x)
    singles = {name: single(model, folder / name, tmp / f"single-{name}", config) for name in inputs}
    ds = folder_run(model, folder, tmp / "dataset", config)
    rows = pd.read_csv(tmp / "dataset" / "inputs.csv", keep_default_na=False).set_index("Input")
    metas = record_metas(tmp / "dataset")
    for name, diag in singles.items():
        s = diag.summary
        fd = s["first_divergence"] or {}
        row = rows.loc[name]
        assert int(row["Abnormal"]) == s["counts"]["abnormal"], name
        assert int(row["OverFlow"]) == s["counts"]["overflow"], name
        assert row["FirstDivergence"] == fd.get("tensor", ""), name
        assert row["FirstDivergenceKind"] == fd.get("kind", ""), name
        counts = metas[name]["counts"]
        for k in ("compared", "abnormal", "overflow", "origins", "propagated"):
            assert counts[k] == s["counts"][k], (name, k)
        assert (metas[name]["first_divergence"] or {}).get("node", "") == fd.get("node", ""), name
    # the worst-input section is that input's own single diagnosis
    worst = ds["dataset"]["facts"]["worst_input"]
    wsum = ds["diagnosis"].summary
    assert wsum["counts"]["abnormal"] == singles[worst].summary["counts"]["abnormal"]
    assert (wsum["first_divergence"] or {}).get("node") == (singles[worst].summary["first_divergence"] or {}).get("node")
    assert int(rows.loc[worst, "Abnormal"]) == wsum["counts"]["abnormal"]
    # dataset.csv: a tensor is abnormal on as many inputs as single compares flag it on
    layers = pd.read_csv(tmp / "dataset" / "dataset.csv").set_index("TensorName")
    union = set()
    for name, diag in singles.items():
        union |= set(abnormal_names(diag))
    for t in layers.index:
        want = sum(t in abnormal_names(d) for d in singles.values())
        assert int(layers.loc[t, "AbnormalInputs"]) == want, t
    # signoff [layers]: over the folder, the tensors abnormal on any input; over one file, that file's
    so = signoff(model, folder, tmp / "so", config, tmp)
    assert sorted(so.evidence["tensors"]) == sorted(union)
    assert so.passed == (not union)
    first = next(iter(inputs))
    so1 = signoff(model, folder / first, tmp / "so1", config, tmp)
    assert so1.evidence["abnormal"] == singles[first].summary["counts"]["abnormal"]
    assert sorted(so1.evidence["tensors"]) == sorted(abnormal_names(singles[first]))
    return singles


def test_cli_reproducer(tmp_path):
    """The tester's reproducer (repro 6), through the CLI: same count and origin everywhere, signoff FAILs."""
    elt_model(tmp_path / "elt.onnx")
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64) + np.float32(0.0001)
    np.savez(tmp_path / "elt.npz", x=x)
    (tmp_path / "in").mkdir()
    np.savez(tmp_path / "in" / "a.npz", x=x)
    (tmp_path / "f16.toml").write_text('precision_mode = "force_fp16"\n')
    (tmp_path / "pol.toml").write_text("[layers]\nmax_abnormal = 1\n")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "toolkit", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, check=False, env=dict(os.environ, PYTHONWARNINGS="ignore"))

    base = ["elt.onnx", "--config", "f16.toml"]
    one, ds = cli("compare", *base, "--inputs", "elt.npz", "--out", "single"), cli("compare", *base, "--inputs", "in",
                                                                                    "--out", "dataset")
    assert one.returncode == ds.returncode == 1, one.stderr + ds.stderr  # output z abnormal: FAIL on both
    s = json.loads((tmp_path / "single" / "summary.json").read_text())
    row = pd.read_csv(tmp_path / "dataset" / "inputs.csv").iloc[0]
    w = json.loads((tmp_path / "dataset" / "summary.json").read_text())
    assert s["counts"]["abnormal"] == int(row["Abnormal"]) == w["counts"]["abnormal"] == 2
    assert s["first_divergence"]["tensor"] == row["FirstDivergence"] == w["first_divergence"]["tensor"] == "s"
    so = cli("signoff", "elt.onnx", "--policy", "pol.toml", "--inputs", "in", "--config", "f16.toml", "--out", "so",
             "--no-html")
    assert so.returncode == 1, so.stdout + so.stderr
    assert "2 abnormal tensor(s) (allowed 1): s, z" in so.stdout


