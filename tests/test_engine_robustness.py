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


def test_in_memory_model_with_empty_node_names():
    """Nodes without names (as onnx's test generator makes them) must not collide in the kernel table."""
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])],
               [_vi("x")], [_vi("y")])
    np.testing.assert_array_equal(simulate(m, {"x": X}, FP32).outputs["y"], -np.maximum(X, 0))
    assert m.graph.node[0].name == ""  # the caller's model is not modified


def test_graph_output_computed_at_compile_time():
    """Shape of a static input, and a Constant output, are folded: no kernel writes them."""
    c = numpy_helper.from_array(np.float32([1, 2]), "c")
    m = _model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Constant", [], ["k"], value=c)],
               [_vi("x")], [_vi("s", TensorProto.INT64, (2,)), _vi("k", TensorProto.FLOAT, (2,))])
    out = simulate(m, {"x": X}, FP32).outputs
    np.testing.assert_array_equal(out["s"], [2, 3])
    np.testing.assert_array_equal(out["k"], [1, 2])


def test_sequence_inputs_and_outputs_stay_sequences():
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    out = helper.make_tensor_sequence_value_info("out", TensorProto.FLOAT, None)
    m = _model([helper.make_node("SequenceInsert", ["seq", "x"], ["out"])], [seq, _vi("x")], [out], opset=17)
    ragged = [np.ones((1, 3), np.float32), np.ones((4, 3), np.float32)]  # np.asarray would fail on this
    res = simulate(m, {"seq": ragged, "x": X}, FP32).outputs["out"]
    assert isinstance(res, list) and [a.shape for a in res] == [(1, 3), (4, 3), (2, 3)]
    same = [np.ones((2, 3), np.float32)] * 2  # np.asarray would silently stack this one
    res = simulate(m, {"seq": same, "x": X}, FP32).outputs["out"]
    assert isinstance(res, list) and len(res) == 3


def test_string_tensors_live_outside_the_arena():
    m = _model([helper.make_node("StringConcat", ["a", "b"], ["y"])],
               [_vi("a", TensorProto.STRING, (2,)), _vi("b", TensorProto.STRING, (2,))],
               [_vi("y", TensorProto.STRING, (2,))], opset=20)
    a, b = np.array(["x", "y"], dtype=object), np.array(["1", "2"], dtype=object)
    sess_out = simulate(m, {"a": a, "b": b}, FP32).outputs["y"]
    assert list(sess_out) == ["x1", "y2"]


def test_unused_initializer_listed_as_input_is_not_required():
    """IR 3 models list initializers as inputs (default values); an unused one must not become required."""
    w = numpy_helper.from_array(np.ones((1, 1), np.float32), "unused")
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x"), _vi("unused", shape=(1, 1))], [_vi("y")],
               inits=[w], opset=9, ir_version=3)
    np.testing.assert_array_equal(simulate(m, {"x": X}, FP32).outputs["y"], np.maximum(X, 0))


def test_dynamic_shape_tensors_run():
    """NonZero's output shape depends on data: it runs on the CPU (host memory) and the copy the NPU reads is
    a 'dynamic' device tensor."""
    m = _model([helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["y"])],
               [_vi("x")], [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    res = compile_model(m, FP32, input_shapes={"x": (2, 3)})
    assert (res.plan.tensors["nz"].storage, res.plan.tensors["nz::h2d"].storage) == ("host", "dynamic")
    np.testing.assert_array_equal(simulate(m, {"x": X}, FP32).outputs["y"], np.argwhere(X))


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


@pytest.mark.parametrize("case", ["broadcast", "matmul", "concat", "static"])
def test_shapes_the_graph_cannot_take_are_one_model_error(case):
    from toolkit.errors import ModelError

    m, shapes, node = _cannot_take(case)
    with pytest.raises(ModelError, match=f"at node '{node}'") as exc:
        compile_model(m, FP32, input_shapes=shapes)
    assert "\n" not in str(exc.value)
    assert ("model's shapes are inconsistent" in str(exc.value)) == (case == "static")
    feeds = {k: np.zeros(v, np.float32) for k, v in shapes.items()} or \
        {"a": np.zeros((1, 16), np.float32), "b": np.zeros((1, 32), np.float32)}
    with pytest.raises(ModelError, match=f"at node '{node}'"):
        simulate(m, feeds, FP32)
    # control: onnxruntime refuses the same shapes too (the refusal is the model's, not ours)
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail
    with pytest.raises(Fail):
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


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
