"""Random ops (toolkit/compare/nondeterminism.py): the registry of onnx random ops and the tensors each taints
(Dropout only in training mode, ops inside subgraphs)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from toolkit.compare.nondeterminism import NONDETERMINISTIC, dependent_tensors, sources


def vi(name, shape, elem=T.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


# registry unit tests: every registered op and Dropout's modes, with no run
def _node_model(nodes, inits=(), opset: int = 17, extra_inputs=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [vi("x", [1, 4]), *extra_inputs], [vi("y", [1, 4])], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_registry_lists_the_onnx_random_ops():
    assert {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial",
            "Bernoulli", "Dropout"} <= set(NONDETERMINISTIC)


@pytest.mark.parametrize("op, inputs, attrs", [
    ("RandomUniform", [], {"shape": [1, 4]}), ("RandomNormal", [], {"shape": [1, 4]}),
    ("RandomUniformLike", ["x"], {}), ("RandomNormalLike", ["x"], {}),
    ("Bernoulli", ["x"], {}), ("Multinomial", ["x"], {"sample_size": 4})])
def test_every_random_op_taints_its_dependents(op, inputs, attrs):
    m = _node_model([helper.make_node(op, inputs, ["r"], name="src", **attrs),
                     helper.make_node("Cast", ["r"], ["rc"], name="cast", to=T.FLOAT),
                     helper.make_node("Add", ["x", "rc"], ["y"], name="add"),
                     helper.make_node("Relu", ["x"], ["free"], name="free")])
    dep = dependent_tensors(m)
    assert set(dep) == {"r", "rc", "y"} and {n.name for n in dep.values()} == {"src"}
    assert [n.name for n in sources(m)] == ["src"]


@pytest.mark.parametrize("mode, ratio, random", [(True, 0.5, True), (False, 0.5, False), (True, 0.0, False),
                                                 (None, 0.5, False)])
def test_dropout_is_random_only_in_training_mode(mode, ratio, random):
    inits = [numpy_helper.from_array(np.array(ratio, np.float32), "ratio")]
    ins = ["x", "ratio"]
    if mode is not None:
        inits.append(numpy_helper.from_array(np.array(mode), "training_mode"))
        ins.append("training_mode")
    m = _node_model([helper.make_node("Dropout", ins, ["y", "mask"], name="drop")], inits)
    assert set(dependent_tensors(m)) == ({"y", "mask"} if random else set())


def test_dropout_training_mode_fed_as_input_is_read_from_the_values():
    m = _node_model([helper.make_node("Dropout", ["x", "", "tm"], ["y"], name="drop")],
                    extra_inputs=[vi("tm", [], T.BOOL)])
    assert set(dependent_tensors(m, {"tm": np.array(False)})) == set()
    assert set(dependent_tensors(m, {"tm": np.array(True)})) == {"y"}
    assert set(dependent_tensors(m)) == {"y"}  # unknown mode: counted as training


def test_random_op_inside_a_subgraph_taints_the_holder():
    then = helper.make_graph([helper.make_node("RandomUniformLike", ["x"], ["a"], name="inner")], "then", [],
                             [vi("a", [1, 4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["b"], name="same")], "else", [],
                              [vi("b", [1, 4])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    m = _node_model([helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other)],
                    [cond])
    assert set(dependent_tensors(m)) == {"y"}
