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

from toolkit.config.schema import Config

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
    assert proc.returncode == 2 and "holds no .npz files" in proc.stderr


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


# ------------------------------------------------------------------------------- empty outputs (exact match)
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


# ------------------------------------------------------------------------ workers die with their parent
def _session_members(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live (not zombie) processes of session ``sid``, from /proc/<pid>/stat."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append((int(d), cmd[:120]))
    return out


def _wait_until_gone(sid: int, deadline_s: float = 60.0) -> list[tuple[int, str]]:
    end = time.monotonic() + deadline_s
    while (left := _session_members(sid)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_jobs_workers_exit_when_the_cli_is_sigkilled(tmp_path):
    """SIGKILL only the CLI (not its group) while --jobs 2 workers evaluate: no process of its session stays
    (workers, multiprocessing's resource_tracker)."""
    model = tiny_model(tmp_path / "tiny.onnx")
    write_inputs(tmp_path / "in", 40)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "compare", str(model), "--inputs", str(tmp_path / "in"),
                             "--out", str(out), "--jobs", "2"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(list((out / "results").glob("*.npz"))) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        workers = [m for m in _session_members(proc.pid) if m[0] != proc.pid]
        assert proc.poll() is None and len(workers) >= 2, workers  # killed mid-run, with its workers alive
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        left = _wait_until_gone(proc.pid)
        assert not left, f"processes left after the CLI was killed: {left}"
    finally:
        for pid, _ in _session_members(proc.pid):
            os.kill(pid, signal.SIGKILL)


_ORPHAN = """
import os, sys, time
from toolkit.dataset import lifeline
lifeline._set_pdeathsig = lambda: False  # the portable watchdog alone
lifeline.exit_with_parent(int(sys.argv[1]), poll_s=0.05)
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(300)
"""
_PARENT = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]])
while not os.path.exists(sys.argv[2]) or not open(sys.argv[2]).read():
    time.sleep(0.01)
os._exit(0)  # dies without waiting for its child
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_watchdog_ends_a_worker_whose_parent_died_without_prctl(tmp_path):
    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _ORPHAN, str(pidfile)], start_new_session=True)
    try:
        assert parent.wait(timeout=TIMEOUT_S) == 0
        assert not _wait_until_gone(parent.pid), "the orphaned child is still running"
    finally:
        for pid, _ in _session_members(parent.pid):
            os.kill(pid, signal.SIGKILL)


def test_worker_whose_parent_is_already_gone_exits_at_once():
    from toolkit.dataset.lifeline import ORPHAN_EXIT

    code = "from toolkit.dataset.lifeline import exit_with_parent; exit_with_parent(1); import time; time.sleep(60)"
    assert subprocess.run([sys.executable, "-c", code], timeout=TIMEOUT_S).returncode == ORPHAN_EXIT


# ------------------------------------------------------------------------------- invalid stored results
@pytest.fixture(scope="module")
def finished(case):
    out = case["root"] / "finished"
    api_compare(case["model"], case["inputs"], out)
    return out


def _corrupt(path: Path, kind: str, other: Path) -> None:
    data = path.read_bytes()
    if kind == "truncated":
        path.write_bytes(data[:100])
    elif kind == "zero_bytes":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    elif kind == "wrong_keys":
        np.savez(path, a=np.zeros(3))
    elif kind == "single_array":
        with open(path, "wb") as fh:
            np.save(fh, np.zeros(3))
    elif kind == "directory":
        path.unlink()
        path.mkdir()
        (path / "inside.txt").write_text("x")
    elif kind == "other_inputs_result":
        path.write_bytes(other.read_bytes())
    elif kind == "values_wrong_shape":
        with np.load(path) as z:
            meta, rows, values = z["meta"], z["rows"], z["values"]
        np.savez(path, meta=meta, rows=rows, values=values[:, :3])
    elif kind == "meta_not_json":
        with np.load(path) as z:
            rows, values = z["rows"], z["values"]
        np.savez(path, meta=np.array("{not json"), rows=rows, values=values)
    else:
        raise AssertionError(kind)


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


def test_truncated_result_file_resumes_from_the_cli(case, finished, tmp_path):
    import shutil

    from toolkit.dataset.store import Store

    out = tmp_path / "out"
    shutil.copytree(finished, out)
    path = Store(out).path_of("in000.npz")
    path.write_bytes(path.read_bytes()[:100])
    proc = npuscope("compare", case["model"], "--precision-mode", "force_fp16", "--inputs", case["inputs"],
                    "--out", out, cwd=tmp_path)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    assert "1 stored result(s) could not be read and were evaluated again: in000.npz" in proc.stdout
    pd.testing.assert_frame_equal(inputs_csv(out), inputs_csv(finished))


# ------------------------------------------------------------------ mistakes found before the output folder
_GEARS = '{"input_shape": "x:1,3,-1,-1", "dynamic_dims": "64,64;128,128"}'


@pytest.mark.parametrize("what, args, env, config, expect", [
    ("gear config", [], {}, _GEARS, "has -1 dims bound by gears"),
    ("keep_dtype names no node", [], {}, '{"keep_dtype": ["conv9"]}', "keep_dtype names node 'conv9'"),
    ("bad thresholds", ["--thresholds", "CosineSimilarity<abc"], {}, None, "CosineSimilarity"),
    ("task check not importable", ["--task-metric", "no_such_module_xyz:f"], {}, None, "no_such_module_xyz:f"),
    ("NPUSCOPE_THREADS", [], {"NPUSCOPE_THREADS": "abc"}, None, "NPUSCOPE_THREADS='abc'"),
    ("empty percentiles", ["--percentiles", ""], {}, None, "--percentiles is empty"),
])
def test_config_mistakes_stop_before_the_output_folder(case, tmp_path, what, args, env, config, expect):
    if config:
        (tmp_path / "c.json").write_text(config)
        args = [*args, "--config", tmp_path / "c.json"]
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(case["model"]), "--inputs",
                           str(case["inputs"]), "--out", str(tmp_path / "out"), *map(str, args)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=dict(os.environ, PYTHONWARNINGS="ignore", **env))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and expect in lines[0], (what, proc.stderr)
    assert not (tmp_path / "out").exists(), what


def test_signoff_gear_config_stops_before_the_output_folder(case, tmp_path):
    (tmp_path / "c.json").write_text(_GEARS)
    (tmp_path / "p.toml").write_text('[policy]\nname = "tiny"\n[outputs."*"]\nCosineSimilarity = 0.99\n')
    proc = npuscope("signoff", case["model"], "--policy", tmp_path / "p.toml", "--config", tmp_path / "c.json",
                    "--inputs", case["inputs"], "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2 and "-1 dims" in proc.stderr and not (tmp_path / "out").exists(), proc.stderr


def test_run_without_a_successful_result_leaves_no_folder(case, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(3):
        (inputs / f"bad{i}.npz").write_bytes(b"not a zip")
    proc = npuscope("compare", case["model"], "--inputs", inputs, "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2 and "none of the 3 input(s)" in proc.stderr and not (tmp_path / "out").exists()


def test_folder_without_a_successful_result_does_not_block_a_rerun_with_other_settings(case, tmp_path):
    """A folder left by a run where every input failed (here written through the store) is started afresh
    by a run with another config; one holding a successful result still refuses it."""
    from toolkit.dataset.store import open_store
    from toolkit.dataset.worker import error_record
    from toolkit.commands.dataset import prepare_job

    out = tmp_path / "out"
    job = prepare_job("diagnose", str(case["model"]), Config.from_dict({"precision_mode": "force_fp32"}),
                      str(case["inputs"]), None)
    with open_store(str(out), tmp_path, "x", job.manifest) as store:
        for ref in job.refs:
            store.write(error_record(ref.name, "", "every input failed"))
    res = api_compare(case["model"], case["inputs"], out)  # FP16: another config
    assert res["dataset"]["facts"]["evaluated_this_run"] == len(case["xs"])
    assert json.loads((out / "manifest.json").read_text())["config"]["precision_mode"] == "force_fp16"
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e["event"] for e in log if "event" in e] == ["start"]
    assert (pd.read_csv(out / "inputs.csv")["Status"] == "ok").all()
    proc = npuscope("compare", case["model"], "--precision-mode", "force_fp32", "--inputs", case["inputs"],
                    "--out", out, cwd=tmp_path)
    assert proc.returncode == 2 and "different config (precision_mode)" in proc.stderr


# --------------------------------------------------------------------- unreadable entries of the folder
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symbolic links")
@pytest.mark.parametrize("jobs", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_unreadable_entries_are_error_rows(case, tmp_path, jobs):
    inputs = tmp_path / "in"
    write_inputs(inputs, 2)
    (inputs / "broken.npz").symlink_to(tmp_path / "missing.npz")
    (inputs / "loop.npz").symlink_to("loop.npz")
    (inputs / "folder.npz").mkdir()
    os.mkfifo(inputs / "fifo.npz")  # reading it would block forever
    (inputs / "link.npz").symlink_to(inputs / "in000.npz")  # a working link is an input
    proc = npuscope("compare", case["model"], "--precision-mode", "force_fp16", "--inputs", inputs,
                    "--out", tmp_path / "out", "--jobs", jobs, cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    table = pd.read_csv(tmp_path / "out" / "inputs.csv").set_index("Input")
    assert sorted(table.index) == ["broken.npz", "fifo.npz", "folder.npz", "in000.npz", "in001.npz", "link.npz",
                                   "loop.npz"]
    bad = {"broken.npz": "broken symbolic link", "loop.npz": "broken symbolic link", "folder.npz": "is a folder",
           "fifo.npz": "is a FIFO"}
    for name, why in bad.items():
        row = table.loc[name]
        assert row["Status"] == "error" and row["Verdict"] == "ERROR" and why in row["Reasons"], (name, row["Reasons"])
        assert "\n" not in row["Reasons"] and name in row["Reasons"]
    assert (table.loc[["in000.npz", "in001.npz", "link.npz"], "Status"] == "ok").all()


# -------------------------------------------------------------------------------------- NPUSCOPE_THREADS
@pytest.mark.parametrize("value, expected", [(None, 0), ("", 0), ("0", 0), ("3", 3), (" 2 ", 2), ("abc", None),
                                             ("-2", None), ("1.5", None), ("+3", None), ("\u0663", None)])
def test_npuscope_threads_is_a_non_negative_integer(monkeypatch, value, expected):
    from toolkit.core.errors import ConfigError
    from toolkit.ort.ort_env import intra_op_threads

    if value is None:
        monkeypatch.delenv("NPUSCOPE_THREADS", raising=False)
    else:
        monkeypatch.setenv("NPUSCOPE_THREADS", value)
    if expected is None:
        with pytest.raises(ConfigError, match="NPUSCOPE_THREADS=.*non-negative integer") as err:
            intra_op_threads()
        assert err.value.exit_code == 2 and "\n" not in str(err.value)
    else:
        assert intra_op_threads() == expected


@pytest.mark.parametrize("value", ["abc", "-2"])
def test_bad_npuscope_threads_is_one_line_in_single_mode(case, tmp_path, value):
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(case["model"]), "--inputs",
                           str(case["inputs"] / "in000.npz"), "--out", str(tmp_path / "out")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=dict(os.environ, PYTHONWARNINGS="ignore", NPUSCOPE_THREADS=value))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and f"NPUSCOPE_THREADS='{value}'" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------- percentiles
def test_percentile_labels_are_plain_decimals(tmp_path):
    from toolkit.dataset.aggregate import Accumulator, parse_percentiles, percentile_label
    from toolkit.dataset.worker import COLUMNS

    qs = parse_percentiles("0.0000001, 1e-7, 12.345671, 12.345672, 50, 99.5, -0, 100")
    assert qs == (1e-7, 12.345671, 12.345672, 50.0, 99.5, 0.0, 100.0)
    assert [percentile_label(q) for q in qs] == ["p0.0000001", "p12.345671", "p12.345672", "p50", "p99.5", "p0",
                                                 "p100"]
    vals = np.random.default_rng(3).random((9, 1, len(COLUMNS)))
    acc = Accumulator(["t"], qs, tmp_path)
    for i, v in enumerate(vals):
        acc.add(f"x{i}", np.array([0], np.int32), v)
    df = acc.finish()
    a = vals[:, 0, COLUMNS.index("CosineSimilarity")]
    for q, label in (("1e-7", "p0.0000001"), (12.345672, "p12.345672"), (99.5, "p99.5")):
        assert df[f"CosineSimilarity_{label}"].iloc[0] == pytest.approx(np.percentile(a, float(q)), abs=1e-15)
    assert not any("e-" in c for c in df.columns)


@pytest.mark.parametrize("text, message", [("", "--percentiles is empty"), ("  ", "--percentiles is empty"),
                                           ("50,,90", "entry ''"), ("nan", "entry 'nan'"), ("101", "entry '101'")])
def test_bad_percentiles_are_usage_errors(text, message):
    from toolkit.dataset.aggregate import parse_percentiles
    from toolkit.core.errors import UsageError

    with pytest.raises(UsageError, match=message):
        parse_percentiles(text)
    assert parse_percentiles("none") == () and parse_percentiles(None) == (50.0, 90.0, 99.0)
