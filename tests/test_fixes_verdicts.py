"""Verdicts and outputs that must agree with what was (or could be) compared.

Kinds covered, each with values computed here with numpy / onnxruntime:

1. NaN/Inf the FP32 reference already holds is not FP16 overflow; a graph output whose reference holds NaN/Inf
   is a ``golden_nonfinite`` error finding, and no verdict is PASS beside an error finding;
2. degenerate graphs: no graph outputs → one-line ModelError (exit 1, no report folder); a graph output the
   compiler folds to a constant is compared (the constant vs the reference) instead of "nothing compared";
3. result.csv has one fixed column list, whatever the model;
4. compare-dumps with --model: a graph output whose dump is missing / unreadable / mis-shaped fails the verdict;
5. parse-log: files of which nothing at all was read count as not parsed (exit 1, no report folder);
6. the intended FP16 overflow of single-kernel isolation prints no numpy warning.

CLI runs go through a subprocess (the CLI sets a global onnxruntime thread pool).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from toolkit.compare.advisor import advise, golden_nonfinite_rows, overflow_rows
from toolkit.compare.layerwise import RESULT_COLUMNS, golden_range, layer_table
from toolkit.compare.metrics import compare_tensors
from toolkit.core.records import Finding
from toolkit.config.schema import Config
from toolkit.diagnose import _verdict, diagnose, prepare
from toolkit.commands.compare_dumps import compare_dumps
from toolkit.dumps.readers import SideSpec
from toolkit.engine import Session

TIMEOUT_S = 300
FP16_MAX = 65504.0
#: result.csv's documented column order (toolkit/compare/diagnosis.py docstring), written out by hand
DOCUMENTED_COLUMNS = [
    "Index", "OpType", "NodeName", "TensorName", "TensorIndex", "Kernel", "KernelIndex", "KernelOpType",
    "FusedNodes", "Rule", "Precision", "ImplMode", "NPUDump", "DataType", "Shape",
    "GoldenMin", "GoldenMax", "GoldenAbsMax",
    "CompareFailReason", "OverFlow", "DeviceNaN", "DeviceInf", "GoldenNaN", "GoldenInf", "NonFiniteMasked",
    "ComparedCount", "GoldenFP16OverflowRatio",
    "CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance",
    "KullbackLeiblerDivergence", "GoldenStd", "DeviceStd", "MeanAbsoluteError", "RootMeanSquareError",
    "MaxRelativeError", "MeanRelativeError", "ExactMatchRate",
    "WithinExpectedNoise", "Abnormal", "AbnormalMetrics", "Role",
    "LocalCosineSimilarity", "LocalRelativeEuclideanDistance", "LocalAbnormal"]


# ------------------------------------------------------------------------------------------------ helpers
def npuscope(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, NPUSCOPE_LOG_LEVEL="3"))


def save(path: Path, nodes, inputs, outputs, inits=()) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def vi(name, shape, elem=T.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def ort_run(path: Path, feeds: dict) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def matmul_relu(path: Path, w: np.ndarray) -> Path:
    """y = Relu(x @ W), x (1, 4)."""
    return save(path, [helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"),
                       helper.make_node("Relu", ["t"], ["y"], name="relu")],
                [vi("x", [1, 4])], [vi("y", [1, w.shape[1]])], [numpy_helper.from_array(w, "W")])


def x_feed(path: Path, x: np.ndarray) -> Path:
    np.savez(path, x=x)
    return path


def report(folder: Path) -> tuple[dict, list[dict], pd.DataFrame]:
    summary = json.loads((folder / "summary.json").read_text())
    findings = json.loads((folder / "findings.json").read_text())
    return summary, findings, pd.read_csv(folder / "result.csv", keep_default_na=False)


# ------------------------------------------------------------------------- 1. reference NaN/Inf ≠ overflow
NONFINITE_WEIGHTS = {
    "nan_inf_neg_inf": np.array([[np.nan, np.inf, -np.inf, 1.0]] * 4, np.float32),
    "inf_only": np.array([[np.inf, 1.0, 2.0, -1.0]] * 4, np.float32),
    "nan_one_column": np.array([[0.5, np.nan, 0.25, 1.0]] * 4, np.float32),
}


@pytest.mark.parametrize("case", sorted(NONFINITE_WEIGHTS))
def test_reference_nonfinite_output_is_golden_nonfinite_not_fp16_overflow(tmp_path, case):
    """Kind: the FP32 model itself computes NaN/Inf (weights hold them). The NPU side shows the same NaN/Inf:
    no fp16_overflow, no 'keep in FP32' advice, a golden_nonfinite finding with the reference's counts, and a
    WARN (not PASS) verdict, exit 0."""
    w = NONFINITE_WEIGHTS[case]
    model = matmul_relu(tmp_path / "m.onnx", w)
    x = np.array([[0.5, 0.25, 1.0, 0.75]], np.float32)
    feeds = x_feed(tmp_path / "x.npz", x)
    y = ort_run(model, {"x": x})["y"]
    n_nan, n_inf = int(np.isnan(y).sum()), int(np.isinf(y).sum())
    assert n_nan + n_inf > 0 and np.isfinite(y).any()  # the precondition, from onnxruntime itself
    proc = npuscope("compare", model, "--inputs", feeds, "--out", tmp_path / "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary, findings, df = report(tmp_path / "r")
    kinds = [f["kind"] for f in findings]
    assert "fp16_overflow" not in kinds and "keep" not in proc.stdout
    assert summary["first_divergence"] is None
    gn = [f for f in findings if f["kind"] == "golden_nonfinite"]
    assert len(gn) == 1 and gn[0]["severity"] == "error" and gn[0]["subject"] == "y"
    assert gn[0]["evidence"]["GoldenNaN"] == n_nan and gn[0]["evidence"]["GoldenInf"] == n_inf
    assert summary["verdict"] == "WARN" and "verdict: WARN" in proc.stdout
    assert any("reference output 'y' holds NaN/Inf" in r for r in summary["reasons"])
    row = df[df["TensorName"] == "y"].iloc[0]
    assert float(row["GoldenNaN"]) == n_nan and float(row["GoldenInf"]) == n_inf
    assert row["OverFlow"] in (False, "False")


def test_real_fp16_overflow_is_still_found(tmp_path):
    """Control: a finite reference beyond 65504 (weights 1e5) in an FP16 kernel is still fp16_overflow."""
    w = np.full((4, 4), 1e5, np.float32)
    model = matmul_relu(tmp_path / "m.onnx", w)
    x = np.array([[0.5, 0.25, 1.0, 0.75]], np.float32)
    y = ort_run(model, {"x": x})["y"]
    assert np.isfinite(y).all() and np.abs(y).max() > FP16_MAX
    proc = npuscope("compare", model, "--inputs", x_feed(tmp_path / "x.npz", x), "--out", tmp_path / "r",
                    cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary, findings, _ = report(tmp_path / "r")
    assert summary["verdict"] == "FAIL" and "fp16_overflow" in [f["kind"] for f in findings]
    assert "golden_nonfinite" not in [f["kind"] for f in findings]
    assert "isolate.py" not in proc.stderr  # 6.: the isolation's intended FP16 overflow is silent


def _row(tensor: str, device, golden, npu_dump: str) -> dict:
    row = {"Index": 0, "OpType": "Relu", "NodeName": tensor, "TensorName": tensor, "Kernel": "k",
           "NPUDump": npu_dump, **golden_range(golden)}
    row.update(compare_tensors(device, golden))
    return row


@pytest.mark.parametrize("golden, device, overflow", [
    # the reference's own NaN/Inf, mirrored on the device: not overflow
    ([np.nan, np.inf, -np.inf, 1.0], [np.nan, np.inf, -np.inf, 1.0], False),
    ([np.inf, 2.0, 3.0, 4.0], [np.inf, 2.0, 3.0, 4.0], False),
    # device non-finite where the reference is finite: overflow
    ([np.nan, 7e4, 1.0, 2.0], [np.nan, np.inf, 1.0, 2.0], True),
    ([1.0, 2.0, 3.0, 4.0], [1.0, np.nan, 3.0, 4.0], True),
    # a finite reference value beyond 65504 in an FP16 tensor (saturated on the device): overflow
    ([np.inf, 7e4, 1.0, 2.0], [np.inf, 65504.0, 1.0, 2.0], True),
])
def test_overflow_rows_need_a_finite_reference(golden, device, overflow):
    """Kind, table level: overflow = device non-finite where the golden is finite, or a finite golden
    beyond the FP16 range; the golden's own NaN/Inf never counts (checked against numpy masks)."""
    g = np.array(golden, np.float32)
    d = np.array(device, np.float16)
    expected = bool(np.any(np.isfinite(g) & ~np.isfinite(d.astype(np.float32)))
                    or np.any(np.isfinite(g) & (np.abs(g) > FP16_MAX)))
    assert expected == overflow
    df = pd.DataFrame([{"Index": -1, "OpType": "Input", "NodeName": "x", "TensorName": "x", "Kernel": "",
                        **compare_tensors(np.ones(2, np.float32), np.ones(2, np.float32))},
                       _row("y", d, g, "float16")])
    df["Role"] = ""
    assert len(overflow_rows(df)) == int(overflow)
    gn = golden_nonfinite_rows(df, ["y"])
    assert len(gn) == int(not np.isfinite(g).all())


def test_no_pass_beside_an_error_finding():
    """Kind: every error-severity finding keeps the verdict from PASS (here one the table cannot show)."""
    g = np.linspace(-1, 1, 8).astype(np.float32)
    df = pd.DataFrame([_row("y", g.astype(np.float16), g, "float16")])
    df["Role"] = ""
    assert _verdict(df, ["y"], [], "none", [])[0] == "PASS"
    for severity, want in (("info", "PASS"), ("warning", "PASS"), ("error", "WARN")):
        f = Finding(severity, "fp16_range_overflow", "n", {}, "keep n in FP32")
        verdict, reasons = _verdict(df, ["y"], [], "none", [f])
        assert verdict == want, (severity, reasons)
    assert any("fp16_range_overflow at 'n'" in r for r in reasons)


# ------------------------------------------------------------------------------- 2. degenerate graphs
def test_model_without_outputs_is_a_one_line_model_error(tmp_path):
    w = np.eye(4, dtype=np.float32)
    model = save(tmp_path / "noout.onnx", [helper.make_node("MatMul", ["x", "W"], ["t"], name="mm")],
                 [vi("x", [1, 4])], [], [numpy_helper.from_array(w, "W")])
    assert not onnx.load(model).graph.output
    for cmd in ("compare", "diagnose"):
        out = tmp_path / f"r_{cmd}"
        proc = npuscope(cmd, model, "--out", out, cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "has no graph outputs" in lines[0] and "Traceback" not in proc.stderr
        assert not out.exists()


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
    return save(path, nodes, ins, outs, inits)


@pytest.mark.parametrize("extra_input", [False, True])
def test_folded_graph_output_is_compared_with_the_reference(tmp_path, extra_input):
    """Kind: a graph output computed at compile time (constant folding) gets a real comparison: the folded
    constant vs onnxruntime's output, PASS when they agree, never "nothing could be compared"."""
    model = const_model(tmp_path / "m.onnx", extra_input)
    args = ["--inputs", x_feed(tmp_path / "x.npz", np.zeros((1, 4), np.float32))] if extra_input else []
    proc = npuscope("compare", model, *args, "--out", tmp_path / "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary, _, df = report(tmp_path / "r")
    assert summary["verdict"] == "PASS", summary["reasons"]
    expected = np.maximum(-CONST, 0)
    feeds = {"x": np.zeros((1, 4), np.float32)} if extra_input else {}
    np.testing.assert_array_equal(ort_run(model, feeds)["y"], expected)
    y = df[df["TensorName"] == "y"].iloc[0]
    assert y["CompareFailReason"] == "" and y["Rule"] == "fold_constants"
    assert float(y["ComparedCount"]) == expected.size and float(y["MaxAbsoluteError"]) == 0.0
    assert float(y["GoldenMax"]) == expected.max() and float(y["GoldenMin"]) == expected.min()
    n = df[df["TensorName"] == "n"].iloc[0]  # a folded intermediate stays "computed at compile time"
    assert n["CompareFailReason"].startswith("computed at compile time")


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


# -------------------------------------------------------------------------------- 3. fixed columns
def test_result_columns_are_fixed_whatever_the_model(tmp_path):
    """Kind: result.csv's header is the documented list for a fused MatMul+Relu, a graph with no node, a
    folded constant output and a NaN model."""
    x = np.array([[0.5, 0.25, 1.0, 0.75]], np.float32)
    feeds = x_feed(tmp_path / "x.npz", x)
    models = {
        "fused": (matmul_relu(tmp_path / "fused.onnx", np.eye(4, dtype=np.float32)), ["--inputs", feeds]),
        "nonodes": (save(tmp_path / "nonodes.onnx", [], [vi("x", [1, 4])], [vi("x", [1, 4])]), ["--inputs", feeds]),
        "folded": (const_model(tmp_path / "folded.onnx", False), []),
        "nan": (matmul_relu(tmp_path / "nan.onnx", NONFINITE_WEIGHTS["nan_inf_neg_inf"]), ["--inputs", feeds]),
    }
    assert RESULT_COLUMNS == DOCUMENTED_COLUMNS
    for name, (model, args) in models.items():
        proc = npuscope("compare", model, *args, "--out", tmp_path / name, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        header = (tmp_path / name / "result.csv").read_text().splitlines()[0].split(",")
        assert header == DOCUMENTED_COLUMNS, name


def test_in_process_table_has_the_columns_even_when_empty(tmp_path):
    model = onnx.load(const_model(tmp_path / "m.onnx", False))
    sess = Session(model, Config(), input_shapes={})
    assert list(layer_table(model, sess.plan, {}, {}).columns) == DOCUMENTED_COLUMNS
    prep = prepare(str(tmp_path / "m.onnx"))
    diag, _ = diagnose(prep, Config())
    assert list(diag.table.columns) == DOCUMENTED_COLUMNS


# ------------------------------------------------------------------------- 4. compare-dumps outputs
def dump_model(path: Path) -> Path:
    """t = x @ w; u = Relu(t); y = u * 2 (node names = tensor names' producers)."""
    w = np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"], name="mm"),
             helper.make_node("Relu", ["t"], ["u"], name="relu"),
             helper.make_node("Mul", ["u", "two"], ["y"], name="mul")]
    return save(path, nodes, [vi("x", [4, 8])], [vi("y", [4, 6])],
                [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(2.0), "two")])


def dump_sides(tmp_path: Path, model: Path, spoil: str, where: str) -> tuple[Path, Path]:
    """Golden (ONNX naming: node.index.timestamp.npy) from onnxruntime; target (an ``npuscope run --dump``
    folder: tensor.npy + index.json) = FP16 rounding of it, with the tensor ``where`` spoiled as ``spoil``
    says: "absent" (neither file nor index entry), "listed_missing" (in index.json, no file), "misshaped"
    (transposed), "truncated" (16 bytes cut)."""
    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    m = onnx.load(model)
    del m.graph.output[:]
    for t in ("t", "u", "y"):
        m.graph.output.append(onnx.ValueInfoProto(name=t))
    every = tmp_path / "every.onnx"
    onnx.save(m, every)
    vals = ort_run(every, {"x": x})
    g, t = tmp_path / "golden", tmp_path / "target"
    g.mkdir()
    t.mkdir()
    index = {}
    for i, (node, tensor) in enumerate((("mm", "t"), ("relu", "u"), ("mul", "y"))):
        np.save(g / f"{node}.0.{1_700_000_000_000_000 + i}.npy", vals[tensor])
        if tensor == where and spoil == "absent":
            continue
        index[f"{tensor}.npy"] = {"tensor": tensor, "kernel": node}
        if tensor == where and spoil == "listed_missing":
            continue
        arr = vals[tensor].astype(np.float16)
        if tensor == where and spoil == "misshaped":
            arr = arr.T.copy()
        np.save(t / f"{tensor}.npy", arr)
        if tensor == where and spoil == "truncated":
            f = t / f"{tensor}.npy"
            f.write_bytes(f.read_bytes()[:-16])
    (t / "index.json").write_text(json.dumps(index))
    return g, t


@pytest.mark.parametrize("spoil", ["absent", "listed_missing", "misshaped", "truncated"])
def test_broken_output_dump_fails_compare_dumps(tmp_path, spoil):
    """Kind: with --model, a graph output that could not be compared fails (exit 1) like compare does;
    the same broken dump on an intermediate stays a WARN (exit 0)."""
    model = dump_model(tmp_path / "m.onnx")
    for where, code, verdict in (("y", 1, "FAIL"), ("u", 0, "WARN")):
        case = tmp_path / f"{where}"
        case.mkdir()
        g, t = dump_sides(case, model, spoil, where)
        proc = npuscope("compare-dumps", g, t, "--model", model, "--out", case / "r", "--no-html", cwd=tmp_path)
        assert proc.returncode == code, proc.stdout + proc.stderr
        summary = json.loads((case / "r" / "summary.json").read_text())
        assert summary["verdict"] == verdict, summary["reasons"]
        out_reason = [r for r in summary["reasons"] if r.startswith("output 'y' could not be compared")]
        assert bool(out_reason) == (where == "y")


def test_compare_dumps_without_model_keeps_warn_for_broken_dumps(tmp_path):
    model = dump_model(tmp_path / "m.onnx")
    gold, t = dump_sides(tmp_path, model, "truncated", "y")
    g = tmp_path / "golden_by_tensor"  # both sides keyed by tensor: no model needed
    g.mkdir()
    for node, tensor in (("mm", "t"), ("relu", "u"), ("mul", "y")):
        np.save(g / f"{tensor}.npy", np.load(next(gold.glob(f"{node}.0.*.npy"))))
    (g / "index.json").write_text(json.dumps({f"{x}.npy": {"tensor": x, "kernel": x} for x in ("t", "u", "y")}))
    diag = compare_dumps(SideSpec(str(g), "golden"), SideSpec(str(t), "target"))
    assert diag.summary["verdict"] == "WARN"  # the outputs are unknown without --model


def test_compare_dumps_golden_nonfinite_output_is_not_overflow(tmp_path):
    """The golden's own NaN/Inf mirrored in the target: golden_nonfinite + WARN, never fp16_overflow."""
    model = dump_model(tmp_path / "m.onnx")
    g, t = dump_sides(tmp_path, model, "none", "")
    y_file = next(g.glob("mul.0.*.npy"))
    y = np.load(y_file)
    y[0, 0], y[1, 1] = np.nan, np.inf
    np.save(y_file, y)
    np.save(t / "y.npy", y.astype(np.float16))
    diag = compare_dumps(SideSpec(str(g), "golden"), SideSpec(str(t), "target"), model=str(model))
    kinds = [f.kind for f in diag.findings]
    assert "fp16_overflow" not in kinds and "golden_nonfinite" in kinds
    assert diag.summary["verdict"] == "WARN"
    row = diag.table[diag.table["TensorName"] == "y"].iloc[0]
    assert (row["GoldenNaN"], row["GoldenInf"]) == (int(np.isnan(y).sum()), int(np.isinf(y).sum()))


# ------------------------------------------------------------------------------------ 5. parse-log
NOTHING = {
    "ort_no_kernel_event.json": '[{"cat":"Node","name":"relu_fence_before","dur":-5,"ph":"X","ts":0,"args":{}}]',
    "empty_trace.json": '{"traceEvents": []}',
}


@pytest.mark.parametrize("name", sorted(NOTHING))
def test_parse_log_of_nothing_exits_1_without_a_report(tmp_path, name):
    """Kind: a recognised file of which nothing was read (no record, no row, no table) is not parsed; when
    nothing was parsed, one line, exit 1, no report folder — for the file and for a folder of it."""
    folder = tmp_path / "logs"
    folder.mkdir()
    f = folder / name
    f.write_text(NOTHING[name])
    (folder / "empty.log").write_text("")
    for arg in (f, folder):
        out = tmp_path / "r"
        proc = npuscope("parse-log", arg, "--out", out, cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "nothing could be parsed" in lines[0] and name in lines[0]
        assert not out.exists() and "report:" not in proc.stdout


def test_parse_log_with_one_kernel_event_still_parses(tmp_path):
    f = tmp_path / "prof.json"
    f.write_text('[{"cat":"Node","name":"relu_kernel_time","dur":5,"ph":"X","ts":10,"args":{"op_name":"Relu"}}]')
    proc = npuscope("parse-log", f, "--out", tmp_path / "r", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = pd.read_csv(tmp_path / "r" / "op_summary.csv")
    assert len(rows) == 1 and rows["Task Duration(us)"].iloc[0] == 5


# ------------------------------------------------------------------------------------ 6. isolation
def test_isolation_cast_overflow_is_silent():
    from toolkit.reexec.isolate import _as_stored

    big = np.array([1e5, -1e5, 1.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _as_stored(big, "float16")
    np.testing.assert_array_equal(out, np.array([np.inf, -np.inf, 1.0], np.float16))


def test_advise_lists_golden_nonfinite_only_with_outputs():
    g = np.array([np.nan, 1.0, 2.0, 3.0], np.float32)
    df = pd.DataFrame([_row("y", g.astype(np.float16), g, "float16")])
    df["Role"] = ""
    plan = type("P", (), {"kernels": []})()
    assert [f.kind for f in advise(df, plan)] == []
    assert [f.kind for f in advise(df, plan, outputs=["y"])] == ["golden_nonfinite"]
