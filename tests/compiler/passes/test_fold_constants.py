"""Constant folding (toolkit/compiler/passes/fold_constants.py): shape subgraphs, when the folder runs, skipping
it, a failing folder, and Constant values as onnxruntime makes them."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T
from onnx import helper as h

from tests.compiler.helpers import f32, kernels, rng
from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.engine import Session, simulate

FP32_CONFIG = Config(precision_mode="force_fp32")


def _model(nodes, inputs, outputs, inits=(), opset=17, ir_version=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model


def _vi(name, elem=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


def test_folder_failure_still_turns_constants_into_initializers(monkeypatch):
    import onnxscript.optimizer

    def boom(*args, **kwargs):
        raise RuntimeError("simulated folder failure")

    from toolkit.compiler.passes import fold_constants as fc

    monkeypatch.setattr(onnxscript.optimizer, "fold_constants", boom)
    monkeypatch.setattr(fc.const_eval, "fold", boom)  # both folders fail
    monkeypatch.setattr(fc, "has_foldable_nodes", lambda model: True)  # make the pass call the folder
    axes = numpy_helper.from_array(np.int64([-1]), "axes")
    m = _model([helper.make_node("Constant", [], ["ax"], value=axes),
                helper.make_node("Unsqueeze", ["x", "ax"], ["y"])], [_vi("x")], [_vi("y", shape=(2, 3, 1))])
    res = compile_model(m, FP32_CONFIG, input_shapes={"x": (2, 3)})
    assert "ax" in {i.name for i in res.model.graph.initializer}
    assert any("constant folder failed" in ln for p in res.passes for ln in p.log)
    np.testing.assert_array_equal(simulate(m, {"x": X}, FP32_CONFIG).outputs["y"], X[..., None])


V = h.make_tensor_value_info


SPARSE_FLAT = h.make_sparse_tensor(h.make_tensor("sv", T.FLOAT, [2], [5.0, 7.0]),
                                   h.make_tensor("si", T.INT64, [2], [1, 4]), [2, 3])
SPARSE_COO = h.make_sparse_tensor(h.make_tensor("sv", T.FLOAT, [2], [5.0, 7.0]),
                                  h.make_tensor("si", T.INT64, [2, 2], [0, 2, 1, 0]), [2, 3])
CONSTANTS = {
    "value": ({"value": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))}, T.FLOAT),
    "sparse_value_flat": ({"sparse_value": SPARSE_FLAT}, T.FLOAT),
    "sparse_value_coo": ({"sparse_value": SPARSE_COO}, T.FLOAT),
    "value_float": ({"value_float": 2.5}, T.FLOAT),
    "value_floats": ({"value_floats": [1.0, -2.0, 0.5]}, T.FLOAT),
    "value_int": ({"value_int": 7}, T.INT64),
    "value_ints": ({"value_ints": [1, -2, 3]}, T.INT64),
    "value_string": ({"value_string": "héllo"}, T.STRING),
    "value_strings": ({"value_strings": ["a", "bé", ""]}, T.STRING),
}


def test_constant_value_helper_matches_onnxruntime():
    """fold_constants.constant_value gives, for each attribute, the array onnxruntime's Constant produces."""
    from toolkit.compiler.passes.fold_constants import constant_value

    for name, (attrs, elem) in CONSTANTS.items():
        node = h.make_node("Constant", [], ["c"], **attrs)
        m = h.make_model(h.make_graph([node, h.make_node("Identity", ["c"], ["y"])], "g", [], [V("y", elem, None)]),
                         opset_imports=[h.make_opsetid("", 21)])
        m.ir_version = 10
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
        got = constant_value(node)
        assert got.shape == np.shape(want) and list(np.ravel(got)) == list(np.ravel(want)), name


# ----------------------------------------------------------------------------------- constant folding
def test_shape_subgraph_folded_once_shapes_known():
    nodes = [N("Shape", ["x"], ["shp"], "shape"), N("Gather", ["shp", "i0"], ["d0"], "gather", axis=0),
             N("Unsqueeze", ["d0", "ax0"], ["d0u"], "unsqueeze"),
             N("Concat", ["d0u", "minus1"], ["newshape"], "concat", axis=0),
             N("Reshape", ["x", "newshape"], ["r"], "reshape"), N("Relu", ["r"], ["y"], "relu")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    graph = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for n in (2, 5):
        x = f32(rng(n).standard_normal((n, 3, 4)))
        sess = Session(model, Config(precision_mode="force_fp32"), input_shapes={"x": (n, 3, 4)})
        assert [k.op_type for k in kernels(sess)] == ["Reshape", "Relu"]
        assert {"shp", "d0", "d0u", "newshape"} <= set(sess.plan.folded)
        assert "Shape" not in [nd.op_type for nd in sess.compiled.model.graph.node]
        out = sess.run({"x": x}).outputs["y"]
        np.testing.assert_array_equal(out, np.maximum(x.reshape(n, -1), 0))


@pytest.mark.parametrize("kind", ["all_constant_inputs", "constant_node_inputs", "shape_op", "subgraph"])
def test_folder_runs_whenever_something_is_computable(kind):
    """Kind: a node the folder can compute. Every way a node becomes computable at compile time (constant
    initializers, Constant-node outputs, a shape op, a subgraph holding one) keeps the folder on."""
    from toolkit.compiler.passes.fold_constants import has_foldable_nodes

    c = numpy_helper.from_array(np.ones(4, np.float32), "c")
    nodes = {"all_constant_inputs": [N("Neg", ["c"], ["nc"], "neg"), N("Add", ["x", "nc"], ["y"], "add")],
             "constant_node_inputs": [N("Constant", [], ["k"], "k", value=c), N("Neg", ["k"], ["nk"], "neg"),
                                      N("Add", ["x", "nk"], ["y"], "add")],
             "shape_op": [N("Shape", ["x"], ["s"], "shape"), N("Reshape", ["x", "s"], ["y"], "reshape")],
             "subgraph": [N("If", ["cond"], ["y"], "if",
                            then_branch=helper.make_graph([N("Identity", ["x"], ["t"], "t")], "t", [],
                                                          [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])]),
                            else_branch=helper.make_graph([N("Neg", ["x"], ["e"], "e")], "e", [],
                                                          [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])]))]}
    inputs = [("x", [4])] + ([("cond", [], TensorProto.BOOL)] if kind == "subgraph" else [])
    model = make_model(nodes[kind], inputs, ["y"], {"c": np.ones(4, np.float32)} if kind == "all_constant_inputs" else {})
    assert has_foldable_nodes(model)
    plain = make_model([N("Add", ["x", "c"], ["y"], "add")], [("x", [4])], ["y"], {"c": np.ones(4, np.float32)})
    assert not has_foldable_nodes(plain)


def test_skipping_the_folder_gives_the_plan_the_folder_gives(monkeypatch):
    """With nothing computable, skipping the folder must not change the plan (kernels, folded tensors, arena)."""
    from toolkit import samples
    from toolkit.compiler.passes import fold_constants as fc
    from toolkit.engine import compile_model
    from toolkit.ir.load import load_model

    for name in ("resnet_small", "transformer_block", "detector_head"):
        m = load_model(samples.sample_path(name))
        assert not fc.has_foldable_nodes(m)
        skipped = compile_model(m, Config()).plan
        monkeypatch.setattr(fc, "has_foldable_nodes", lambda model: True)
        folded = compile_model(m, Config()).plan
        monkeypatch.undo()
        assert [(k.name, k.op_type, k.precision, k.nodes) for k in skipped.kernels] == \
               [(k.name, k.op_type, k.precision, k.nodes) for k in folded.kernels]
        assert sorted(skipped.folded) == sorted(folded.folded) and skipped.arena_bytes == folded.arena_bytes
