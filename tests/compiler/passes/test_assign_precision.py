"""Precision assignment (toolkit/compiler/passes/assign_precision.py): precision modes and their Casts,
keep_dtype / implmode / mixlist options, and FP16-origin models (float16 tensors in the ONNX file) under
every precision mode.

For FP16-origin models, checked per mode: kernel precision labels, plan storage dtypes, inserted Cast kernel
counts, and the outputs against an independent numpy emulation of the contract (GUIDE §3): FP32 kernels
compute in FP32 from the FP16 inputs and round only the declared float16 graph outputs; FP16 kernels read
FP16, compute in FP32 and round each kernel output once to FP16. Kernels run in high_precision implmode there
(FP16 accumulation of high_performance is tested in tests/precision/test_contract.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as TP

from tests.compiler.helpers import ORDER, PRECISION_CASES, _precision_model, kernels, ort_outputs
from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.engine import Session
from toolkit.core.errors import ConfigError


def rm_sm_model(path):
    """x[4,4096] -> ReduceMean 'rm' (axes [1], keepdims) -> m; Softmax 'sm' (axis 1) -> s -> ReduceSum 'rs' (axes
    input [1], keepdims) -> y2; opset 13; outputs m, s, y2."""
    m = make_model([N("ReduceMean", ["x"], ["m"], "rm", axes=[1], keepdims=1),
                    N("Softmax", ["x"], ["s"], "sm", axis=1),
                    N("ReduceSum", ["s", "ax"], ["y2"], "rs", keepdims=1)],
                   [("x", [4, 4096])], ["m", "s", "y2"], {"ax": np.array([1], np.int64)}, opset=13)
    del m.graph.output[:]
    m.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                           for n, shape in (("m", [4, 1]), ("s", [4, 4096]), ("y2", [4, 1]))])
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("optypes,select,expected", [
    (["Softmax"], "high_precision", {"rm": "high_performance", "sm": "high_precision", "rs": "high_performance"}),
    ("Softmax", "high_precision", {"rm": "high_performance", "sm": "high_precision", "rs": "high_performance"}),
    (["ReduceMean", "ReduceSum"], "high_precision",
     {"rm": "high_precision", "sm": "high_performance", "rs": "high_precision"}),
    ("ReduceSum, Softmax", "high_precision", {"rm": "high_performance", "sm": "high_precision", "rs": "high_precision"}),
    ([], "high_precision", {"rm": "high_precision", "sm": "high_precision", "rs": "high_precision"}),
    ([], "high_performance", {"rm": "high_performance", "sm": "high_performance", "rs": "high_performance"}),
])
def test_implmode_applies_to_listed_op_types_only(tmp_path, optypes, select, expected):
    model = onnx.load(rm_sm_model(tmp_path / "rm_sm.onnx"))
    cfg = Config.from_dict({"precision_mode": "force_fp16", "op_select_implmode": select,
                            "optypelist_for_implmode": optypes})
    plan = compile_model(model, cfg).plan
    assert {k.name: k.implmode for k in plan.kernels if k.name in expected} == expected


def test_optypelist_with_default_select_is_a_warning(tmp_path):
    model = onnx.load(rm_sm_model(tmp_path / "rm_sm.onnx"))
    res = compile_model(model, Config.from_dict({"precision_mode": "force_fp16",
                                                 "optypelist_for_implmode": ["ReduceMean", "Gelu"]}))
    kinds = {(f.kind, f.subject) for f in res.findings}
    assert ("option_ignored", "optypelist_for_implmode") in kinds
    assert ("option_unmatched", "Gelu") in kinds and ("option_unmatched", "ReduceMean") not in kinds


def test_keep_dtype_node_folded_at_compile_time_is_a_warning():
    """'c' (Cast of a constant, output named as the node) is computed at compile time: no kernel runs it."""
    model = make_model([N("Cast", ["k"], ["c"], "c", to=TensorProto.FLOAT), N("Add", ["x", "c"], ["y"], "add")],
                       [("x", [2, 4])], ["y"], {"k": np.ones((2, 4), np.float64)})
    res = compile_model(model, Config.from_dict({"keep_dtype": ["c"]}))
    f = [f for f in res.findings if f.kind == "option_unmatched"]
    assert len(f) == 1 and f[0].subject == "c" and f[0].evidence["reason"] == "folded"
    assert "computed at compile time" in f[0].recommendation


def test_keep_dtype_folded_node_with_other_output_name_is_a_warning():
    model = make_model([N("Cast", ["k"], ["c_out"], "cast_node", to=TensorProto.FLOAT),
                        N("Add", ["x", "c_out"], ["y"], "add")], [("x", [2, 4])], ["y"],
                       {"k": np.ones((2, 4), np.float64)})
    res = compile_model(model, Config.from_dict({"keep_dtype": ["cast_node"]}))
    assert [f.evidence["reason"] for f in res.findings if f.kind == "option_unmatched"] == ["folded"]


F16, F32 = "float16", "float32"
FP16_MODES = ("force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype")


def r16(a) -> np.ndarray:
    """Round to FP16 and back to float32 (round to nearest even)."""
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def make(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def issue_model():
    """The issue's model: x[4,64] f16 -> MatMul 'mm' (W f16) -> Softmax 'sm' -> ReduceSum 'rs' -> y[4,1] f16."""
    w = (np.random.default_rng(0).standard_normal((64, 64)) * 0.3).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Softmax", ["m"], ["s"], name="sm", axis=-1),
             helper.make_node("ReduceSum", ["s", "axes"], ["y"], name="rs", keepdims=1)]
    return make(nodes, [("x", TP.FLOAT16, [4, 64])], [("y", TP.FLOAT16, [4, 1])],
                {"W": w, "axes": np.array([1], np.int64)}), w


def mixed_model():
    """x f16 -> Cast(float) 'cx' -> MatMul 'mm' (W f32) -> y f32, and x -> Mul(x, x) 'sq' -> y16 f16."""
    w = (np.random.default_rng(1).standard_normal((64, 32)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["xf"], name="cx", to=TP.FLOAT),
             helper.make_node("MatMul", ["xf", "W"], ["y"], name="mm"),
             helper.make_node("Mul", ["x", "x"], ["y16"], name="sq")]
    return make(nodes, [("x", TP.FLOAT16, [4, 64])], [("y", TP.FLOAT, [4, 32]), ("y16", TP.FLOAT16, [4, 64])],
                {"W": w}), w


def conv_model():
    """x[1,3,8,8] f16 -> Conv 'conv' (W[4,3,3,3], B[4] f16, pads 1) -> Relu 'relu' -> y f16."""
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.4).astype(np.float16)
    b = (rng.standard_normal(4) * 0.1).astype(np.float16)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return make(nodes, [("x", TP.FLOAT16, [1, 3, 8, 8])], [("y", TP.FLOAT16, [1, 4, 8, 8])], {"W": w, "B": b}), w, b


def storage_model():
    """y = (x + 1024) - 1024, all float16: one FP16 rounding of x + 1024 keeps only integers."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Sub", ["a", "c"], ["y"], name="sub")]
    return make(nodes, [("x", TP.FLOAT16, [1, 8])], [("y", TP.FLOAT16, [1, 8])],
                {"c": np.array(1024.0, np.float16)})


def session(model, mode, **cfg):
    return Session(model, Config(precision_mode=mode, op_select_implmode="high_precision", **cfg))


def labels(plan) -> dict[str, str]:
    """{original node name: precision of the kernel running it}."""
    return {n: k.precision for k in plan.kernels for n in k.nodes}


def casts(plan) -> list[str]:
    return sorted(k.outputs[0] for k in plan.kernels if k.fusion == "cast")


def dtypes(plan, names) -> dict[str, str]:
    return {n: plan.tensors[n].dtype for n in names}


def assert_ulp(got, want, maxulp=1):
    """float16 results within ``maxulp`` FP16 ulps (FP32 summation order may move one rounding)."""
    np.testing.assert_array_max_ulp(np.asarray(got, np.float16), np.asarray(want, np.float16), maxulp=maxulp)


def x_issue():
    return np.random.default_rng(3).standard_normal((4, 64)).astype(np.float16)


def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("mode,want,cast_list", [
    ("force_fp32", {"mm": "fp32", "sm": "fp32", "rs": "fp32"}, ["x__cast_fp32"]),
    ("force_fp16", {"mm": "fp16", "sm": "fp16", "rs": "fp16"}, []),
    ("allow_fp32_to_fp16", {"mm": "fp16", "sm": "fp16", "rs": "fp16"}, []),
    ("must_keep_origin_dtype", {"mm": "fp16", "sm": "fp16", "rs": "fp16"}, []),
    # Softmax / ReduceSum are on the default black list: FP32, reading the FP16 MatMul output cast up
    ("allow_mix_precision", {"mm": "fp16", "sm": "fp32", "rs": "fp32"}, ["m__cast_fp32"]),
])
def test_issue_model_labels_dtypes_casts(mode, want, cast_list):
    plan = session(issue_model()[0], mode).plan
    assert labels(plan) == want
    assert casts(plan) == cast_list
    stored = {"fp16": F16, "fp32": F32}
    assert dtypes(plan, ["x", "m", "s", "y"]) == {"x": F16, "m": stored[want["mm"]], "s": stored[want["sm"]],
                                                  "y": F16}  # graph input/output keep the declared float16
    for t in ("m", "s"):  # bytes follow the storage dtype
        assert plan.tensors[t].nbytes == 4 * 64 * (2 if plan.tensors[t].dtype == F16 else 4)


def test_issue_model_force_fp32_numerics():
    model, w = issue_model()
    x = x_issue()
    res = session(model, "force_fp32").run({"x": x}, dump=True)
    m = x.astype(np.float32) @ w.astype(np.float32)
    assert res.dumps["m"].dtype == np.float32 and res.dumps["s"].dtype == np.float32
    np.testing.assert_allclose(res.dumps["m"], m, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.dumps["s"], softmax(m), rtol=1e-5, atol=1e-7)
    assert res.outputs["y"].dtype == np.float16
    assert_ulp(res.outputs["y"], softmax(m).sum(1, keepdims=True))


@pytest.mark.parametrize("mode", FP16_MODES)
def test_issue_model_fp16_numerics(mode):
    model, w = issue_model()
    x = x_issue()
    res = session(model, mode).run({"x": x}, dump=True)
    m = r16(x.astype(np.float32) @ w.astype(np.float32))
    s = r16(softmax(m))
    assert res.dumps["m"].dtype == np.float16 and res.dumps["s"].dtype == np.float16
    assert_ulp(res.dumps["m"], m)
    assert_ulp(res.dumps["s"], s)
    assert_ulp(res.outputs["y"], s.sum(1, keepdims=True))


def test_issue_model_mix_numerics():
    """allow_mix_precision: MatMul FP16 (one rounding), Softmax and ReduceSum FP32 on its value cast up."""
    model, w = issue_model()
    x = x_issue()
    res = session(model, "allow_mix_precision").run({"x": x}, dump=True)
    m = r16(x.astype(np.float32) @ w.astype(np.float32))
    assert_ulp(res.dumps["m"], m)
    np.testing.assert_allclose(res.dumps["s"], softmax(res.dumps["m"].astype(np.float32)), rtol=1e-5, atol=1e-7)


def test_keep_dtype_moves_fp16_origin_kernel_to_fp32():
    plan = session(issue_model()[0], "force_fp16", keep_dtype=["sm"]).plan
    assert labels(plan) == {"mm": "fp16", "sm": "fp32", "rs": "fp16"}
    assert casts(plan) == ["m__cast_fp32", "s__cast_fp16"]  # up for Softmax, back down for the FP16 ReduceSum
    assert dtypes(plan, ["m", "s", "s__cast_fp16", "y"]) == {"m": F16, "s": F32, "s__cast_fp16": F16, "y": F16}


def test_cpu_placed_kernel_on_fp16_origin_is_fp32():
    """A CPU-placed Softmax (always FP32) reads the FP16 MatMul output cast up and stores FP32 on the host."""
    model, w = issue_model()
    sess = session(model, "force_fp16", op_placement={"sm": "CPU"})
    plan = sess.plan
    assert labels(plan) == {"mm": "fp16", "sm": "fp32", "rs": "fp16"}
    assert casts(plan) == ["m__cast_fp32", "s__cast_fp16"]
    assert (plan.tensors["s"].dtype, plan.tensors["s"].storage) == (F32, "host")
    x = x_issue()
    res = sess.run({"x": x}, dump=True)
    m = r16(x.astype(np.float32) @ w.astype(np.float32))
    np.testing.assert_allclose(res.dumps["s"], softmax(res.dumps["m"].astype(np.float32)), rtol=1e-5, atol=1e-7)
    assert_ulp(res.dumps["m"], m)
    assert_ulp(res.outputs["y"], r16(softmax(m)).sum(1, keepdims=True))


@pytest.mark.parametrize("mode,want,cast_list,stored", [
    ("force_fp32", {"cx": "fp32", "mm": "fp32", "sq": "fp32"}, ["x__cast_fp32"],
     {"xf": F32, "y": F32, "y16": F16}),
    ("force_fp16", {"cx": "fp16", "mm": "fp16", "sq": "fp16"}, [], {"xf": F16, "y": F16, "y16": F16}),
    ("must_keep_origin_dtype", {"cx": "fp32", "mm": "fp32", "sq": "fp16"}, [], {"xf": F32, "y": F32, "y16": F16}),
    ("allow_mix_precision", {"cx": "fp16", "mm": "fp16", "sq": "fp16"}, [], {"xf": F16, "y": F16, "y16": F16}),
    ("allow_fp32_to_fp16", {"cx": "fp32", "mm": "fp16", "sq": "fp16"}, ["x__cast_fp32", "xf__cast_fp16"],
     {"xf": F32, "y": F16, "y16": F16}),
])
def test_mixed_model_plan(mode, want, cast_list, stored):
    plan = session(mixed_model()[0], mode).plan
    assert labels(plan) == want
    assert casts(plan) == cast_list
    assert dtypes(plan, ["x", *stored]) == {"x": F16, **stored}


@pytest.mark.parametrize("mode", ["force_fp32", "force_fp16", "must_keep_origin_dtype", "allow_mix_precision",
                                  "allow_fp32_to_fp16"])
def test_mixed_model_numerics(mode):
    model, w = mixed_model()
    x = (np.random.default_rng(4).standard_normal((4, 64)) * 2).astype(np.float16)
    res = session(model, mode).run({"x": x})
    x32 = x.astype(np.float32)
    assert res.outputs["y"].dtype == np.float32 and res.outputs["y16"].dtype == np.float16
    assert_ulp(res.outputs["y16"], x32 * x32)  # Mul: FP32 compute, one FP16 rounding (declared float16)
    if mode in ("force_fp32", "must_keep_origin_dtype"):  # FP32 MatMul on the exact cast of x
        np.testing.assert_allclose(res.outputs["y"], x32 @ w, rtol=1e-5, atol=1e-5)
    else:  # FP16 MatMul: FP16 weights, FP32 accumulation, output rounded once
        assert_ulp(res.outputs["y"], x32 @ r16(w))


def conv_ref(x, w, b):
    """NCHW convolution, stride 1, pads 1, in float64 (independent of onnxruntime)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # [1, C, H, W, 3, 3]
    return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64)) + b.astype(np.float64)[None, :, None, None]


@pytest.mark.parametrize("mode", ["force_fp32", "force_fp16", "must_keep_origin_dtype", "allow_mix_precision",
                                  "allow_fp32_to_fp16"])
def test_conv_model(mode):
    model, w, b = conv_model()
    sess = session(model, mode, fusion_level=0)  # unfused: every tensor of the model is a plan tensor
    plan = sess.plan
    prec = "fp32" if mode == "force_fp32" else "fp16"
    assert labels(plan) == {"conv": prec, "relu": prec}
    assert casts(plan) == (["x__cast_fp32"] if prec == "fp32" else [])
    assert plan.tensors["c"].dtype == (F32 if prec == "fp32" else F16)
    assert plan.tensors["y"].dtype == F16
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float16)
    res = sess.run({"x": x}, dump=True)
    c = conv_ref(x, w, b)
    if prec == "fp32":
        np.testing.assert_allclose(res.dumps["c"], c, rtol=1e-5, atol=1e-5)
    else:
        assert_ulp(res.dumps["c"], c)
    assert_ulp(res.outputs["y"], np.maximum(c, 0))


X_STORAGE = np.array([[0.1, 0.3, 0.7, 0.55, 0.05, 0.9, 0.2, 0.45]], np.float16)


def fp16_storage_result(x):
    return r16(r16(x.astype(np.float32) + 1024) - 1024)


def fp32_storage_result(x):
    """(x + 1024) - 1024 in float32 arithmetic, rounded once to the declared float16."""
    return r16((x.astype(np.float32) + np.float32(1024)) - np.float32(1024))


@pytest.mark.parametrize("mode,cfg,fp32", [
    ("force_fp32", {}, True),
    ("force_fp16", {}, False),
    ("must_keep_origin_dtype", {}, False),
    ("allow_mix_precision", {}, False),
    ("force_fp16", {"keep_dtype": ["add", "sub"]}, True),
    ("allow_mix_precision", {"modify_mixlist": {"black-list": {"to-add": ["Add", "Sub"]}}}, True),
])
def test_fp32_storage_changes_the_result(mode, cfg, fp32):
    x = X_STORAGE
    sess = session(storage_model(), mode, **cfg)
    assert sess.plan.tensors["a"].dtype == (F32 if fp32 else F16)
    y = sess.run({"x": x}).outputs["y"]
    assert y.dtype == np.float16
    # FP32 storage of x + 1024 keeps x to ~1e-4; FP16 storage keeps only whole numbers
    want = fp32_storage_result(x) if fp32 else fp16_storage_result(x)
    np.testing.assert_array_equal(y.astype(np.float32), want)
    assert np.abs(fp32_storage_result(x) - fp16_storage_result(x)).min() > 0.04  # the two really differ


def test_fp16_origin_single_ops_run_natively():
    """FP16 Add/Sub on FP16-origin tensors skip their boundary Casts (same numerics, tests/runtime/test_kernels.py)."""
    sess = session(storage_model(), "force_fp16")
    assert [ek.native_fp16 for ek in sess.runtime.kernels] == [True, True]


def test_fp16_constant_attribute_widened_in_fp32_kernel():
    """A float16 Constant node and Cast(to=float16) inside an FP32 kernel compute in FP32."""
    nodes = [helper.make_node("Constant", [], ["k"], name="k",
                              value=numpy_helper.from_array(np.array(1024.0, np.float16), "kv")),
             helper.make_node("Cast", ["xi"], ["xh"], name="cast", to=TP.FLOAT16),
             helper.make_node("Add", ["xh", "k"], ["a"], name="add"),
             helper.make_node("Sub", ["a", "k"], ["y"], name="sub")]
    model = make(nodes, [("xi", TP.FLOAT, [1, 8])], [("y", TP.FLOAT16, [1, 8])], {})
    x = X_STORAGE.astype(np.float32)
    y32 = session(model, "force_fp32").run({"xi": x}).outputs["y"]
    y16 = session(model, "force_fp16").run({"xi": x}).outputs["y"]
    np.testing.assert_array_equal(y32.astype(np.float32), fp32_storage_result(X_STORAGE))
    np.testing.assert_array_equal(y16.astype(np.float32), fp16_storage_result(X_STORAGE))


@pytest.mark.parametrize("mode", ["force_fp16", "must_keep_origin_dtype", "force_fp32"])
def test_conv_epilogue_of_an_fp16_model_is_fused(mode):
    """Buffer fusion takes the Relu into the Conv's kernel on FP16-origin data too: one kernel, the Conv output
    never stored, and the output rounded once (within 1 FP16 ulp of relu(conv) computed in float64)."""
    model, w, b = conv_model()
    sess = session(model, mode)
    kernels = [k for k in sess.plan.kernels if k.fusion != "cast"]
    assert [(k.fusion, k.nodes) for k in kernels] == [("ub", ["conv", "relu"])]
    assert "c" not in sess.plan.tensors and sess.plan.tensors["y"].dtype == F16
    x = np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype(np.float16)
    assert_ulp(sess.run({"x": x}).outputs["y"], np.maximum(conv_ref(x, w, b), 0))


def _activation_model(kind: str, dtype=TP.FLOAT16) -> onnx.ModelProto:
    """y = act(x) in its decomposed ONNX form, every tensor and constant in ``dtype``."""
    np_t = helper.tensor_dtype_to_np_dtype(dtype)
    c = {"half": 0.5, "one": 1.0, "rsqrt2": 1.0 / np.sqrt(2.0), "three": 3.0, "six": 6.0, "zero": 0.0}
    inits = {k: np.array(v, np_t) for k, v in c.items()}
    nodes = {
        "Gelu": [helper.make_node("Mul", ["x", "rsqrt2"], ["s"], name="scale"),
                 helper.make_node("Erf", ["s"], ["e"], name="erf"),
                 helper.make_node("Add", ["e", "one"], ["p"], name="plus1"),
                 helper.make_node("Mul", ["x", "p"], ["m"], name="mul_x"),
                 helper.make_node("Mul", ["m", "half"], ["y"], name="half")],
        "Swish": [helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
                  helper.make_node("Mul", ["x", "s"], ["y"], name="mul")],
        "HardSwish": [helper.make_node("Add", ["x", "three"], ["a"], name="add3"),
                      helper.make_node("Clip", ["a", "zero", "six"], ["c"], name="clip"),
                      helper.make_node("Mul", ["x", "c"], ["m"], name="mul_x"),
                      helper.make_node("Div", ["m", "six"], ["y"], name="div6")],
    }[kind]
    return make(nodes, [("x", dtype, [4, 64])], [("y", dtype, [4, 64])], inits)


#: the functions on the model's own constants (1/sqrt(2) as the FP16 model stores it)
_ACT_REF = {"Gelu": lambda x: 0.5 * x * (1.0 + np.vectorize(__import__("math").erf)(
                x * float(np.float16(1.0 / np.sqrt(2.0))))),
            "Swish": lambda x: x / (1.0 + np.exp(-x)),
            "HardSwish": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0}


@pytest.mark.parametrize("kind", sorted(_ACT_REF))
@pytest.mark.parametrize("mode", ["force_fp16", "must_keep_origin_dtype", "allow_mix_precision"])
def test_activation_of_an_fp16_model_is_graph_fused(kind, mode):
    """The activation rules match FP16-origin regions too: one graph-fused kernel holding every node of the
    decomposed formula, its output rounded once to FP16 (within 1 FP16 ulp of the function computed in float64
    on the FP16 input; 1e-6 absolute where the FP32 formula cancels, GELU's 1 + erf(x) near -1, and the result is
    an FP16 subnormal), as the same region of an FP32 model is fused."""
    model = _activation_model(kind)
    sess = Session(model, Config(precision_mode=mode, op_select_implmode="high_precision"))
    kernels = [k for k in sess.plan.kernels if k.fusion != "cast"]
    assert [(k.fusion, sorted(k.nodes)) for k in kernels] == \
        [("graph", sorted(n.name for n in model.graph.node))], [(k.fusion, k.nodes) for k in kernels]
    fp32 = Session(_activation_model(kind, TP.FLOAT), Config(precision_mode="force_fp32"))
    assert [k.fusion for k in fp32.plan.kernels] == ["graph"]  # the same region fused in an FP32 model
    x = np.random.default_rng(7).uniform(-6, 6, (4, 64)).astype(np.float16)
    got = sess.run({"x": x}).outputs["y"]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), _ACT_REF[kind](x.astype(np.float64)), rtol=2.0**-10, atol=1e-6)


@pytest.mark.parametrize("case", sorted(PRECISION_CASES))
def test_precision_modes_and_casts(case):
    cfg, precs, casts = PRECISION_CASES[case]
    model, feeds = _precision_model()
    sess = Session(model, Config(fusion_level=0, **cfg))
    plan = sess.plan
    by_node = {k.nodes[0]: k for k in kernels(sess)}
    assert [by_node[n].precision for n in ORDER] == ["fp" + p for p in precs.split()]
    cast_ks = [k for k in plan.kernels if k.fusion == "cast"]
    assert sorted((k.cast_of, k.precision) for k in cast_ks) == sorted(casts)
    # casts sit exactly at the boundaries: every float input of a kernel is stored in the kernel's precision,
    # and every Cast really changes the dtype
    want_dtype = {"fp16": "float16", "fp32": "float32"}
    for k in kernels(sess):
        for t in k.inputs:
            assert plan.tensors[t].dtype == want_dtype[k.precision], (k.name, t)
    for k in cast_ks:
        assert plan.tensors[k.inputs[0]].dtype != plan.tensors[k.outputs[0]].dtype
    out = sess.run(feeds).outputs["y"]
    ref = ort_outputs(model, feeds)["y"]
    tol = 1e-5 if precs == "32 32 32 32 32" else 2e-2
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


def test_keep_dtype_unknown_node_suggests():
    model, _ = _precision_model()
    with pytest.raises(ConfigError) as exc:
        Session(model, Config(precision_mode="force_fp16", keep_dtype=["softmaxx"]))
    assert "did you mean 'softmax'" in str(exc.value)


MODES = ["force_fp16", "allow_mix_precision", "allow_fp32_to_fp16", "must_keep_origin_dtype", "force_fp32"]


@pytest.mark.parametrize("mode", MODES)
def test_kernels_without_float32_or_float16_data_are_fp32_in_every_mode(mode):
    """A float64 MatMul and an integer Add have nothing the FP16 contract lowers: they are labelled FP32 (they
    run on their data as given, bit-exact with onnxruntime), while the float32 MatMul beside them follows the
    mode. They had been labelled FP16 and counted as FP16 coverage."""
    rng = np.random.default_rng(0)
    w64, w32 = rng.standard_normal((4, 4)), rng.standard_normal((4, 4)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w64"], ["y64"], name="mm64"),
         helper.make_node("Add", ["i", "one"], ["yi"], name="add_int"),
         helper.make_node("MatMul", ["b", "w32"], ["y32"], name="mm32")], "g",
        [helper.make_tensor_value_info("a", TP.DOUBLE, [2, 4]), helper.make_tensor_value_info("i", TP.INT64, [2, 4]),
         helper.make_tensor_value_info("b", TP.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y64", TP.DOUBLE, [2, 4]), helper.make_tensor_value_info("yi", TP.INT64, [2, 4]),
         helper.make_tensor_value_info("y32", TP.FLOAT, [2, 4])],
        [numpy_helper.from_array(w64, "w64"), numpy_helper.from_array(np.int64(1), "one"),
         numpy_helper.from_array(w32, "w32")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = Session(model, Config(precision_mode=mode, op_compiler_cache_mode="disable"))
    prec = {k.name: k.precision for k in sess.plan.kernels if k.fusion != "cast"}
    assert prec["mm64"] == prec["add_int"] == "fp32"
    assert prec["mm32"] == ("fp32" if mode in ("force_fp32", "must_keep_origin_dtype") else "fp16")
    feeds = {"a": rng.standard_normal((2, 4)), "i": np.arange(8).reshape(2, 4), "b": rng.standard_normal((2, 4)).astype(np.float32)}
    out = sess.runtime.run(feeds).outputs
    import onnxruntime as ort

    want = dict(zip(["y64", "yi"], ort.InferenceSession(model.SerializeToString()).run(["y64", "yi"], feeds)))
    np.testing.assert_array_equal(out["y64"], want["y64"])
    np.testing.assert_array_equal(out["yi"], feeds["i"] + 1)
    np.testing.assert_allclose(out["y64"], feeds["a"] @ w64, rtol=1e-14)


def _shaped(m):
    """``m`` with its output 'y' declared float32[2, 8] (the checker wants output shapes)."""
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]))
    return m


@pytest.mark.parametrize("copies", [2, 3])
@pytest.mark.parametrize("fusion_level", [0, 2])
def test_keep_dtype_naming_a_duplicated_node_name_keeps_every_such_node(tmp_path, copies, fusion_level):
    """A model file that names several nodes alike (the loader renames the later ones 'dup__2', ...): a keep_dtype
    entry with the file's name keeps all of them in FP32, with a warning naming the loaded names; a unique name
    elsewhere in the same model is not affected."""
    from toolkit.ir.load import load_model

    names = ["dup"] * copies + ["tail"]
    nodes = [N("Relu" if i % 2 == 0 else "Neg", ["x" if i == 0 else f"t{i}"],
               [f"t{i + 1}" if i < len(names) - 1 else "y"], n) for i, n in enumerate(names)]
    m = _shaped(make_model(nodes, [("x", [2, 8])], ["y"]))
    onnx.save(m, tmp_path / "m.onnx")
    model = load_model(tmp_path / "m.onnx")
    loaded = [n.name for n in model.graph.node]
    assert loaded == ["dup"] + [f"dup__{k}" for k in range(2, copies + 1)] + ["tail"]  # precondition: renamed
    res = compile_model(model, Config(precision_mode="force_fp16", fusion_level=fusion_level, keep_dtype=["dup"]))
    prec = {n: k.precision for k in res.plan.kernels for n in k.nodes}
    assert all(prec[n] == "fp32" for n in loaded[:-1]) and prec["tail"] == "fp16", prec
    (f,) = [f for f in res.findings if f.kind == "duplicate_node_name"]
    assert f.evidence["nodes"] == loaded[:-1] and f.severity == "warning"
    # the same names in a file without duplicates: 'dup__2' is a node of its own, never a twin of 'dup'
    m2 = _shaped(make_model([N("Relu", ["x"], ["a"], "dup"), N("Neg", ["a"], ["y"], "dup__2")], [("x", [2, 8])], ["y"]))
    onnx.save(m2, tmp_path / "m2.onnx")
    res2 = compile_model(load_model(tmp_path / "m2.onnx"), Config(precision_mode="force_fp16", keep_dtype=["dup"]))
    prec2 = {n: k.precision for k in res2.plan.kernels for n in k.nodes}
    assert prec2["dup"] == "fp32" and prec2["dup__2"] == "fp16"
    assert not [f for f in res2.findings if f.kind == "duplicate_node_name"]


@pytest.mark.parametrize("kind", ["If", "Loop"])
@pytest.mark.parametrize("depth", [1, 3])
def test_keep_dtype_naming_a_node_inside_a_control_flow_body_is_a_warning_not_an_error(kind, depth):
    """The body runs on the host in FP32 (AI_CPU) whatever the settings: the entry changes nothing, and says so;
    a name that is nowhere in the model, at any depth, is still an error."""
    from tests.graphs import nested_control_flow

    model = nested_control_flow(depth, kind)
    res = compile_model(model, Config.from_dict({"precision_mode": "force_fp16", "keep_dtype": ["inner_add"]}))
    f = [f for f in res.findings if f.kind == "option_unmatched"]
    assert len(f) == 1 and f[0].subject == "inner_add" and f[0].evidence["reason"] == "in_subgraph"
    assert f"control-flow node 'cf_{depth - 1}'" in f[0].recommendation
    host = [k for k in res.plan.kernels if k.op_type == kind]
    assert host and all(k.precision == "fp32" for k in host)
    with pytest.raises(ConfigError, match="not in the model"):
        compile_model(model, Config.from_dict({"keep_dtype": ["inner_nowhere"]}))
    with pytest.raises(ConfigError, match="did you mean 'inner_add'"):  # a body's names are suggested too
        compile_model(model, Config.from_dict({"keep_dtype": ["inner_addd"]}))


@pytest.mark.parametrize("names,entry,file_name", [
    (["dense", "dense", "out"], "dense__2", "dense"),  # a repeat the loader renamed
    (["", "Mul_1", "out"], "Mul_0", ""),  # an unnamed node
    (["Mul_1", "", "out"], "Mul_1__2", ""),  # an unnamed node whose made name steps around a real one
])
def test_keep_dtype_naming_a_node_by_the_loaders_name_warns_that_a_converter_does_not_know_it(names, entry, file_name):
    """The entry is applied (that node runs in FP32), with a loader_node_name warning naming what the file calls
    it; the file's own names give no such warning."""
    nodes = [N("Mul", ["x", "k"], ["a"], names[0]), N("Mul", ["a", "k"], ["b"], names[1]), N("Relu", ["b"], ["y"], names[2])]
    model = make_model(nodes, [("x", [2, 4])], ["y"], {"k": np.full((2, 4), 3.0, np.float32)})
    res = compile_model(model, Config.from_dict({"precision_mode": "force_fp16", "keep_dtype": [entry]}))
    warn = [f for f in res.findings if f.kind == "loader_node_name"]
    assert len(warn) == 1 and warn[0].subject == entry and warn[0].evidence["file_name"] == file_name
    assert [k.precision for k in res.plan.kernels if entry in k.nodes] == ["fp32"]
    ok = compile_model(model, Config.from_dict({"precision_mode": "force_fp16", "keep_dtype": ["out"]}))
    assert not [f for f in ok.findings if f.kind == "loader_node_name"]
