"""Dataset runs (``--inputs FOLDER``): streaming, aggregation against numpy, --jobs 2 == --jobs 1, resume after a
SIGKILL, Ray == local, corrupted inputs as rows, manifest mismatch as a one-line error, signoff over a folder."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from graphs import N, make_model

from toolkit.config import Config

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TIMEOUT_S = 300
FP16 = {"precision_mode": "force_fp16"}


# ------------------------------------------------------------------------------------------------- helpers
def tiny_model(path: Path) -> Path:
    """Conv(3→16) → Relu → Conv(16→8) → GlobalAveragePool → Flatten on a 1x3x64x64 input: 65,536-element
    intermediates (large enough for threaded BLAS dot products in the metric sums)."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.normal(0, 0.3, (16, 3, 3, 3)).astype(np.float32), "b1": rng.normal(0, 0.1, 16).astype(np.float32),
             "w2": rng.normal(0, 0.3, (8, 16, 3, 3)).astype(np.float32), "b2": rng.normal(0, 0.1, 8).astype(np.float32)}
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], "conv1", pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"], "relu1"),
             N("Conv", ["r1", "w2", "b2"], ["c2"], "conv2", pads=[1, 1, 1, 1]),
             N("GlobalAveragePool", ["c2"], ["g"], "gap"), N("Flatten", ["g"], ["y"], "flat")]
    model = make_model(nodes, [("x", [1, 3, 64, 64])], ["y"], inits)
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8]))
    onnx.save(model, path)
    return path


def write_inputs(folder: Path, n: int, seed: int = 0) -> list[np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    xs = []
    for i in range(n):
        x = np.random.default_rng(seed + i).normal(0, 1 + 0.5 * (i % 5), (1, 3, 64, 64)).astype(np.float32)
        np.savez(folder / f"in{i:03d}.npz", x=x)
        xs.append(x)
    return xs


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    model = tiny_model(root / "tiny.onnx")
    xs = write_inputs(root / "in", 8)
    return {"root": root, "model": model, "inputs": root / "in", "xs": xs}


def npuscope(*args, cwd: Path, **kw):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"), **kw)


def api_compare(model, inputs, out, **kw):
    from toolkit import api

    cfg = Config.from_dict(kw.pop("config", FP16))
    return api.diagnose_command(str(model), cfg, inputs=str(inputs), out=str(out), html=kw.pop("html", False), **kw)


def inputs_csv(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "inputs.csv").drop(columns=["RunMs"])


def cosine(x, y) -> float:
    """Σxy / (‖x‖‖y‖) over the positions where both are finite (the compare tool's masking)."""
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    both = np.isfinite(x) & np.isfinite(y)
    x, y = x[both], y[both]
    return float(np.sum(x * y) / (np.sqrt(np.sum(x * x)) * np.sqrt(np.sum(y * y))))


# ---------------------------------------------------------------------------------------------- streaming
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


# -------------------------------------------------------------------------------------------- aggregation
def test_accumulator_matches_numpy(tmp_path):
    from toolkit.dataset.aggregate import AGG_METRICS, Accumulator
    from toolkit.dataset.worker import COLUMNS

    rng = np.random.default_rng(1)
    n_in, n_t = 23, 7
    tensors = [f"t{i}" for i in range(n_t)]
    vals = rng.random((n_in, n_t, len(COLUMNS)))
    vals[rng.random((n_in, n_t)) < 0.2] = np.nan  # tensors not compared on some inputs
    vals[:, 6, :] = np.nan  # never compared
    names = [f"x{i:02d}" for i in range(n_in)]
    acc = Accumulator(tensors, (10, 50, 99.5), tmp_path)
    for name, v in zip(names, vals):
        rows = np.flatnonzero(~np.isnan(v).all(axis=1)).astype(np.int32)
        acc.add(name, rows, v[rows])
    df = acc.finish().set_index("TensorName")
    assert list(df.index) == tensors[:6] and not list(tmp_path.iterdir())  # spill files removed
    for m in AGG_METRICS:
        a = vals[:, :6, COLUMNS.index(m)]
        low = m in ("CosineSimilarity", "ExactMatchRate")
        worst = np.nanmin(a, axis=0) if low else np.nanmax(a, axis=0)
        at = np.nanargmin(a, axis=0) if low else np.nanargmax(a, axis=0)
        np.testing.assert_array_equal(df[f"{m}_worst"].to_numpy(), worst)
        assert df[f"{m}_worst_input"].tolist() == [names[i] for i in at]
        np.testing.assert_allclose(df[f"{m}_mean"].to_numpy(), np.nanmean(a, axis=0), rtol=1e-12)
        for q in (10, 50, 99.5):
            np.testing.assert_allclose(df[f"{m}_p{q:g}"].to_numpy(), np.nanpercentile(a, q, axis=0), rtol=1e-12)
    assert df["Inputs"].tolist() == (~np.isnan(vals[:, :6, 0])).sum(axis=0).tolist()


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
        cos.append(cosine(npu, golden))
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


# ------------------------------------------------------------------------------------------- backends
@pytest.mark.slow
def test_jobs_2_equals_jobs_1(case, tmp_path):
    one = npuscope("compare", case["model"], "--precision-mode", "force_fp16", "--inputs", case["inputs"],
                   "--out", tmp_path / "j1", cwd=tmp_path)
    two = npuscope("compare", case["model"], "--precision-mode", "force_fp16", "--inputs", case["inputs"],
                   "--out", tmp_path / "j2", "--jobs", "2", cwd=tmp_path)
    assert one.returncode == two.returncode, (one.stderr, two.stderr)
    assert (tmp_path / "j1" / "dataset.csv").read_bytes() == (tmp_path / "j2" / "dataset.csv").read_bytes()
    pd.testing.assert_frame_equal(inputs_csv(tmp_path / "j1"), inputs_csv(tmp_path / "j2"))
    assert len(list((tmp_path / "j2" / "results").glob("*.npz"))) == len(case["xs"])


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


# --------------------------------------------------------------------------------------------------- resume
@pytest.mark.slow
def test_resume_after_kill(tmp_path):
    """SIGKILL the CLI after some results are written; the re-run evaluates only the rest (the log names every
    input at most once) and its report equals an uninterrupted run's."""
    model = tiny_model(tmp_path / "tiny.onnx")
    write_inputs(tmp_path / "in", 40)
    args = ["compare", model, "--precision-mode", "force_fp16", "--inputs", tmp_path / "in"]
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", *map(str, args), "--out", str(out)], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + TIMEOUT_S
    while len(list((out / "results").glob("*.npz"))) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(list((out / "results").glob("*.npz")))
    assert 5 <= done_before < 40, f"the run must be killed midway ({done_before} of 40 done, exit {proc.returncode})"
    again = npuscope(*args, "--out", out, cwd=tmp_path)
    assert again.returncode in (0, 1), again.stderr
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    runs = [e["input"] for e in log if "input" in e]
    counts = pd.Series(runs).value_counts()
    assert counts.max() == 1, counts[counts > 1]
    assert len(runs) >= 39 and len(list((out / "results").glob("*.npz"))) == 40
    starts = [e for e in log if e.get("event") == "start"]
    assert len(starts) == 2 and starts[1]["pending"] == 40 - done_before
    whole = npuscope(*args, "--out", tmp_path / "whole", cwd=tmp_path)
    assert whole.returncode == again.returncode
    assert (out / "dataset.csv").read_bytes() == (tmp_path / "whole" / "dataset.csv").read_bytes()
    pd.testing.assert_frame_equal(inputs_csv(out), inputs_csv(tmp_path / "whole"))


def test_changed_input_is_evaluated_again(case, tmp_path):
    inputs = tmp_path / "in"
    write_inputs(inputs, 3)
    api_compare(case["model"], inputs, tmp_path / "out")
    np.savez(inputs / "in001.npz", x=np.zeros((1, 3, 64, 64), np.float32) + 0.5)
    res = api_compare(case["model"], inputs, tmp_path / "out")
    assert res["dataset"]["facts"]["evaluated_this_run"] == 1 and res["dataset"]["facts"]["resumed"]
    runs = [json.loads(line).get("input") for line in (tmp_path / "out" / "log.jsonl").read_text().splitlines()]
    assert [r for r in runs if r] == ["in000.npz", "in001.npz", "in002.npz", "in001.npz"]


def test_non_matching_manifest_is_a_one_line_error(case, tmp_path):
    api_compare(case["model"], case["inputs"], tmp_path / "out")
    proc = npuscope("compare", case["model"], "--precision-mode", "force_fp32", "--inputs", case["inputs"],
                    "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "different config (precision_mode)" in lines[0] and "Traceback" not in proc.stderr


def test_non_empty_folder_without_manifest_is_refused(case, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    proc = npuscope("compare", case["model"], "--inputs", case["inputs"], "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2 and "not empty" in proc.stderr and (tmp_path / "out" / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------------------------------ faulty inputs
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


def test_bad_options_are_usage_errors(case, tmp_path):
    proc = npuscope("compare", case["model"], "--inputs", case["inputs"] / "in000.npz", "--jobs", "2", cwd=tmp_path)
    assert proc.returncode == 2 and "dataset runs only" in proc.stderr
    proc = npuscope("compare", case["model"], "--inputs", case["inputs"], "--percentiles", "50,120", cwd=tmp_path)
    assert proc.returncode == 2 and "--percentiles entry '120'" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = npuscope("compare", case["model"], "--inputs", empty, cwd=tmp_path)
    assert proc.returncode == 1 and "holds no .npz files" in proc.stderr


# ------------------------------------------------------------------------------------------------ reports
def test_diagnose_html_has_the_dataset_section(case, tmp_path):
    api_compare(case["model"], case["inputs"], tmp_path / "out", html=True)
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert 'id="dataset"' in html and 'id="fig-dataset"' in html and 'id="table"' in html
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert f"worst input '{summary['dataset']['worst_input']}'" in summary["inputs"]


@pytest.mark.slow
def test_signoff_over_a_folder_matches_the_in_memory_signoff(case, tmp_path):
    from toolkit import api
    from toolkit.signoff.policy import load_policy
    from toolkit.signoff.run import run_signoff

    pol = tmp_path / "p.toml"
    pol.write_text('[policy]\nname = "tiny"\n[outputs."*"]\nCosineSimilarity = 0.9999\n[layers]\nmax_abnormal = 0\n'
                   'min_cosine = 0.999\n[fp16_overflow]\n[memory]\nmax_arena_bytes = 10_000_000\n', encoding="utf-8")
    cfg = Config.from_dict(FP16)
    streamed = api.signoff_command(str(case["model"]), str(pol), cfg, inputs=str(case["inputs"]),
                                   out=str(tmp_path / "so"), html=False, percentiles="50")
    held = run_signoff(str(case["model"]), load_policy(str(pol)), cfg, inputs=str(case["inputs"]))
    assert [(r.name, r.passed, r.message) for r in streamed["run"].results] == \
           [(r.name, r.passed, r.message) for r in held.results]
    assert streamed["run"].summary["counts"]["input_sets"] == len(case["xs"])
    assert {"dataset.csv", "inputs.csv", "junit.xml", "summary.json", "result.csv"} <= \
           {p.name for p in (tmp_path / "so").iterdir()}


def test_result_keys_do_not_collide():
    from toolkit.dataset.store import result_key

    names = ["a b.npz", "a_b.npz", "a?b.npz", "x.npz", "../x.npz"]
    keys = [result_key(n) for n in names]
    assert len(set(keys)) == len(names) and keys[1] == "a_b" and keys[3] == "x"
    assert all("/" not in k and not k.startswith(".") for k in keys)
