"""The NPU runtime (toolkit/runtime/npu.py) checks the arena against this machine's memory before allocating it:
a model whose declared sizes cannot fit is a one-line ModelError, and a small model still runs."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.engine import compile_model
from toolkit.runtime.host_memory import host_memory_bytes
from toolkit.core.errors import ModelError
from toolkit.runtime.npu import NpuRuntime


def huge_model(elems: int) -> onnx.ModelProto:
    """y = x + ReduceSum(ConstantOfShape([elems])): the constant's size is only known at compile time."""
    shape = numpy_helper.from_array(np.array([elems], np.int64), "shp")
    nodes = [helper.make_node("ConstantOfShape", ["shp"], ["big"], name="cos"),
             helper.make_node("ReduceSum", ["big"], ["s"], name="rs", keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture()
def too_big() -> int:
    total = host_memory_bytes()
    if not total:
        pytest.skip("this machine does not report its memory size")
    return total // 4 + 1  # float32 elements: the constant alone is the machine's whole memory


def test_runtime_refuses_an_arena_larger_than_the_machine(too_big):
    plan = compile_model(huge_model(too_big)).plan
    assert plan.arena_bytes >= too_big * 4  # the plan really holds the constant
    with pytest.raises(ModelError, match=r"arena needs .* more than 80% of this machine's .*'big'"):
        NpuRuntime(compile_model(huge_model(too_big)))


def test_a_small_model_still_runs():
    y = NpuRuntime(compile_model(huge_model(8))).run({"x": np.ones((1, 4), np.float32)}).outputs["y"]
    np.testing.assert_allclose(y, np.ones((1, 4)) * 0 + 1)  # ConstantOfShape's default value is 0
