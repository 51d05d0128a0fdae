"""In-place and view ops (toolkit/memory/aliases.py): every op type the aggressive policy runs in place
(INPLACE_OPS) or as a view (VIEW_OPS) gives the same bits when onnxruntime's input and output are bound to
one address as when they are separate, in FP32 and FP16."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.memory.aliases import INPLACE_OPS, VIEW_OPS
from toolkit.ort.ort_env import make_session

BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"}
POSITIVE = {"Sqrt", "Log", "Reciprocal", "Pow"}
EXTRA = {"Reshape": ("s", np.array([2, -1], np.int64)), "Squeeze": ("a", np.array([2], np.int64)),
         "Unsqueeze": ("a", np.array([1], np.int64))}


def _model(op, dt, shape, extra):
    inits, ins = [], ["x"]
    if op in BINARY:
        inits.append(extra)
        ins.append("b")
    elif op in EXTRA:
        name, val = EXTRA[op]
        inits.append(numpy_helper.from_array(val, name))
        ins.append(name)
    g = helper.make_graph([helper.make_node(op, ins, ["y"])], "g", [helper.make_tensor_value_info("x", dt, shape)],
                          [helper.make_tensor_value_info("y", dt, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("np_dt,dt", [(np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16)])
@pytest.mark.parametrize("op", sorted(INPLACE_OPS | VIEW_OPS))
def test_same_address_binding_is_exact(op, np_dt, dt):
    r = np.random.default_rng(0)
    shape = [2, 64, 1, 1031] if op == "Squeeze" else [2, 64, 1031]  # > 100k elements: threaded paths too
    x = r.standard_normal(shape).astype(np_dt)
    if op in POSITIVE:
        x = np.abs(x) + np_dt(0.5)
    b = numpy_helper.from_array((r.standard_normal([64, 1]) * (0.5 if op == "Pow" else 1)).astype(np_dt), "b")
    try:
        sess = make_session(_model(op, dt, shape, b).SerializeToString(), optimize="all")
    except Exception:  # no kernel for this dtype in onnxruntime: the Cast path runs it (not in place)
        pytest.skip(f"onnxruntime has no {np_dt.__name__} {op} kernel")
    want = sess.run(["y"], {"x": x})[0]
    buf = x.copy()
    io = sess.io_binding()
    io.bind_input("x", "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
    io.bind_output("y", "cpu", 0, buf.dtype, list(want.shape), buf.ctypes.data)
    sess.run_with_iobinding(io)
    np.testing.assert_array_equal(buf.reshape(want.shape), want)
