"""The run command (toolkit/commands/run.py), in process: shapes that fail only at run time are one ModelError."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.config.schema import Config

FP32_CONFIG = Config(precision_mode="force_fp32")


def _model(nodes, inputs, outputs, inits=(), opset=17, ir_version=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model


def _vi(name, elem=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


def test_shapes_that_fail_only_at_run_time_are_one_model_error(tmp_path):
    """A Reshape to a fixed size: shape inference does not check the element count, the kernel fails at run
    time; run reports it as the model's (onnxruntime fails too), not as an internal error."""
    from toolkit import api
    from toolkit.core.errors import ModelError

    shape = numpy_helper.from_array(np.array([2, 8], np.int64), "s")
    m = _model([helper.make_node("Reshape", ["a", "s"], ["t"], name="rs"), helper.make_node("Relu", ["t"], ["y"])],
               [_vi("a", shape=(1, "n"))], [_vi("y", shape=(2, 8))], [shape])
    path = tmp_path / "rs.onnx"
    import onnx
    onnx.save(m, path)
    np.savez(tmp_path / "ok.npz", a=np.arange(16, dtype=np.float32).reshape(1, 16))
    res = api.run_command(str(path), FP32_CONFIG, inputs=str(tmp_path / "ok.npz"), out=str(tmp_path / "ok"))
    np.testing.assert_array_equal(res["result"].outputs["y"], np.arange(16, dtype=np.float32).reshape(2, 8))
    np.savez(tmp_path / "bad.npz", a=np.zeros((1, 12), np.float32))
    with pytest.raises(ModelError, match=r"cannot run inputs a\(1, 12\): onnxruntime fails on them too") as exc:
        api.run_command(str(path), FP32_CONFIG, inputs=str(tmp_path / "bad.npz"), out=str(tmp_path / "bad"))
    assert "\n" not in str(exc.value) and not (tmp_path / "bad").exists()
