"""FP16-origin models (float16 tensors in the ONNX file) under every precision mode.

Checked per mode: kernel precision labels, plan storage dtypes, inserted Cast kernel counts, and the outputs
against an independent numpy emulation of the contract (GUIDE §3): FP32 kernels compute in FP32 from the
FP16 inputs and round only the declared float16 graph outputs; FP16 kernels read FP16, compute in FP32 and
round each kernel output once to FP16. Kernels run in high_precision implmode here (FP16 accumulation of
high_performance is tested in tests/test_contract_fp16.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from toolkit.config.schema import Config
from toolkit.engine import Session

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


# ----------------------------------------------------------------------------- the issue's model

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


# ----------------------------------------------------------------------------- FP16 input, FP32 subgraph

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


# ----------------------------------------------------------------------------- Conv

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


# ----------------------------------------------------------------------------- FP32 storage matters

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
    """FP16 Add/Sub on FP16-origin tensors skip their boundary Casts (same numerics, tests/test_native_fp16.py)."""
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


# ----------------------------------------------------------------------------- reporting

def test_precision_frame_counts_fp16_origin_kernels():
    from toolkit.diagnose import _precision_frame

    model = issue_model()[0]
    frame = _precision_frame(session(model, "must_keep_origin_dtype").plan, model).set_index("OpType")
    assert frame.loc[["MatMul", "Softmax", "ReduceSum"], "FP16"].tolist() == [1, 1, 1]
    assert frame.loc[["MatMul", "Softmax", "ReduceSum"], "FP32"].tolist() == [0, 0, 0]


@pytest.mark.parametrize("mode,line", [
    ("force_fp32", "0 FP16, 3 FP32 kernels, 1 Casts"),
    ("must_keep_origin_dtype", "3 FP16, 0 FP32 kernels, 0 Casts"),
])
def test_cli_compile_summary(tmp_path, mode, line):
    path = tmp_path / "m.onnx"
    onnx.save(issue_model()[0], path)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compile", str(path), "--precision-mode", mode,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"precision ({mode}): {line}" in proc.stdout
    plan = json.loads((out / "plan.json").read_text())
    tensors = {t["name"]: t["dtype"] for t in plan["tensors"]}
    assert tensors["m"] == (F32 if mode == "force_fp32" else F16)


def test_result_rows_of_graph_inputs_name_their_storage_precision(tmp_path):
    """result.csv's graph-input rows say the precision the input is stored in: fp16 for a float16 input (was a
    hard-coded fp32), fp32 for a float32 one."""
    import csv

    f32 = make([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", TP.FLOAT, [4, 8])],
               [("y", TP.FLOAT, [4, 8])], {})
    for kind, model in (("fp16", issue_model()[0]), ("fp32", f32)):
        path = tmp_path / f"{kind}.onnx"
        onnx.save(model, str(path))
        out = tmp_path / f"{kind}-out"
        proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(path), "--out", str(out)],
                              capture_output=True, text=True)
        assert proc.returncode in (0, 1), proc.stderr[-500:]
        rows = [r for r in csv.DictReader(open(out / "result.csv")) if r["OpType"] == "Input"]
        want = {i.name: ("fp16" if i.type.tensor_type.elem_type == TP.FLOAT16 else "fp32") for i in model.graph.input}
        assert rows and {r["TensorName"]: r["Precision"] for r in rows} == want


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
