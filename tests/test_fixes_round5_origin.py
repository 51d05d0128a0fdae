"""Round 5: where a divergence starts when FP16 *storage* is the cause, what the advice changes, the minimal
reproducer, and the noise allowance of FP32 kernels downstream of FP16 data.

Fault kinds covered (each over several shapes, fused and unfused plans):

1. Storage origin: an FP32 kernel (Softmax) fed by an FP16-stored tensor whose rounding destroys its result
   (logits offset by ~2e4: the FP16 step there is 16, larger than the logits' spread). The origin is the FP16
   producer, the advice keeps it in FP32 (never keep_dtype on the FP32 Softmax), and the advice makes the
   model PASS.
2. An FP32 origin kernel that is wrong on exact inputs (a planted compile fault): no keep_dtype advice.
3. Reproducer: the origin read FP16-stored inputs in the full plan (Mul x30000 after an FP16 MatMul, FP16
   overflow), the storage-origin case, and the plain case (origin reads the graph input).
4. An FP32 kernel downstream of FP16 data inherits its inputs' noise allowance (x30000 then /30000 in FP32
   after an FP16 MatMul): PASS; genuine faults downstream of FP16 data still flag.

Expected values come from onnxruntime (faultkinds.reference) and numpy, never from the toolkit's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.faultkinds import builders as fk
from toolkit.config import Config
from toolkit.diagnose import diagnose, prepare

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TIMEOUT_S = 300


# ------------------------------------------------------------------ helpers (independent of the toolkit)
def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def softmax_offset(rows=4, dim=64, offset=20000.0, seed=0):
    """x[rows,dim] -> MatMul 'proj' (W ~ N(0,1)*0.5) -> Add 'offset' (+offset) -> Softmax 'sm' -> p."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, dim)) * 0.5).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["logits"], name="proj"),
                helper.make_node("Add", ["logits", "off"], ["l2"], name="offset"),
                helper.make_node("Softmax", ["l2"], ["p"], name="sm", axis=-1)],
               [("x", [rows, dim])], [("p", [rows, dim])], {"W": w, "off": np.array(offset, np.float32)})
    x = fk.fp16_exact(rng.random((rows, dim), dtype=np.float32))
    return m, {"x": x}


def scale_chain(rows=4, dim=64, factor=30000.0, seed=0, relu=True):
    """x -> MatMul 'mm' -> Mul 'scale' (x factor) -> Div 'unscale' (/ factor) -> [Relu 'relu'] -> MatMul 'mm2' -> y."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, dim)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Mul", ["mm", "big"], ["scaled"], name="scale"),
             helper.make_node("Div", ["scaled", "big2"], ["unscaled"], name="unscale")]
    last = "unscaled"
    if relu:
        nodes.append(helper.make_node("Relu", ["unscaled"], ["r"], name="relu"))
        last = "r"
    nodes.append(helper.make_node("MatMul", [last, "W2"], ["y"], name="mm2"))
    m = _model(nodes, [("x", [rows, dim])], [("y", [rows, dim])],
               {"W": w, "big": np.array(factor, np.float32), "big2": np.array(factor, np.float32), "W2": w.T.copy()})
    x = fk.fp16_exact(rng.standard_normal((rows, dim)).astype(np.float32))
    return m, {"x": x}


def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def run_diag(tmp_path, model, feeds, stem="m", **cfg):
    tmp_path.mkdir(parents=True, exist_ok=True)
    mp, ip = tmp_path / f"{stem}.onnx", tmp_path / f"{stem}.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    return diagnose(prepare(str(mp), str(ip)), Config(**cfg))


def rows(diag):
    return diag.table.set_index("TensorName")


def npuscope(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"))


def check_metrics_consistent(table):
    """Abnormal => AbnormalMetrics non-empty; never Abnormal within the expected noise (the default lines it
    crossed stay listed); otherwise a listed line makes the tensor abnormal."""
    for _, r in table.iterrows():
        listed = list(r["AbnormalMetrics"]) if isinstance(r["AbnormalMetrics"], (list, tuple)) else []
        assert not r["Abnormal"] or listed, r["TensorName"]
        if r["WithinExpectedNoise"] is True:
            assert not r["Abnormal"], r["TensorName"]
        elif listed:
            assert r["Abnormal"], (r["TensorName"], listed)


# ------------------------------------------------------------------ 1. storage origin
STORAGE_CASES = [(4, 64, 20000.0, 2), (4, 64, 20000.0, 0), (8, 32, 30000.0, 2), (2, 128, -25000.0, 0)]


# ------------------------------------------------------------------ 3. the reproducer
def _cli_diag(folder: Path, model, feeds, *args):
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "model.onnx")
    np.savez(folder / "in.npz", **feeds)
    proc = npuscope("diagnose", "model.onnx", "--inputs", "in.npz", "--out", "r", *args, cwd=folder)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return folder / "r", json.loads((folder / "r" / "summary.json").read_text())


def _run_repro(report: Path):
    repro = report / "repro"
    proc = npuscope("diagnose", "model.onnx", "--inputs", "inputs.npz", "--config", "config.json", "--out",
                    report / "rr", cwd=repro)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return json.loads((report / "rr" / "summary.json").read_text())


@pytest.mark.parametrize("factor, args, cast", [
    (30000.0, ["--fusion-level", "0"], True),  # gray Mul follows its input: FP16 only if 'mm' enters as FP16
    (40000.0, ["--fusion-level", "0", "--precision-mode", "force_fp16"], False),  # FP16 anyway: no Cast needed
])
def test_repro_keeps_fp16_storage_of_the_origin_inputs(tmp_path, factor, args, cast):
    model, feeds = scale_chain(factor=factor)
    ref = fk.reference(model, feeds)
    assert np.abs(ref["scaled"]).max() > 65504 > np.abs(ref["mm"]).max()  # precondition: 'scale' overflows FP16
    report, summary = _cli_diag(tmp_path, model, feeds, *args)
    assert summary["verdict"] == "FAIL" and summary["first_divergence"]["node"] == "scale"
    ins = np.load(report / "repro" / "inputs.npz")
    (name,) = ins.files
    sub = onnx.load(report / "repro" / "model.onnx")
    if cast:  # 'mm' enters as FP16, as the full plan stores it
        assert ins[name].dtype == np.float16
        np.testing.assert_array_equal(ins[name], ref["mm"].astype(np.float16))
        assert [n.op_type for n in sub.graph.node] == ["Cast", "Mul"] and sub.graph.node[0].output[0] == "mm"
    else:
        assert name == "mm" and ins[name].dtype == np.float32
        np.testing.assert_array_equal(ins[name], ref["mm"])
        assert [n.op_type for n in sub.graph.node] == ["Mul"]
    again = _run_repro(report)
    assert again["verdict"] == "FAIL"
    assert again["first_divergence"]["node"] == "scale" and again["first_divergence"]["kind"] == "fp16_overflow"


def test_repro_of_a_storage_origin_keeps_the_consumer(tmp_path):
    model, feeds = softmax_offset()
    report, summary = _cli_diag(tmp_path, model, feeds)
    assert summary["first_divergence"]["node"] == "offset"
    sub = onnx.load(report / "repro" / "model.onnx")
    assert [n.name for n in sub.graph.node] == ["proj", "offset", "sm"]
    again = _run_repro(report)
    assert again["verdict"] == "FAIL" and again["first_divergence"]["node"] == "offset"


def test_repro_of_an_origin_reading_the_graph_input(tmp_path):
    """The plain case: the origin reads a graph input (FP32 as declared): no Cast is added."""
    rng = np.random.default_rng(3)
    model = _model([helper.make_node("Mul", ["x", "big"], ["scaled"], name="scale"),
                    helper.make_node("Relu", ["scaled"], ["y"], name="relu")],
                   [("x", [4, 16])], [("y", [4, 16])], {"big": np.array(5e4, np.float32)})
    feeds = {"x": fk.fp16_exact(rng.uniform(0.5, 3.0, (4, 16)).astype(np.float32))}
    assert np.abs(fk.reference(model, feeds)["scaled"]).max() > 65504
    report, summary = _cli_diag(tmp_path, model, feeds, "--precision-mode", "force_fp16")
    assert summary["first_divergence"]["node"] == "scale"
    ins = np.load(report / "repro" / "inputs.npz")
    assert ins.files == ["x"] and ins["x"].dtype == np.float32
    np.testing.assert_array_equal(ins["x"], feeds["x"])
    assert [n.op_type for n in onnx.load(report / "repro" / "model.onnx").graph.node] == ["Mul"]
    again = _run_repro(report)
    assert again["verdict"] == "FAIL" and again["first_divergence"]["node"] == "scale"


