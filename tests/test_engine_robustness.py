"""Engine fixes found by the ONNX conformance sweep, one test per failure kind (force_fp32)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.compiler.pipeline import PASSES, _load_passes, compile_model
from toolkit.config import Config
from toolkit.engine import simulate

FP32 = Config(precision_mode="force_fp32")


def _model(nodes, inputs, outputs, inits=(), opset=17, ir_version=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model


def _vi(name, elem=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


# ------------------------------------------------------------------ shapes the graph cannot take (one kind)
def _vis(shapes):
    return [_vi(n, shape=s) for n, s in shapes]


def _cannot_take(case):
    """(model, input shapes, failing node): shapes that pass the per-input checks (names, ranks, static dims,
    shared symbols) but that the graph cannot take; before the fix shape inference silently left the node's
    output untyped, the compiler placed it as a host value and the kernel builder raised KeyError."""
    w = numpy_helper.from_array(np.ones((16, 4), np.float32), "w")
    relu = helper.make_node("Relu", ["t"], ["y"], name="relu")
    if case == "broadcast":  # two different symbols that must broadcast
        return _model([helper.make_node("Add", ["a", "b"], ["t"], name="add"), relu],
                      _vis([("a", (1, "n")), ("b", (1, "m"))]), [_vi("y", shape=(1, "n"))]), \
            {"a": (1, 16), "b": (1, 32)}, "add"
    if case == "matmul":
        return _model([helper.make_node("MatMul", ["a", "w"], ["t"], name="mm"), relu], _vis([("a", (1, "k"))]),
                      [_vi("y", shape=(1, 4))], [w]), {"a": (1, 8)}, "mm"
    if case == "concat":
        return _model([helper.make_node("Concat", ["a", "b"], ["t"], name="cat", axis=0), relu],
                      _vis([("a", (1, "n")), ("b", (1, "m"))]), [_vi("y", shape=(2, "n"))]), \
            {"a": (1, 16), "b": (1, 32)}, "cat"
    # the model's own declared shapes are inconsistent (no input_shape involved)
    return _model([helper.make_node("Add", ["a", "b"], ["t"], name="add"), relu], _vis([("a", (1, 16)), ("b", (1, 32))]),
                  [_vi("y", shape=(1, 16))]), {}, "add"


def test_shapes_that_fail_only_at_run_time_are_one_model_error(tmp_path):
    """A Reshape to a fixed size: shape inference does not check the element count, the kernel fails at run
    time; run reports it as the model's (onnxruntime fails too), not as an internal error."""
    from toolkit import api
    from toolkit.errors import ModelError

    shape = numpy_helper.from_array(np.array([2, 8], np.int64), "s")
    m = _model([helper.make_node("Reshape", ["a", "s"], ["t"], name="rs"), helper.make_node("Relu", ["t"], ["y"])],
               [_vi("a", shape=(1, "n"))], [_vi("y", shape=(2, 8))], [shape])
    path = tmp_path / "rs.onnx"
    import onnx
    onnx.save(m, path)
    np.savez(tmp_path / "ok.npz", a=np.arange(16, dtype=np.float32).reshape(1, 16))
    res = api.run_command(str(path), FP32, inputs=str(tmp_path / "ok.npz"), out=str(tmp_path / "ok"))
    np.testing.assert_array_equal(res["result"].outputs["y"], np.arange(16, dtype=np.float32).reshape(2, 8))
    np.savez(tmp_path / "bad.npz", a=np.zeros((1, 12), np.float32))
    with pytest.raises(ModelError, match=r"cannot run inputs a\(1, 12\): onnxruntime fails on them too") as exc:
        api.run_command(str(path), FP32, inputs=str(tmp_path / "bad.npz"), out=str(tmp_path / "bad"))
    assert "\n" not in str(exc.value) and not (tmp_path / "bad").exists()


def test_shapes_that_fail_only_at_run_time_are_one_model_error_in_diagnose(tmp_path):
    """The same kind through diagnose: a kernel failing on inputs the model cannot take is the model's error."""
    from toolkit import api
    from toolkit.errors import ModelError

    shape = numpy_helper.from_array(np.array([2, 8], np.int64), "s")
    m = _model([helper.make_node("Reshape", ["a", "s"], ["t"], name="rs"), helper.make_node("Relu", ["t"], ["y"])],
               [_vi("a", shape=(1, "n"))], [_vi("y", shape=(2, 8))], [shape])
    import onnx
    onnx.save(m, tmp_path / "rs.onnx")
    np.savez(tmp_path / "bad.npz", a=np.zeros((1, 12), np.float32))
    with pytest.raises(ModelError, match=r"cannot run inputs a\(1, 12\): onnxruntime fails on them too"):
        api.diagnose_command(str(tmp_path / "rs.onnx"), FP32, inputs=str(tmp_path / "bad.npz"),
                             out=str(tmp_path / "d"), html=False)
    assert not (tmp_path / "d").exists()
