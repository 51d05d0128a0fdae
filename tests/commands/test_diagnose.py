"""The diagnose / compare command (toolkit/commands/diagnose.py), in process: reproducer files, dataset runs
(streaming, aggregation checked against independent metrics, Ray == local, resume, corrupted inputs, HTML),
dataset and single runs agreeing on origins, a kernel failing at run time, the model file recorded, and
diagnose on the real PP-OCRv4 models."""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
import shutil
import weakref
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.dataset.helpers import FP16, _corrupt, api_compare, finite_cosine, inputs_csv, tiny_model, write_inputs
from tests.faultkinds import builders as fk
from tests.graphs import N, make_model
from toolkit import zoo
from toolkit.commands.diagnose import diagnose_command
from toolkit.config.schema import Config
from toolkit.diagnose import diagnose, prepare
from toolkit.inputs import binarize_iou, ctc_greedy_decode, read_ctc_characters, realistic_inputs
from toolkit.samples import SAMPLES


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    model = tiny_model(root / "tiny.onnx")
    xs = write_inputs(root / "in", 8)
    return {"root": root, "model": model, "inputs": root / "in", "xs": xs}


# ---------------------------------------------------------------------------------------------- streaming
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_inputs_are_loaded_one_at_a_time(case, tmp_path, monkeypatch):
    """The loader is called once per input, just before that input is evaluated (after the previous result was
    written), and no earlier input's arrays are alive when the next is loaded."""
    from toolkit.dataset import worker
    from toolkit.dataset.store import Store

    events, refs, alive_at_load = [], [], []
    real_load, real_write = worker.load_feed, Store.write

    def load(name, data, specs):
        gc.collect()
        alive_at_load.append(sum(r() is not None for r in refs))
        feed = real_load(name, data, specs)
        refs.extend(weakref.ref(a) for a in feed.values())
        events.append(("load", name))
        return feed

    def write(self, rec):
        events.append(("write", rec.meta["input"]))
        return real_write(self, rec)

    monkeypatch.setattr(worker, "load_feed", load)
    monkeypatch.setattr(Store, "write", write)
    api_compare(case["model"], case["inputs"], tmp_path / "out")
    names = sorted(p.name for p in case["inputs"].glob("*.npz"))
    assert events == [e for n in names for e in (("load", n), ("write", n))]
    assert alive_at_load == [0] * len(names), alive_at_load  # the previous input's arrays are freed


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dataset_output_row_matches_independent_metrics(case, tmp_path):
    """dataset.csv's output row against cosines computed here: onnxruntime FP32 vs the engine's NPU run."""
    import onnxruntime as ort

    from toolkit.engine import simulate

    res = api_compare(case["model"], case["inputs"], tmp_path / "out", percentiles="25,75")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the reference's own setting
    ref = ort.InferenceSession(str(case["model"]), so, providers=["CPUExecutionProvider"])
    names = sorted(p.name for p in case["inputs"].glob("*.npz"))
    cos, overflow = [], 0
    for name in names:
        x = np.load(case["inputs"] / name)["x"]
        golden = ref.run(["y"], {"x": x})[0]
        npu = simulate(onnx.load(case["model"]), {"x": x}, Config.from_dict(FP16)).outputs["y"]
        cos.append(finite_cosine(npu, golden))
        overflow += bool(np.any(~np.isfinite(npu) & np.isfinite(golden)))  # FP16 accumulation overflow
    cos = np.array(cos)
    row = pd.read_csv(tmp_path / "out" / "dataset.csv").set_index("TensorName").loc["y"]
    assert row["Inputs"] == len(names)
    assert overflow >= 1 and row["OverFlowInputs"] == overflow
    assert row["CosineSimilarity_worst"] == pytest.approx(cos.min(), abs=1e-12)
    assert row["CosineSimilarity_worst_input"] == names[int(cos.argmin())]
    assert row["CosineSimilarity_mean"] == pytest.approx(cos.mean(), abs=1e-12)
    assert row["CosineSimilarity_p25"] == pytest.approx(np.percentile(cos, 25), abs=1e-12)
    assert row["CosineSimilarity_p75"] == pytest.approx(np.percentile(cos, 75), abs=1e-12)
    assert res["dataset"]["facts"]["worst_input"] in names
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["dataset"]["inputs"] == len(names) and summary["dataset"]["aggregated"] == len(names)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.slow
def test_ray_equals_local(case, tmp_path):
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'npuscope[ray]')")
    local = api_compare(case["model"], case["inputs"], tmp_path / "local")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        remote = api_compare(case["model"], case["inputs"], tmp_path / "ray", ray="auto")
    finally:
        ray.shutdown()
    assert remote["dataset"]["facts"]["ray"] == "auto"
    assert (tmp_path / "local" / "dataset.csv").read_bytes() == (tmp_path / "ray" / "dataset.csv").read_bytes()
    pd.testing.assert_frame_equal(inputs_csv(tmp_path / "local"), inputs_csv(tmp_path / "ray"))
    assert local["verdict"] == remote["verdict"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_changed_input_is_evaluated_again(case, tmp_path):
    inputs = tmp_path / "in"
    write_inputs(inputs, 3)
    api_compare(case["model"], inputs, tmp_path / "out")
    np.savez(inputs / "in001.npz", x=np.zeros((1, 3, 64, 64), np.float32) + 0.5)
    res = api_compare(case["model"], inputs, tmp_path / "out")
    assert res["dataset"]["facts"]["evaluated_this_run"] == 1 and res["dataset"]["facts"]["resumed"]
    runs = [json.loads(line).get("input") for line in (tmp_path / "out" / "log.jsonl").read_text().splitlines()]
    assert [r for r in runs if r] == ["in000.npz", "in001.npz", "in002.npz", "in001.npz"]


# ------------------------------------------------------------------------------------------ faulty inputs
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_corrupted_inputs_are_rows_not_crashes(case, tmp_path):
    inputs = tmp_path / "in"
    write_inputs(inputs, 2)
    (inputs / "garbage.npz").write_bytes(b"not a zip")
    np.savez(inputs / "pickled.npz", x=np.array([{"a": 1}], dtype=object))
    np.savez(inputs / "wrong_shape.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    good = (inputs / "in000.npz").read_bytes()
    (inputs / "truncated.npz").write_bytes(good[: len(good) // 2])
    res = api_compare(case["model"], inputs, tmp_path / "out")
    table = pd.read_csv(tmp_path / "out" / "inputs.csv").set_index("Input")
    bad = ["garbage.npz", "pickled.npz", "truncated.npz", "wrong_shape.npz"]
    assert (table.loc[bad, "Status"] == "error").all() and (table.loc[bad, "Verdict"] == "ERROR").all()
    assert (table.loc[["in000.npz", "in001.npz"], "Status"] == "ok").all()
    assert "not an .npz" in table.loc["garbage.npz", "Reasons"] and "pickled" in table.loc["pickled.npz", "Reasons"]
    assert "shape" in table.loc["wrong_shape.npz", "Reasons"]
    assert res["verdict"] == "FAIL" and any("4 of 6 input(s) could not be evaluated" in r
                                            for r in res["diagnosis"].summary["reasons"])
    assert pd.read_csv(tmp_path / "out" / "dataset.csv").set_index("TensorName").loc["y", "Inputs"] == 2
    # the ship sentence is the dataset's (its verdict and reasons), not the worst evaluated input's
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["verdict"] == "FAIL" and summary["ship"].startswith("Cannot ship")
    assert "could not be evaluated" in summary["ship"] and "garbage.npz" in summary["ship"]
    assert summary["dataset"]["worst_input_ship"].startswith("Can")  # the worst evaluated input's own, kept apart
    assert any(line.strip() == summary["ship"] for line in res["summary"])


# ------------------------------------------------------------------------------------------------ reports
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_diagnose_html_has_the_dataset_section(case, tmp_path):
    api_compare(case["model"], case["inputs"], tmp_path / "out", html=True)
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert 'id="dataset"' in html and 'id="fig-dataset"' in html and 'id="table"' in html
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert f"worst input '{summary['dataset']['worst_input']}'" in summary["inputs"]


# ------------------------------------------------------------------------------- empty outputs (exact match)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_empty_outputs_on_both_sides_pass_and_are_not_the_worst_input(tmp_path):
    """detector_head on an all-zero feature map: onnxruntime itself returns boxes (0, 4) and scores (0,);
    the NPU agrees, so that input PASSes (CosineSimilarity 1 by convention) and another input is the worst."""
    import onnxruntime as ort

    from toolkit.samples import SAMPLES, detector_head_inputs

    feat = detector_head_inputs()["feat"]
    inputs = tmp_path / "in"
    inputs.mkdir()
    np.savez(inputs / "zeros.npz", feat=np.zeros_like(feat))
    for i in range(2):
        np.savez(inputs / f"d{i}.npz", feat=np.random.default_rng(i).normal(0, 1, feat.shape).astype(feat.dtype))
    ref = ort.InferenceSession(str(SAMPLES["detector_head"].path), providers=["CPUExecutionProvider"])
    golden = dict(zip([o.name for o in ref.get_outputs()], ref.run(None, {"feat": np.zeros_like(feat)})))
    assert golden["boxes"].shape == (0, 4) and golden["scores"].shape == (0,)  # the premise: empty on the reference
    res = api_compare("detector_head", inputs, tmp_path / "out", config={})
    table = pd.read_csv(tmp_path / "out" / "inputs.csv").set_index("Input")
    zero = table.loc["zeros.npz"]
    assert zero["Status"] == "ok" and zero["Verdict"] != "FAIL" and "could not be compared" not in zero["Reasons"]
    assert zero["boxes:CosineSimilarity"] == 1.0 and zero["boxes:MaxAbsoluteError"] == 0.0
    assert zero["scores:CosineSimilarity"] == 1.0
    assert res["dataset"]["facts"]["worst_input"] in ("d0.npz", "d1.npz")


# ------------------------------------------------------------------------------- invalid stored results
@pytest.fixture(scope="module")
def finished(case):
    out = case["root"] / "finished"
    api_compare(case["model"], case["inputs"], out)
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("kind", ["truncated", "zero_bytes", "garbage", "wrong_keys", "single_array", "directory",
                                  "other_inputs_result", "values_wrong_shape", "meta_not_json"])
def test_invalid_result_file_is_evaluated_again(case, finished, tmp_path, kind):
    import shutil

    from toolkit.dataset.store import Store

    out = tmp_path / "out"
    shutil.copytree(finished, out)
    store = Store(out)
    _corrupt(store.path_of("in003.npz"), kind, store.path_of("in004.npz"))
    res = api_compare(case["model"], case["inputs"], out)
    facts = res["dataset"]["facts"]
    assert facts["evaluated_this_run"] == 1 and [r["input"] for r in facts["redone"]] == ["in003.npz"]
    assert any("in003.npz" in line and "evaluated again" in line for line in res["summary"])
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e["name"] for e in log if e.get("event") == "invalid_result"] == ["in003.npz"]
    assert [e["input"] for e in log if "input" in e][-1] == "in003.npz"
    assert store.read("in003.npz") is not None
    assert (out / "dataset.csv").read_bytes() == (finished / "dataset.csv").read_bytes()
    pd.testing.assert_frame_equal(inputs_csv(out), inputs_csv(finished))


C02 = Path("/work/shared/cases/fp16/c02_decomposed_layernorm_pow_overflow")


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


# ------------------------------------------------------------------ the minimal reproducer
@pytest.fixture(scope="module")
def c02_report(tmp_path_factory):
    if not C02.is_dir():
        pytest.skip(f"{C02} not present")
    if not has_module("toolkit.core.csvjson"):
        pytest.skip("toolkit.core.csvjson not written yet")
    from toolkit import api

    out = tmp_path_factory.mktemp("c02") / "report"
    cfg = Config(precision_mode="force_fp16", fusion_level=0)
    res = api.diagnose_command(str(C02 / "model.onnx"), cfg, inputs=str(C02 / "inputs.npz"), out=str(out), html=False)
    return out, res, cfg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_reproducer_files(c02_report):
    out, res, _ = c02_report
    diag = res["diagnosis"]
    assert diag.summary["first_divergence"]["node"] == "ln_sq"
    repro = out / "repro"
    assert {"model.onnx", "inputs.npz", "config.json"} <= {p.name for p in repro.iterdir()}
    assert diag.summary["repro"] == "repro/model.onnx"
    sub = onnx.load(repro / "model.onnx")
    onnx.checker.check_model(sub, full_check=True)
    assert [n.name for n in sub.graph.node] == diag.summary["origin_nodes"] == ["ln_sq"]
    cfg = json.loads((repro / "config.json").read_text())
    assert cfg["precision_mode"] == "force_fp16" and cfg["fusion_level"] == 0
    # its inputs are the reference values of the original model at the subgraph's boundary
    full = fk.reference(onnx.load(C02 / "model.onnx"), dict(np.load(C02 / "inputs.npz")))
    with np.load(repro / "inputs.npz") as z:
        assert set(z.files) == {i.name for i in sub.graph.input}
        for name in z.files:
            np.testing.assert_array_equal(z[name], full[name])
    if (repro / "expected.npz").is_file():
        with np.load(repro / "expected.npz") as z:
            for name in z.files:
                np.testing.assert_allclose(z[name], full[name], rtol=1e-6)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_reproducer_alone_names_the_same_origin(c02_report):
    out, res, _ = c02_report
    repro = out / "repro"
    want = res["diagnosis"].summary["origin_nodes"]
    cfg = Config.load(repro / "config.json")
    diag, extra = diagnose(prepare(str(repro / "model.onnx"), str(repro / "inputs.npz")), cfg)
    assert diag.summary["first_divergence"]["node"] == res["diagnosis"].summary["first_divergence"]["node"]
    assert diag.summary["origin_nodes"] == want
    assert diag.summary["verdict"] == "FAIL"


FP32_CONFIG = Config(precision_mode="force_fp32")


def _model(nodes, inputs, outputs, inits=(), opset=17, ir_version=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model


def _vi(name, elem=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


def test_shapes_that_fail_only_at_run_time_are_one_model_error_in_diagnose(tmp_path):
    """The same kind through diagnose: a kernel failing on inputs the model cannot take is the model's error."""
    from toolkit import api
    from toolkit.core.errors import ModelError

    shape = numpy_helper.from_array(np.array([2, 8], np.int64), "s")
    m = _model([helper.make_node("Reshape", ["a", "s"], ["t"], name="rs"), helper.make_node("Relu", ["t"], ["y"])],
               [_vi("a", shape=(1, "n"))], [_vi("y", shape=(2, 8))], [shape])
    import onnx
    onnx.save(m, tmp_path / "rs.onnx")
    np.savez(tmp_path / "bad.npz", a=np.zeros((1, 12), np.float32))
    with pytest.raises(ModelError, match=r"cannot run inputs a\(1, 12\): onnxruntime fails on them too"):
        api.diagnose_command(str(tmp_path / "rs.onnx"), FP32_CONFIG, inputs=str(tmp_path / "bad.npz"),
                             out=str(tmp_path / "d"), html=False)
    assert not (tmp_path / "d").exists()


FP32 = {"precision_mode": "force_fp32"}


def _save_with_output(model, path: Path, out_type=onnx.TensorProto.FLOAT, out_shape=(1, 64)) -> Path:
    name = model.graph.output[0].name
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info(name, out_type, list(out_shape)))
    model.ir_version = 8
    onnx.save(model, path)
    return path


def elt_model(path: Path) -> Path:
    """z = (x*3 + 1000) - 1000 on a 1x64 input (the tester's elt.onnx)."""
    nodes = [N("Mul", ["x", "a"], ["m"], "mul"), N("Add", ["m", "b"], ["s"], "add"), N("Sub", ["s", "b"], ["z"], "sub")]
    return _save_with_output(make_model(nodes, [("x", [1, 64])], ["z"], {"a": np.array([3.0], np.float32),
                                                             "b": np.array([1000.0], np.float32)}), path)


def argmax_model(path: Path) -> Path:
    """y = ArgMax(x + 1000, axis 1) on a 4x16 input."""
    nodes = [N("Add", ["x", "b"], ["s"], "add"), N("ArgMax", ["s"], ["y"], "argmax", axis=1, keepdims=0)]
    return _save_with_output(make_model(nodes, [("x", [4, 16])], [("y", onnx.TensorProto.INT64)],
                            {"b": np.array([1000.0], np.float32)}), path, onnx.TensorProto.INT64, (4,))


def overflow_model(path: Path) -> Path:
    """y = (x * 30000) * 1e-4 on a 1x64 input."""
    nodes = [N("Mul", ["x", "a"], ["m"], "mul"), N("Mul", ["m", "c"], ["y"], "scale")]
    return _save_with_output(make_model(nodes, [("x", [1, 64])], ["y"], {"a": np.array([30000.0], np.float32),
                                                             "c": np.array([1e-4], np.float32)}), path)


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def f16(v):
    return np.asarray(v, np.float32).astype(np.float16)


def single(model: Path, npz: Path, out: Path, config: dict):
    from toolkit import api

    res = api.diagnose_command(str(model), Config.from_dict(config), inputs=str(npz), out=str(out), html=False)
    return res["diagnosis"]


def folder_run(model: Path, folder: Path, out: Path, config: dict) -> dict:
    from toolkit import api

    return api.diagnose_command(str(model), Config.from_dict(config), inputs=str(folder), out=str(out), html=False)


def signoff(model: Path, inputs: Path, out: Path, config: dict, tmp: Path):
    from toolkit import api

    policy = tmp / "pol.toml"
    policy.write_text("[layers]\nmax_abnormal = 0\n")
    res = api.signoff_command(str(model), str(policy), Config.from_dict(config), inputs=str(inputs), out=str(out),
                              html=False)
    return next(r for r in res["run"].results if r.name == "layers.max_abnormal")


def record_metas(out: Path) -> dict:
    metas = {}
    for f in sorted((out / "results").glob("*.npz")):
        with np.load(f) as z:
            m = json.loads(str(z["meta"]))
        metas[m["input"]] = m
    return metas


def abnormal_names(diag) -> list[str]:
    t = diag.table
    return t.loc[t["Abnormal"] | t["OverFlow"], "TensorName"].astype(str).tolist()


def check_agreement(tmp: Path, model: Path, inputs: dict[str, np.ndarray], config: dict) -> dict:
    """Run every path on ``inputs`` ({file name: x}) and assert they agree; returns the single diagnoses."""
    folder = tmp / "in"
    folder.mkdir()
    for name, x in inputs.items():
        np.savez(folder / name, x=x)
    singles = {name: single(model, folder / name, tmp / f"single-{name}", config) for name in inputs}
    ds = folder_run(model, folder, tmp / "dataset", config)
    rows = pd.read_csv(tmp / "dataset" / "inputs.csv", keep_default_na=False).set_index("Input")
    metas = record_metas(tmp / "dataset")
    for name, diag in singles.items():
        s = diag.summary
        fd = s["first_divergence"] or {}
        row = rows.loc[name]
        assert int(row["Abnormal"]) == s["counts"]["abnormal"], name
        assert int(row["OverFlow"]) == s["counts"]["overflow"], name
        assert row["FirstDivergence"] == fd.get("tensor", ""), name
        assert row["FirstDivergenceKind"] == fd.get("kind", ""), name
        counts = metas[name]["counts"]
        for k in ("compared", "abnormal", "overflow", "origins", "propagated"):
            assert counts[k] == s["counts"][k], (name, k)
        assert (metas[name]["first_divergence"] or {}).get("node", "") == fd.get("node", ""), name
    # the worst-input section is that input's own single diagnosis
    worst = ds["dataset"]["facts"]["worst_input"]
    wsum = ds["diagnosis"].summary
    assert wsum["counts"]["abnormal"] == singles[worst].summary["counts"]["abnormal"]
    assert (wsum["first_divergence"] or {}).get("node") == (singles[worst].summary["first_divergence"] or {}).get("node")
    assert int(rows.loc[worst, "Abnormal"]) == wsum["counts"]["abnormal"]
    # dataset.csv: a tensor is abnormal on as many inputs as single compares flag it on
    layers = pd.read_csv(tmp / "dataset" / "dataset.csv").set_index("TensorName")
    union = set()
    for name, diag in singles.items():
        union |= set(abnormal_names(diag))
    for t in layers.index:
        want = sum(t in abnormal_names(d) for d in singles.values())
        assert int(layers.loc[t, "AbnormalInputs"]) == want, t
    # signoff [layers]: over the folder, the tensors abnormal on any input; over one file, that file's
    so = signoff(model, folder, tmp / "so", config, tmp)
    assert sorted(so.evidence["tensors"]) == sorted(union)
    assert so.passed == (not union)
    first = next(iter(inputs))
    so1 = signoff(model, folder / first, tmp / "so1", config, tmp)
    assert so1.evidence["abnormal"] == singles[first].summary["counts"]["abnormal"]
    assert sorted(so1.evidence["tensors"]) == sorted(abnormal_names(singles[first]))
    return singles


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_storage_rounding_origin_agrees(tmp_path):
    model = elt_model(tmp_path / "elt.onnx")
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64) + np.float32(0.0001)
    # numpy: s stored in FP16 is close (cosine ~1), but z = s16 - 1000 computed from it is destroyed
    s_ref = x.astype(np.float64) * 3 + 1000
    s16 = f16(f16(f16(x) * f16(3)) + f16(1000)).astype(np.float64)
    z_ref = s_ref - 1000
    assert cosine(s16, s_ref) > 0.9999
    red = np.linalg.norm((s16 - 1000) - z_ref) / np.linalg.norm(z_ref)
    assert red > 0.05  # beyond the default RelativeEuclideanDistance line
    singles = check_agreement(tmp_path, model, {"a.npz": x}, FP16)
    diag = singles["a.npz"]
    assert sorted(abnormal_names(diag)) == ["s", "z"]
    assert diag.summary["first_divergence"]["node"] == "add"
    roles = dict(zip(diag.table["TensorName"], diag.table["Role"]))
    assert roles["s"] == "origin" and roles["z"] == "propagated"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_fp16_tie_flipping_argmax_agrees(tmp_path):
    model = argmax_model(tmp_path / "am.onnx")
    xa = np.random.default_rng(0).uniform(0, 0.4, (4, 16)).astype(np.float32)
    xb = np.tile(np.arange(16, dtype=np.float32), (4, 1)) * np.float32(4.0)  # spread far beyond the FP16 spacing
    # numpy: FP16 rounding of x+1000 (spacing 0.5) changes the argmax of xa, not that of xb
    exact_a = np.argmax(xa.astype(np.float64) + 1000, axis=1)
    stored_a = np.argmax(f16(f16(xa) + f16(1000)), axis=1)
    assert (exact_a != stored_a).any()
    assert (np.argmax(f16(f16(xb) + f16(1000)), axis=1) == np.argmax(xb.astype(np.float64) + 1000, axis=1)).all()
    singles = check_agreement(tmp_path, model, {"a.npz": xa, "b.npz": xb}, FP16)
    fd = singles["a.npz"].summary["first_divergence"]
    assert (fd["node"], fd["kind"]) == ("add", "abnormal")  # the FP16 Add, not the ArgMax
    assert "y" in abnormal_names(singles["a.npz"])
    assert singles["b.npz"].summary["first_divergence"] is None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_fp16_overflow_agrees(tmp_path):
    model = overflow_model(tmp_path / "ov.onnx")
    xa = np.linspace(-4, 4, 64, dtype=np.float32).reshape(1, 64)
    xb = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    assert np.isinf(f16(xa.astype(np.float64) * 30000)).any()  # beyond 65504
    assert np.isfinite(f16(xb.astype(np.float64) * 30000)).all()
    singles = check_agreement(tmp_path, model, {"a.npz": xa, "b.npz": xb}, FP16)
    fd = singles["a.npz"].summary["first_divergence"]
    assert (fd["node"], fd["kind"]) == ("mul", "fp16_overflow")
    assert singles["a.npz"].summary["counts"]["overflow"] >= 1
    assert singles["b.npz"].summary["counts"]["abnormal"] == 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_clean_run_agrees(tmp_path):
    model = elt_model(tmp_path / "elt.onnx")
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    # numpy: in FP32 the same three ops give the reference's values to FP32 rounding
    z32 = (x * np.float32(3) + np.float32(1000)) - np.float32(1000)
    assert cosine(z32, x.astype(np.float64) * 3) > 0.99999
    singles = check_agreement(tmp_path, model, {"a.npz": x, "b.npz": x * np.float32(0.5)}, FP32)
    for diag in singles.values():
        assert diag.summary["counts"]["abnormal"] == 0 and diag.summary["first_divergence"] is None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_folder_of_the_old_record_format_is_not_resumed(tmp_path):
    """Records written before the shared analysis (format 1: layer table only) are not mixed into a new aggregate:
    resuming such a folder is refused with one line naming the format."""
    from toolkit.core.errors import UsageError

    model = elt_model(tmp_path / "elt.onnx")
    (tmp_path / "in").mkdir()
    np.savez(tmp_path / "in" / "a.npz", x=np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64))
    out = tmp_path / "dataset"
    folder_run(model, tmp_path / "in", out, FP16)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] >= 2
    manifest["format"] = 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UsageError, match="different format"):
        folder_run(model, tmp_path / "in", out, FP16)


def test_diagnose_summary_names_the_model_it_compiled(tmp_path, monkeypatch):
    """The model file is swapped for another one between loading and the end of the run: summary.json keeps the
    sha256 of the model that was compiled (the one result.csv describes)."""
    import json

    import toolkit.diagnose as D
    from toolkit import api
    from toolkit.config.schema import Config

    a, b = SAMPLES["resnet_small"].path, SAMPLES["detector_head"].path
    live = tmp_path / "live.onnx"
    shutil.copyfile(a, live)
    real = D.diagnose

    def swap_then_diagnose(prep, *args, **kw):
        shutil.copyfile(b, live)  # the user overwrites the file while the run goes on
        return real(prep, *args, **kw)

    monkeypatch.setattr("toolkit.commands.diagnose.diagnose", swap_then_diagnose)
    api.diagnose_command(str(live), Config(), out=str(tmp_path / "o"), html=False)
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["model_sha256"] == hashlib.sha256(a.read_bytes()).hexdigest()
    assert summary["model_sha256"] != hashlib.sha256(live.read_bytes()).hexdigest()


def _ort_outputs(path, feeds):
    from toolkit.ort.ort_env import session_options

    sess = ort.InferenceSession(str(path), session_options(optimize=False), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppocr_det", "ppocr_rec", "ppocr_cls"])
def test_diagnose_ppocr_default_mixed_precision(name, tmp_path):
    res = diagnose_command(name, Config(), out=str(tmp_path / "r"), html=False)
    folder = res["out"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["verdict"] in ("PASS", "WARN", "FAIL")
    assert summary["reasons"] and all(isinstance(r, str) and r for r in summary["reasons"])
    # every row of result.csv has metrics or a reason
    df = pd.read_csv(folder / "result.csv", keep_default_na=False)
    has_metric = pd.to_numeric(df["CosineSimilarity"], errors="coerce").notna() | \
        pd.to_numeric(df["ExactMatchRate"], errors="coerce").notna()
    assert (has_metric | (df["CompareFailReason"].astype(str) != "")).all()
    # task checks agree in the default mixed precision, recomputed here from the saved outputs
    tasks = {t["name"]: t for t in summary["tasks"]}
    assert tasks and all(t["passed"] for t in tasks.values()), tasks
    # recomputed independently of the report: plain onnxruntime vs a fresh NPU-mode session
    from toolkit.engine import Session

    path, feeds = zoo.fetch(name), realistic_inputs(name)
    golden = _ort_outputs(path, feeds)
    out = Session(path, Config(), input_shapes={k: v.shape for k, v in feeds.items()}).run(feeds).outputs
    g, d = next(iter(golden.values())), next(iter(out.values()))
    if name == "ppocr_det":
        assert binarize_iou(g, d, thr=0.3) >= 0.95
    elif name == "ppocr_rec":
        chars = read_ctc_characters(path)
        assert ctc_greedy_decode(g, chars) == ctc_greedy_decode(d, chars)
        assert ctc_greedy_decode(g, chars)[0].strip() != ""
    else:
        assert np.argmax(g, -1).tolist() == np.argmax(d, -1).tolist()


@pytest.mark.parametrize("lines", ["MaxAbsErr=0", "MaxAbsoluteError<=1e-7", "logits:MaxAbsErr<=1e-7"])
def test_the_advice_is_verified_against_the_users_failing_lines(tmp_path, lines):
    """A FAIL on the user's own --thresholds is never answered by "no fix needed: the outputs meet the default
    target": the advice's target carries the user's line on the outputs (checked here with numpy against the
    FP32 onnxruntime outputs), and whatever fix it prints meets that line when re-run."""
    res = diagnose_command("resnet_small", Config(), thresholds=lines, out=str(tmp_path / "o"), html=False)
    assert res["verdict"] == "FAIL"
    fix = res["diagnosis"].summary["fix"]
    assert fix["needed"] is True and "no fix needed" not in " ".join(res["summary"])
    assert any("MaxAbsoluteError<=" in t and ("1e-07" in t or "0.0" in t) for t in fix["target"]), fix["target"]
    if fix.get("met"):  # a printed fix: the re-run outputs are within the user's line (numpy, not our metric)
        cfg = Config.load(tmp_path / "o" / "fixed_config.json")
        from toolkit.engine import Session, shapes_of
        from toolkit.diagnose import prepare
        from toolkit.ort.reference import ReferenceRunner

        prep = prepare("resnet_small", None)
        got = Session(prep.model, cfg, input_shapes=shapes_of(prep.feeds)).run(prep.feeds).outputs["logits"]
        ref = ReferenceRunner(prep.model, expose=False).run(prep.feeds)["logits"]
        assert float(np.max(np.abs(got.astype(np.float64) - ref))) <= 1e-7


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_dataset_diagnosis_verifies_the_worst_inputs_fix_as_a_single_input_does(tmp_path):
    """Kind: a dataset whose worst input FAILs. Its diagnosis carries what a single input's carries: the
    advisor's findings, the verified fix (keep_dtype.txt, fixed_config.json, naming the input it was verified
    on), and the fix applied to that input meets the target against onnxruntime's FP32 output (numpy here)."""
    import dataclasses

    from toolkit.engine import Session, shapes_of

    rng = np.random.default_rng(3)
    path = _mm_model(tmp_path, rng)
    ds = tmp_path / "ds"
    ds.mkdir()
    for i, scale in enumerate((0.1, 0.2, 3.0)):  # the last one: errors large enough to cross the line
        np.savez(ds / f"in{i}.npz", x=(rng.normal(0, 1, (1, 16)) * scale).astype(np.float32))
    cfg = Config(precision_mode="force_fp16", fusion_level=0)
    res = diagnose_command(str(path), cfg, inputs=str(ds), thresholds="MaxAbsoluteError<=1e-3",
                           out=str(tmp_path / "o"), html=False)
    assert res["verdict"] == "FAIL"
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    fix = summary["fix"]
    assert fix["met"] and fix["keep_dtype"] and fix["input"] == summary["dataset"]["worst_input"]
    assert json.loads((tmp_path / "o" / "findings.json").read_text())  # the advisor's findings are there
    fixed = Config.from_dict(json.loads((tmp_path / "o" / "fixed_config.json").read_text()))
    assert (tmp_path / "o" / "keep_dtype.txt").read_text().split() == fix["keep_dtype"]
    feed = dict(np.load(ds / fix["input"]))
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = Session(onnx.load(path), dataclasses.replace(fixed, op_compiler_cache_mode="disable"),
                  input_shapes=shapes_of(feed)).run(feed).outputs["y"]
    assert float(np.abs(got.astype(np.float64) - want).max()) <= 1e-3


def _mm_model(tmp_path: Path, rng) -> Path:
    """MatMul -> Relu -> MatMul (16 -> 64 -> 8): in FP16 its error crosses MaxAbsoluteError<=1e-3 for inputs of
    scale 3, not for inputs of scale 0.01."""
    w1 = rng.normal(0, 1, (16, 64)).astype(np.float32)
    w2 = rng.normal(0, 1, (64, 8)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
                           helper.make_node("Relu", ["h"], ["r"], name="relu"),
                           helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _fp16_max_abs_error(path: Path, x: np.ndarray) -> float:
    """Largest |FP16 emulation - onnxruntime FP32| of the MatMul model (numpy: inputs, weights and every
    tensor rounded to FP16, products summed in FP32)."""
    m = onnx.load(path)
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    f16 = lambda a: np.asarray(a, np.float32).astype(np.float16).astype(np.float32)  # noqa: E731
    h = f16(np.maximum(f16(f16(x) @ f16(w["w1"])), 0))  # FP16 storage, FP32 accumulation
    y16 = f16(h @ f16(w["w2"])).astype(np.float64)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return float(np.abs(y16 - ref).max())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("change", ["failing_input_fixed", "html_dropped"])
def test_a_resumed_dataset_run_leaves_no_report_file_of_the_earlier_run(tmp_path, change):
    """Kind: a dataset diagnosis re-run into the same --out (resumed) whose report holds fewer files than the
    earlier one: the worst input no longer fails (no verified fix, no reproducer), or --no-html. The folder then
    holds no keep_dtype.txt / fixed_config.json / repro/ (resp. index.html / plotly.min.js) of the earlier run,
    and what the user put into the folder is untouched."""
    rng = np.random.default_rng(3)
    path = _mm_model(tmp_path, rng)
    ds, out = tmp_path / "ds", tmp_path / "o"
    ds.mkdir()
    xs = [(rng.normal(0, 1, (1, 16)) * s).astype(np.float32) for s in (0.01, 0.02, 3.0)]
    for i, x in enumerate(xs):
        np.savez(ds / f"in{i}.npz", x=x)
    line = 1e-3
    assert _fp16_max_abs_error(path, xs[2]) > line  # the last input fails the line (checked independently)
    cfg = Config(precision_mode="force_fp16", fusion_level=0)
    run = dict(inputs=str(ds), thresholds=f"MaxAbsoluteError<={line}", out=str(out))
    diagnose_command(str(path), cfg, html=True, **run)
    for name in ("keep_dtype.txt", "fixed_config.json", "repro", "index.html", "plotly.min.js"):
        assert (out / name).exists(), name
    (out / "my_notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "keep_dtype.txt").write_text("not the tool's")
    if change == "failing_input_fixed":
        x = (rng.normal(0, 1, (1, 16)) * 0.01).astype(np.float32)
        assert max(_fp16_max_abs_error(path, v) for v in (xs[0], xs[1], x)) <= line
        np.savez(ds / "in2.npz", x=x)
        gone, kept = ("keep_dtype.txt", "fixed_config.json", "repro"), ("index.html", "plotly.min.js")
    else:
        gone, kept = ("index.html", "plotly.min.js"), ("keep_dtype.txt", "fixed_config.json", "repro")
    res = diagnose_command(str(path), cfg, html=change != "html_dropped", **run)
    assert res["dataset"]["facts"]["resumed"]
    summary = json.loads((out / "summary.json").read_text())
    for name in gone:
        assert not (out / name).exists(), name
    for name in kept:
        assert (out / name).exists(), name
    if change == "failing_input_fixed":
        assert summary["verdict"] == "PASS" and not summary["fix"]["keep_dtype"] and "files" not in summary["fix"]
    else:
        assert (out / "keep_dtype.txt").read_text().split() == summary["fix"]["keep_dtype"]
    assert (out / "my_notes.txt").read_text() == "mine"
    assert (out / "mine" / "keep_dtype.txt").read_text() == "not the tool's"
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_no_fix_needed_is_recorded_as_met_in_summary_json(tmp_path):
    """'no fix needed: the outputs meet the default target' and summary.json's fix agree: needed False, met True
    (a script reading fix.met must not conclude the target is missed), keep_dtype empty. The bundled model's
    outputs are checked here against onnxruntime: within the default target's lines."""
    from toolkit.diagnose import prepare
    from toolkit.engine import Session, shapes_of
    from toolkit.ort.reference import ReferenceRunner

    res = diagnose_command("resnet_small", Config(), out=str(tmp_path / "o"), html=False)
    prep = prepare("resnet_small", None)
    got = Session(prep.model, Config(), input_shapes=shapes_of(prep.feeds)).run(prep.feeds).outputs["logits"]
    ref = ReferenceRunner(prep.model, expose=False).run(prep.feeds)["logits"].astype(np.float64)
    got = got.astype(np.float64)
    assert float(got.ravel() @ ref.ravel() / np.linalg.norm(got) / np.linalg.norm(ref)) >= 0.9999
    assert float(np.abs(got - ref).max()) <= 1e-2  # independently: the default target holds as compiled
    fix = json.loads((tmp_path / "o" / "summary.json").read_text())["fix"]
    assert fix["needed"] is False and fix["met"] is True and fix["keep_dtype"] == []
    assert "no fix needed" in fix["sentence"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("how", ["no_verify", "subset"])
@pytest.mark.parametrize("build", [lambda: fk.rmsnorm(hidden=64, rows=4, peak=400.0),
                                   lambda: fk.layernorm(hidden=64, rows=8, peak=500.0)])
def test_advice_printed_without_verification_says_so(tmp_path, how, build):
    """With --no-verify, or a subset run (too few tensors to rank kernels), no advised keep_dtype set is applied and
    re-run: every finding that advises one says "[not verified: <why>]", none claims "verified", and no fix file is
    written."""
    from toolkit.compare.subset import Subset

    b = build()
    model, inputs = b.save(tmp_path / "m")
    cfg = Config(precision_mode="force_fp16", fusion_level=0)
    kw = {"verify": False} if how == "no_verify" else {"subset": Subset(until=b.model.graph.output[0].name)}
    res = diagnose_command(str(model), cfg, inputs=str(inputs), out=str(tmp_path / "out"), html=False, **kw)
    advised = [f for f in res["diagnosis"].findings if isinstance(f.evidence, dict) and f.evidence.get("keep_dtype")]
    assert advised, [f.kind for f in res["diagnosis"].findings]
    why = "--no-verify" if how == "no_verify" else "--until"
    assert all(f"[not verified: {why}" in f.recommendation and "[verified" not in f.recommendation for f in advised)
    assert not (tmp_path / "out" / "fixed_config.json").exists()
