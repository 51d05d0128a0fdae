"""``npuscope compare`` (and its dataset runs, ``--inputs FOLDER``) in a subprocess: verdicts and exit codes,
origins and advice the report names (FP16 storage of integer ops' inputs, overflow sites, rounding passed on by
exact ops), task checks, random ops, dtypes onnxruntime cannot run, folded graph outputs, the fixed
result.csv columns, one-line errors, and dataset runs (--jobs, resume after a kill, manifests, locked or
half-written folders, unreadable entries)."""

from __future__ import annotations

import csv
import fcntl
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from decimal import ROUND_CEILING, Context, Decimal
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidGraph
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as NotImplementedOrt

from tests.dataset.helpers import (
    _GEARS,
    _session_members,
    _wait_until_gone,
    api_compare,
    inputs_csv,
    tiny_model,
    write_inputs,
)
from tests.dtype_models import CPU_MODELS, _run_cli, _save
from tests.faultkinds import builders as fk
from tests.graphs import N, make_model
from toolkit import samples
from toolkit.compare.layerwise import RESULT_COLUMNS
from toolkit.compare.tasks import RESULT_KEYS
from toolkit.config.schema import Config
from tests.cli.helpers import TIMEOUT_S, npuscope, run_cli, REPO, TITLE, OSC52, OSC8, REST, BIDI, N_MUL, T_MUL, N_DIV, T_DIV, N_RELU, OUT, BIDI_CHARS, FORMULA, _cli_bytes, _bad_chars, _assert_clean, _evil_model, X_EVIL, evil, _csv_cells, _is_number, _assert_no_formula, V, IR, cli_with_warnings, write_model, _cli_user_path, _error_line
from tests.cli.helpers import npuscope_with_path, vi, save, relu_model, npuscope_error_line, ENV, TB, cli_no_warnings, refusal_line, _npz_folder
from tests.cli.helpers import PROGRESS, error_lines, assert_one_line_error, has_module, METRIC_COLUMNS, check_result_csv, needs_tables
from tests.cli.helpers import rm_sm_model, _string_model
from tests.compare.task_fixtures import CHECKS, BAD, GOOD, checks_module, _assert_task_results


@pytest.mark.parametrize("args,mention", [
    (["--val-range", "y:[0,1]"], "--val-range names 'y'"),
    (["--input-shape", "x:1,3,64,64"], "dim 2 is 32 in the model but 64 was given"),
    (["--input-shape", "y:1,3,32,32"], "'y'"),
])
def test_options_the_model_cannot_take_are_usage_errors(tmp_path, args, mention):
    """Kind: an option naming an input the model lacks or a shape its static dims refuse — a usage error
    (exit 2), found before any data is generated, whichever option carries it."""
    proc = npuscope("compare", "resnet_small", *args, "--out", "o", cwd=tmp_path)
    assert_one_line_error(proc, 2, mention, out=tmp_path / "o")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    model = tiny_model(root / "tiny.onnx")
    xs = write_inputs(root / "in", 8)
    return {"root": root, "model": model, "inputs": root / "in", "xs": xs}


# ------------------------------------------------------------------------------------------- backends
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_non_matching_manifest_is_a_one_line_error(case, tmp_path):
    api_compare(case["model"], case["inputs"], tmp_path / "out")
    proc = npuscope("compare", case["model"], "--precision-mode", "force_fp32", "--inputs", case["inputs"],
                    "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "different config (precision_mode)" in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_non_empty_folder_without_manifest_is_refused(case, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    proc = npuscope("compare", case["model"], "--inputs", case["inputs"], "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2 and "not empty" in proc.stderr and (tmp_path / "out" / "notes.txt").read_text() == "mine"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dataset_options_that_cannot_apply_are_usage_errors(case, tmp_path):
    proc = npuscope("compare", case["model"], "--inputs", case["inputs"] / "in000.npz", "--jobs", "2", cwd=tmp_path)
    assert proc.returncode == 2 and "dataset runs only" in proc.stderr
    proc = npuscope("compare", case["model"], "--inputs", case["inputs"], "--percentiles", "50,120", cwd=tmp_path)
    assert proc.returncode == 2 and "--percentiles entry '120'" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = npuscope("compare", case["model"], "--inputs", empty, cwd=tmp_path)
    assert proc.returncode == 2 and "holds no .npz files" in proc.stderr
    for verb in ("compare", "signoff"):  # where the inputs run: --jobs or --ray, not both (--jobs was ignored)
        extra = ("--policy", "nope.toml") if verb == "signoff" else ()
        proc = npuscope(verb, case["model"], *extra, "--inputs", case["inputs"], "--jobs", "2", "--ray", "auto",
                        "--out", "both", cwd=tmp_path)
        assert proc.returncode == 2 and "--jobs 2 and --ray auto" in proc.stderr, proc.stderr
        assert not (tmp_path / "both").exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


# ------------------------------------------------------------------------------- invalid stored results
@pytest.fixture(scope="module")
def finished(case):
    out = case["root"] / "finished"
    api_compare(case["model"], case["inputs"], out)
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_run_without_a_successful_result_leaves_no_folder(case, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(3):
        (inputs / f"bad{i}.npz").write_bytes(b"not a zip")
    proc = npuscope("compare", case["model"], "--inputs", inputs, "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2 and "none of the 3 input(s)" in proc.stderr and not (tmp_path / "out").exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("value", ["abc", "-2"])
def test_bad_npuscope_threads_is_one_line_in_single_mode(case, tmp_path, value):
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(case["model"]), "--inputs",
                           str(case["inputs"] / "in000.npz"), "--out", str(tmp_path / "out")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=dict(os.environ, PYTHONWARNINGS="ignore", NPUSCOPE_THREADS=value))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and f"NPUSCOPE_THREADS='{value}'" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


C02 = Path("/work/shared/cases/fp16/c02_decomposed_layernorm_pow_overflow")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@needs_tables
def test_compare_writes_no_html(tmp_path):
    proc = npuscope("compare", "--out", "rep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = tmp_path / "rep"
    assert not (rep / "index.html").exists()
    assert {"summary.json", "result.csv", "findings.json"} <= {p.name for p in rep.iterdir()}
    check_result_csv(rep / "result.csv")
    assert json.loads((rep / "summary.json").read_text())["verdict"] in ("PASS", "WARN")
    assert f"report: {(rep / 'summary.json').resolve()}" in proc.stdout


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@needs_tables
def test_compare_on_a_fault_exits_1_and_names_the_origin(tmp_path):
    b = fk.softplus()
    b.save(tmp_path, "softplus")
    proc = npuscope("compare", "softplus.onnx", "--inputs", "softplus.npz", "--precision-mode", "force_fp16",
                    "--out", "rep", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verdict: FAIL" in proc.stdout and "first divergence: node 'exp'" in proc.stdout
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["verdict"] == "FAIL" and summary["first_divergence"]["node"] == "exp"


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
@needs_tables
def test_reproducer_readme_command_runs(c02_report, tmp_path):
    """The command README.txt gives, run in the repro folder (copied), names the same node."""
    out, res, _ = c02_report
    repro = out / "repro"
    readme = (repro / "README.txt").read_text()
    assert "npuscope diagnose model.onnx --inputs inputs.npz --config config.json" in readme
    work = tmp_path / "repro"
    work.mkdir()
    for p in repro.iterdir():
        (work / p.name).write_bytes(p.read_bytes())
    proc = npuscope("compare", "model.onnx", "--inputs", "inputs.npz", "--config", "config.json", "--out", "rep",
                    cwd=work)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # FAIL verdict
    fd = res["diagnosis"].summary["first_divergence"]["node"]
    assert f"first divergence: node '{fd}'" in proc.stdout


def test_compare_prints_no_warning_from_check_constants(tmp_path):
    w = numpy_helper.from_array(np.full((1, 4), 1e6, np.float32), "W")
    graph = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"], name="add")], "ovf",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "ovf.onnx")
    proc = run_cli("compare", str(tmp_path / "ovf.onnx"), "--out", str(tmp_path / "o"))
    assert "check_constants.py" not in proc.stderr, proc.stderr


def test_error_messages_quoting_model_names_are_escaped(tmp_path):
    """--val-range naming no input of the model: the error lists the model's (evil) input names verbatim."""
    evil_in = "\x1b]0;x\x07in\u202e"
    g = helper.make_graph([helper.make_node("Relu", [evil_in], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info(evil_in, TensorProto.FLOAT, (1, 4))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    proc = _cli_bytes("compare", tmp_path / "m.onnx", "--val-range", "nope:[0,1]", "--out", tmp_path / "o")
    err = _assert_clean(proc.stderr, "stderr")
    _assert_clean(proc.stdout, "stdout")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("npuscope: error: "), err  # usage
    assert lines[0].endswith(r"(valid: \x1b]0;x\x07in\u202e)"), lines[0]


def test_dataset_csvs_are_formula_safe(evil):
    folder = evil / "dataset_in"
    folder.mkdir()
    for i, name in enumerate(["=1+2.npz", "-cmd.npz", "@a.npz"]):
        np.savez(folder / name, x=X_EVIL * (0.5 + 0.25 * i))
    out = evil / "out_dataset"
    proc = _cli_bytes("compare", evil / "evil.onnx", "--precision-mode", "force_fp16", "--inputs", folder, "--out", out)
    _assert_clean(proc.stdout, "stdout")
    _assert_clean(proc.stderr, "stderr")
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
    csvs = sorted(out.rglob("*.csv"))
    assert {"dataset.csv", "inputs.csv"} <= {p.name for p in csvs}, csvs
    for p in csvs:
        _assert_no_formula(p)


def _matmul_model(path: Path) -> np.ndarray:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((256, 16)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 256))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 16))],
                          [numpy_helper.from_array(w, "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return rng.standard_normal((4, 256)).astype(np.float32)


def test_a_metric_crossing_a_line_is_printed_beyond_it(tmp_path):
    """FP16 MatMul: cosine 1 - ~5e-8 under the line 0.99999999 used to print as 'CosineSimilarity 1'."""
    x = _matmul_model(tmp_path / "mm.onnx")
    np.savez(tmp_path / "x.npz", x=x)
    ran = _cli_bytes("run", tmp_path / "mm.onnx", "--precision-mode", "force_fp16", "--inputs", tmp_path / "x.npz",
               "--out", tmp_path / "run")
    assert ran.returncode == 0, ran.stderr.decode()
    device = np.load(tmp_path / "run" / "outputs.npz")["y"].astype(np.float64).ravel()
    golden = ort.InferenceSession(str(tmp_path / "mm.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0].astype(np.float64).ravel()
    cos = float(device @ golden / (np.linalg.norm(device) * np.linalg.norm(golden)))
    line = 0.99999999
    assert 0.9999995 < cos < line  # the case of the bug: 6 significant digits would print 1
    proc = _cli_bytes("compare", tmp_path / "mm.onnx", "--precision-mode", "force_fp16", "--inputs", tmp_path / "x.npz",
                "--thresholds", f"CosineSimilarity<{line}", "--out", tmp_path / "cmp")
    stdout = proc.stdout.decode()
    assert proc.returncode == 1, stdout + proc.stderr.decode()
    match = re.search(r"output 'y' is abnormal \(CosineSimilarity ([-+0-9.e]+)", stdout)
    assert match, stdout
    text = match.group(1)
    assert text not in ("1", "0.99999999", "1e+00") and float(text) < line, text
    assert float(text) <= cos and cos - float(text) < 1e-6, (text, cos)


REASON = "depends on nondeterministic op '{}' ({}): reference and NPU draw different numbers"


def report(folder: Path) -> tuple[dict, list[dict], pd.DataFrame]:
    summary = json.loads((folder / "summary.json").read_text())
    findings = json.loads((folder / "findings.json").read_text())
    return summary, findings, pd.read_csv(folder / "result.csv", keep_default_na=False)


def _task_args(names) -> list[str]:
    return [a for f in names for a in ("--task-metric", f"r3checks:{f}")]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("command", ["compare", "diagnose"])
def test_cli_single_run_reports_failing_task_results_as_failing(tmp_path, checks_module, command):
    """Checks that fail (or raise) on the device outputs but not on the reference fail the run (exit 1)."""
    model = relu_model(tmp_path / "relu.onnx")
    res = npuscope_with_path(command, model, "--precision-mode", "force_fp16",
                             *_task_args([*GOOD, "raises", "fails_on_device"]), "--out", "o", cwd=tmp_path,
                             pythonpath=checks_module)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["verdict"] == "FAIL"
    _assert_task_results(summary["tasks"])
    assert "task r3checks:raises: FAIL (task check r3checks:raises raised KeyError: 'nope')" in res.stdout


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("command,fn,dataset", [("compare", "str_false", False), ("compare", "always_raises", False),
                                                ("compare", "returns_int", True), ("diagnose", "array_passed", False),
                                                ("diagnose", "always_raises", True)])
def test_cli_a_task_check_that_cannot_judge_the_reference(tmp_path, checks_module, fn, dataset, command):
    """Kind: a broken --task-metric (a result off the contract: str "false", an array, 5; or raising), broken on
    the FP32 reference itself (every such result is covered in process by tests/compare/test_tasks.py; here the
    exit code and the files, across both commands and both input kinds). One input: exit 2 with one line naming it and what is wrong, no report. A
    dataset: each input an error row naming it, and as no input could be evaluated, exit 2 with the first
    error; never a FAIL blamed on the model."""
    model = relu_model(tmp_path / "relu.onnx")
    inputs = []
    if dataset:
        ds = tmp_path / "ds"
        ds.mkdir()
        for i in range(2):
            np.savez(ds / f"in{i}.npz", x=np.random.RandomState(i).standard_normal((1, 8)).astype(np.float32))
        inputs = ["--inputs", ds]
    res = npuscope_with_path(command, model, *inputs, *_task_args(["ok", fn]), "--out", "o", cwd=tmp_path,
                             pythonpath=checks_module)
    assert "Traceback" not in res.stderr
    what = BAD.get(fn, "raised ZeroDivisionError")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"r3checks:{fn}" in res.stderr and what in res.stderr and "FP32 reference" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "summary.json").exists()
    if dataset:
        assert "none of the 2 input(s)" in res.stderr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_a_task_check_that_changes_its_arguments_changes_nothing(tmp_path, checks_module):
    """Kind: a check writing into the arrays it gets. The verdict, rows and advice are those of the run
    without it (the tester's check zeroed the device outputs and made a FAIL read "no fix needed")."""
    model = relu_model(tmp_path / "relu.onnx")
    base = npuscope_with_path("compare", model, "--precision-mode", "force_fp16", "--atol", "1e-9", "--out", "a",
                              cwd=tmp_path, pythonpath=checks_module)
    res = npuscope_with_path("compare", model, "--precision-mode", "force_fp16", "--atol", "1e-9",
                             *_task_args(["mutates"]), "--out", "b", cwd=tmp_path, pythonpath=checks_module)
    assert res.returncode == base.returncode == 1, (res.stderr, base.stderr)
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert a["verdict"] == b["verdict"] == "FAIL" and a["reasons"] == b["reasons"]
    ra = pd.read_csv(tmp_path / "a" / "result.csv", keep_default_na=False)
    rb = pd.read_csv(tmp_path / "b" / "result.csv", keep_default_na=False)
    pd.testing.assert_frame_equal(ra, rb)


def random_add(path: Path, op: str = "RandomUniformLike", **attrs) -> Path:
    """x float32[1, 64] -> <op> 'rnd' -> r; y = Add(x, r)."""
    return save(path, [helper.make_node(op, ["x"], ["r"], name="rnd", **attrs),
                       helper.make_node("Add", ["x", "r"], ["y"], name="add")], [vi("x", [1, 64])], [vi("y", [1, 64])])


def random_and_independent(path: Path, random_output: bool) -> Path:
    """y_det = Relu(x) * 2 (independent of the random op); z = Add(x, RandomUniformLike(x) 'rnd'), a graph
    output when ``random_output`` else feeding nothing the model returns."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["r"], name="rnd"),
             helper.make_node("Add", ["x", "r"], ["z"], name="add"),
             helper.make_node("Relu", ["x"], ["t"], name="relu"),
             helper.make_node("Mul", ["t", "two"], ["y_det"], name="mul")]
    outs = [vi("y_det", [1, 64])] + ([vi("z", [1, 64])] if random_output else [])
    return save(path, nodes, [vi("x", [1, 64])], outs, [two])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("flags", [["--fusion-level", "0", "--precision-mode", "force_fp32"], ["--fusion-level", "2"]])
def test_cli_random_op_is_not_a_compile_stage_fault(tmp_path, flags):
    model = random_add(tmp_path / "random.onnx")
    res = npuscope_with_path("compare", model, *flags, "--out", "o", cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # the output could not be compared: nothing vouches for it
    summary, findings, table = report(tmp_path / "o")
    kinds = {f["kind"] for f in findings}
    assert "compile_stage_fault" not in kinds and "compile_stage_fault" not in res.stdout
    assert summary["stage"] != "compile" and summary["triage"]["fp32_first_divergence"] is None
    nd = [f for f in findings if f["kind"] == "nondeterministic_op"]
    assert len(nd) == 1 and nd[0]["severity"] == "warning" and nd[0]["subject"] == "rnd"
    assert nd[0]["evidence"]["op_type"] == "RandomUniformLike" and nd[0]["evidence"]["outputs_affected"] == ["y"]
    assert "graph input" in nd[0]["recommendation"] and "seed" in nd[0]["recommendation"]
    rows = table.set_index("TensorName")
    for t in ("r", "y"):
        assert rows.at[t, "CompareFailReason"] == REASON.format("rnd", "RandomUniformLike")
        assert rows.at[t, "CosineSimilarity"] == ""  # no metrics
    assert rows.at["x", "CompareFailReason"] == ""  # the input is compared
    assert summary["verdict"] != "PASS"
    assert any("output 'y' could not be compared" in r and "nondeterministic op 'rnd'" in r
               for r in summary["reasons"])
    assert not any("compile-stage" in r for r in summary["reasons"])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fusion", ["0", "2"])
def test_cli_random_branch_off_the_outputs_can_pass(tmp_path, fusion):
    model = random_and_independent(tmp_path / "side.onnx", random_output=False)
    res = npuscope_with_path("compare", model, "--fusion-level", fusion, "--out", "o", cwd=tmp_path)
    summary, findings, table = report(tmp_path / "o")
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert summary["verdict"] == "PASS"
    assert [f["subject"] for f in findings if f["kind"] == "nondeterministic_op"] == ["rnd"]
    assert table.set_index("TensorName").at["y_det", "CompareFailReason"] == ""


def _clean_env():
    from toolkit.core.env import RELEVANT_ENV

    e = {k: v for k, v in os.environ.items() if k not in ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                           "NPUSCOPE_DEFAULTED", *RELEVANT_ENV)}
    e["PYTHONWARNINGS"] = "ignore"
    return e


def _run_clean(*args, **extra):
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True,
                          env={**_clean_env(), **extra}, timeout=300)


def test_diagnose_summary_environment_separates_npuscope_defaults(tmp_path):
    out = tmp_path / "cmp"
    r = _run_clean("compare", str(rm_sm_model(tmp_path / "m.onnx")), "--out", str(out))
    assert r.returncode in (0, 1), r.stderr
    env = json.loads((out / "summary.json").read_text())["environment"]
    assert "MKL_NUM_THREADS" not in env["env"] and env["set_by_npuscope"]["MKL_NUM_THREADS"] == "1"


F, I64 = TensorProto.FLOAT, TensorProto.INT64
FP16_MAX = 65504.0


def _typed_model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
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


def save_case(folder: Path, model, feeds) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "model.onnx")
    np.savez(folder / "in.npz", **feeds)
    return folder


def by_kind(findings, kind):
    return [f for f in findings if f["kind"] == kind]


def fp16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


TIES = np.array([[1.0001, 1.0002, 0.5], [2, 3, 1], [5, 4, 4.5], [1.0002, 1.0003, 1.0001]], np.float32)
ONE = {"one": np.array(1, np.float32)}


def mul(src="x", out="xm"):
    return helper.make_node("Mul", [src, "one"], [out], name="mul")


def integer_case(name):
    """(model, feeds, numpy function of the Mul output giving the graph output, integer op node name,
    expected keep_dtype set, expected origin node)."""
    x = TIES
    if name == "argmax":
        m = _typed_model([mul(), helper.make_node("ArgMax", ["xm"], ["o"], name="op", axis=1, keepdims=0)],
                   [("x", F, [4, 3])], [("o", I64, [4])], ONE)
        return m, {"x": x}, lambda v: np.argmax(v, axis=1), {"mul", "op"}, "mul"
    if name == "argmin":
        x = np.array([[1.0003, 1.0002, 2.0, 3.0], [0.5001, 0.5002, 0.7, 0.9], [4.0, 3.0, 2.0, 1.0]], np.float32)
        m = _typed_model([mul(), helper.make_node("ArgMin", ["xm"], ["o"], name="op", axis=-1, keepdims=0)],
                   [("x", F, [3, 4])], [("o", I64, [3])], ONE)
        return m, {"x": x}, lambda v: np.argmin(v, axis=-1), {"mul", "op"}, "mul"
    if name == "topk":
        m = _typed_model([mul(), helper.make_node("TopK", ["xm", "k"], ["v", "o"], name="op", axis=1)],
                   [("x", F, [4, 3])], [("o", I64, [4, 1])], {**ONE, "k": np.array([1], np.int64)})
        return m, {"x": x}, lambda v: np.argmax(v, axis=1)[:, None], {"mul", "op"}, "mul"
    if name == "greater":
        thr = np.float32(1.0001)
        m = _typed_model([mul(), helper.make_node("Greater", ["xm", "thr"], ["o"], name="op")],
                   [("x", F, [4, 3])], [("o", TensorProto.BOOL, [4, 3])], {**ONE, "thr": np.array(thr)})
        return m, {"x": x}, lambda v: v > thr, {"mul", "op"}, "mul"
    if name == "cast_int":
        x = np.array([[2.999, 3.999, 1.5], [7.9999, 0.5, 2.0]], np.float32)
        m = _typed_model([mul(), helper.make_node("Cast", ["xm"], ["o"], name="op", to=TensorProto.INT32)],
                   [("x", F, [2, 3])], [("o", TensorProto.INT32, [2, 3])], ONE)
        return m, {"x": x}, lambda v: v.astype(np.int32), {"mul", "op"}, "mul"
    if name == "relu_mul_argmax":  # the rounding is stored by 'relu'; the FP16 Mul by 1 passes it on exactly
        m = _typed_model([helper.make_node("Relu", ["x"], ["r"], name="relu"), mul("r"),
                    helper.make_node("ArgMax", ["xm"], ["o"], name="op", axis=1, keepdims=0)],
                   [("x", F, [4, 3])], [("o", I64, [4])], ONE)
        return m, {"x": x}, lambda v: np.argmax(v, axis=1), {"relu", "mul", "op"}, "relu"
    raise ValueError(name)


CASES = ["argmax", "argmin", "topk", "greater", "cast_int", "relu_mul_argmax"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_integer_output_of_fp16_stored_data_names_the_writer_and_the_advice_passes(tmp_path, name):
    model, feeds, fn, keep_want, origin = integer_case(name)
    x = feeds["x"]
    (ref,) = reference(model, feeds)
    # preconditions, independently: the op is right on the exact values, flips on them rounded to FP16
    np.testing.assert_array_equal(fn(x), ref)
    rate = float(np.mean(fn(fp16(x)) == ref))
    assert rate < 1.0
    folder = save_case(tmp_path, model, feeds)
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.slow
@pytest.mark.parametrize("name", ["argmax", "greater", "relu_mul_argmax"])
def test_after_keeping_only_the_integer_op_the_advice_names_the_writer_and_passes(tmp_path, name):
    """The tester's loop: keep_dtype ['op'] (an FP32 ArgMax reading FP16-stored data) still FAILs; the finding
    names the FP16 writer(s) with ExactMatchRate, and adding them passes."""
    model, feeds, fn, keep_want, origin = integer_case(name)
    (ref,) = reference(model, feeds)
    rate = float(np.mean(fn(fp16(feeds["x"])) == ref))
    folder = save_case(tmp_path, model, feeds)
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_integer_op_reading_an_fp32_graph_input_keeps_the_op_itself(tmp_path):
    """Control: ArgMax straight on the graph input (FP32, cast to FP16 at the ArgMax's input): keeping the
    ArgMax in FP32 is the whole fix, no writer upstream is blamed."""
    model = _typed_model([helper.make_node("ArgMax", ["x"], ["o"], name="op", axis=1, keepdims=0)],
                   [("x", F, [4, 3])], [("o", I64, [4])], {})
    feeds = {"x": TIES}
    (ref,) = reference(model, feeds)
    assert (np.argmax(fp16(TIES), axis=1) != ref).any()
    folder = save_case(tmp_path, model, feeds)
    rc, summary, findings = compare(folder, "a", "--precision-mode", "force_fp16")
    assert rc == 1 and summary["first_divergence"]["node"] == "op"
    (first,) = by_kind(findings, "first_divergence")
    assert first["evidence"]["keep_dtype"] == ["op"] and "storage_rounding" not in first["evidence"]
    rc, summary, _ = compare(folder, "b", "--precision-mode", "force_fp16", keep=["op"])
    assert rc == 0 and summary["verdict"] == "PASS"


def overflow_finding(findings):
    (f,) = by_kind(findings, "fp16_overflow")
    return f


def shown(v: float) -> str:
    """How a |x| past 65504 reads in a message: the whole number rounded up."""
    return str(math.ceil(v))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.slow
@pytest.mark.parametrize("shape, scale", [((4, 8), 5e4), ((2, 16), 3e4)])
def test_overflow_at_an_fp16_kernel_output(tmp_path, shape, scale):
    x = np.random.default_rng(0).uniform(2.5, 3.0, shape).astype(np.float32)
    model = _typed_model([helper.make_node("Mul", ["x", "s"], ["a"], name="up"),
                    helper.make_node("Relu", ["a"], ["r"], name="relu"),
                    helper.make_node("Mul", ["r", "t"], ["y"], name="down")],
                   [("x", F, list(shape))], [("y", F, list(shape))],
                   {"s": np.array(scale, np.float32), "t": np.array(1e-4, np.float32)})
    a = x * np.float32(scale)
    assert np.abs(a).max() > FP16_MAX > np.abs(reference(model, {"x": x})[0]).max()
    folder = save_case(tmp_path, model, {"x": x})
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
    model = _typed_model([helper.make_node("MatMul", ["x", "W"], ["a"], name="mm1"),
                    helper.make_node("Relu", ["a"], ["b"], name="relu"),
                    helper.make_node("MatMul", ["b", "W2"], ["y"], name="mm2")],
                   [("x", F, [2, n])], [("y", F, [2, n])],
                   {"W": (np.eye(n) * gain).astype(np.float32), "W2": (np.eye(n) * 1e-3).astype(np.float32)})
    x = np.linspace(-span, span, 2 * n).reshape(2, n).astype(np.float32)
    return model, {"x": x}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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
    folder = save_case(tmp_path, model, feeds)
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.slow
def test_overflow_at_the_cast_of_a_graph_input(tmp_path):
    x = np.random.default_rng(1).uniform(7e4, 1e5, (3, 5)).astype(np.float32)
    model = _typed_model([helper.make_node("Mul", ["x", "s"], ["y"], name="shrink")], [("x", F, [3, 5])],
                   [("y", F, [3, 5])], {"s": np.array(1e-3, np.float32)})
    folder = save_case(tmp_path, model, {"x": x})
    rc, _, findings = compare(folder, "a", "--precision-mode", "force_fp16")
    assert rc == 1
    f = overflow_finding(findings)
    site = f["evidence"]["overflow"]
    assert (site["where"], site["tensor"], site["producer"]) == ("input_cast", "x", "")
    assert site["golden_absmax"] == pytest.approx(float(x.max()), rel=1e-7)
    assert "graph input 'x'" in f["recommendation"] and shown(float(x.max())) in f["recommendation"]
    rc, summary, findings = compare(folder, "b", "--precision-mode", "force_fp16", keep=f["evidence"]["keep_dtype"])
    assert rc == 0 and summary["verdict"] == "PASS" and not by_kind(findings, "fp16_overflow")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.slow
def test_overflow_in_the_accumulation(tmp_path):
    n = 2048
    x = np.random.default_rng(0).uniform(0, 100, (4, n)).astype(np.float32)
    model = _typed_model([helper.make_node("ReduceMean", ["x"], ["y"], name="rm", axes=[1], keepdims=1)],
                   [("x", F, [4, n])], [("y", F, [4, 1])], {})
    sums = x.astype(np.float64).sum(1)
    assert np.abs(x).max() < FP16_MAX < sums.max() and np.abs(sums / n).max() < FP16_MAX
    folder = save_case(tmp_path, model, {"x": x})
    rc, _, findings = compare(folder, "a", "--precision-mode", "force_fp16")
    assert rc == 1
    f = overflow_finding(findings)
    site = f["evidence"]["overflow"]
    assert site["where"] == "accumulation" and site["golden_absmax"] == pytest.approx(sums.max(), rel=1e-9)
    assert shown(sums.max()) in f["recommendation"]
    assert f["evidence"]["keep_dtype"] == ["rm"]
    rc, summary, findings = compare(folder, "b", "--precision-mode", "force_fp16", keep=f["evidence"]["keep_dtype"])
    assert rc == 0 and summary["verdict"] == "PASS" and not by_kind(findings, "fp16_overflow")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_compare_passes_string_and_int4_outputs(tmp_path):
    for name in ("STRING", "INT4"):
        (tmp_path / name).mkdir()
        path = _save(CPU_MODELS[name], tmp_path / name)
        res = _run_cli("compare", path, "--out", f"o{name}", cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert json.loads((tmp_path / f"o{name}" / "summary.json").read_text())["verdict"] == "PASS"


NUM = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"


def _m1(folder: Path) -> tuple[Path, Path]:
    """The tester's m1: x[4,8] -> y = 3x + 1 (Mul 'mul', Add 'add'), z = exp(x) (Exp 'exp')."""
    from tests.graphs import affine_and

    m = affine_and("Exp")
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(m, folder / "m1.onnx")
    np.savez(folder / "in.npz", x=np.random.default_rng(9).uniform(-1, 6, (4, 8)).astype(np.float32))
    return folder / "m1.onnx", folder / "in.npz"


@pytest.mark.slow
def test_cli_compare_reason_prints_the_line_exactly(tmp_path):
    import onnxruntime as ort

    mp, ip = _m1(tmp_path)
    (y,) = ort.InferenceSession(str(mp), providers=["CPUExecutionProvider"]).run(["y"], {"x": np.load(ip)["x"]})
    y = y.astype(np.float64).ravel()
    run = npuscope("run", mp, "--precision-mode", "force_fp16", "--inputs", ip, "--out", tmp_path / "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    dev = np.load(tmp_path / "run" / "outputs.npz")["y"].astype(np.float64).ravel()
    cos = float(np.dot(dev, y) / (np.linalg.norm(dev) * np.linalg.norm(y)))
    assert 0.99 < cos < 1 - 1e-9
    line = float(Context(prec=10, rounding=ROUND_CEILING).plus(Decimal(repr(cos + 1e-12))))  # 10 digits, above cos
    res = npuscope("compare", mp, "--inputs", ip, "--precision-mode", "force_fp16", "--thresholds",
                   f"CosineSimilarity<{line!r}", "--out", tmp_path / "c", cwd=tmp_path)
    table = pd.read_csv(tmp_path / "c" / "result.csv").set_index("TensorName")
    reasons = [ln for ln in res.stdout.splitlines() if ln.startswith("  - ") and "CosineSimilarity" in ln]
    assert reasons, res.stdout
    for r in reasons:
        m = re.search(rf"CosineSimilarity {NUM} < {NUM}", r)
        assert m and float(m.group(2)) == line and float(m.group(1)) < line, r
    assert table["Abnormal"].any()


@pytest.mark.parametrize("code,opset", [(T.COMPLEX64, 21), (T.FLOAT4E2M1, 25)])
def test_types_onnxruntime_cannot_run_are_one_line_errors(tmp_path, code, opset):
    p = write_model(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["b"], to=code, name="c1"),
                                  h.make_node("Cast", ["b"], ["y"], to=T.FLOAT, name="c2")],
             [V("x", T.FLOAT, [4])], [V("y", T.FLOAT, [4])], opset)
    with pytest.raises((InvalidGraph, NotImplementedOrt, Fail)):  # onnxruntime itself refuses the model
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
    line = npuscope_error_line(cli_with_warnings("compare", str(p), "--out", str(tmp_path / "o")))
    assert "c1" in line or "complex" in line  # names the node or the type


SPARSE_FLAT = h.make_sparse_tensor(h.make_tensor("sv", T.FLOAT, [2], [5.0, 7.0]),
                                   h.make_tensor("si", T.INT64, [2], [1, 4]), [2, 3])


def test_bfloat16_and_sparse_constant_models_compare(tmp_path):
    """o_bf16.onnx / o_sparse.onnx of the report: compare exits 0, no traceback."""
    bf = write_model(tmp_path, "o_bf16.onnx", [h.make_node("Cast", ["x"], ["b"], to=T.BFLOAT16, name="c1"),
                                        h.make_node("Cast", ["b"], ["y"], to=T.FLOAT, name="c2")],
              [V("x", T.FLOAT, [4])], [V("y", T.FLOAT, [4])], 21)
    sp = write_model(tmp_path, "o_sparse.onnx", [h.make_node("Constant", [], ["c"], sparse_value=SPARSE_FLAT, name="k"),
                                          h.make_node("Add", ["x", "c"], ["y"], name="a")],
              [V("x", T.FLOAT, [2, 3])], [V("y", T.FLOAT, [2, 3])], 21)
    for p in (bf, sp):
        r = cli_with_warnings("compare", str(p), "--out", str(tmp_path / f"out-{p.stem}"))
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_origin_isolation_reruns_a_kernel_reading_bfloat16(tmp_path):
    """An FP16 overflow at a Cast reading a bfloat16 graph input: the origin analysis re-runs that kernel alone
    on the reference's bfloat16 values (toolkit.reexec.isolate) and names it; FAIL, exit 1, no traceback."""
    p = write_model(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["f"], to=T.FLOAT, name="c2"),
                                  h.make_node("Mul", ["f", "k"], ["y"], name="mul2")],
             [V("x", T.BFLOAT16, [8])], [V("y", T.FLOAT, [8])], 21, [numpy_helper.from_array(np.array(0.5, np.float32), "k")])
    # (an .npz cannot hold bfloat16: random values in a range past FP16 max instead)
    r = cli_with_warnings("compare", str(p), "--val-range", "x:[60000,200000]", "--precision-mode", "force_fp16",
            "--out", str(tmp_path / "o"))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "first divergence: node 'c2'" in r.stdout, r.stdout


def test_cli_string_input_of_wrong_kind_gets_working_advice(tmp_path):
    _string_model(tmp_path / "s.onnx")
    np.savez(tmp_path / "n.npz", x=np.array([1.0, 2.0]))
    line = _error_line(_cli_user_path("compare", "s.onnx", "--inputs", "n.npz", "--out", "o", cwd=tmp_path), 2)
    assert "np.object" not in line and "str array" in line


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


def single(model: Path, npz: Path, out: Path, config: dict):
    from toolkit import api

    res = api.diagnose_command(str(model), Config.from_dict(config), inputs=str(npz), out=str(out), html=False)
    return res["diagnosis"]


def signoff(model: Path, inputs: Path, out: Path, config: dict, tmp: Path):
    from toolkit import api

    policy = tmp / "pol.toml"
    policy.write_text("[layers]\nmax_abnormal = 0\n")
    res = api.signoff_command(str(model), str(policy), Config.from_dict(config), inputs=str(inputs), out=str(out),
                              html=False)
    return next(r for r in res["run"].results if r.name == "layers.max_abnormal")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dataset_and_single_runs_agree_on_the_fp16_origin_through_the_cli(tmp_path):
    """The tester's reproducer (repro 6), through the CLI: same count and origin everywhere, signoff FAILs."""
    elt_model(tmp_path / "elt.onnx")
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64) + np.float32(0.0001)
    np.savez(tmp_path / "elt.npz", x=x)
    (tmp_path / "in").mkdir()
    np.savez(tmp_path / "in" / "a.npz", x=x)
    (tmp_path / "f16.toml").write_text('precision_mode = "force_fp16"\n')
    (tmp_path / "pol.toml").write_text("[layers]\nmax_abnormal = 1\n")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "toolkit", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, check=False, env=dict(os.environ, PYTHONWARNINGS="ignore"))

    base = ["elt.onnx", "--config", "f16.toml"]
    one, ds = cli("compare", *base, "--inputs", "elt.npz", "--out", "single"), cli("compare", *base, "--inputs", "in",
                                                                                    "--out", "dataset")
    assert one.returncode == ds.returncode == 1, one.stderr + ds.stderr  # output z abnormal: FAIL on both
    s = json.loads((tmp_path / "single" / "summary.json").read_text())
    row = pd.read_csv(tmp_path / "dataset" / "inputs.csv").iloc[0]
    w = json.loads((tmp_path / "dataset" / "summary.json").read_text())
    assert s["counts"]["abnormal"] == int(row["Abnormal"]) == w["counts"]["abnormal"] == 2
    assert s["first_divergence"]["tensor"] == row["FirstDivergence"] == w["first_divergence"]["tensor"] == "s"
    so = cli("signoff", "elt.onnx", "--policy", "pol.toml", "--inputs", "in", "--config", "f16.toml", "--out", "so",
             "--no-html")
    assert so.returncode == 1, so.stdout + so.stderr
    assert "2 abnormal tensor(s) (allowed 1): s, z" in so.stdout


RNG = np.random.default_rng(0)
W = np.zeros((64, 64), np.float32)
W[:32, :32] = np.abs(RNG.standard_normal((32, 32))) * 500
W[32:, 32:] = RNG.standard_normal((32, 32)) * 0.05
X = RNG.standard_normal((1, 64)).astype(np.float32)
X[0, :32] = np.abs(X[0, :32])


def _noise_model(op: str) -> onnx.ModelProto:
    inits = [nh.from_array(W, "W"), nh.from_array(np.zeros(64, np.float32), "b")]
    tail = {"Relu": [h.make_node("Relu", ["add"], ["y"], name="op")],
            "Abs": [h.make_node("Abs", ["add"], ["y"], name="op")],
            "Neg": [h.make_node("Neg", ["add"], ["y"], name="op")],
            "Transpose": [h.make_node("Transpose", ["add"], ["y"], name="op", perm=[1, 0])],
            "Reshape": [h.make_node("Reshape", ["add", "shape"], ["y"], name="op")],
            # cancellation: y = add - (reference add), small values carrying the full rounding of large ones
            "SubCancel": [h.make_node("Sub", ["add", "ref"], ["y"], name="op")]}[op]
    if op == "Reshape":
        inits.append(nh.from_array(np.array([8, 8], np.int64), "shape"))
    if op == "SubCancel":
        inits.append(nh.from_array((X @ W + np.float32(0.5)).astype(np.float32), "ref"))
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"), h.make_node("Add", ["mm", "b"], ["add"], name="add"),
             *tail, h.make_node("Sigmoid", ["add"], ["z"], name="sig")]
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, [1, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, {"Transpose": [64, 1], "Reshape": [8, 8]}.get(op, [1, 64])),
                      h.make_tensor_value_info("z", T.FLOAT, [1, 64])],
                     inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _compare(tmp_path, op):
    path = tmp_path / f"{op}.onnx"
    onnx.save(_noise_model(op), path)
    np.savez(tmp_path / "x.npz", x=X)
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(path), "--inputs", str(tmp_path / "x.npz"),
                           "--precision-mode", "force_fp16", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300)
    rows = pd.read_csv(tmp_path / "o" / "result.csv", keep_default_na=False).set_index("TensorName")
    return proc, rows


def _max_err(rows, t) -> float:
    return float(rows.loc[t, "MaxAbsoluteError"])


@pytest.mark.parametrize("op", ["Relu", "Abs", "Neg", "Transpose", "Reshape"])
def test_exact_ops_keep_the_allowance_of_the_noise_they_pass_on(tmp_path, op):
    proc, rows = _compare(tmp_path, op)
    assert str(rows.loc["add", "WithinExpectedNoise"]) == "True"  # the cube op's rounding, excused
    # the op passes it on unchanged: the same largest error (Relu: at most the same), computed from the rows
    assert _max_err(rows, "y") <= _max_err(rows, "add") + 1e-9
    assert str(rows.loc["y", "WithinExpectedNoise"]) == "True", rows.loc["y"].to_dict()
    assert str(rows.loc["y", "Abnormal"]) == "False"
    assert proc.returncode == 0 and proc.stdout.startswith("verdict: PASS"), proc.stdout + proc.stderr


def test_an_op_that_amplifies_the_rounding_is_still_flagged(tmp_path):
    """y = add - reference(add) + 0.5: |y| ~ 0.5 carries add's FP16 rounding (spacing 8 near 1e4), far beyond
    any relative allowance of y's own magnitude."""
    proc, rows = _compare(tmp_path, "SubCancel")
    ref = (X @ W).astype(np.float64)
    fp16_err = float(np.max(np.abs(ref.astype(np.float16).astype(np.float64) - ref)))
    assert fp16_err > 1.0  # the rounding of the large block, computed here
    assert _max_err(rows, "y") > 1.0
    assert str(rows.loc["y", "Abnormal"]) == "True"
    assert proc.returncode == 1


LOCK = ".npuscope-run.lock"


def _ok_lines(folder: Path) -> int:
    return sum(json.loads(x).get("status") == "ok" for x in (folder / "log.jsonl").read_text().splitlines())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dataset_run_refused_while_another_holds_the_folder(tmp_path):
    ds = _npz_folder(tmp_path / "inputs", 3)
    out = tmp_path / "run"
    first = cli_no_warnings("compare", "transformer_block", "--inputs", ds, "--out", out)
    assert first.returncode == 0, first.stderr
    assert not (out / LOCK).exists()  # released and removed at exit
    log_before = (out / "log.jsonl").read_text()
    with open(out / LOCK, "w") as held:  # another run holding the folder
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242\n")
        held.flush()
        r = cli_no_warnings("compare", "transformer_block", "--inputs", ds, "--out", out)
        assert r.returncode == 2
        line = refusal_line(r)
        assert f"'{out}'" in line and "pid 4242" in line
        assert (out / "log.jsonl").read_text() == log_before
    # the holder died without removing its lock file: nothing holds it, the run resumes
    r = cli_no_warnings("compare", "transformer_block", "--inputs", ds, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "(0 evaluated now, 3 reused)" in r.stdout
    assert not (out / LOCK).exists() and _ok_lines(out) == 3


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_new_folder_held_by_another_run_is_not_removed(tmp_path):
    ds = _npz_folder(tmp_path / "inputs", 2)
    out = tmp_path / "run"
    out.mkdir()
    with open(out / LOCK, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = cli_no_warnings("compare", "transformer_block", "--inputs", ds, "--out", out)
        assert r.returncode == 2 and "in use by another dataset run" in refusal_line(r)
        assert (out / LOCK).exists() and os.listdir(out) == [LOCK]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.slow
def test_two_concurrent_dataset_runs_evaluate_each_input_once(tmp_path):
    ds = _npz_folder(tmp_path / "inputs", 40)
    out = tmp_path / "race"
    cmd = [sys.executable, "-m", "toolkit", "compare", "transformer_block", "--inputs", str(ds), "--out", str(out)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
             for _ in range(2)]
    res = [(p.wait(TIMEOUT_S), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(c for c, _, _ in res)
    refused = [e for c, _, e in res if c == 2]
    # either the second start was refused (exit 2: it could not run as asked), or it came after the first
    # finished and reused every result
    assert codes in ([0, 2], [0, 0]), res
    if refused:
        assert "in use by another dataset run" in refused[0]
    else:
        assert any("(0 evaluated now, 40 reused)" in o for _, o, _ in res)
    assert _ok_lines(out) == 40 and not (out / LOCK).exists()


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


def npuscope_errors_only(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, NPUSCOPE_LOG_LEVEL="3"))


def save_checked_model(path: Path, nodes, inputs, outputs, inits=()) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def ort_run(path: Path, feeds: dict) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def matmul_relu(path: Path, w: np.ndarray) -> Path:
    """y = Relu(x @ W), x (1, 4)."""
    return save_checked_model(path, [helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"),
                       helper.make_node("Relu", ["t"], ["y"], name="relu")],
                [vi("x", [1, 4])], [vi("y", [1, w.shape[1]])], [numpy_helper.from_array(w, "W")])


def x_feed(path: Path, x: np.ndarray) -> Path:
    np.savez(path, x=x)
    return path


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
    proc = npuscope_errors_only("compare", model, "--inputs", feeds, "--out", tmp_path / "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary, findings, df = report(tmp_path / "r")
    kinds = [f["kind"] for f in findings]
    assert "fp16_overflow" not in kinds and "keep" not in proc.stdout
    assert summary["first_divergence"] is None
    gn = [f for f in findings if f["kind"] == "golden_nonfinite"]
    assert len(gn) == 1 and gn[0]["severity"] == "warning" and gn[0]["subject"] == "y"
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
    proc = npuscope_errors_only("compare", model, "--inputs", x_feed(tmp_path / "x.npz", x), "--out", tmp_path / "r",
                    cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary, findings, _ = report(tmp_path / "r")
    assert summary["verdict"] == "FAIL" and "fp16_overflow" in [f["kind"] for f in findings]
    assert "golden_nonfinite" not in [f["kind"] for f in findings]
    assert "isolate.py" not in proc.stderr  # 6.: the isolation's intended FP16 overflow is silent


def test_model_without_outputs_is_a_one_line_model_error(tmp_path):
    w = np.eye(4, dtype=np.float32)
    model = save_checked_model(tmp_path / "noout.onnx", [helper.make_node("MatMul", ["x", "W"], ["t"], name="mm")],
                 [vi("x", [1, 4])], [], [numpy_helper.from_array(w, "W")])
    assert not onnx.load(model).graph.output
    for cmd in ("compare", "diagnose", "tune"):
        out = tmp_path / f"r_{cmd}"
        proc = npuscope_errors_only(cmd, model, "--out", out, cwd=tmp_path)
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
    return save_checked_model(path, nodes, ins, outs, inits)


@pytest.mark.parametrize("extra_input", [False, True])
def test_folded_graph_output_is_compared_with_the_reference(tmp_path, extra_input):
    """Kind: a graph output computed at compile time (constant folding) gets a real comparison: the folded
    constant vs onnxruntime's output, PASS when they agree, never "nothing could be compared"."""
    model = const_model(tmp_path / "m.onnx", extra_input)
    args = ["--inputs", x_feed(tmp_path / "x.npz", np.zeros((1, 4), np.float32))] if extra_input else []
    proc = npuscope_errors_only("compare", model, *args, "--out", tmp_path / "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary, _, df = report(tmp_path / "r")
    if extra_input:
        assert summary["verdict"] == "PASS", summary["reasons"]
    else:  # nothing left for the device: said in the verdict, and no fix sentence claims the target is met
        assert summary["verdict"] == "WARN" and any("no kernel ran" in r for r in summary["reasons"])
        fix = summary["fix"]["sentence"]
        assert fix.startswith("no fix to verify: no kernel runs on the device") and "meet" not in fix
    expected = np.maximum(-CONST, 0)
    feeds = {"x": np.zeros((1, 4), np.float32)} if extra_input else {}
    np.testing.assert_array_equal(ort_run(model, feeds)["y"], expected)
    y = df[df["TensorName"] == "y"].iloc[0]
    assert y["CompareFailReason"] == "" and y["Rule"] == "fold_constants"
    assert float(y["ComparedCount"]) == expected.size and float(y["MaxAbsoluteError"]) == 0.0
    assert float(y["GoldenMax"]) == expected.max() and float(y["GoldenMin"]) == expected.min()
    n = df[df["TensorName"] == "n"].iloc[0]  # a folded intermediate stays "computed at compile time"
    assert n["CompareFailReason"].startswith("computed at compile time")


def test_result_columns_are_fixed_whatever_the_model(tmp_path):
    """Kind: result.csv's header is the documented list for a fused MatMul+Relu, a graph with no node, a
    folded constant output and a NaN model."""
    x = np.array([[0.5, 0.25, 1.0, 0.75]], np.float32)
    feeds = x_feed(tmp_path / "x.npz", x)
    models = {
        "fused": (matmul_relu(tmp_path / "fused.onnx", np.eye(4, dtype=np.float32)), ["--inputs", feeds]),
        "nonodes": (save_checked_model(tmp_path / "nonodes.onnx", [], [vi("x", [1, 4])], [vi("x", [1, 4])]), ["--inputs", feeds]),
        "folded": (const_model(tmp_path / "folded.onnx", False), []),
        "nan": (matmul_relu(tmp_path / "nan.onnx", NONFINITE_WEIGHTS["nan_inf_neg_inf"]), ["--inputs", feeds]),
    }
    assert RESULT_COLUMNS == DOCUMENTED_COLUMNS
    for name, (model, args) in models.items():
        proc = npuscope_errors_only("compare", model, *args, "--out", tmp_path / name, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        header = (tmp_path / name / "result.csv").read_text().splitlines()[0].split(",")
        assert header == DOCUMENTED_COLUMNS, name


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
