"""The layer table (toolkit/compare/layerwise.py): golden ranges, user lines and excused default lines, tensors
of CPU-placed ops, folded outputs compared, and the columns of an empty table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.faultkinds import builders as fk
from tests.graphs import N, make_model
from toolkit.compare.layerwise import layer_table
from toolkit.compare.metrics import resolve_thresholds
from toolkit.config.schema import Config
from toolkit.diagnose import _verdict, diagnose, prepare
from toolkit.engine import Session
from toolkit.ort.reference import ReferenceRunner


def _scale_model(low: float, high: float):
    """x[4,8] -> t = 3x (Mul 'mul') -> y = t + 1 (Add 'add'); z = |x| (Abs 'abs'). Values ``low``..``high``."""
    from tests.graphs import affine_and

    m = affine_and("Abs", name="g")
    onnx.checker.check_model(m)
    x = np.random.default_rng(7).uniform(low, high, (4, 8)).astype(np.float32)
    return m, {"x": x}


def _diagnose(tmp_path: Path, model, feeds, thresholds):
    from toolkit.config.schema import Config
    from toolkit.diagnose import diagnose, prepare

    tmp_path.mkdir(parents=True, exist_ok=True)
    mp, ip = tmp_path / "m.onnx", tmp_path / "in.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    lines = resolve_thresholds(thresholds) if thresholds else None  # as toolkit.api.diagnose_command does
    diag, extra = diagnose(prepare(str(mp), str(ip)), Config(precision_mode="force_fp16", fusion_level=0),
                           thresholds=lines)
    return diag, extra, mp


def test_layer_table_applies_user_lines_and_lists_excused_default_lines(tmp_path):
    model, feeds = _scale_model(5000.0, 10000.0)  # y up to 3e4: FP16 spacing 16, RMSE of the rounding > 1
    diag, extra, _ = _diagnose(tmp_path / "default", model, feeds, None)
    ref = fk.reference(model, feeds)
    d = extra["device"]["y"].astype(np.float64) - ref["y"].astype(np.float64)
    assert np.sqrt(np.mean(d * d)) > 1.0  # precondition: the default RMSE line is crossed, by FP16 rounding
    t = diag.table.set_index("TensorName")
    assert t.loc["y", "WithinExpectedNoise"] is True and not t.loc["y", "Abnormal"]
    assert "RootMeanSquareError" in t.loc["y", "AbnormalMetrics"]  # listed although excused
    assert diag.summary["verdict"] == "PASS"
    strict, _, _ = _diagnose(tmp_path / "strict", model, feeds, "RootMeanSquareError>1")
    s = strict.table.set_index("TensorName")
    assert s.loc["y", "Abnormal"] and "RootMeanSquareError" in s.loc["y", "AbnormalMetrics"]
    assert strict.summary["verdict"] == "FAIL"


#: result.csv's documented column order (toolkit/compare/diagnosis.py docstring), written out by hand
DOCUMENTED_COLUMNS = [
    "Index", "OpType", "NodeName", "TensorName", "TensorIndex", "Kernel", "KernelIndex", "KernelOpType",
    "FusedNodes", "Rule", "Precision", "ImplMode", "NPUDump", "DataType", "GroundTruth", "GroundTruthDataType",
    "Shape",
    "GoldenMin", "GoldenMax", "GoldenAbsMax",
    "CompareFailReason", "OverFlow", "DeviceNaN", "DeviceInf", "GoldenNaN", "GoldenInf", "NonFiniteMasked",
    "ComparedCount", "GoldenFP16OverflowRatio",
    "CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance",
    "KullbackLeiblerDivergence", "GoldenStd", "DeviceStd", "MeanAbsoluteError", "RootMeanSquareError",
    "MaxRelativeError", "MeanRelativeError", "ExactMatchRate",
    "WithinExpectedNoise", "Abnormal", "AbnormalMetrics", "Role",
    "LocalCosineSimilarity", "LocalRelativeEuclideanDistance", "LocalAbnormal"]


def save_checked_model(path: Path, nodes, inputs, outputs, inits=()) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def vi(name, shape, elem=T.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


CONST = np.array([[-1.5, 0.0, 2.0, 3.25]], np.float32)


def const_model(path: Path, extra_input: bool) -> Path:
    """y = Relu(Neg(c)) on an initializer c: folded at compile time. With ``extra_input``, a second output
    z = x + 1 that the device does compute."""
    nodes = [helper.make_node("Neg", ["c"], ["n"], name="neg"), helper.make_node("Relu", ["n"], ["y"], name="relu")]
    ins, outs = [], [vi("y", [1, 4])]
    if extra_input:
        nodes.append(helper.make_node("Add", ["x", "one"], ["z"], name="add"))
        ins, outs = [vi("x", [1, 4])], outs + [vi("z", [1, 4])]
    inits = [numpy_helper.from_array(CONST, "c"), numpy_helper.from_array(np.ones((1, 4), np.float32), "one")]
    return save_checked_model(path, nodes, ins, outs, inits)


def test_a_wrong_folded_constant_is_abnormal(tmp_path):
    """The folded output is really compared: a wrong constant in its place is an abnormal row."""
    model = onnx.load(const_model(tmp_path / "m.onnx", False))
    sess = Session(model, Config(), input_shapes={})
    assert "y" in sess.plan.folded
    golden = {"y": np.maximum(-CONST, 0), "n": -CONST}
    wrong = golden["y"] + np.array([[0, 0, 1, 0]], np.float32)
    df = layer_table(model, sess.plan, golden, {"y": wrong})
    y = df[df["TensorName"] == "y"].iloc[0]
    assert y["CompareFailReason"] == "" and bool(y["Abnormal"])
    assert y["MaxAbsoluteError"] == pytest.approx(float(np.abs(wrong - golden["y"]).max()))
    assert _verdict(df, ["y"], [], "none", [])[0] == "FAIL"


def test_in_process_table_has_the_columns_even_when_empty(tmp_path):
    model = onnx.load(const_model(tmp_path / "m.onnx", False))
    sess = Session(model, Config(), input_shapes={})
    assert list(layer_table(model, sess.plan, {}, {}).columns) == DOCUMENTED_COLUMNS
    prep = prepare(str(tmp_path / "m.onnx"))
    diag, _ = diagnose(prep, Config())
    assert list(diag.table.columns) == DOCUMENTED_COLUMNS


def golden_range_reference(y) -> dict:
    a = np.asarray(y)
    if a.size == 0 or a.dtype.kind not in "fiub":
        return {}
    f = a.astype(np.float64)
    fin = f[np.isfinite(f)]
    if fin.size == 0:
        return {}
    return {"GoldenMin": float(fin.min()), "GoldenMax": float(fin.max()), "GoldenAbsMax": float(np.abs(fin).max())}


@pytest.mark.parametrize("y", [np.array([np.nan, 1.0]), np.array([np.inf, -2.0], np.float32), np.array([True, False]),
                               np.array([2**62, -3], np.int64), np.array([], np.float32), np.array([np.nan]),
                               np.array([-0.0, 0.0]), np.array([1, 2], np.uint8), np.array([-5.5], np.float16),
                               np.array(["a"]), np.random.default_rng(1).standard_normal((3, 7)).astype(np.float32)])
def test_golden_range_fast_path_equals_the_finite_range(y):
    """layerwise.golden_range skips the float64 copy when there is no NaN/inf; the result must not change."""
    from toolkit.compare.layerwise import golden_range

    assert golden_range(y) == golden_range_reference(y)


R = np.random.default_rng(11)
W = (R.standard_normal((16, 16)) * 0.3).astype(np.float32)
X = R.standard_normal((4, 16)).astype(np.float32)


def mlp():
    """mm (MatMul, FP16) -> tanh -> mm2 (MatMul, FP16) -> tanh2 -> y."""
    return make_model([N("MatMul", ["x", "W"], ["a"], "mm"), N("Tanh", ["a"], ["t"], "tanh"),
                       N("MatMul", ["t", "W"], ["b"], "mm2"), N("Tanh", ["b"], ["y"], "tanh2")],
                      [("x", [4, 16])], ["y"], {"W": W})


# ------------------------------------------------------------------------------------- comparison
def test_layer_comparison_finds_every_tensor_with_cpu_ops():
    model = mlp()
    golden = ReferenceRunner(model).run({"x": X})
    tables = {}
    for name, cfg in (("npu", Config()), ("cpu", Config(op_placement={"Tanh": "CPU", "mm2": "CPU"}))):
        sess = Session(model, cfg)
        dumps = sess.run({"x": X}, dump=True).dumps
        df = layer_table(model, sess.plan, golden, dumps)
        tables[name] = df
        assert not any("::" in t for t in df["TensorName"])  # copies are no rows of their own
    compared = {n: set(df.loc[df["CompareFailReason"] == "", "TensorName"]) for n, df in tables.items()}
    assert compared["cpu"] >= compared["npu"]
    assert {"a", "t", "b", "y"} <= compared["cpu"]
    cpu = tables["cpu"].set_index("TensorName")
    assert cpu.loc["t", "Kernel"] == "tanh" and cpu.loc["b", "Kernel"] == "mm2" and cpu.loc["b", "Precision"] == "fp32"


def _chain_plan(n: int):
    """Kernels k0..k{n-1}: k_i reads t_i (t_0 the graph input) and writes t_{i+1}, plus a side branch s reading
    t_0 into every kernel from k1 on (a second, normal input)."""
    from types import SimpleNamespace

    ks = [SimpleNamespace(name=f"k{i}", inputs=[f"t{i}"] + (["s"] if i else []), outputs=[f"t{i + 1}"], cast_of=None)
          for i in range(n)]
    ks.insert(1, SimpleNamespace(name="side", inputs=["t0"], outputs=["s"], cast_of=None))
    return SimpleNamespace(kernels=ks)


@pytest.mark.parametrize("n, first_bad, gap", [(4, 1, [2]), (6, 1, [2, 3, 4]), (5, 2, [3]), (40, 3, list(range(4, 38)))])
def test_an_input_that_was_not_compared_is_not_taken_as_normal(n, first_bad, gap):
    """A kernel whose input was not compared (a device that did not dump it, a tensor outside a subset) and
    whose compared ancestor is abnormal is 'propagated', not a new origin; with the gap's ancestors normal it
    stays an origin. Deep gaps are walked without recursion."""
    import pandas as pd

    from toolkit.compare.layerwise import assign_roles

    plan = _chain_plan(n)
    rows = []
    for i in range(1, n + 1):
        t = f"t{i}"
        rows.append({"TensorName": t, "Kernel": f"k{i - 1}", "Abnormal": i >= first_bad and i not in gap, "OverFlow": False,
                     "CompareFailReason": "not dumped by the device" if i in gap else ""})
    rows.append({"TensorName": "s", "Kernel": "side", "Abnormal": False, "OverFlow": False, "CompareFailReason": ""})
    df = pd.DataFrame(rows)
    roles = dict(zip(df["TensorName"], assign_roles(df, plan)))
    after = max(gap) + 1
    assert roles[f"t{first_bad}"] == "origin"
    assert roles[f"t{after}"] == "propagated"  # its input is in the gap, behind an abnormal compared tensor
    clean = df.assign(Abnormal=[r["TensorName"] == f"t{after}" for r in rows])
    assert dict(zip(clean["TensorName"], assign_roles(clean, plan)))[f"t{after}"] == "origin"


# ------------------------------------------------------------------ FP32 rounding of large values is no fault
FP32_KINDS = ("matmul", "square", "reducesum")
MAGNITUDES = (1e2, 1e4, 1e6, 1e8, 1e9)


def fp32_model(kind: str, mag: float, k: int = 1024, seed: int = 0):
    """x[4,k] @ W (MatMul 'mm', |t| ~ ``mag``; K = 1024 terms, summed in another order by our kernel than by
    onnxruntime), then: 'matmul' y = t; 'square' y = t·t (Mul 'sq', W scaled so |y| ~ ``mag``); 'reducesum'
    y = ReduceSum(t, axis 1) ('rs'). Returns (model, feeds, float64 numpy value of y)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, k)).astype(np.float32)
    scale = np.sqrt(mag) if kind == "square" else (mag / 4.0 if kind == "reducesum" else mag)
    w = (rng.standard_normal((k, 16)) / np.sqrt(k) * scale / 3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["t" if kind != "matmul" else "y"], name="mm")]
    inits = [fk._c("W", w)]
    t64 = x.astype(np.float64) @ w.astype(np.float64)
    if kind == "square":
        nodes.append(helper.make_node("Mul", ["t", "t"], ["y"], name="sq"))
        y64, out = t64 * t64, (4, 16)
    elif kind == "reducesum":
        nodes.append(helper.make_node("ReduceSum", ["t", "ax"], ["y"], name="rs", keepdims=0))
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "ax"))
        y64, out = t64.sum(axis=1), (4,)
    else:
        y64, out = t64, (4, 16)
    model = fk._model(nodes, [fk._vi("x", (4, k))], [fk._vi("y", out)], inits, f"fp32_{kind}")
    return model, {"x": x}, y64


def _fp32_diagnose(tmp_path: Path, model, feeds, thresholds=None, **cfg):
    tmp_path.mkdir(parents=True, exist_ok=True)
    mp, ip = tmp_path / "m.onnx", tmp_path / "in.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    lines = resolve_thresholds(thresholds) if thresholds else None
    return diagnose(prepare(str(mp), str(ip)), Config(**{"precision_mode": "force_fp32", **cfg}), thresholds=lines)


def _rms(a) -> float:
    a = np.asarray(a, np.float64)
    return float(np.sqrt(np.mean(a * a)))


@pytest.mark.parametrize("mag", MAGNITUDES)
@pytest.mark.parametrize("kind", FP32_KINDS)
def test_fp32_rounding_of_large_values_is_not_abnormal(tmp_path, kind, mag):
    """A force_fp32 plan differs from onnxruntime by FP32 rounding only (both within ~1e-6 of the float64
    value); at |y| >= 1e6 that rounding crosses the default absolute line (RootMeanSquareError > 1), which the
    contract's FP32 rounding allowance excuses: no tensor is abnormal, the verdict is PASS, no compile stage."""
    model, feeds, y64 = fp32_model(kind, mag)
    diag, extra = _fp32_diagnose(tmp_path, model, feeds)
    ort = fk.reference(model, feeds)["y"].astype(np.float64)
    dev = np.asarray(extra["device"]["y"], np.float64)
    # independent preconditions: both FP32 results are FP32 rounding of the float64 value
    assert _rms(ort - y64) / _rms(y64) < 1e-5 and _rms(dev - y64) / _rms(y64) < 1e-5
    assert _rms(dev - ort) / _rms(y64) < 1e-5
    t = diag.table.set_index("TensorName")
    assert not t["Abnormal"].any() and not t["OverFlow"].any()
    assert diag.summary["verdict"] == "PASS" and diag.summary["stage"] == "none"
    assert diag.triage["fp32_first_divergence"] is None
    assert not [f for f in diag.findings if f.kind in ("compile_stage_fault", "line_tighter_than_fp32")]
    if _rms(dev - ort) > 1.0:  # the default RMSE line is crossed by FP32 rounding, and excused
        assert "RootMeanSquareError" in t.loc["y", "AbnormalMetrics"] and t.loc["y", "WithinExpectedNoise"] is True
    if mag >= 1e8:  # the case of the defect: the rounding of these values is larger than the default line
        assert _rms(dev - ort) > 1.0


@pytest.mark.parametrize("kind", FP32_KINDS)
def test_fp32_rounding_allowance_excuses_default_lines_only(tmp_path, kind):
    """The user names the RMSE line (at its default value): FP32 rounding of values ~1e9 crosses it and the
    row is abnormal, as for the FP16 allowance; the layer table applies the line as given."""
    model, feeds, _ = fp32_model(kind, 1e9)
    diag, extra = _fp32_diagnose(tmp_path, model, feeds, "RootMeanSquareError>1")
    ort = fk.reference(model, feeds)["y"].astype(np.float64)
    assert _rms(np.asarray(extra["device"]["y"], np.float64) - ort) > 1.0  # precondition
    t = diag.table.set_index("TensorName")
    assert t.loc["y", "Abnormal"] and "RootMeanSquareError" in t.loc["y", "AbnormalMetrics"]
    assert diag.summary["verdict"] == "FAIL"


def test_nodes_kept_in_fp32_under_force_fp16_get_the_fp32_allowance(tmp_path):
    """The user's second case: a config keeping the nodes in FP32 under force_fp16. The kept kernels read FP32
    data only, so their FP32 rounding (RMSE > 1 on values ~1e8) is excused: PASS, no abnormal intermediate."""
    model, feeds, _ = fp32_model("square", 1e8)
    diag, extra = _fp32_diagnose(tmp_path, model, feeds, precision_mode="force_fp16", keep_dtype=["mm", "sq"])
    plan = extra["compiled"].plan
    assert {k.precision for k in plan.kernels if set(k.nodes) & {"mm", "sq"}} == {"fp32"}
    ort = fk.reference(model, feeds)
    assert _rms(np.asarray(extra["device"]["t"], np.float64) - ort["t"]) > 0.0  # the MatMul does round
    assert _rms(np.asarray(extra["device"]["y"], np.float64) - ort["y"]) > 1.0
    t = diag.table.set_index("TensorName")
    assert not t["Abnormal"].any()
    assert diag.summary["verdict"] == "PASS", diag.summary["reasons"]


@pytest.mark.parametrize("factor", [1.0 + 1e-4, 1.0 + 1e-2])
def test_fp32_rounding_allowance_does_not_excuse_a_wrong_value(tmp_path, factor):
    """A planted compile-time rescale (by 1 + 1e-4: 10 times FP32 rounding's rtol 1e-5; by 1 + 1e-2) of a constant
    multiplying values ~1e8: the row is abnormal beyond FP32 rounding and the output fails. The triage calls the
    1e-2 one a compile-stage fault (its quick screen, 1e-3 of the tensor's |x| max, passes smaller errors)."""
    model, feeds, _ = fp32_model("square", 1e8)
    nodes = list(model.graph.node) + [helper.make_node("Mul", ["y", "k"], ["z"], name="scale_mul")]
    m2 = fk._model(nodes, [fk._vi("x", (4, 1024))], [fk._vi("z", (4, 16))],
                   [*model.graph.initializer, fk._c("k", 0.5)], "fp32_planted")
    with fk.planted_pass("scale_mul", factor):
        diag, extra = _fp32_diagnose(tmp_path, m2, feeds)
    ort = fk.reference(m2, feeds)["z"].astype(np.float64)
    dev = np.asarray(extra["device"]["z"], np.float64)
    assert _rms(dev - ort) / _rms(ort) > 0.5 * (factor - 1.0)  # precondition: off beyond FP32 rounding
    t = diag.table.set_index("TensorName")
    assert t.loc["z", "Abnormal"] and t.loc["z", "WithinExpectedNoise"] is False and not t.loc["y", "Abnormal"]
    assert diag.summary["verdict"] == "FAIL"
    if factor > 1.001:
        assert diag.summary["stage"] == "compile"
        assert diag.findings[0].kind == "compile_stage_fault" and diag.findings[0].subject == "scale_mul"
