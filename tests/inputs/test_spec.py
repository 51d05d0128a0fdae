"""Input specs (toolkit/inputs/spec.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from toolkit.core.errors import ModelError
from toolkit.inputs import InputSpec, input_specs


def test_input_specs_skip_initializers_and_read_dims():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, None])
    x.type.tensor_type.shape.dim[2].Clear()  # an unnamed dynamic dim
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, [-1, "?"])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x, mask, w], [y],
                              [helper.make_tensor("w", TensorProto.FLOAT, [3], [1, 2, 3])])
    specs = input_specs(helper.make_model(graph))
    assert specs == [InputSpec("x", np.dtype("float32"), ("batch", 3, None)),
                     InputSpec("mask", np.dtype("bool"), (None, None))]
    assert not specs[0].is_static and specs[0].describe() == "x: float32[batch,3,?]"


def test_input_specs_refuse_non_tensor_inputs():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    graph = helper.make_graph([], "g", [seq], [seq])
    with pytest.raises(ModelError, match="'s' is a sequence_type"):
        input_specs(helper.make_model(graph))
