"""OrtValue exchange (toolkit/runtime/ort_values.py): the dtype list covers every kind, sub-byte types packed."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.dtype_models import CPU_TYPES


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
    from toolkit.ort import ort_values

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
