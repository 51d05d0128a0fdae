"""Models whose tensors have every dtype onnxruntime's CPU provider outputs, and their onnxruntime results (not
a test module; shared by the engine, runtime, artifacts, reproducer, regress and CLI tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from toolkit.config.schema import Config
from toolkit.ort import ort_values

OPSET = 25
SHAPE = [2, 3]
FEED = np.linspace(0.1, 0.9, 6, dtype=np.float32).reshape(SHAPE)


def _graph_model(nodes, inputs, outputs) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=11)


def _cast_model(code: int, identity: bool) -> onnx.ModelProto:
    """x (float32) -> Cast(to=code) [-> Identity] -> y."""
    nodes = [helper.make_node("Cast", ["x"], ["c" if identity else "y"], to=code, name="cast")]
    if identity:
        nodes.append(helper.make_node("Identity", ["c"], ["y"], name="id"))
    return _graph_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                        [helper.make_tensor_value_info("y", code, SHAPE)])


def _const_model(code: int) -> onnx.ModelProto | None:
    """x -> Identity -> xo, and a Constant of type ``code`` as output y (for types no Cast produces)."""
    np_dt = helper.tensor_dtype_to_np_dtype(code)
    vals = [b"a", b"b", b"c", b"d", b"e", b"f"] if code == TensorProto.STRING else \
        np.array([0, 1, 0, 1, 1, 0], np.float32).astype(np_dt).tolist()
    try:
        value = helper.make_tensor("v", code, SHAPE, vals)
    except (TypeError, ValueError, OverflowError):
        return None
    nodes = [helper.make_node("Identity", ["x"], ["xo"], name="idx"),
             helper.make_node("Constant", [], ["y"], value=value, name="const")]
    return _graph_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                        [helper.make_tensor_value_info("xo", TensorProto.FLOAT, SHAPE),
                         helper.make_tensor_value_info("y", code, SHAPE)])


def _ort_runs(model: onnx.ModelProto):
    """onnxruntime's CPU provider (no graph optimisation) runs ``model``: its output y, else None."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return ort_values.run(sess, ["y"], {"x": FEED})[0]
    except Exception:  # noqa: BLE001 - this type is not supported by this chain
        return None


def _cpu_models() -> dict[str, onnx.ModelProto]:
    """{ONNX type name: the first model of Cast+Identity, Cast, Constant whose output y onnxruntime's CPU
    provider computes}: every element type it can output (complex and float6 have none in onnxruntime 1.32)."""
    out = {}
    for name, code in TensorProto.DataType.items():
        if code == TensorProto.UNDEFINED:
            continue
        for build in (lambda c: _cast_model(c, True), lambda c: _cast_model(c, False), _const_model):
            m = build(code)
            if m is not None and _ort_runs(m) is not None:
                out[name] = m
                break
    return out


CPU_MODELS = _cpu_models()
CPU_TYPES = sorted(CPU_MODELS)


def _save(model: onnx.ModelProto, folder: Path) -> Path:
    path = folder / "m.onnx"
    onnx.save(model, path)
    return path


def _planted(arr: np.ndarray) -> np.ndarray:
    """A copy of ``arr`` with element 0 changed to another value of its dtype (computed with numpy/ml_dtypes)."""
    out = np.array(arr, copy=True)
    flat = out.reshape(-1)
    if out.dtype.kind in "OUS":
        flat[0] = str(flat[0]) + "x"
    elif out.dtype == np.bool_:
        flat[0] = not flat[0]
    elif np.dtype(out.dtype).name.startswith(("int", "uint")):
        flat[0] = np.array(0 if int(flat[0].astype(np.int64)) != 0 else 1).astype(out.dtype)
    else:
        big = float(np.abs(out.astype(np.float64)).max()) * 4.0 or 4.0
        flat[0] = np.array(big).astype(out.dtype)
    return out


def _diagnose(path: Path, monkeypatch=None, plant=False):
    from toolkit import diagnose as dg

    if plant:
        real = dg._run_or_explain

        def planted(sess, prep):
            res = real(sess, prep)
            bad = _planted(res.outputs["y"])
            res.outputs["y"] = bad
            res.dumps["y"] = bad
            return res

        monkeypatch.setattr(dg, "_run_or_explain", planted)
    prep = dg.prepare(str(path))
    diag, extra = dg.diagnose(prep, Config())
    return diag, extra


def _reference_output(name: str) -> np.ndarray:
    return _ort_runs(CPU_MODELS[name])


def _expected_stored(arr: np.ndarray) -> np.ndarray:
    """What the file must hold, computed here: strings as <U, ml_dtypes floats as float32, ints as (u)int8."""
    if arr.dtype.kind == "O":
        return np.array([str(v) for v in arr.reshape(-1)]).reshape(arr.shape)
    if arr.dtype.type.__module__.startswith("ml_dtypes"):
        name = arr.dtype.name
        target = np.uint8 if name.startswith("uint") else np.int8 if name.startswith("int") else np.float32
        return arr.astype(target)
    return arr


def _run_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


def _bf16_input_model() -> onnx.ModelProto:
    """x (bfloat16) -> Identity -> y: an ml_dtypes model input."""
    return _graph_model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3])],
                        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3])])


def _compare_run(folder: Path) -> Path:
    from toolkit import api

    model = _cast_model(TensorProto.FLOAT, True)
    path = _save(model, folder)
    api.diagnose_command(str(path), Config(), out=str(folder / "run"), html=False)
    return folder / "run"


def _noise_row(name, within, crossed, abnormal=False):
    return {"TensorName": name, "OpType": "Mul", "Abnormal": abnormal, "OverFlow": False, "CompareFailReason": "",
            "WithinExpectedNoise": within, "AbnormalMetrics": crossed, "CosineSimilarity": 1.0,
            "RelativeEuclideanDistance": 0.0, "GoldenNaN": 0, "GoldenInf": 0}


def _sequence_model(path, ragged: bool):
    """s = SequenceConstruct(relu(x), x or x[0]) (a sequence graph output) next to r = relu(x)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu")]
    second = "x"
    if ragged:
        nodes.append(h.make_node("Gather", ["x", "zero"], ["x0"], name="row0", axis=0))
        second = "x0"
    nodes.append(h.make_node("SequenceConstruct", ["r", second], ["s"], name="sc"))
    seq = h.make_value_info("s", h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, None)))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [seq, h.make_tensor_value_info("r", T.FLOAT, [2, 3])],
                     [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
    return path
