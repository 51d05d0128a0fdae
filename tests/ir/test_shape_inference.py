"""Fault kind: shape inference run without the large weights (toolkit.ir.shape_inference) must infer exactly
what onnx.shape_inference.infer_shapes infers on the whole model: every value_info and graph output type, for
every op. Checked against onnx itself on the ONNX backend node cases (their float inputs made initializers, so
that value-reading inference, Resize scales, Reshape shapes, Range bounds..., sees constants), the bundled
samples, synthetic models whose large weights feed shape-reading ops, and the PP-OCRv4 models (slow)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conformance.cases import feeds_of, node_cases
from toolkit.ir import shape_inference as si
from toolkit.samples import SAMPLES


def _types(model: onnx.ModelProto) -> tuple:
    g = model.graph
    vi = sorted((v.name, v.type.SerializeToString(deterministic=True)) for v in g.value_info)
    outs = [(o.name, o.type.SerializeToString(deterministic=True)) for o in g.output]
    return vi, outs


def _full(model, **kw):
    return onnx.shape_inference.infer_shapes(model, **kw)


def _assert_same(model: onnx.ModelProto, **kw) -> None:
    try:
        want = _types(_full(model, **kw))
    except Exception as exc:  # noqa: BLE001 - then the light inference must fail the same way
        with pytest.raises(type(exc)):
            si.infer_light(model, **kw)
        return
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    assert _types(si.infer_into(copy, **kw)) == want
    light = si.infer_light(model, **kw)
    assert _types(light)[1] == want[1]
    assert sorted(x for x in _types(light)[0]) == want[0]


def _initialized(case) -> onnx.ModelProto:
    """The case's model with every numeric tensor input turned into an initializer holding its test value."""
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    feeds = feeds_of(case)
    keep = []
    for i in m.graph.input:
        v = feeds.get(i.name)
        if isinstance(v, np.ndarray) and v.dtype.kind in "fiub" and i.name not in {t.name for t in m.graph.initializer}:
            m.graph.initializer.append(numpy_helper.from_array(v, i.name))
        else:
            keep.append(i)
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


def _big(case) -> bool:
    return any(isinstance(v, np.ndarray) and v.size > si.LIGHT_MIN_ELEMENTS for v in feeds_of(case).values())


@pytest.mark.parametrize("data_prop", [False, True])
def test_light_inference_equals_onnx_on_every_backend_node_case(data_prop):
    cases = node_cases()
    stripped = 0
    for case in cases:
        model = _initialized(case)
        stripped += si.light_copy(model) is not model
        try:
            _assert_same(model, strict_mode=False, data_prop=data_prop)
        except AssertionError as exc:
            raise AssertionError(f"{case.name}: {exc}") from None
    assert stripped >= 5, "too few cases exercise the weight stripping"  # measured: dozens


@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.parametrize("kw", [dict(strict_mode=False, data_prop=True), dict(data_prop=True),
                                dict(check_type=True, strict_mode=True, data_prop=True)])
def test_light_inference_equals_onnx_on_the_samples(name, kw):
    model = onnx.load(SAMPLES[name].path)
    assert si.light_copy(model) is not model  # the samples carry large weights
    _assert_same(model, **kw)


def _shape_readers(n: int, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """A model where a large float weight (n elements) feeds Conv and MatMul next to constants whose values
    shape inference reads: Reshape's shape, Resize's scales, Range's bounds, Expand's shape, Slice's starts."""
    rng = np.random.default_rng(0)
    np_t = helper.tensor_dtype_to_np_dtype(dtype)
    w = numpy_helper.from_array(rng.standard_normal((n // 9, 1, 3, 3)).astype(np_t), "w")
    inits = [w, numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array(0.0, np.float32), "start"),
             numpy_helper.from_array(np.array(float(n // 9), np.float32), "limit"),
             numpy_helper.from_array(np.array(1.0, np.float32), "delta"),
             numpy_helper.from_array(np.array([n // 9, 1], np.int64), "eshape"),
             numpy_helper.from_array(np.array([1], np.int64), "s0"),
             numpy_helper.from_array(np.array([3], np.int64), "s1"),
             numpy_helper.from_array(np.array([1], np.int64), "ax")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "scales"], ["r"], mode="nearest"),
             helper.make_node("Reshape", ["r", "shape"], ["flat"]),
             helper.make_node("Range", ["start", "limit", "delta"], ["rg"]),
             helper.make_node("Unsqueeze", ["rg", "ax"], ["rg2"]),
             helper.make_node("Expand", ["rg2", "eshape"], ["ex"]),
             helper.make_node("Shape", ["w"], ["ws"]),
             helper.make_node("Slice", ["ws", "s0", "s1"], ["wsl"])]
    x = helper.make_tensor_value_info("x", dtype, [1, 1, 6, 6])
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in ("flat", "ex", "wsl")]
    g = helper.make_graph(nodes, "readers", [x], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE])
@pytest.mark.parametrize("n", [9 * 64, 9 * 200])  # below and above LIGHT_MIN_ELEMENTS
def test_large_weights_next_to_value_reading_ops(dtype, n):
    model = _shape_readers(n, dtype)
    light = si.light_copy(model)
    left_out = {t.name for t in model.graph.initializer} - {t.name for t in light.graph.initializer}
    assert left_out == ({"w"} if n > si.LIGHT_MIN_ELEMENTS else set())
    for kw in (dict(strict_mode=True, data_prop=True), dict(strict_mode=False)):
        _assert_same(model, **kw)
    got = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in
           si.infer_into(model, strict_mode=True, data_prop=True).graph.output}
    assert got == {"flat": [1, (n // 9) * 12 * 12], "ex": [n // 9, 1], "wsl": [2]}


def test_subgraph_models_go_through_whole_and_the_model_is_not_changed():
    then = helper.make_graph([helper.make_node("Identity", ["w"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Neg", ["w"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    before = model.SerializeToString(deterministic=True)
    _assert_same(model, strict_mode=False, data_prop=True)
    si.infer_light(model)
    assert model.SerializeToString(deterministic=True) == before


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppocr_det", "ppocr_rec", "ppocr_cls"])
def test_light_inference_equals_onnx_on_ppocr(name):
    from toolkit import zoo
    from toolkit.compiler.passes.bind_shapes import bind_input_shapes
    from toolkit.inputs import realistic_inputs

    model = onnx.load(zoo.fetch(name))
    feeds = realistic_inputs(name)
    bind_input_shapes(model, {k: list(v.shape) for k, v in feeds.items()}, check=False)
    _assert_same(model, strict_mode=False, data_prop=True)
