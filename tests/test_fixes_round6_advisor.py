"""Round 6: the advisor's origin findings and their recommendations (defects 7 and 11).

Fault kinds covered:

1. An integer / index output (ArgMax, ArgMin, TopK indices, Greater, Cast to int) flips because its float
   input, written in FP16 by an FP16 kernel (directly, or through exact ops: Relu then Mul by 1), ties or
   rounds differently. The origin is the FP16 writer of that input, not the integer op; the recommendation
   quotes ExactMatchRate (never a cosine, undefined on integers) with the values computed here by numpy; the
   advised keep_dtype (evidence ``keep_dtype``), applied by re-running the CLI, makes the verdict PASS — also
   after the user first kept only the integer op in FP32 (the tester's loop).
2. FP16 overflow, named where it happens with the reference value that passes 65504 there:
   a. at an FP16 kernel's output (Mul x5e4, then Relu and Mul x1e-4 downstream: each FP16 kernel meeting
      values past 65504 is kept);
   b. at the cast of an FP32 value into an FP16 consumer (MatMul x300 + Relu kept in FP32, then an FP16
      MatMul x1e-3; a graph input past 65504 read by an FP16 Mul);
   c. in an FP16 kernel's accumulation (ReduceMean in high_performance implmode: every value fits, the sum
      does not);
   d. inside a fused kernel (an on-chip intermediate), and inside the computation (nothing passes 65504):
      :func:`toolkit.compare.advisor.overflow_site` on a hand-made plan.
   Applying the advised keep_dtype removes the overflow (no fp16_overflow finding, verdict PASS).

Expected values come from numpy and onnxruntime, never from the toolkit's output.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F, I64 = TensorProto.FLOAT, TensorProto.INT64
FP16_MAX = 65504.0
TIMEOUT_S = 300


# ------------------------------------------------------------------ helpers (independent of the toolkit)
def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    """``inputs`` / ``outputs``: [(name, elem type, shape)]; ``inits``: {name: array}."""
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def reference(model, feeds) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def npuscope(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"), check=False)


def compare(folder: Path, out: str, *args, keep=None):
    """Run ``npuscope compare model.onnx`` in ``folder`` (with ``keep`` as keep_dtype); (rc, summary, findings)."""
    extra = []
    if keep is not None:
        (folder / f"{out}.json").write_text(json.dumps({"keep_dtype": list(keep)}))
        extra = ["--config", f"{out}.json"]
    proc = npuscope("compare", "model.onnx", "--inputs", "in.npz", "--out", out, *args, *extra, cwd=folder)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    summary = json.loads((folder / out / "summary.json").read_text())
    findings = json.loads((folder / out / "findings.json").read_text())
    return proc.returncode, summary, findings


def save(folder: Path, model, feeds) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "model.onnx")
    np.savez(folder / "in.npz", **feeds)
    return folder


def by_kind(findings, kind):
    return [f for f in findings if f["kind"] == kind]


def fp16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


# ------------------------------------------------------------------ 1. integer outputs of FP16-stored data
TIES = np.array([[1.0001, 1.0002, 0.5], [2, 3, 1], [5, 4, 4.5], [1.0002, 1.0003, 1.0001]], np.float32)
ONE = {"one": np.array(1, np.float32)}


def mul(src="x", out="xm"):
    return helper.make_node("Mul", [src, "one"], [out], name="mul")


def case(name):
    """(model, feeds, numpy function of the Mul output giving the graph output, integer op node name,
    expected keep_dtype set, expected origin node)."""
    x = TIES
    if name == "argmax":
        m = _model([mul(), helper.make_node("ArgMax", ["xm"], ["o"], name="op", axis=1, keepdims=0)],
                   [("x", F, [4, 3])], [("o", I64, [4])], ONE)
        return m, {"x": x}, lambda v: np.argmax(v, axis=1), {"mul", "op"}, "mul"
    if name == "argmin":
        x = np.array([[1.0003, 1.0002, 2.0, 3.0], [0.5001, 0.5002, 0.7, 0.9], [4.0, 3.0, 2.0, 1.0]], np.float32)
        m = _model([mul(), helper.make_node("ArgMin", ["xm"], ["o"], name="op", axis=-1, keepdims=0)],
                   [("x", F, [3, 4])], [("o", I64, [3])], ONE)
        return m, {"x": x}, lambda v: np.argmin(v, axis=-1), {"mul", "op"}, "mul"
    if name == "topk":
        m = _model([mul(), helper.make_node("TopK", ["xm", "k"], ["v", "o"], name="op", axis=1)],
                   [("x", F, [4, 3])], [("o", I64, [4, 1])], {**ONE, "k": np.array([1], np.int64)})
        return m, {"x": x}, lambda v: np.argmax(v, axis=1)[:, None], {"mul", "op"}, "mul"
    if name == "greater":
        thr = np.float32(1.0001)
        m = _model([mul(), helper.make_node("Greater", ["xm", "thr"], ["o"], name="op")],
                   [("x", F, [4, 3])], [("o", TensorProto.BOOL, [4, 3])], {**ONE, "thr": np.array(thr)})
        return m, {"x": x}, lambda v: v > thr, {"mul", "op"}, "mul"
    if name == "cast_int":
        x = np.array([[2.999, 3.999, 1.5], [7.9999, 0.5, 2.0]], np.float32)
        m = _model([mul(), helper.make_node("Cast", ["xm"], ["o"], name="op", to=TensorProto.INT32)],
                   [("x", F, [2, 3])], [("o", TensorProto.INT32, [2, 3])], ONE)
        return m, {"x": x}, lambda v: v.astype(np.int32), {"mul", "op"}, "mul"
    if name == "relu_mul_argmax":  # the rounding is stored by 'relu'; the FP16 Mul by 1 passes it on exactly
        m = _model([helper.make_node("Relu", ["x"], ["r"], name="relu"), mul("r"),
                    helper.make_node("ArgMax", ["xm"], ["o"], name="op", axis=1, keepdims=0)],
                   [("x", F, [4, 3])], [("o", I64, [4])], ONE)
        return m, {"x": x}, lambda v: np.argmax(v, axis=1), {"relu", "mul", "op"}, "relu"
    raise ValueError(name)


CASES = ["argmax", "argmin", "topk", "greater", "cast_int", "relu_mul_argmax"]


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_integer_output_of_fp16_stored_data_names_the_writer_and_the_advice_passes(tmp_path, name):
    model, feeds, fn, keep_want, origin = case(name)
    x = feeds["x"]
    (ref,) = reference(model, feeds)
    # preconditions, independently: the op is right on the exact values, flips on them rounded to FP16
    np.testing.assert_array_equal(fn(x), ref)
    rate = float(np.mean(fn(fp16(x)) == ref))
    assert rate < 1.0
    folder = save(tmp_path, model, feeds)
    rc, summary, findings = compare(folder, "a", "--precision-mode", "force_fp16")
    assert rc == 1 and summary["verdict"] == "FAIL"
    assert summary["first_divergence"]["node"] == origin
    (first,) = by_kind(findings, "first_divergence")
    assert first["subject"] == origin
    rec = first["recommendation"]
    assert "ExactMatchRate" in rec and "cosine" not in rec.lower() and "nan" not in rec.split()
    ev = first["evidence"]["storage_rounding"]
    assert ev["metric"] == "ExactMatchRate" and ev["consumer_node"] == "op"
    assert ev["stored_value"] == pytest.approx(rate) and ev["exact_value"] == 1.0
    keep = first["evidence"]["keep_dtype"]
    assert set(keep) == keep_want
    assert all(f"'{n}'" in rec for n in keep_want)
    # applying the advice (the CLI again, with that keep_dtype) passes
    rc, summary, findings = compare(folder, "b", "--precision-mode", "force_fp16", keep=keep)
    assert rc == 0 and summary["verdict"] == "PASS", summary["reasons"]
    assert not by_kind(findings, "first_divergence")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["argmax", "greater", "relu_mul_argmax"])
def test_after_keeping_only_the_integer_op_the_advice_names_the_writer_and_passes(tmp_path, name):
    """The tester's loop: keep_dtype ['op'] (an FP32 ArgMax reading FP16-stored data) still FAILs; the finding
    names the FP16 writer(s) with ExactMatchRate, and adding them passes."""
    model, feeds, fn, keep_want, origin = case(name)
    (ref,) = reference(model, feeds)
    rate = float(np.mean(fn(fp16(feeds["x"])) == ref))
    folder = save(tmp_path, model, feeds)
    rc, summary, findings = compare(folder, "a", "--precision-mode", "force_fp16", keep=["op"])
    assert rc == 1 and summary["first_divergence"]["node"] == origin
    (first,) = by_kind(findings, "first_divergence")
    rec = first["recommendation"]
    assert "ExactMatchRate" in rec and "cosine" not in rec.lower()
    assert first["evidence"]["storage_rounding"]["stored_value"] == pytest.approx(rate)
    added = first["evidence"]["keep_dtype"]
    assert set(added) == keep_want - {"op"}  # 'op' already runs in FP32
    rc, summary, _ = compare(folder, "b", "--precision-mode", "force_fp16", keep=["op", *added])
    assert rc == 0 and summary["verdict"] == "PASS", summary["reasons"]


def test_integer_op_reading_an_fp32_graph_input_keeps_the_op_itself(tmp_path):
    """Control: ArgMax straight on the graph input (FP32, cast to FP16 at the ArgMax's input): keeping the
    ArgMax in FP32 is the whole fix, no writer upstream is blamed."""
    model = _model([helper.make_node("ArgMax", ["x"], ["o"], name="op", axis=1, keepdims=0)],
                   [("x", F, [4, 3])], [("o", I64, [4])], {})
    feeds = {"x": TIES}
    (ref,) = reference(model, feeds)
    assert (np.argmax(fp16(TIES), axis=1) != ref).any()
    folder = save(tmp_path, model, feeds)
    rc, summary, findings = compare(folder, "a", "--precision-mode", "force_fp16")
    assert rc == 1 and summary["first_divergence"]["node"] == "op"
    (first,) = by_kind(findings, "first_divergence")
    assert first["evidence"]["keep_dtype"] == ["op"] and "storage_rounding" not in first["evidence"]
    rc, summary, _ = compare(folder, "b", "--precision-mode", "force_fp16", keep=["op"])
    assert rc == 0 and summary["verdict"] == "PASS"


# ------------------------------------------------------------------ 2. where an FP16 overflow happens
def overflow_finding(findings):
    (f,) = by_kind(findings, "fp16_overflow")
    return f


def shown(v: float) -> str:
    """How a |x| past 65504 reads in a message: the whole number rounded up."""
    return str(math.ceil(v))


@pytest.mark.slow
@pytest.mark.parametrize("shape, scale", [((4, 8), 5e4), ((2, 16), 3e4)])
def test_overflow_at_an_fp16_kernel_output(tmp_path, shape, scale):
    x = np.random.default_rng(0).uniform(2.5, 3.0, shape).astype(np.float32)
    model = _model([helper.make_node("Mul", ["x", "s"], ["a"], name="up"),
                    helper.make_node("Relu", ["a"], ["r"], name="relu"),
                    helper.make_node("Mul", ["r", "t"], ["y"], name="down")],
                   [("x", F, list(shape))], [("y", F, list(shape))],
                   {"s": np.array(scale, np.float32), "t": np.array(1e-4, np.float32)})
    a = x * np.float32(scale)
    assert np.abs(a).max() > FP16_MAX > np.abs(reference(model, {"x": x})[0]).max()
    folder = save(tmp_path, model, {"x": x})
    rc, summary, findings = compare(folder, "a", "--precision-mode", "force_fp16")
    assert rc == 1
    f = overflow_finding(findings)
    site = f["evidence"]["overflow"]
    assert f["subject"] == "up" and site["where"] == "output" and site["tensor"] == "a"
    assert site["golden_absmax"] == pytest.approx(float(np.abs(a).max()), rel=1e-7) and site["golden_absmax"] > FP16_MAX
    assert shown(site["golden_absmax"]) in f["recommendation"] and "output of 'up'" in f["recommendation"]
    # 'relu' and 'down' read values past 65504 too: kept with 'up', or they would cast them to FP16 again
    assert set(f["evidence"]["keep_dtype"]) == {"up", "relu", "down"}
    rc, summary, findings = compare(folder, "b", "--precision-mode", "force_fp16", keep=f["evidence"]["keep_dtype"])
    assert rc == 0 and summary["verdict"] == "PASS", summary["reasons"]
    assert not by_kind(findings, "fp16_overflow")


def m2(n=16, gain=300.0, span=400.0):
    """x -> MatMul 'mm1' (x gain) -> Relu 'relu' -> MatMul 'mm2' (x 1e-3) -> y (the tester's m2.onnx)."""
    model = _model([helper.make_node("MatMul", ["x", "W"], ["a"], name="mm1"),
                    helper.make_node("Relu", ["a"], ["b"], name="relu"),
                    helper.make_node("MatMul", ["b", "W2"], ["y"], name="mm2")],
                   [("x", F, [2, n])], [("y", F, [2, n])],
                   {"W": (np.eye(n) * gain).astype(np.float32), "W2": (np.eye(n) * 1e-3).astype(np.float32)})
    x = np.linspace(-span, span, 2 * n).reshape(2, n).astype(np.float32)
    return model, {"x": x}


@pytest.mark.slow
@pytest.mark.parametrize("n, gain, span, args, keep", [
    (16, 300.0, 400.0, [], ["relu"]),  # the tester's case: mm1+relu fused, FP32 because 'relu' is kept
    (8, 500.0, 200.0, ["--precision-mode", "force_fp16", "--fusion-level", "0"], ["mm1", "relu"]),
])
def test_overflow_at_the_cast_of_an_fp32_value_into_an_fp16_consumer(tmp_path, n, gain, span, args, keep):
    model, feeds = m2(n, gain, span)
    b = np.maximum(feeds["x"] @ (np.eye(n, dtype=np.float32) * np.float32(gain)), 0)
    (y,) = reference(model, feeds)
    assert np.abs(b).max() > FP16_MAX > np.abs(y).max()
    folder = save(tmp_path, model, feeds)
    rc, summary, findings = compare(folder, "a", *args, keep=keep)
    assert rc == 1
    f = overflow_finding(findings)
    site = f["evidence"]["overflow"]
    assert f["subject"] == "mm2" and site["where"] == "input_cast" and site["tensor"] == "b"
    assert site["producer"] == "relu"
    assert site["golden_absmax"] == pytest.approx(float(np.abs(b).max()), rel=1e-6) and site["golden_absmax"] > FP16_MAX
    rec = f["recommendation"]
    assert "input of 'mm2'" in rec and shown(site["golden_absmax"]) in rec and "65504" in rec
    # the evidence holds no contradiction: the value past FP16 max is the input's, not the output's
    assert f["evidence"]["GoldenAbsMax"] == pytest.approx(float(np.abs(y).max()), rel=1e-5)
    assert f["evidence"]["keep_dtype"] == ["mm2"] and "keep 'mm2' in FP32" in rec
    rc, summary, findings = compare(folder, "b", *args, keep=keep + f["evidence"]["keep_dtype"])
    assert rc == 0 and summary["verdict"] == "PASS", summary["reasons"]
    assert not by_kind(findings, "fp16_overflow")


@pytest.mark.slow
def test_overflow_at_the_cast_of_a_graph_input(tmp_path):
    x = np.random.default_rng(1).uniform(7e4, 1e5, (3, 5)).astype(np.float32)
    model = _model([helper.make_node("Mul", ["x", "s"], ["y"], name="shrink")], [("x", F, [3, 5])],
                   [("y", F, [3, 5])], {"s": np.array(1e-3, np.float32)})
    folder = save(tmp_path, model, {"x": x})
    rc, _, findings = compare(folder, "a", "--precision-mode", "force_fp16")
    assert rc == 1
    f = overflow_finding(findings)
    site = f["evidence"]["overflow"]
    assert (site["where"], site["tensor"], site["producer"]) == ("input_cast", "x", "")
    assert site["golden_absmax"] == pytest.approx(float(x.max()), rel=1e-7)
    assert "graph input 'x'" in f["recommendation"] and shown(float(x.max())) in f["recommendation"]
    rc, summary, findings = compare(folder, "b", "--precision-mode", "force_fp16", keep=f["evidence"]["keep_dtype"])
    assert rc == 0 and summary["verdict"] == "PASS" and not by_kind(findings, "fp16_overflow")


@pytest.mark.slow
def test_overflow_in_the_accumulation(tmp_path):
    n = 2048
    x = np.random.default_rng(0).uniform(0, 100, (4, n)).astype(np.float32)
    model = _model([helper.make_node("ReduceMean", ["x"], ["y"], name="rm", axes=[1], keepdims=1)],
                   [("x", F, [4, n])], [("y", F, [4, 1])], {})
    sums = x.astype(np.float64).sum(1)
    assert np.abs(x).max() < FP16_MAX < sums.max() and np.abs(sums / n).max() < FP16_MAX
    folder = save(tmp_path, model, {"x": x})
    rc, _, findings = compare(folder, "a", "--precision-mode", "force_fp16")
    assert rc == 1
    f = overflow_finding(findings)
    site = f["evidence"]["overflow"]
    assert site["where"] == "accumulation" and site["golden_absmax"] == pytest.approx(sums.max(), rel=1e-9)
    assert shown(sums.max()) in f["recommendation"]
    assert f["evidence"]["keep_dtype"] == ["rm"]
    rc, summary, findings = compare(folder, "b", "--precision-mode", "force_fp16", keep=f["evidence"]["keep_dtype"])
    assert rc == 0 and summary["verdict"] == "PASS" and not by_kind(findings, "fp16_overflow")


def _fake(kernels, tensors, graph_inputs=()):
    return SimpleNamespace(kernels=kernels, tensors={n: SimpleNamespace(name=n, dtype=d) for n, d in tensors.items()},
                           graph_inputs=list(graph_inputs))


def _k(name, nodes, inputs, outputs, internal=(), precision="fp16"):
    return SimpleNamespace(name=name, nodes=list(nodes), inputs=list(inputs), outputs=list(outputs),
                           internal=list(internal), precision=precision, cast_of=None, op_class="elementwise",
                           implmode="high_precision", fusion="ub", exec_nodes=None, rule="SomeFusion")


