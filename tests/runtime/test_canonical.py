"""Kernels of identical layers share one onnxruntime session (toolkit.runtime.canonical, bound constants in
toolkit.runtime.kernels) while each layer still computes with its own weights; positional renaming never changes
what a model computes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.graphs import residual_model
from toolkit.config.schema import Config
from toolkit.engine import Session
from toolkit.ir.load import load_model
from toolkit.runtime.canonical import canonical_kernel, named_back


def _run(model: onnx.ModelProto, feeds: dict) -> list:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _chain(prefix: str, rng) -> tuple[onnx.ModelProto, dict]:
    """y = Softmax(Relu(x @ W + b) * s) with names under ``prefix`` and an output that is also a value read on."""
    w = numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), f"{prefix}W")
    b = numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), f"{prefix}b")
    s = numpy_helper.from_array(np.array(0.5, np.float32), f"{prefix}s")
    nodes = [helper.make_node("MatMul", [f"{prefix}x", f"{prefix}W"], [f"{prefix}mm"], name=f"{prefix}MatMul"),
             helper.make_node("Add", [f"{prefix}mm", f"{prefix}b"], [f"{prefix}add"], name=f"{prefix}Add"),
             helper.make_node("Relu", [f"{prefix}add"], [f"{prefix}r"], name=f"{prefix}Relu"),
             helper.make_node("Mul", [f"{prefix}r", f"{prefix}s"], [f"{prefix}m"], name=f"{prefix}Mul"),
             helper.make_node("Softmax", [f"{prefix}m"], [f"{prefix}y"], name=f"{prefix}Softmax", axis=-1)]
    g = helper.make_graph(nodes, f"{prefix}g", [helper.make_tensor_value_info(f"{prefix}x", T.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info(f"{prefix}y", T.FLOAT, None),
                           helper.make_tensor_value_info(f"{prefix}r", T.FLOAT, None)], [w, b, s])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = [(f"{prefix}x", f"{prefix}x")]
    fetches = [(f"{prefix}y", f"{prefix}y"), (f"{prefix}r", f"{prefix}r")]
    return m, feeds, fetches


@pytest.mark.parametrize("prefix", ["", "/layers.7/", "a'b\"c<d>", "x" * 300])
def test_renaming_keeps_what_the_model_computes(prefix):
    """Any names (quotes, markup, long): outputs equal onnxruntime's run of the model as it was, fed and read
    through the renamed feeds and fetches."""
    rng = np.random.default_rng(1)
    m, feeds, fetches = _chain(prefix, rng)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    want = dict(zip([o.name for o in m.graph.output], _run(m, {f"{prefix}x": x})))
    c, cfeeds, cfetches = canonical_kernel(onnx.ModelProto.FromString(m.SerializeToString()), feeds, fetches)
    assert [t for _, t in cfeeds] == [t for _, t in feeds] and [t for _, t in cfetches] == [t for _, t in fetches]
    got = dict(zip([o.name for o in c.graph.output], _run(c, {cfeeds[0][0]: x})))
    for (kname, tensor) in cfetches:
        np.testing.assert_array_equal(got[kname], want[tensor])


def test_models_that_differ_only_in_names_become_the_same_bytes():
    a = canonical_kernel(_chain("/layers.0/", np.random.default_rng(5))[0], [], [])[0]
    b = canonical_kernel(_chain("/layers.11/", np.random.default_rng(5))[0], [], [])[0]
    c = canonical_kernel(_chain("/layers.0/", np.random.default_rng(6))[0], [], [])[0]  # other weights
    assert a.SerializeToString() == b.SerializeToString() != c.SerializeToString()


def test_a_kernel_with_a_subgraph_is_left_as_it_is():
    then = helper.make_graph([helper.make_node("Identity", ["outer"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", T.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Neg", ["outer"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", T.FLOAT, None)])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")],
                          "g", [helper.make_tensor_value_info("c", T.BOOL, []),
                                helper.make_tensor_value_info("outer", T.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    before = m.SerializeToString()
    out, feeds, fetches = canonical_kernel(m, [("c", "c"), ("outer", "outer")], [("y", "y")])
    assert out.SerializeToString() == before and feeds == [("c", "c"), ("outer", "outer")]


def test_error_messages_name_the_original_nodes():
    msg = "Non-zero status code returned while running Gather node. Name:'n2' Status Message: idx=9 'n12'"
    assert named_back(msg, {"n2": "/emb/Gather", "n1": "x"}) == \
        "Non-zero status code returned while running Gather node. Name:'/emb/Gather' Status Message: idx=9 'n12'"
    assert named_back(msg, {}) == msg


@pytest.mark.parametrize("external", [True, False])
@pytest.mark.parametrize("precision_mode", ["force_fp16", "force_fp32"])
def test_identical_layers_share_a_session_and_keep_their_own_weights(tmp_path, external, precision_mode):
    """Six layers of the same shapes: the MatMul+Add(+Relu) kernels of every layer run in one session; each
    layer's output still equals numpy's computation with that layer's weights (FP16 kernels: FP16-rounded inputs
    and weights, FP32 accumulation, one rounding at the output: within one FP16 ulp of numpy's float32 matmul)."""
    layers, width, seq = 6, 16, 8
    path, inits = residual_model(tmp_path, np.random.default_rng(2), layers=layers, width=width, seq=seq)
    if not external:  # the weights inside the model file
        m = onnx.load(str(path))
        path = tmp_path / "inside.onnx"
        onnx.save(m, str(path))
    model = load_model(str(path))
    x = np.random.default_rng(3).standard_normal((1, seq, width)).astype(np.float32)
    sess = Session(model, Config(precision_mode=precision_mode, op_compiler_cache_mode="disable"),
                   input_shapes={"x": x.shape}, model_path=str(path))
    first = {}
    for ek in sess.runtime.kernels:
        if ek.spec.op_type.startswith("MatMul+Add"):
            first.setdefault(ek.spec.op_type, ek.session)
            assert ek.session is first[ek.spec.op_type], ek.spec.name
    assert len(first) == 2
    run = sess.runtime.run({"x": x}, dump=True)
    fp16 = precision_mode == "force_fp16"
    r = (lambda a: a.astype(np.float16).astype(np.float32)) if fp16 else (lambda a: a)
    for i in range(layers):
        # the layer's input as the device stored it, then its first matmul with the layer's own weights
        src = "x" if i == 0 else f"y{i - 1}"
        xin = np.asarray(run.dumps.get(src + "__cast_fp16", run.dumps.get(src, x))).astype(np.float32)
        want = np.maximum(r(xin) @ r(inits[f"W{i}"]) + r(inits[f"b{i}"]), 0)
        got = np.asarray(run.dumps[f"h{i}"]).astype(np.float32)
        tol = np.abs(want) * 2.0 ** -10 + 2.0 ** -24 if fp16 else np.abs(want) * 1e-5 + 1e-6
        assert np.all(np.abs(got - want) <= tol + 1e-6), (i, float(np.max(np.abs(got - want))))
