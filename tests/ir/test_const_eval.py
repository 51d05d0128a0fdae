"""toolkit.ort.const_eval: the computable part of a graph folded by one onnxruntime evaluation.

Every case checks the folded graph computes what the original computes (both run by onnxruntime, the
original unfolded) and what was folded away, for each kind of computable node: constant inputs, Shape/Size
(with start/end), chains that need a second round, and the kinds that must stay (random ops, outputs over the
size limit, inputs only known at run time)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.config.schema import Config
from toolkit.engine import compile_model
from toolkit.ort import const_eval

LIMIT = 1 << 22


def N(op, i, o, name, **kw):
    return helper.make_node(op, i, o, name=name, **kw)


def model_of(nodes, x_shape, inits=(), opset=17, out_shape=None):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(model, x):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def check_same(model, folded, x):
    np.testing.assert_array_equal(run(folded.model, x), run(model, x))


X = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)


def test_constant_inputs_are_folded_and_their_initializers_dropped():
    nodes = [N("Mul", ["a", "b"], ["ab"], "mul"), N("Neg", ["ab"], ["nab"], "neg"), N("Add", ["x", "nab"], ["y"], "add")]
    a, b = np.arange(4, dtype=np.float32), np.full(4, 3.0, np.float32)
    m = model_of(nodes, [2, 3, 4], [("a", a), ("b", b)])
    f = const_eval.fold(m, LIMIT)
    assert [n.op_type for n in f.model.graph.node] == ["Add"] and f.tensors == ["ab", "nab"]
    inits = {t.name: numpy_helper.to_array(t) for t in f.model.graph.initializer}
    assert set(inits) == {"nab"}
    np.testing.assert_array_equal(inits["nab"], -(a * b))
    check_same(m, f, X)


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-2, None), (0, -1), (-10, 10), (2, 1)])
def test_shape_with_start_and_end_and_size(start, end):
    kw = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    nodes = [N("Shape", ["x"], ["s"], "shape", **kw), N("Size", ["x"], ["n"], "size"),
             N("Cast", ["s"], ["sf"], "cast", to=TensorProto.FLOAT), N("ReduceSum", ["sf"], ["ssum"], "rs", keepdims=0),
             N("Cast", ["n"], ["nf"], "castn", to=TensorProto.FLOAT), N("Add", ["ssum", "nf"], ["k"], "addk"),
             N("Add", ["x", "k"], ["y"], "add")]
    m = model_of(nodes, [2, 3, 4])
    f = const_eval.fold(m, LIMIT)
    assert [n.op_type for n in f.model.graph.node] == ["Add"]
    dims = (2, 3, 4)
    want = float(sum(dims[slice(start, end)]) + 24)  # numpy slicing clamps as the Shape op does
    k = {t.name: numpy_helper.to_array(t) for t in f.model.graph.initializer}["k"]
    assert float(k) == want
    check_same(m, f, X)


def test_a_chain_that_needs_a_second_round():
    """Reshape to a computed shape, then Shape of the reshaped tensor: its shape is static only after round 1."""
    nodes = [N("Shape", ["x"], ["s"], "shape"), N("Gather", ["s", "i0"], ["d0"], "gather", axis=0),
             N("Unsqueeze", ["d0", "ax"], ["d0u"], "unsq"), N("Concat", ["d0u", "m1"], ["ns"], "concat", axis=0),
             N("Reshape", ["x", "ns"], ["r"], "reshape"),
             N("Shape", ["r"], ["s2"], "shape2"), N("Reshape", ["r", "s2"], ["r2"], "reshape2"),
             N("Relu", ["r2"], ["y"], "relu")]
    inits = [("i0", np.array(0, np.int64)), ("ax", np.array([0], np.int64)), ("m1", np.array([-1], np.int64))]
    m = model_of(nodes, [2, 3, 4], inits)
    f = const_eval.fold(m, LIMIT)
    assert "Shape" not in [n.op_type for n in f.model.graph.node]
    assert {"s", "s2", "ns"} <= set(f.tensors)
    check_same(m, f, X)


def test_what_must_stay():
    nodes = [N("RandomNormalLike", ["c"], ["rnd"], "rnd", dtype=TensorProto.FLOAT),  # random: never folded
             N("ConstantOfShape", ["big_shape"], ["big"], "big"),                     # over the limit
             N("ReduceSum", ["big"], ["bs"], "bsum", keepdims=0),
             N("Relu", ["x"], ["xr"], "relu"),                                        # runtime input
             N("Add", ["xr", "bs"], ["y0"], "add0"), N("Mul", ["y0", "rnd"], ["y"], "mul")]
    inits = [("c", np.ones((2, 3, 4), np.float32)), ("big_shape", np.array([LIMIT + 1], np.int64))]
    m = model_of(nodes, [2, 3, 4], inits)
    f = const_eval.fold(m, LIMIT)
    assert [n.op_type for n in f.model.graph.node] == [n.op_type for n in nodes]
    assert f.tensors == []


def test_the_compiler_uses_it_and_keeps_onnxscript_for_control_flow():
    nodes = [N("Shape", ["x"], ["s"], "shape"), N("Reshape", ["x", "s"], ["y"], "reshape")]
    cr = compile_model(model_of(nodes, [2, 3, 4]), Config(precision_mode="force_fp32"))
    log = next(p for p in cr.passes if p.name == "fold_constants").log
    assert "onnxruntime" in log[0] and "s" in cr.plan.folded
    then = helper.make_graph([N("Identity", ["x"], ["t"], "t")], "t", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3, 4])])
    other = helper.make_graph([N("Neg", ["x"], ["e"], "e")], "e", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3, 4])])
    cf = model_of([N("If", ["cond"], ["y"], "if", then_branch=then, else_branch=other)], [2, 3, 4],
                  [("cond", np.array(True))])
    assert const_eval.has_subgraphs(cf)
    cr = compile_model(cf, Config(precision_mode="force_fp32"))
    log = next(p for p in cr.passes if p.name == "fold_constants").log
    assert "onnxruntime" not in log[0]


def test_refusal_is_reported_for_the_fallback():
    """A computable node onnxruntime has no CPU kernel for (Tan on float64: valid ONNX, shapes infer) raises
    NotFoldable, which makes the pass fall back to the onnxscript folder; the plan still computes y."""
    nodes = [N("Tan", ["c"], ["cc"], "tan"), N("Cast", ["cc"], ["ccf"], "cast", to=TensorProto.FLOAT),
             N("Add", ["x", "ccf"], ["y"], "add")]
    c = np.array([0.1, 0.2, 0.3, 0.4], np.float64)
    m = model_of(nodes, [2, 3, 4], [("c", c)])
    with pytest.raises(const_eval.NotFoldable):
        const_eval.fold(m, LIMIT)
    from toolkit.runtime.npu import NpuRuntime

    cr = compile_model(m, Config(precision_mode="force_fp32"))
    y = NpuRuntime(cr).run({"x": X}).outputs["y"]
    np.testing.assert_allclose(y, X + np.tan(c).astype(np.float32), rtol=1e-6)
    log = next(p for p in cr.passes if p.name == "fold_constants").log
    assert "onnxruntime" not in log[0] and "cc" in cr.plan.folded
