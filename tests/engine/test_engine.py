"""The engine (toolkit/engine.py): fixes found by the ONNX conformance sweep (force_fp32, one test per failure
kind), tensors of every type crossing kernels and graph boundaries, and force_fp32 at fusion level 2 computing
what onnxruntime computes.

For every output of the equivalence tests: cosine similarity >= 0.99999 and max |npu - ort| <= 1e-4 * max
|ort| (non-float outputs must be equal). Models: the shared fault cases, the three built-in samples, and the
PP-OCRv4 zoo models (slow)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T
from onnx import helper as h

from tests.dtype_models import CPU_MODELS, CPU_TYPES, _diagnose, _planted, _save
from toolkit.compare.metrics import value_kind
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.engine import simulate

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


def test_in_memory_model_with_empty_node_names():
    """Nodes without names (as onnx's test generator makes them) must not collide in the kernel table."""
    m = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])],
               [_vi("x")], [_vi("y")])
    np.testing.assert_array_equal(simulate(m, {"x": X}, FP32_CONFIG).outputs["y"], -np.maximum(X, 0))
    assert m.graph.node[0].name == ""  # the caller's model is not modified


def test_graph_output_computed_at_compile_time():
    """Shape of a static input, and a Constant output, are folded: no kernel writes them."""
    c = numpy_helper.from_array(np.float32([1, 2]), "c")
    m = _model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Constant", [], ["k"], value=c)],
               [_vi("x")], [_vi("s", TensorProto.INT64, (2,)), _vi("k", TensorProto.FLOAT, (2,))])
    out = simulate(m, {"x": X}, FP32_CONFIG).outputs
    np.testing.assert_array_equal(out["s"], [2, 3])
    np.testing.assert_array_equal(out["k"], [1, 2])


def test_sequence_inputs_and_outputs_stay_sequences():
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    out = helper.make_tensor_sequence_value_info("out", TensorProto.FLOAT, None)
    m = _model([helper.make_node("SequenceInsert", ["seq", "x"], ["out"])], [seq, _vi("x")], [out], opset=17)
    ragged = [np.ones((1, 3), np.float32), np.ones((4, 3), np.float32)]  # np.asarray would fail on this
    res = simulate(m, {"seq": ragged, "x": X}, FP32_CONFIG).outputs["out"]
    assert isinstance(res, list) and [a.shape for a in res] == [(1, 3), (4, 3), (2, 3)]
    same = [np.ones((2, 3), np.float32)] * 2  # np.asarray would silently stack this one
    res = simulate(m, {"seq": same, "x": X}, FP32_CONFIG).outputs["out"]
    assert isinstance(res, list) and len(res) == 3


def test_string_tensors_live_outside_the_arena():
    m = _model([helper.make_node("StringConcat", ["a", "b"], ["y"])],
               [_vi("a", TensorProto.STRING, (2,)), _vi("b", TensorProto.STRING, (2,))],
               [_vi("y", TensorProto.STRING, (2,))], opset=20)
    a, b = np.array(["x", "y"], dtype=object), np.array(["1", "2"], dtype=object)
    sess_out = simulate(m, {"a": a, "b": b}, FP32_CONFIG).outputs["y"]
    assert list(sess_out) == ["x1", "y2"]


def test_unused_initializer_listed_as_input_is_not_required():
    """IR 3 models list initializers as inputs (default values); an unused one must not become required."""
    w = numpy_helper.from_array(np.ones((1, 1), np.float32), "unused")
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x"), _vi("unused", shape=(1, 1))], [_vi("y")],
               inits=[w], opset=9, ir_version=3)
    np.testing.assert_array_equal(simulate(m, {"x": X}, FP32_CONFIG).outputs["y"], np.maximum(X, 0))


def test_dynamic_shape_tensors_run():
    """NonZero's output shape depends on data: it runs on the CPU (host memory) and the copy the NPU reads is
    a 'dynamic' device tensor."""
    m = _model([helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["y"])],
               [_vi("x")], [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    res = compile_model(m, FP32_CONFIG, input_shapes={"x": (2, 3)})
    assert (res.plan.tensors["nz"].storage, res.plan.tensors["nz::h2d"].storage) == ("host", "dynamic")
    np.testing.assert_array_equal(simulate(m, {"x": X}, FP32_CONFIG).outputs["y"], np.argwhere(X))


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
    from toolkit.core.errors import ModelError

    m, shapes, node = _cannot_take(case)
    with pytest.raises(ModelError, match=f"at node '{node}'") as exc:
        compile_model(m, FP32_CONFIG, input_shapes=shapes)
    assert "\n" not in str(exc.value)
    assert ("model's shapes are inconsistent" in str(exc.value)) == (case == "static")
    feeds = {k: np.zeros(v, np.float32) for k, v in shapes.items()} or \
        {"a": np.zeros((1, 16), np.float32), "b": np.zeros((1, 32), np.float32)}
    with pytest.raises(ModelError, match=f"at node '{node}'"):
        simulate(m, feeds, FP32_CONFIG)
    # control: onnxruntime refuses the same shapes too (the refusal is the model's, not ours)
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail
    with pytest.raises(Fail):
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", CPU_TYPES)
def test_equal_outputs_of_every_cpu_dtype_pass(name, tmp_path):
    diag, extra = _diagnose(_save(CPU_MODELS[name], tmp_path))
    row = diag.table.set_index("TensorName").loc["y"]
    assert row["CompareFailReason"] == "", row["CompareFailReason"]
    assert diag.summary["verdict"] == "PASS", diag.summary["reasons"]
    golden = np.asarray(extra["golden"]["y"])
    if golden.dtype.kind in "OUS" or value_kind(golden.dtype) == "integer":
        assert row["ExactMatchRate"] == 1.0
    else:
        assert row["MaxAbsoluteError"] == 0.0 and row["CosineSimilarity"] == 1.0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", CPU_TYPES)
def test_a_planted_difference_in_every_cpu_dtype_fails(name, tmp_path, monkeypatch):
    diag, extra = _diagnose(_save(CPU_MODELS[name], tmp_path), monkeypatch, plant=True)
    row = diag.table.set_index("TensorName").loc["y"]
    assert diag.summary["verdict"] == "FAIL", diag.summary["reasons"]
    assert row["CompareFailReason"] == "" and row["Abnormal"]
    golden = np.asarray(extra["golden"]["y"])
    device = _planted(golden)
    if golden.dtype.kind in "OUS" or value_kind(golden.dtype) == "integer":
        assert row["ExactMatchRate"] == 5 / 6  # one of six elements differs
    else:
        g64, d64 = golden.astype(np.float32).astype(np.float64), device.astype(np.float32).astype(np.float64)
        both = np.isfinite(g64) & np.isfinite(d64)
        if both.all():
            assert row["MaxAbsoluteError"] == pytest.approx(np.abs(d64 - g64).max(), rel=1e-12)
        else:  # the planted value overflowed the format: the device NaN/inf where the golden is finite
            assert row["OverFlow"]


V = h.make_tensor_value_info
IR = {21: 10, 25: 12}


def write_model(tmp: Path, name: str, nodes, ins, outs, opset=21, inits=()) -> Path:
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, list(inits)), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = IR[opset]
    p = tmp / name
    onnx.save(m, p)
    return p


def ort_run(path: Path, feeds: dict) -> dict:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


#: (ONNX type, opset, values exactly representable in it)
SIGNED = [-2.0, -1.0, 0.0, 1.0, 1.0, 0.0]
TYPES = {
    "bfloat16": (T.BFLOAT16, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e4m3fn": (T.FLOAT8E4M3FN, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e4m3fnuz": (T.FLOAT8E4M3FNUZ, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e5m2": (T.FLOAT8E5M2, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e5m2fnuz": (T.FLOAT8E5M2FNUZ, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e8m0": (T.FLOAT8E8M0, 25, [0.5, 1, 2, 4, 8, 0.25]),
    "int4": (T.INT4, 21, [-8, -1, 0, 1, 2, 7]),
    "uint4": (T.UINT4, 21, [0, 1, 2, 3, 14, 15]),
    "int2": (T.INT2, 25, SIGNED),
    "uint2": (T.UINT2, 25, [0, 1, 2, 3, 0, 1]),
    "float16": (T.FLOAT16, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "double": (T.DOUBLE, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "int8": (T.INT8, 21, [-3, -1, 0, 1, 2, 100]),
    "uint8": (T.UINT8, 21, [0, 1, 2, 3, 200, 255]),
    "int16": (T.INT16, 21, [-300, -1, 0, 1, 2, 3000]),
    "uint16": (T.UINT16, 21, [0, 1, 2, 3, 400, 60000]),
    "int32": (T.INT32, 21, [-70000, -1, 0, 1, 2, 70000]),
    "uint32": (T.UINT32, 21, [0, 1, 2, 3, 400, 70000]),
    "int64": (T.INT64, 21, [-70000, -1, 0, 1, 2, 70000]),
    "uint64": (T.UINT64, 21, [0, 1, 2, 3, 400, 70000]),
    "bool": (T.BOOL, 21, [0, 1, 0, 1, 1, 0]),
}


def np_dtype(code):
    return np.dtype(h.tensor_dtype_to_np_dtype(code))


def run_npu(path: Path, feeds: dict):
    """(NPU RunResult with dumps, FP32 reference outputs) of the model at ``path`` (defaults: mixed precision)."""
    from toolkit.engine import Session
    from toolkit.ir.load import load_model
    from toolkit.ort.reference import ReferenceRunner

    m = load_model(path)
    sess = Session(m, Config(), input_shapes={k: v.shape for k, v in feeds.items()})
    return sess.run(feeds, dump=True), ReferenceRunner(m).run(feeds)


def as_float(a) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


@pytest.mark.parametrize("name", list(TYPES))
def test_intermediate_of_every_type_crosses_kernels(tmp_path, name):
    """x -> Cast(T) -> Cast(float): the T tensor is written by one kernel and read by the next."""
    code, opset, vals = TYPES[name]
    p = write_model(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["b"], to=code, name="c1"),
                                  h.make_node("Cast", ["b"], ["y"], to=T.FLOAT, name="c2")],
             [V("x", T.FLOAT, [6])], [V("y", T.FLOAT, [6])], opset)
    x = np.array(vals, np.float32)
    want = ort_run(p, {"x": x})["y"]
    res, ref = run_npu(p, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], want)
    np.testing.assert_array_equal(ref["y"], want)
    assert ref["b"].dtype == np_dtype(code)
    if code != T.FLOAT16:  # float16-origin tensors are stored in the kernel's precision (numerics contract)
        assert res.dumps["b"].dtype == np_dtype(code)
    np.testing.assert_array_equal(as_float(res.dumps["b"]), want)  # the stored T values themselves
    np.testing.assert_array_equal(as_float(ref["b"]), want)


@pytest.mark.parametrize("name", list(TYPES))
def test_graph_input_of_every_type(tmp_path, name):
    code, opset, vals = TYPES[name]
    p = write_model(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["f"], to=T.FLOAT, name="c"),
                                  h.make_node("Relu", ["f"], ["y"], name="r")],
             [V("x", code, [6])], [V("y", T.FLOAT, [6])], opset)
    x = np.array(vals, np.float32).astype(np_dtype(code))
    want = np.maximum(x.astype(np.float32), 0)
    res, ref = run_npu(p, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], want)
    np.testing.assert_array_equal(ref["y"], want)


@pytest.mark.parametrize("name", list(TYPES))
def test_graph_output_of_every_type(tmp_path, name):
    """x -> Relu -> Cast(T) = y; expected: onnxruntime's own Cast of y back to float (fetchable)."""
    code, opset, vals = TYPES[name]
    nodes = [h.make_node("Relu", ["x"], ["r"], name="r"), h.make_node("Cast", ["r"], ["y"], to=code, name="c1")]
    p = write_model(tmp_path, "m.onnx", nodes, [V("x", T.FLOAT, [6])], [V("y", code, [6])], opset)
    probe = write_model(tmp_path, "probe.onnx", nodes + [h.make_node("Cast", ["y"], ["yf"], to=T.FLOAT, name="back")],
                 [V("x", T.FLOAT, [6])], [V("yf", T.FLOAT, [6])], opset)
    x = np.array(vals, np.float32)
    want = ort_run(probe, {"x": x})["yf"]
    res, ref = run_npu(p, {"x": x})
    for got in (res.outputs["y"], ref["y"]):
        assert got.dtype == np_dtype(code) and got.shape == (6,)
        np.testing.assert_array_equal(as_float(got), want)


def test_string_tensor_crosses_kernels(tmp_path):
    p = write_model(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["s"], to=T.STRING, name="c1"),
                                  h.make_node("Cast", ["s"], ["y"], to=T.FLOAT, name="c2")],
             [V("x", T.FLOAT, [4])], [V("y", T.FLOAT, [4])])
    x = np.array([0, 1.5, -2, 3], np.float32)
    res, ref = run_npu(p, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], ort_run(p, {"x": x})["y"])
    np.testing.assert_array_equal(ref["y"], ort_run(p, {"x": x})["y"])
    assert list(res.dumps["s"]) == list(ort_run(
        write_model(tmp_path, "s.onnx", [h.make_node("Cast", ["x"], ["s"], to=T.STRING)], [V("x", T.FLOAT, [4])],
             [V("s", T.STRING, [4])]), {"x": x})["s"])


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


@pytest.mark.parametrize("name", list(CONSTANTS))
def test_every_constant_value_attribute_runs(tmp_path, name):
    """A Constant of each value attribute feeding an op that also reads the graph input; outputs equal
    onnxruntime's on the original model."""
    attrs, elem = CONSTANTS[name]
    if elem == T.STRING:  # Concat of [x] and c: strings through an op with a runtime input
        nodes = [h.make_node("Constant", [], ["c"], name="k", **attrs),
                 h.make_node("Reshape", ["c", "flat"], ["c1"], name="rs"),
                 h.make_node("Concat", ["x", "c1"], ["y"], axis=0, name="cat")]
        inits = [numpy_helper.from_array(np.array([-1], np.int64), "flat")]
        x = np.array(["x0", "x1"], dtype=object)
    else:
        nodes = [h.make_node("Constant", [], ["c"], name="k", **attrs), h.make_node("Add", ["x", "c"], ["y"], name="a")]
        inits = []
        x = (np.arange(6).reshape(2, 3) * 3 - 4).astype(np.float32 if elem == T.FLOAT else np.int64)
        if name in ("value_floats", "value_ints"):
            x = x[:, :3]
    y_shape = [2 + (3 if name == "value_strings" else 1)] if elem == T.STRING else list(x.shape)
    p = write_model(tmp_path, "m.onnx", nodes, [V("x", elem, list(x.shape))], [V("y", elem, y_shape)], 21, inits)
    want = ort_run(p, {"x": x})["y"]
    res, ref = run_npu(p, {"x": x})
    assert list(np.asarray(res.outputs["y"]).reshape(-1)) == list(np.asarray(want).reshape(-1))
    assert list(np.asarray(ref["y"]).reshape(-1)) == list(np.asarray(want).reshape(-1))


def feeds(kind: str) -> np.ndarray:
    x = (np.random.default_rng(1).standard_normal((4, 8)) * 3).astype(np.float32)
    if kind == "nan":
        x[:] = np.nan
    elif kind == "inf":
        x[:] = np.inf
    elif kind == "mixed":
        x[0, 0], x[1, 1], x[2, 2], x[3, 3] = np.nan, np.inf, -np.inf, 200
    return x


REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("NPUSCOPE_SHARED", REPO.parent / "shared")) / "cases" / "fp16"
CASES = sorted(p.parent.name for p in SHARED.glob("*/model.onnx")) if SHARED.is_dir() else []
COSINE_MIN = 0.99999
REL_MAX_ABS = 1e-4


def ort_outputs(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    from toolkit.ort.ort_env import session_options

    sess = ort.InferenceSession(model.SerializeToString(), session_options(optimize=False),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, sess.run(names, feeds)))


def assert_equivalent(model: onnx.ModelProto, feeds: dict, label: str) -> None:
    ref = ort_outputs(model, feeds)
    got = simulate(model, feeds, Config(precision_mode="force_fp32")).outputs
    for name, r in ref.items():
        g = np.asarray(got[name])
        assert g.shape == r.shape, f"{label}/{name}: shape {g.shape} vs onnxruntime {r.shape}"
        if not np.issubdtype(r.dtype, np.floating):
            np.testing.assert_array_equal(g, r, err_msg=f"{label}/{name}")
            continue
        x, y = g.astype(np.float64).ravel(), r.astype(np.float64).ravel()
        assert np.array_equal(np.isnan(x), np.isnan(y)), f"{label}/{name}: NaN positions differ"
        fin = np.isfinite(y)
        assert np.array_equal(x[~fin], y[~fin], equal_nan=True), f"{label}/{name}: inf positions differ"
        x, y = x[fin], y[fin]
        if y.size == 0:
            continue
        nx, ny = np.linalg.norm(x), np.linalg.norm(y)
        cos = 1.0 if nx == ny == 0 else float(x @ y / (nx * ny)) if nx and ny else 0.0
        err, scale = float(np.abs(x - y).max()), float(np.abs(y).max())
        assert cos >= COSINE_MIN, f"{label}/{name}: cosine {cos:.8f} < {COSINE_MIN}"
        assert err <= REL_MAX_ABS * scale, f"{label}/{name}: max abs err {err:.3g} > {REL_MAX_ABS} * {scale:.3g}"


@pytest.mark.skipif(not CASES, reason=f"shared cases not found at {SHARED}")
@pytest.mark.parametrize("case", CASES)
def test_force_fp32_equals_onnxruntime_on_shared_case(case):
    folder = SHARED / case
    model = onnx.load(str(folder / "model.onnx"))
    with np.load(folder / "inputs.npz") as npz:
        feeds = {k: npz[k] for k in npz.files}
    assert_equivalent(model, feeds, case)


@pytest.mark.parametrize("name", ["resnet_small", "transformer_block", "detector_head"])
def test_force_fp32_equals_onnxruntime_on_sample(name):
    from toolkit.samples import SAMPLES

    spec = SAMPLES[name]
    assert_equivalent(onnx.load(str(spec.path)), spec.make_inputs(), name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppocr_det", "ppocr_rec", "ppocr_cls"])
def test_force_fp32_equals_onnxruntime_on_ppocr(name):
    from toolkit import zoo
    from toolkit.inputs import realistic_inputs

    path = zoo.fetch(name)
    assert_equivalent(onnx.load(str(path)), realistic_inputs(name), name)
