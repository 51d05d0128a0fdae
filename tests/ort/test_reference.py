"""toolkit.ort.reference.ReferenceRunner on models onnxruntime itself refuses to load: a one-line ModelError
quoting onnxruntime's reason (exit 1), never onnxruntime's exception (exit 3)."""

from __future__ import annotations

import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from toolkit.core.errors import ModelError
from toolkit.ort.reference import ReferenceRunner


def _chain():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Sigmoid", ["a"], ["b"], name="sig"),
             helper.make_node("Neg", ["b"], ["y"], name="neg")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("tensor", ["a", "b"])
@pytest.mark.parametrize("elem", [TensorProto.INT64, TensorProto.BOOL, TensorProto.STRING, TensorProto.DOUBLE])
@pytest.mark.parametrize("expose", [True, False])
def test_a_value_info_type_the_op_contradicts_is_a_model_error(tensor, elem, expose):
    model = _chain()
    model.graph.value_info.append(helper.make_tensor_value_info(tensor, elem, [2, 3]))
    with pytest.raises(Exception) as ort_exc:  # independent: onnxruntime refuses the model as it is
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert "Type" in str(ort_exc.value)
    with pytest.raises(ModelError) as exc:
        ReferenceRunner(model, expose=expose)
    text = str(exc.value)
    assert "\n" not in text and "onnxruntime cannot load the model" in text and tensor in text
