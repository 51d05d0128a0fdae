"""Fault kind (round 8): a kernel that passes FP16-rounded data on without amplifying it (Relu, Abs, Neg,
Transpose, Reshape, ...) must keep the expected-noise allowance of the data it receives, FP16 kernel or not;
its own class' allowance (rtol 1e-3, no atol for data movement) flagged values near zero that only carried a
cube op's rounding, and the model FAILed on ordinary FP16 rounding. A kernel that amplifies the rounding (a
subtraction cancelling large values) must still be flagged.

Model: x[1,64] -> MatMul(W) -> Add(b) -> OP -> y, with a Sigmoid branch on the Add so OP is a kernel of its own.
W has a block of large weights (outputs ~1e4, FP16 spacing 8) and a block of small ones (outputs ~0.01).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

RNG = np.random.default_rng(0)
W = np.zeros((64, 64), np.float32)
W[:32, :32] = np.abs(RNG.standard_normal((32, 32))) * 500
W[32:, 32:] = RNG.standard_normal((32, 32)) * 0.05
X = RNG.standard_normal((1, 64)).astype(np.float32)
X[0, :32] = np.abs(X[0, :32])


def _model(op: str) -> onnx.ModelProto:
    inits = [nh.from_array(W, "W"), nh.from_array(np.zeros(64, np.float32), "b")]
    tail = {"Relu": [h.make_node("Relu", ["add"], ["y"], name="op")],
            "Abs": [h.make_node("Abs", ["add"], ["y"], name="op")],
            "Neg": [h.make_node("Neg", ["add"], ["y"], name="op")],
            "Transpose": [h.make_node("Transpose", ["add"], ["y"], name="op", perm=[1, 0])],
            "Reshape": [h.make_node("Reshape", ["add", "shape"], ["y"], name="op")],
            # cancellation: y = add - (reference add), small values carrying the full rounding of large ones
            "SubCancel": [h.make_node("Sub", ["add", "ref"], ["y"], name="op")]}[op]
    if op == "Reshape":
        inits.append(nh.from_array(np.array([8, 8], np.int64), "shape"))
    if op == "SubCancel":
        inits.append(nh.from_array((X @ W + np.float32(0.5)).astype(np.float32), "ref"))
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"), h.make_node("Add", ["mm", "b"], ["add"], name="add"),
             *tail, h.make_node("Sigmoid", ["add"], ["z"], name="sig")]
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, [1, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, {"Transpose": [64, 1], "Reshape": [8, 8]}.get(op, [1, 64])),
                      h.make_tensor_value_info("z", T.FLOAT, [1, 64])],
                     inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _compare(tmp_path, op):
    path = tmp_path / f"{op}.onnx"
    onnx.save(_model(op), path)
    np.savez(tmp_path / "x.npz", x=X)
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(path), "--inputs", str(tmp_path / "x.npz"),
                           "--precision-mode", "force_fp16", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300)
    rows = pd.read_csv(tmp_path / "o" / "result.csv", keep_default_na=False).set_index("TensorName")
    return proc, rows


def _max_err(rows, t) -> float:
    return float(rows.loc[t, "MaxAbsoluteError"])


@pytest.mark.parametrize("op", ["Relu", "Abs", "Neg", "Transpose", "Reshape"])
def test_exact_ops_keep_the_allowance_of_the_noise_they_pass_on(tmp_path, op):
    proc, rows = _compare(tmp_path, op)
    assert str(rows.loc["add", "WithinExpectedNoise"]) == "True"  # the cube op's rounding, excused
    # the op passes it on unchanged: the same largest error (Relu: at most the same), computed from the rows
    assert _max_err(rows, "y") <= _max_err(rows, "add") + 1e-9
    assert str(rows.loc["y", "WithinExpectedNoise"]) == "True", rows.loc["y"].to_dict()
    assert str(rows.loc["y", "Abnormal"]) == "False"
    assert proc.returncode == 0 and proc.stdout.startswith("verdict: PASS"), proc.stdout + proc.stderr


def test_an_op_that_amplifies_the_rounding_is_still_flagged(tmp_path):
    """y = add - reference(add) + 0.5: |y| ~ 0.5 carries add's FP16 rounding (spacing 8 near 1e4), far beyond
    any relative allowance of y's own magnitude."""
    proc, rows = _compare(tmp_path, "SubCancel")
    ref = (X @ W).astype(np.float64)
    fp16_err = float(np.max(np.abs(ref.astype(np.float16).astype(np.float64) - ref)))
    assert fp16_err > 1.0  # the rounding of the large block, computed here
    assert _max_err(rows, "y") > 1.0
    assert str(rows.loc["y", "Abnormal"]) == "True"
    assert proc.returncode == 1
