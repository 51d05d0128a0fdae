"""Dumps and the small model they come from, shared by the compare-dumps tests (in process: tests/commands, in a
subprocess: tests/cli): golden values computed with numpy, target values their FP16 rounding with one planted fault."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T

T0 = 1_700_000_000_000_000  # 16-digit µs timestamps, as on the device

PLANT = 1.5  # channel 2 of relu_2's output is scaled by this on the target

#: (node name, op type, output tensor), in execution order; names hold '/' and '.' on purpose
NODES = [("mm/0", "MatMul", "t_mm"), ("add.1", "Add", "t_add"), ("relu_2", "Relu", "t_relu"),
         ("mul_3", "Mul", "t_mul"), ("sm_4", "Softmax", "y")]

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

def save_checked_model(path: Path, nodes, inputs, outputs, inits=()) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path

def vi(name, shape, elem=T.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)

def ort_run(path: Path, feeds: dict) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))

def dump_model(path: Path) -> Path:
    """t = x @ w; u = Relu(t); y = u * 2 (node names = tensor names' producers)."""
    w = np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"], name="mm"),
             helper.make_node("Relu", ["t"], ["u"], name="relu"),
             helper.make_node("Mul", ["u", "two"], ["y"], name="mul")]
    return save_checked_model(path, nodes, [vi("x", [4, 8])], [vi("y", [4, 6])],
                [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(2.0), "two")])

def dump_sides(tmp_path: Path, model: Path, spoil: str, where: str) -> tuple[Path, Path]:
    """Golden (ONNX naming: node.index.timestamp.npy) from onnxruntime; target (an ``npuscope run --dump``
    folder: tensor.npy + index.json) = FP16 rounding of it, with the tensor ``where`` spoiled as ``spoil``
    says: "absent" (neither file nor index entry), "listed_missing" (in index.json, no file), "misshaped"
    (transposed), "truncated" (16 bytes cut)."""
    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    m = onnx.load(model)
    del m.graph.output[:]
    for t in ("t", "u", "y"):
        m.graph.output.append(onnx.ValueInfoProto(name=t))
    every = tmp_path / "every.onnx"
    onnx.save(m, every)
    vals = ort_run(every, {"x": x})
    g, t = tmp_path / "golden", tmp_path / "target"
    g.mkdir()
    t.mkdir()
    index = {}
    for i, (node, tensor) in enumerate((("mm", "t"), ("relu", "u"), ("mul", "y"))):
        np.save(g / f"{node}.0.{1_700_000_000_000_000 + i}.npy", vals[tensor])
        if tensor == where and spoil == "absent":
            continue
        index[f"{tensor}.npy"] = {"tensor": tensor, "kernel": node}
        if tensor == where and spoil == "listed_missing":
            continue
        arr = vals[tensor].astype(np.float16)
        if tensor == where and spoil == "misshaped":
            arr = arr.T.copy()
        np.save(t / f"{tensor}.npy", arr)
        if tensor == where and spoil == "truncated":
            f = t / f"{tensor}.npy"
            f.write_bytes(f.read_bytes()[:-16])
    (t / "index.json").write_text(json.dumps(index))
    return g, t
