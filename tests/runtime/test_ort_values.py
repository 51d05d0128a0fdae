"""OrtValue exchange (toolkit/runtime/ort_values.py): the dtype list covers every kind, sub-byte types packed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import TensorProto as T
from onnx import helper as h

from toolkit.runtime import ort_values

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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_dtype_list_covers_every_kind():
    """The probe found what onnxruntime 1.32 outputs: numeric, bool, string, bfloat16, float8, sub-byte ints."""
    assert {"FLOAT", "DOUBLE", "FLOAT16", "BOOL", "STRING", "INT64", "UINT8", "BFLOAT16", "FLOAT8E4M3FN",
            "FLOAT8E5M2", "FLOAT8E8M0", "INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1"} <= set(CPU_TYPES)


V = h.make_tensor_value_info


def np_dtype(code):
    return np.dtype(h.tensor_dtype_to_np_dtype(code))


def test_ortvalue_exchange_packs_sub_byte_types():
    """int4/uint4/int2 arrays survive the trip through onnxruntime's packed layout (checked by onnxruntime's own
    Cast of the packed tensor), odd counts included."""
    from toolkit.runtime import ort_values

    for code, vals in [(T.INT4, [-8, 7, -1, 0, 3]), (T.UINT4, [15, 0, 9]), (T.INT2, [-2, 1, -1]),
                       (T.UINT2, [3, 0, 2, 1, 3])]:
        g = h.make_graph([h.make_node("Cast", ["b"], ["y"], to=T.FLOAT)], "g", [V("b", code, [len(vals)])],
                         [V("y", T.FLOAT, [len(vals)])])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 25)])
        m.ir_version = 12
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        b = np.array(vals, np.float32).astype(np_dtype(code))
        (y,) = ort_values.run(s, ["y"], {"b": b})
        np.testing.assert_array_equal(y, np.array(vals, np.float32))
