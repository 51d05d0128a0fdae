"""Round 5: where a divergence starts when FP16 *storage* is the cause, what the advice changes, the minimal
reproducer, and the noise allowance of FP32 kernels downstream of FP16 data.

Fault kinds covered (each over several shapes, fused and unfused plans):

1. Storage origin: an FP32 kernel (Softmax) fed by an FP16-stored tensor whose rounding destroys its result
   (logits offset by ~2e4: the FP16 step there is 16, larger than the logits' spread). The origin is the FP16
   producer, the advice keeps it in FP32 (never keep_dtype on the FP32 Softmax), and the advice makes the
   model PASS.
2. An FP32 origin kernel that is wrong on exact inputs (a planted compile fault): no keep_dtype advice.
3. Reproducer: the origin read FP16-stored inputs in the full plan (Mul x30000 after an FP16 MatMul, FP16
   overflow), the storage-origin case, and the plain case (origin reads the graph input).
4. An FP32 kernel downstream of FP16 data inherits its inputs' noise allowance (x30000 then /30000 in FP32
   after an FP16 MatMul): PASS; genuine faults downstream of FP16 data still flag.

Expected values come from onnxruntime (faultkinds.reference) and numpy, never from the toolkit's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.faultkinds import builders as fk
from toolkit.config import Config
from toolkit.diagnose import diagnose, prepare

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TIMEOUT_S = 300


# ------------------------------------------------------------------ helpers (independent of the toolkit)
def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def softmax_offset(rows=4, dim=64, offset=20000.0, seed=0):
    """x[rows,dim] -> MatMul 'proj' (W ~ N(0,1)*0.5) -> Add 'offset' (+offset) -> Softmax 'sm' -> p."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, dim)) * 0.5).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["logits"], name="proj"),
                helper.make_node("Add", ["logits", "off"], ["l2"], name="offset"),
                helper.make_node("Softmax", ["l2"], ["p"], name="sm", axis=-1)],
               [("x", [rows, dim])], [("p", [rows, dim])], {"W": w, "off": np.array(offset, np.float32)})
    x = fk.fp16_exact(rng.random((rows, dim), dtype=np.float32))
    return m, {"x": x}


def scale_chain(rows=4, dim=64, factor=30000.0, seed=0, relu=True):
    """x -> MatMul 'mm' -> Mul 'scale' (x factor) -> Div 'unscale' (/ factor) -> [Relu 'relu'] -> MatMul 'mm2' -> y."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, dim)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Mul", ["mm", "big"], ["scaled"], name="scale"),
             helper.make_node("Div", ["scaled", "big2"], ["unscaled"], name="unscale")]
    last = "unscaled"
    if relu:
        nodes.append(helper.make_node("Relu", ["unscaled"], ["r"], name="relu"))
        last = "r"
    nodes.append(helper.make_node("MatMul", [last, "W2"], ["y"], name="mm2"))
    m = _model(nodes, [("x", [rows, dim])], [("y", [rows, dim])],
               {"W": w, "big": np.array(factor, np.float32), "big2": np.array(factor, np.float32), "W2": w.T.copy()})
    x = fk.fp16_exact(rng.standard_normal((rows, dim)).astype(np.float32))
    return m, {"x": x}


def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def run_diag(tmp_path, model, feeds, stem="m", **cfg):
    tmp_path.mkdir(parents=True, exist_ok=True)
    mp, ip = tmp_path / f"{stem}.onnx", tmp_path / f"{stem}.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    return diagnose(prepare(str(mp), str(ip)), Config(**cfg))


def rows(diag):
    return diag.table.set_index("TensorName")


def npuscope(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"))


def check_metrics_consistent(table):
    """Abnormal => AbnormalMetrics non-empty; never Abnormal within the expected noise (the default lines it
    crossed stay listed); otherwise a listed line makes the tensor abnormal."""
    for _, r in table.iterrows():
        listed = list(r["AbnormalMetrics"]) if isinstance(r["AbnormalMetrics"], (list, tuple)) else []
        assert not r["Abnormal"] or listed, r["TensorName"]
        if r["WithinExpectedNoise"] is True:
            assert not r["Abnormal"], r["TensorName"]
        elif listed:
            assert r["Abnormal"], (r["TensorName"], listed)


# ------------------------------------------------------------------ 1. storage origin
STORAGE_CASES = [(4, 64, 20000.0, 2), (4, 64, 20000.0, 0), (8, 32, 30000.0, 2), (2, 128, -25000.0, 0)]


@pytest.mark.parametrize("rows_, dim, offset, level", STORAGE_CASES)
def test_fp16_storage_that_destroys_an_fp32_softmax_is_the_origin(tmp_path, rows_, dim, offset, level):
    model, feeds = softmax_offset(rows_, dim, offset)
    ref = fk.reference(model, feeds)
    # precondition, independently: Softmax is exact on the reference logits and destroyed by their FP16 rounding
    assert cosine(softmax(ref["l2"].astype(np.float64)), ref["p"]) > 0.999999
    stored = ref["l2"].astype(np.float16).astype(np.float32)
    assert cosine(softmax(stored.astype(np.float64)), ref["p"]) < 0.99

    diag, extra = run_diag(tmp_path, model, feeds, fusion_level=level)
    plan = extra["compiled"].plan
    kernels = {k.name: k for k in plan.kernels}
    producer = plan.kernel_of_tensor()["l2"]
    assert producer.precision == "fp16" and kernels["sm"].precision == "fp32"
    assert diag.summary["verdict"] == "FAIL"
    first = diag.summary["first_divergence"]
    assert first["node"] == "offset" and first["kernel"] == producer.name and first["precision"] == "fp16"
    t = rows(diag)
    # (a) the FP32 Softmax re-run on the exact reference logits is exact: not locally abnormal
    assert t.loc["p", "LocalAbnormal"] is False and t.loc["p", "Role"] == "propagated"
    assert t.loc["p", "LocalCosineSimilarity"] == pytest.approx(cosine(softmax(ref["l2"].astype(np.float64)),
                                                                        ref["p"]), abs=1e-6)
    assert t.loc["l2", "Role"] == "origin" and t.loc["l2", "Abnormal"] and t.loc["l2", "WithinExpectedNoise"] is False
    # (c) AbnormalMetrics agrees with Abnormal on every row
    check_metrics_consistent(diag.table)
    # (b) no keep_dtype advice for the FP32 Softmax; the finding names the FP16 producer
    origin = next(f for f in diag.findings if f.kind == "first_divergence")
    assert origin.subject == "offset" and "keep 'sm'" not in origin.recommendation
    assert all("keep 'sm'" not in f.recommendation for f in diag.findings)
    assert origin.evidence["storage_rounding"]["consumer_node"] == "sm"
    # applying the advice (keep the producer kernel's nodes in FP32) makes the model pass
    keep = list(producer.nodes)
    fixed, fextra = run_diag(tmp_path / "fixed", model, feeds, fusion_level=level, keep_dtype=keep)
    assert fixed.summary["verdict"] == "PASS", fixed.summary["reasons"]
    assert cosine(fextra["npu_outputs"]["p"], ref["p"]) > 0.9999


def test_keep_dtype_on_the_fp32_softmax_changes_nothing_and_is_not_advised(tmp_path):
    """The tester's loop: keep_dtype ['sm'] leaves the plan's result as it was; the advice is elsewhere."""
    model, feeds = softmax_offset()
    before, _ = run_diag(tmp_path / "a", model, feeds, fusion_level=0)
    after, extra = run_diag(tmp_path / "b", model, feeds, fusion_level=0, keep_dtype=["sm"])
    ref = fk.reference(model, feeds)
    assert cosine(extra["npu_outputs"]["p"], ref["p"]) < 0.99
    for d in (before, after):
        assert d.summary["first_divergence"]["node"] == "offset"
        assert all("keep 'sm'" not in f.recommendation for f in d.findings)


# ------------------------------------------------------------------ 2. FP32 origin wrong on exact inputs
@pytest.mark.parametrize("cfg", [{"precision_mode": "force_fp32", "fusion_level": 0},
                                 {"precision_mode": "force_fp32"},  # fused: mm+scale+unscale+relu
                                 {"fusion_level": 0, "keep_dtype": ["unscale"]}])
def test_fp32_origin_wrong_on_exact_inputs_gets_no_keep_dtype_advice(tmp_path, cfg):
    model, feeds = scale_chain(factor=8.0)
    with fk.planted_pass("unscale", 1.5):
        diag, extra = run_diag(tmp_path, model, feeds, **cfg)
    first = diag.summary["first_divergence"]
    k = {k.name: k for k in extra["compiled"].plan.kernels}[first["kernel"]]
    assert k.precision == "fp32" and "unscale" in k.nodes
    t = rows(diag)
    assert t.loc[first["tensor"], "Role"] == "origin" and t.loc[first["tensor"], "LocalAbnormal"] is True
    origin = next(f for f in diag.findings if f.kind == "first_divergence")
    assert "keep_dtype cannot change it" in origin.recommendation
    assert "in FP32 (keep_dtype)" not in origin.recommendation  # neither the kernel nor its producer
    if k.rule:
        assert f"switch its fusion {k.rule} off" in origin.recommendation


# ------------------------------------------------------------------ 3. the reproducer
def _cli_diag(folder: Path, model, feeds, *args):
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "model.onnx")
    np.savez(folder / "in.npz", **feeds)
    proc = npuscope("diagnose", "model.onnx", "--inputs", "in.npz", "--out", "r", *args, cwd=folder)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return folder / "r", json.loads((folder / "r" / "summary.json").read_text())


def _run_repro(report: Path):
    repro = report / "repro"
    proc = npuscope("diagnose", "model.onnx", "--inputs", "inputs.npz", "--config", "config.json", "--out",
                    report / "rr", cwd=repro)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return json.loads((report / "rr" / "summary.json").read_text())


@pytest.mark.parametrize("factor, args, cast", [
    (30000.0, ["--fusion-level", "0"], True),  # gray Mul follows its input: FP16 only if 'mm' enters as FP16
    (40000.0, ["--fusion-level", "0", "--precision-mode", "force_fp16"], False),  # FP16 anyway: no Cast needed
])
def test_repro_keeps_fp16_storage_of_the_origin_inputs(tmp_path, factor, args, cast):
    model, feeds = scale_chain(factor=factor)
    ref = fk.reference(model, feeds)
    assert np.abs(ref["scaled"]).max() > 65504 > np.abs(ref["mm"]).max()  # precondition: 'scale' overflows FP16
    report, summary = _cli_diag(tmp_path, model, feeds, *args)
    assert summary["verdict"] == "FAIL" and summary["first_divergence"]["node"] == "scale"
    ins = np.load(report / "repro" / "inputs.npz")
    (name,) = ins.files
    sub = onnx.load(report / "repro" / "model.onnx")
    if cast:  # 'mm' enters as FP16, as the full plan stores it
        assert ins[name].dtype == np.float16
        np.testing.assert_array_equal(ins[name], ref["mm"].astype(np.float16))
        assert [n.op_type for n in sub.graph.node] == ["Cast", "Mul"] and sub.graph.node[0].output[0] == "mm"
    else:
        assert name == "mm" and ins[name].dtype == np.float32
        np.testing.assert_array_equal(ins[name], ref["mm"])
        assert [n.op_type for n in sub.graph.node] == ["Mul"]
    again = _run_repro(report)
    assert again["verdict"] == "FAIL"
    assert again["first_divergence"]["node"] == "scale" and again["first_divergence"]["kind"] == "fp16_overflow"


def test_repro_of_a_storage_origin_keeps_the_consumer(tmp_path):
    model, feeds = softmax_offset()
    report, summary = _cli_diag(tmp_path, model, feeds)
    assert summary["first_divergence"]["node"] == "offset"
    sub = onnx.load(report / "repro" / "model.onnx")
    assert [n.name for n in sub.graph.node] == ["proj", "offset", "sm"]
    again = _run_repro(report)
    assert again["verdict"] == "FAIL" and again["first_divergence"]["node"] == "offset"


def test_repro_of_an_origin_reading_the_graph_input(tmp_path):
    """The plain case: the origin reads a graph input (FP32 as declared): no Cast is added."""
    rng = np.random.default_rng(3)
    model = _model([helper.make_node("Mul", ["x", "big"], ["scaled"], name="scale"),
                    helper.make_node("Relu", ["scaled"], ["y"], name="relu")],
                   [("x", [4, 16])], [("y", [4, 16])], {"big": np.array(5e4, np.float32)})
    feeds = {"x": fk.fp16_exact(rng.uniform(0.5, 3.0, (4, 16)).astype(np.float32))}
    assert np.abs(fk.reference(model, feeds)["scaled"]).max() > 65504
    report, summary = _cli_diag(tmp_path, model, feeds, "--precision-mode", "force_fp16")
    assert summary["first_divergence"]["node"] == "scale"
    ins = np.load(report / "repro" / "inputs.npz")
    assert ins.files == ["x"] and ins["x"].dtype == np.float32
    np.testing.assert_array_equal(ins["x"], feeds["x"])
    assert [n.op_type for n in onnx.load(report / "repro" / "model.onnx").graph.node] == ["Mul"]
    again = _run_repro(report)
    assert again["verdict"] == "FAIL" and again["first_divergence"]["node"] == "scale"


def test_extract_subgraph_casts_only_fp16_stored_inputs():
    from toolkit.compare.repro import extract_subgraph

    model, feeds = scale_chain()
    ref = fk.reference(model, feeds)
    sub, ins, exp = extract_subgraph(model, ["unscale"], ref, stored_fp16={"mm"})
    assert list(ins) == ["scaled"] and ins["scaled"].dtype == np.float32  # 'scaled' not FP16-stored: as is
    sub, ins, exp = extract_subgraph(model, ["unscale"], ref, stored_fp16={"scaled"})
    assert list(ins) == ["scaled__fp16"] and ins["scaled__fp16"].dtype == np.float16
    onnx.checker.check_model(sub)
    np.testing.assert_array_equal(ins["scaled__fp16"], ref["scaled"].astype(np.float16))
    import onnxruntime as ort

    sess = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"])
    out = sess.run(None, ins)[0]
    np.testing.assert_allclose(out, ref["scaled"].astype(np.float16).astype(np.float32) / np.float32(30000.0))


# ------------------------------------------------------------------ 4. FP32 kernels downstream of FP16 data
@pytest.mark.parametrize("rows_, dim, factor, relu", [(4, 64, 30000.0, True), (8, 32, 40000.0, False),
                                                      (2, 128, 50000.0, True)])
def test_fp32_kernel_downstream_of_fp16_inherits_the_noise_allowance(tmp_path, rows_, dim, factor, relu):
    model, feeds = scale_chain(rows_, dim, factor, relu=relu)
    ref = fk.reference(model, feeds)
    assert np.abs(ref["scaled"]).max() > 65504  # kept in FP32 because FP16 would overflow
    diag, extra = run_diag(tmp_path, model, feeds, fusion_level=0, keep_dtype=["scale"])
    kernels = extra["compiled"].plan.kernel_of_tensor()
    assert kernels["mm"].precision == "fp16" and kernels["scaled"].precision == "fp32"
    dev = extra["device"]
    mm_err = np.abs(dev["mm"].astype(np.float64) - ref["mm"])
    sc_err = np.abs(dev["scaled"].astype(np.float64) - ref["scaled"])
    # independently: 'scaled' carries exactly the FP16 error of 'mm', times the factor; an absolute line
    # (RMSE > 1) is crossed only because the values are large
    np.testing.assert_allclose(sc_err, mm_err * factor, rtol=1e-3, atol=factor * 1e-6)
    assert np.sqrt(np.mean(sc_err ** 2)) > 1.0
    assert diag.summary["verdict"] == "PASS", diag.summary["reasons"]
    t = rows(diag)
    assert t.loc["scaled", "WithinExpectedNoise"] is True and not t.loc["scaled", "Abnormal"]
    check_metrics_consistent(diag.table)


@pytest.mark.parametrize("fault", [1.01, 1.1])
def test_genuine_faults_downstream_of_fp16_data_still_flag(tmp_path, fault):
    model, feeds = scale_chain(factor=30000.0)
    ref = fk.reference(model, feeds)
    # a planted error in the FP32 'unscale': beyond the inherited allowance (relative 4e-3 of the FP16 MatMul)
    with fk.planted_pass("unscale", fault):
        diag, extra = run_diag(tmp_path / "planted", model, feeds, fusion_level=0, keep_dtype=["scale"])
    dev = extra["device"]["unscaled"].astype(np.float64)
    rel = np.abs(dev - ref["unscaled"]) / np.maximum(np.abs(ref["unscaled"]), 1e-3)
    assert np.median(rel) > 0.9 * (fault - 1)  # the fault is there
    t = rows(diag)
    assert t.loc["unscaled", "WithinExpectedNoise"] is False
    red = np.linalg.norm(dev - ref["unscaled"]) / np.linalg.norm(ref["unscaled"])
    if red > 0.05:  # crosses the RelativeEuclideanDistance line: abnormal, whatever the noise
        assert t.loc["unscaled", "Abnormal"] and diag.summary["verdict"] != "PASS"
    else:
        assert fault == 1.01


def test_softmax_destroyed_by_fp16_storage_keeps_its_output_abnormal(tmp_path):
    """No inherited allowance hides the Softmax destroyed by its FP16-stored input: the output still fails."""
    model, feeds = softmax_offset(4, 64, 20000.0)
    diag, _ = run_diag(tmp_path, model, feeds, fusion_level=0)
    t = rows(diag)
    assert t.loc["p", "Abnormal"] and t.loc["p", "WithinExpectedNoise"] is False
    assert diag.summary["verdict"] == "FAIL"
