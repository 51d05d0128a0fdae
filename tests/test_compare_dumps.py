"""``npuscope compare-dumps``: dumps written here in each naming convention, a Polygraphy RunResults JSON made
by polygraphy itself, a planted divergence, a fusion mapping, and missing / mis-shaped / truncated dumps.

The golden values are computed with numpy in this file; the target values are their FP16 rounding with one
planted fault (a channel scaled by 1.5 at 'relu_2') propagated downstream in numpy. Metric values are checked
against numpy formulas applied to the same arrays.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.dumps import compare_dumps
from toolkit.dumps.entry import DumpReadError, read_npy
from toolkit.dumps.names import choose_convention, parse_device, parse_onnx_golden
from toolkit.dumps.readers import SideSpec
from toolkit.errors import InputError, UsageError, UserError

TIMEOUT_S = 300
T0 = 1_700_000_000_000_000  # 16-digit µs timestamps, as on the device
PLANT = 1.5  # channel 2 of relu_2's output is scaled by this on the target
#: (node name, op type, output tensor), in execution order; names hold '/' and '.' on purpose
NODES = [("mm/0", "MatMul", "t_mm"), ("add.1", "Add", "t_add"), ("relu_2", "Relu", "t_relu"),
         ("mul_3", "Mul", "t_mul"), ("sm_4", "Softmax", "y")]

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
needs_polygraphy = pytest.mark.skipif(importlib.util.find_spec("polygraphy") is None, reason="polygraphy not installed")


# ------------------------------------------------------------------------------------------------ fixtures
def weights():
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((8, 6)) * 0.5).astype(np.float32)
    b = np.array([0.1, -0.2, 3.0, 0.3, -0.1, 0.2], np.float32)  # channel 2 stays positive through Relu
    s = np.full(6, 1.7, np.float32)
    return w, b, s


def feed() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)


def build_model(path: Path) -> Path:
    w, b, s = weights()
    nodes = [helper.make_node(op, ins, [out], name=name, **({"axis": -1} if op == "Softmax" else {}))
             for (name, op, out), ins in zip(NODES, [["x", "w"], ["t_mm", "b"], ["t_add"], ["t_relu", "s"], ["t_mul"]])]
    graph = helper.make_graph(nodes, "dumps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
                              [numpy_helper.from_array(a, n) for n, a in (("w", w), ("b", b), ("s", s))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def golden_values(x: np.ndarray) -> dict[str, np.ndarray]:
    """{tensor: float32 array} computed with numpy."""
    w, b, s = weights()
    mm = x @ w
    add = mm + b
    relu = np.maximum(add, 0)
    mul = relu * s
    return {"t_mm": mm, "t_add": add, "t_relu": relu, "t_mul": mul, "y": softmax(mul)}


def target_values(x: np.ndarray) -> dict[str, np.ndarray]:
    """FP16 results with the planted fault at relu_2, propagated downstream (numpy)."""
    g = golden_values(x)
    _, _, s = weights()
    relu = g["t_relu"].copy()
    relu[:, 2] *= PLANT
    mul = relu * s
    vals = {"t_mm": g["t_mm"], "t_add": g["t_add"], "t_relu": relu, "t_mul": mul, "y": softmax(mul)}
    return {k: v.astype(np.float16) for k, v in vals.items()}


def write_onnx_golden(folder: Path, values: dict) -> Path:
    """``{node}.{output_index}.{timestamp}.npy`` ('/' becomes '_' in file names; dots stay)."""
    folder.mkdir()
    for i, (name, _op, tensor) in enumerate(NODES):
        np.save(folder / f"{name.replace('/', '_')}.0.{T0 + 10 * i}.npy", values[tensor])
    return folder


def device_name(i: int, name: str, op: str, role: str = "output", index: int = 0) -> str:
    return f"{op}.{name.replace('/', '_')}.{i + 3}.1.{T0 + 100 + 10 * i}.{role}.{index}.npy"


def write_device(folder: Path, values: dict, skip=()) -> Path:
    """``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.output.0.npy`` plus one input dump per op."""
    folder.mkdir()
    for i, (name, op, tensor) in enumerate(NODES):
        if name in skip:
            continue
        np.save(folder / device_name(i, name, op), values[tensor])
        np.save(folder / device_name(i, name, op, "input", 0), np.zeros(3, np.float16))  # must be ignored
    return folder


def side(path, role, **kw) -> SideSpec:
    return SideSpec(str(path), role, **kw)


def npuscope(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"))


def row(df: pd.DataFrame, node: str) -> pd.Series:
    hit = df[df["NodeName"] == node]
    assert len(hit) == 1, f"{node}: {len(hit)} rows in\n{df[['NodeName', 'TensorName', 'CompareFailReason']]}"
    return hit.iloc[0]


def cosine(x, y) -> float:
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def red(x, y) -> float:
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    return float(np.sqrt(((x - y) ** 2).sum() / (y ** 2).sum()))


# ------------------------------------------------------------------------------------ Polygraphy and the CLI
def polygraphy_run(tmp_path: Path, model: Path, x: np.ndarray) -> Path:
    """Run polygraphy itself (onnxruntime, every tensor marked as an output) on ``x``; return the JSON path."""
    from polygraphy.json import save_json

    save_json([{"x": x}], str(tmp_path / "inputs.json"))
    exe = shutil.which("polygraphy") or str(Path(sys.executable).with_name("polygraphy"))
    proc = subprocess.run([exe, "run", str(model), "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs",
                           str(tmp_path / "inputs.json"), "--save-outputs", str(tmp_path / "pg.json")],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp_path / "pg.json"


@needs_polygraphy
def test_polygraphy_json_on_either_side_through_the_cli(tmp_path):
    x = feed()
    model = build_model(tmp_path / "m.onnx")
    pg = polygraphy_run(tmp_path, model, x)
    gold, dev = golden_values(x), target_values(x)
    write_device(tmp_path / "device", dev)
    write_onnx_golden(tmp_path / "golden", gold)

    # golden = Polygraphy (onnxruntime), target = device dumps with the planted fault
    proc = npuscope("compare-dumps", pg, "device", "--model", model, "--out", "rep", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "first divergence: node 'relu_2'" in proc.stdout
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["verdict"] == "FAIL" and summary["first_divergence"]["node"] == "relu_2"
    assert summary["golden"]["format"] == "polygraphy" and summary["target"]["format"] == "device"
    df = pd.read_csv(tmp_path / "rep" / "result.csv")
    mm = df[df["NodeName"] == "mm/0"].iloc[0]
    assert mm["TensorName"] == "t_mm" and mm["GoldenDump"].endswith("[0]:t_mm")
    # polygraphy's onnxruntime golden equals the numpy golden to float32 rounding
    assert mm["MaxAbsoluteError"] == pytest.approx(np.abs(dev["t_mm"].astype(np.float64) - gold["t_mm"]).max(),
                                                   abs=1e-5)
    assert (tmp_path / "rep" / "index.html").is_file()
    assert "relu_2" in (tmp_path / "rep" / "index.html").read_text(encoding="utf-8")

    # golden = numpy dumps, target = Polygraphy: onnxruntime FP32 agrees with numpy → PASS, exit 0
    proc = npuscope("compare-dumps", "golden", pg, "--model", model, "--out", "rep2", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    df = pd.read_csv(tmp_path / "rep2" / "result.csv")
    assert len(df) == len(NODES) and (df["CompareFailReason"].isna()).all()
    assert (df["CosineSimilarity"] > 1 - 1e-6).all() and not (tmp_path / "rep2" / "index.html").exists()

    # the same JSON on both sides, runner chosen by prefix: identical
    proc = npuscope("compare-dumps", pg, pg, "--target-runner", "onnxrt", "--out", "rep3", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0 and "verdict: PASS" in proc.stdout, proc.stdout + proc.stderr

    proc = npuscope("compare-dumps", pg, "device", "--golden-runner", "trt", "--model", model, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "matches no runner" in proc.stderr
    proc = npuscope("compare-dumps", pg, "device", "--golden-iteration", "3", "--model", model, cwd=tmp_path)
    assert proc.returncode == 1 and "1 iteration(s)" in proc.stderr


def test_cli_bad_folder_is_one_line_exit_1(tmp_path):
    proc = npuscope("compare-dumps", "missing", "also_missing", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "GOLDEN 'missing' does not exist" in proc.stderr and not any(tmp_path.iterdir())


def test_two_npuscope_run_dump_folders(tmp_path):
    """`npuscope run --dump` folders: compared with numpy goldens through the model, and with each other."""
    x = feed()
    model = build_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=x)
    for name in ("d1", "d2"):
        proc = npuscope("run", model, "--inputs", "in.npz", "--dump", name, "--out", f"run_{name}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = npuscope("compare-dumps", "d1", "d2", "--out", "same", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0 and "verdict: PASS" in proc.stdout, proc.stdout + proc.stderr
    df = pd.read_csv(tmp_path / "same" / "result.csv")
    assert len(df) >= 1 and (df["MaxAbsoluteError"] == 0).all()

    write_onnx_golden(tmp_path / "golden", golden_values(x))
    proc = npuscope("compare-dumps", "golden", "d1", "--model", model, "--out", "rep", "--no-html", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    df = pd.read_csv(tmp_path / "rep" / "result.csv")
    index = json.loads((tmp_path / "d1" / "index.json").read_text())
    gold = golden_values(x)
    for fname, info in index.items():
        r = df[df["TensorName"] == info["tensor"]].iloc[0]
        dev = np.load(tmp_path / "d1" / fname)
        assert r["MaxAbsoluteError"] == pytest.approx(np.abs(dev.astype(np.float64) - gold[info["tensor"]]).max(),
                                                      rel=1e-9, abs=1e-12)
