"""The NPU runtime (toolkit/runtime/npu.py) checks the arena against this machine's memory before allocating it:
a model whose declared sizes cannot fit is a one-line ModelError, and a small model still runs."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.core.errors import ModelError
from toolkit.engine import compile_model
from toolkit.runtime.host_memory import host_memory_bytes
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


@pytest.mark.parametrize("declared", [0, 5, 1000])
def test_a_declared_output_shape_the_ops_contradict_is_a_model_error(declared):
    """Kind: a graph output declared with a static shape its producer does not write (onnxruntime runs such a
    model: it checks declared output shapes only as a warning). The plan takes the declaration; the runtime
    finds the kernel's write differs and names the output, both shapes and the fix (exit 1, not 3)."""
    import onnxruntime as ort

    from toolkit import samples
    from toolkit.engine import Session

    model = samples.build_detector_head()
    feeds = samples.detector_head_inputs()
    out = next(o for o in model.graph.output if o.type.tensor_type.shape.dim)
    real = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        [out.name], feeds)[0].shape  # independent: what the model really writes
    assert real[0] != declared
    out.type.tensor_type.shape.dim[0].Clear()
    out.type.tensor_type.shape.dim[0].dim_value = declared
    with pytest.raises(ModelError) as exc:
        Session(model).run(feeds)
    text = str(exc.value)
    assert "\n" not in text and f"declares output '{out.name}' as [{declared}, " in text
    assert f"[{real[0]}, " in text and "fix or remove the declared shape" in text
