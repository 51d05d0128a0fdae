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
from tests.graphs import N, make_model

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


def test_bad_options_are_usage_errors(case, tmp_path):
    proc = npuscope("compare", case["model"], "--inputs", case["inputs"] / "in000.npz", "--jobs", "2", cwd=tmp_path)
    assert proc.returncode == 2 and "dataset runs only" in proc.stderr
    proc = npuscope("compare", case["model"], "--inputs", case["inputs"], "--percentiles", "50,120", cwd=tmp_path)
    assert proc.returncode == 2 and "--percentiles entry '120'" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = npuscope("compare", case["model"], "--inputs", empty, cwd=tmp_path)
    assert proc.returncode == 1 and "holds no .npz files" in proc.stderr


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
    assert proc.returncode == 1 and "none of the 3 input(s)" in proc.stderr and not (tmp_path / "out").exists()


def test_folder_without_a_successful_result_does_not_block_a_rerun_with_other_settings(case, tmp_path):
    """A folder left by a run where every input failed (here written through the store) is started afresh
    by a run with another config; one holding a successful result still refuses it."""
    from toolkit.dataset.store import open_store
    from toolkit.dataset.worker import error_record
    from toolkit.dataset.workflow import prepare_job

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


@pytest.mark.parametrize("value", ["abc", "-2"])
def test_bad_npuscope_threads_is_one_line_in_single_mode(case, tmp_path, value):
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(case["model"]), "--inputs",
                           str(case["inputs"] / "in000.npz"), "--out", str(tmp_path / "out")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=dict(os.environ, PYTHONWARNINGS="ignore", NPUSCOPE_THREADS=value))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and f"NPUSCOPE_THREADS='{value}'" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


