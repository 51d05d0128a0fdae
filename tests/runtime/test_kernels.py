"""The native-FP16 kernel path is only allowed for ops whose onnxruntime float16 kernel is bit-identical to the
contract (FP16 inputs, FP32 compute, one rounding): checked here over random FP16 bit patterns (NaN, inf,
subnormals included) against the Cast → FP32 op → Cast formulation, so an onnxruntime change that breaks
exactness fails this test instead of silently changing results."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

from toolkit.runtime.kernels import NATIVE_FP16_ARITH, NATIVE_FP16_MOVE

BINARY = {"Add", "Sub", "Mul", "Div"}


def _session(nodes, ins, out_type=T.FLOAT16, out="y"):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(i, T.FLOAT16, None) for i in ins],
                          [helper.make_tensor_value_info(out, out_type, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("op", sorted(NATIVE_FP16_ARITH | {"Relu"}))
def test_native_fp16_elementwise_is_bit_identical_to_fp32_compute(op):
    rng = np.random.default_rng(0)
    n = 1 << 18
    a = rng.integers(0, 1 << 16, n, dtype=np.uint16).view(np.float16)
    b = rng.integers(0, 1 << 16, n, dtype=np.uint16).view(np.float16)
    ins = ["a", "b"] if op in BINARY else ["a"]
    native = _session([helper.make_node(op, ins, ["y"])], ins)
    ref = _session([helper.make_node("Cast", [i], [i + "f"], to=T.FLOAT) for i in ins]
                   + [helper.make_node(op, [i + "f" for i in ins], ["yf"])], ins, T.FLOAT, "yf")
    feeds = {"a": a, "b": b} if op in BINARY else {"a": a}
    got = native.run(None, feeds)[0]
    # independent rounding: numpy's float32 -> float16 conversion (IEEE round to nearest even)
    want = ref.run(None, feeds)[0].astype(np.float16)
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{op}: {(~same).sum()} of {n} results differ from FP32-compute-then-round"


def test_data_movement_ops_are_listed_as_exact_only():
    # arithmetic that can overflow must not be in the saturation-safe list
    assert not (NATIVE_FP16_MOVE & NATIVE_FP16_ARITH)
    assert NATIVE_FP16_MOVE <= {"Relu", "Concat", "Transpose", "Reshape", "Slice", "Squeeze", "Unsqueeze",
                                "Flatten", "Identity", "Split", "MaxPool"}
