"""FP16-origin models (float16 tensors in the ONNX file) under every precision mode.

Checked per mode: kernel precision labels, plan storage dtypes, inserted Cast kernel counts, and the outputs
against an independent numpy emulation of the contract (GUIDE §3): FP32 kernels compute in FP32 from the
FP16 inputs and round only the declared float16 graph outputs; FP16 kernels read FP16, compute in FP32 and
round each kernel output once to FP16. Kernels run in high_precision implmode here (FP16 accumulation of
high_performance is tested in tests/test_contract_fp16.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from toolkit.config import Config
from toolkit.engine import Session

F16, F32 = "float16", "float32"
FP16_MODES = ("force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype")


def r16(a) -> np.ndarray:
    """Round to FP16 and back to float32 (round to nearest even)."""
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def make(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def issue_model():
    """The issue's model: x[4,64] f16 -> MatMul 'mm' (W f16) -> Softmax 'sm' -> ReduceSum 'rs' -> y[4,1] f16."""
    w = (np.random.default_rng(0).standard_normal((64, 64)) * 0.3).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Softmax", ["m"], ["s"], name="sm", axis=-1),
             helper.make_node("ReduceSum", ["s", "axes"], ["y"], name="rs", keepdims=1)]
    return make(nodes, [("x", TP.FLOAT16, [4, 64])], [("y", TP.FLOAT16, [4, 1])],
                {"W": w, "axes": np.array([1], np.int64)}), w


def mixed_model():
    """x f16 -> Cast(float) 'cx' -> MatMul 'mm' (W f32) -> y f32, and x -> Mul(x, x) 'sq' -> y16 f16."""
    w = (np.random.default_rng(1).standard_normal((64, 32)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["xf"], name="cx", to=TP.FLOAT),
             helper.make_node("MatMul", ["xf", "W"], ["y"], name="mm"),
             helper.make_node("Mul", ["x", "x"], ["y16"], name="sq")]
    return make(nodes, [("x", TP.FLOAT16, [4, 64])], [("y", TP.FLOAT, [4, 32]), ("y16", TP.FLOAT16, [4, 64])],
                {"W": w}), w


def conv_model():
    """x[1,3,8,8] f16 -> Conv 'conv' (W[4,3,3,3], B[4] f16, pads 1) -> Relu 'relu' -> y f16."""
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.4).astype(np.float16)
    b = (rng.standard_normal(4) * 0.1).astype(np.float16)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return make(nodes, [("x", TP.FLOAT16, [1, 3, 8, 8])], [("y", TP.FLOAT16, [1, 4, 8, 8])], {"W": w, "B": b}), w, b


def storage_model():
    """y = (x + 1024) - 1024, all float16: one FP16 rounding of x + 1024 keeps only integers."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Sub", ["a", "c"], ["y"], name="sub")]
    return make(nodes, [("x", TP.FLOAT16, [1, 8])], [("y", TP.FLOAT16, [1, 8])],
                {"c": np.array(1024.0, np.float16)})


def session(model, mode, **cfg):
    return Session(model, Config(precision_mode=mode, op_select_implmode="high_precision", **cfg))


def labels(plan) -> dict[str, str]:
    """{original node name: precision of the kernel running it}."""
    return {n: k.precision for k in plan.kernels for n in k.nodes}


def casts(plan) -> list[str]:
    return sorted(k.outputs[0] for k in plan.kernels if k.fusion == "cast")


def dtypes(plan, names) -> dict[str, str]:
    return {n: plan.tensors[n].dtype for n in names}


def assert_ulp(got, want, maxulp=1):
    """float16 results within ``maxulp`` FP16 ulps (FP32 summation order may move one rounding)."""
    np.testing.assert_array_max_ulp(np.asarray(got, np.float16), np.asarray(want, np.float16), maxulp=maxulp)


def x_issue():
    return np.random.default_rng(3).standard_normal((4, 64)).astype(np.float16)


def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ----------------------------------------------------------------------------- the issue's model


# ----------------------------------------------------------------------------- FP16 input, FP32 subgraph


# ----------------------------------------------------------------------------- Conv

def conv_ref(x, w, b):
    """NCHW convolution, stride 1, pads 1, in float64 (independent of onnxruntime)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # [1, C, H, W, 3, 3]
    return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64)) + b.astype(np.float64)[None, :, None, None]


# ----------------------------------------------------------------------------- FP32 storage matters

X_STORAGE = np.array([[0.1, 0.3, 0.7, 0.55, 0.05, 0.9, 0.2, 0.45]], np.float16)


def fp16_storage_result(x):
    return r16(r16(x.astype(np.float32) + 1024) - 1024)


def fp32_storage_result(x):
    """(x + 1024) - 1024 in float32 arithmetic, rounded once to the declared float16."""
    return r16((x.astype(np.float32) + np.float32(1024)) - np.float32(1024))


# ----------------------------------------------------------------------------- reporting


@pytest.mark.parametrize("mode,line", [
    ("force_fp32", "0 FP16, 3 FP32 kernels, 1 Casts"),
    ("must_keep_origin_dtype", "3 FP16, 0 FP32 kernels, 0 Casts"),
])
def test_cli_compile_summary(tmp_path, mode, line):
    path = tmp_path / "m.onnx"
    onnx.save(issue_model()[0], path)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compile", str(path), "--precision-mode", mode,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"precision ({mode}): {line}" in proc.stdout
    plan = json.loads((out / "plan.json").read_text())
    tensors = {t["name"]: t["dtype"] for t in plan["tensors"]}
    assert tensors["m"] == (F32 if mode == "force_fp32" else F16)


def test_result_rows_of_graph_inputs_name_their_storage_precision(tmp_path):
    """result.csv's graph-input rows say the precision the input is stored in: fp16 for a float16 input (was a
    hard-coded fp32), fp32 for a float32 one."""
    import csv

    f32 = make([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", TP.FLOAT, [4, 8])],
               [("y", TP.FLOAT, [4, 8])], {})
    for kind, model in (("fp16", issue_model()[0]), ("fp32", f32)):
        path = tmp_path / f"{kind}.onnx"
        onnx.save(model, str(path))
        out = tmp_path / f"{kind}-out"
        proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(path), "--out", str(out)],
                              capture_output=True, text=True)
        assert proc.returncode in (0, 1), proc.stderr[-500:]
        rows = [r for r in csv.DictReader(open(out / "result.csv")) if r["OpType"] == "Input"]
        want = {i.name: ("fp16" if i.type.tensor_type.elem_type == TP.FLOAT16 else "fp32") for i in model.graph.input}
        assert rows and {r["TensorName"]: r["Precision"] for r in rows} == want


def _activation_model(kind: str, dtype=TP.FLOAT16) -> onnx.ModelProto:
    """y = act(x) in its decomposed ONNX form, every tensor and constant in ``dtype``."""
    np_t = helper.tensor_dtype_to_np_dtype(dtype)
    c = {"half": 0.5, "one": 1.0, "rsqrt2": 1.0 / np.sqrt(2.0), "three": 3.0, "six": 6.0, "zero": 0.0}
    inits = {k: np.array(v, np_t) for k, v in c.items()}
    nodes = {
        "Gelu": [helper.make_node("Mul", ["x", "rsqrt2"], ["s"], name="scale"),
                 helper.make_node("Erf", ["s"], ["e"], name="erf"),
                 helper.make_node("Add", ["e", "one"], ["p"], name="plus1"),
                 helper.make_node("Mul", ["x", "p"], ["m"], name="mul_x"),
                 helper.make_node("Mul", ["m", "half"], ["y"], name="half")],
        "Swish": [helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
                  helper.make_node("Mul", ["x", "s"], ["y"], name="mul")],
        "HardSwish": [helper.make_node("Add", ["x", "three"], ["a"], name="add3"),
                      helper.make_node("Clip", ["a", "zero", "six"], ["c"], name="clip"),
                      helper.make_node("Mul", ["x", "c"], ["m"], name="mul_x"),
                      helper.make_node("Div", ["m", "six"], ["y"], name="div6")],
    }[kind]
    return make(nodes, [("x", dtype, [4, 64])], [("y", dtype, [4, 64])], inits)


#: the functions on the model's own constants (1/sqrt(2) as the FP16 model stores it)
_ACT_REF = {"Gelu": lambda x: 0.5 * x * (1.0 + np.vectorize(__import__("math").erf)(
                x * float(np.float16(1.0 / np.sqrt(2.0))))),
            "Swish": lambda x: x / (1.0 + np.exp(-x)),
            "HardSwish": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0}


