"""Fixes in the tool commands, each fault kind covered through the CLI (run in a subprocess):

- memcheck / run --plan: errors name the plan FILE (never the Plan repr); without MODEL the model the plan
  records is used, else a usage error (exit 2);
- tune --target: recorded and printed as given (repr of the float, not %g); the same range rules as
  --thresholds (usage error, exit 2, before any work); the host time of the cost is a median after a warm-up;
- regress: refuses folders that are not diagnose/compare/signoff results, results of different models (unless
  --allow-different-models, then a warning) and a dataset run against a single-input run;
- dataset runs: an exclusive lock on the output folder (a second run is refused, exit 1; a stale lock file
  left by a crash does not block the resume);
- doctor --json: every outcome is JSON on stdout with the exit code of the plain run.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from toolkit import samples

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ENV = dict(os.environ, PYTHONWARNINGS="ignore")
TIMEOUT_S = 300
TB = str(samples.sample_path("transformer_block"))


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=TIMEOUT_S, cwd=cwd, check=False)


def one_line_error(proc) -> str:
    """The single stderr line of a refused command."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


# ------------------------------------------------------------------------------------------- 1. plan files
@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """plan.json of transformer_block as compile writes it (model recorded) and as compare writes it (model '')."""
    tmp = tmp_path_factory.mktemp("plans")
    r = cli("compile", "transformer_block", "--out", tmp / "c")
    assert r.returncode == 0, r.stderr
    d = json.loads((tmp / "c" / "plan.json").read_text())
    out = {"tmp": tmp, "with_model": tmp / "c" / "plan.json", "first_kernel": d["kernels"][0]["name"]}
    for name, model in (("no_model", ""), ("missing_model", str(tmp / "gone.onnx"))):
        out[name] = tmp / f"{name}.json"
        out[name].write_text(json.dumps({**d, "model": model}))
    return out


@pytest.mark.parametrize("command", ["memcheck", "run"])
def test_plan_without_model_argument_or_record_is_usage_error(plans, command):
    for key in ("no_model", "missing_model"):
        r = cli(command, "--plan", plans[key], "--out", plans["tmp"] / f"{command}-{key}")
        assert r.returncode == 2, r.stdout + r.stderr
        line = one_line_error(r)
        assert f"plan file '{plans[key]}'" in line and "MODEL" in line
        assert not (plans["tmp"] / f"{command}-{key}").exists()


@pytest.mark.parametrize("command", ["memcheck", "run"])
def test_plan_of_another_model_names_the_file_not_the_repr(plans, command):
    r = cli(command, "resnet_small", "--plan", plans["no_model"], "--out", plans["tmp"] / f"{command}-other")
    assert r.returncode == 2, r.stdout + r.stderr
    line = one_line_error(r)
    assert f"plan file '{plans['no_model']}'" in line
    assert f"kernel #0 is '{plans['first_kernel']}'" in line
    assert "Plan(" not in line and "KernelSpec" not in line and len(line) < 600


def test_memcheck_without_model_uses_the_model_the_plan_records(plans):
    out = plans["tmp"] / "mc-recorded"
    r = cli("memcheck", "--plan", plans["with_model"], "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((out / "memcheck.json").read_text())
    assert Path(rep["model"]).resolve() == Path(TB).resolve()
    checked = json.loads((out / "plan.json").read_text())
    assert [k["name"] for k in checked["kernels"]] == \
        [k["name"] for k in json.loads(plans["with_model"].read_text())["kernels"]]


# ----------------------------------------------------------------------------------------------- 2. tune
def test_format_target_keeps_every_digit():
    from toolkit.tuning.tune import format_target, parse_target

    for text in ("CosineSimilarity>=0.9999999", "MaxAbsoluteError<=1.2345678901e-07", "CosineSimilarity>0.123456789"):
        (m, o, v), = parse_target(text)
        shown = format_target([(m, o, v)])[0]
        assert float(shown.split(o, 1)[1]) == float(text.split(o, 1)[1])
        assert shown.startswith(m + o)


def test_tune_records_the_target_as_given(tmp_path):
    r = cli("tune", "resnet_small", "--target", "CosineSimilarity>=0.9999999", "--out", tmp_path / "t")
    assert r.returncode in (0, 1), r.stderr
    assert "CosineSimilarity>=0.9999999" in r.stdout.splitlines()[0]
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["target"] == ["CosineSimilarity>=0.9999999"]
    html = (tmp_path / "t" / "tune.html").read_text()
    assert "CosineSimilarity&gt;=0.9999999" in html and "CosineSimilarity&gt;=1<" not in html
    cost = summary["cost"]
    assert cost["host_time_ratio"] == pytest.approx(cost["host_ms_after"] / cost["host_ms_before"])
    assert "median" in cost["host_time_measure"] and "warm-up" in cost["host_time_measure"]


# out-of-range target values and the --thresholds line that names the same out-of-range value
OUT_OF_RANGE = [("CosineSimilarity>=2", "CosineSimilarity<2"), ("CosineSimilarity>=-1.5", "CosineSimilarity<-1.5"),
                ("MaxAbsoluteError<=-1", "MaxAbsoluteError>-1"), ("CosineSimilarity>=nan", "CosineSimilarity<nan"),
                ("RelativeEuclideanDistance<=-0.01", "RelativeEuclideanDistance>-0.01")]


@pytest.mark.parametrize("target,threshold", OUT_OF_RANGE)
def test_tune_target_range_matches_thresholds(tmp_path, target, threshold):
    r = cli("tune", "resnet_small", "--target", target, "--out", tmp_path / "t")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"target '{target}'" in one_line_error(r)
    assert not (tmp_path / "t").exists() and r.stdout == ""
    t = cli("compare", "resnet_small", "--thresholds", threshold, "--out", tmp_path / "c")
    assert t.returncode == 2, t.stdout + t.stderr


def test_host_time_skips_the_warm_up_and_takes_the_median():
    from types import SimpleNamespace

    from toolkit.tuning.tune import host_time_ms

    class Fake:
        def __init__(self, times):
            self.times = list(times)

        def run(self, feed):
            return SimpleNamespace(total_ms=self.times.pop(0))

    times = [1000.0, 5.0, 1.0, 4.0, 2.0, 3.0]  # first run: session creation
    assert host_time_ms(Fake(times), {}, runs=5) == float(np.median(times[1:]))


# -------------------------------------------------------------------------------------------- 3. regress
def _npz_folder(folder: Path, n: int) -> Path:
    """``n`` transformer_block inputs (x: 1x16x64 normal, mask: ones, the shapes of the sample's inputs)."""
    folder.mkdir()
    model = onnx.load(TB)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    rng = np.random.default_rng(1)
    for k in range(n):
        np.savez(folder / f"in{k:03d}.npz", **{name: (rng.normal(0, 1, s) if name == "x" else np.ones(s))
                                              .astype(np.float32) for name, s in shapes.items()})
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("regress")
    runs = {"tb": ("compare", "transformer_block"), "tb2": ("compare", "transformer_block"),
            "rs": ("compare", "resnet_small"), "tune": ("tune", "resnet_small"),
            "mc": ("memcheck", "resnet_small")}
    for name, (cmd, model) in runs.items():
        r = cli(cmd, model, *([] if cmd == "compare" else ["--no-html"]), "--out", tmp / name)
        assert r.returncode in (0, 1), r.stderr
    ds = _npz_folder(tmp / "inputs", 3)
    r = cli("compare", "transformer_block", "--inputs", ds, "--out", tmp / "ds")
    assert r.returncode == 0, r.stderr
    return tmp


def test_regress_same_model_still_works(folders):
    r = cli("regress", folders / "tb", folders / "tb2", "--no-html", "--out", folders / "r-same")
    assert r.returncode == 0 and "NO REGRESSION" in r.stdout, r.stdout + r.stderr


def test_regress_refuses_different_models_unless_allowed(folders):
    r = cli("regress", folders / "rs", folders / "tb", "--no-html", "--out", folders / "r-diff")
    assert r.returncode == 2
    line = one_line_error(r)
    assert "different models" in line and "--allow-different-models" in line
    assert str(folders / "rs") in line and str(folders / "tb") in line
    assert not (folders / "r-diff").exists()
    ok = cli("regress", folders / "rs", folders / "tb", "--allow-different-models", "--no-html",
             "--out", folders / "r-diff2")
    assert ok.returncode in (0, 1), ok.stderr
    assert ok.stdout.splitlines()[0].startswith("WARNING: DIFFERENT MODELS")
    rep = json.loads((folders / "r-diff2" / "regress.json").read_text())
    assert rep["warnings"] and "DIFFERENT MODELS" in rep["warnings"][0]


@pytest.mark.parametrize("other,what", [("tune", "tune"), ("mc", "memcheck")])
def test_regress_refuses_folders_of_other_commands(folders, other, what):
    for a, b in ((folders / "tb", folders / other), (folders / other, folders / "tb")):
        r = cli("regress", a, b, "--no-html", "--out", folders / f"r-{other}")
        assert r.returncode == 2
        line = one_line_error(r)
        assert f"'{folders / other}'" in line and what in line
        assert not (folders / f"r-{other}").exists()


def test_regress_refuses_dataset_against_single_input(folders):
    for a, b in ((folders / "ds", folders / "tb"), (folders / "tb", folders / "ds")):
        r = cli("regress", a, b, "--no-html", "--out", folders / "r-ds")
        assert r.returncode == 2
        line = one_line_error(r)
        assert f"'{folders / 'ds'}' is a dataset run" in line and str(folders / "tb") in line


# ------------------------------------------------------------------------------------- 4. dataset run lock
LOCK = ".npuscope-run.lock"


def _ok_lines(folder: Path) -> int:
    return sum(json.loads(x).get("status") == "ok" for x in (folder / "log.jsonl").read_text().splitlines())


def test_dataset_run_refused_while_another_holds_the_folder(tmp_path):
    ds = _npz_folder(tmp_path / "inputs", 3)
    out = tmp_path / "run"
    first = cli("compare", "transformer_block", "--inputs", ds, "--out", out)
    assert first.returncode == 0, first.stderr
    assert not (out / LOCK).exists()  # released and removed at exit
    log_before = (out / "log.jsonl").read_text()
    with open(out / LOCK, "w") as held:  # another run holding the folder
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242\n")
        held.flush()
        r = cli("compare", "transformer_block", "--inputs", ds, "--out", out)
        assert r.returncode == 2
        line = one_line_error(r)
        assert f"'{out}'" in line and "pid 4242" in line
        assert (out / "log.jsonl").read_text() == log_before
    # the holder died without removing its lock file: nothing holds it, the run resumes
    r = cli("compare", "transformer_block", "--inputs", ds, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "(0 evaluated now, 3 reused)" in r.stdout
    assert not (out / LOCK).exists() and _ok_lines(out) == 3


def test_new_folder_held_by_another_run_is_not_removed(tmp_path):
    ds = _npz_folder(tmp_path / "inputs", 2)
    out = tmp_path / "run"
    out.mkdir()
    with open(out / LOCK, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = cli("compare", "transformer_block", "--inputs", ds, "--out", out)
        assert r.returncode == 2 and "in use by another dataset run" in one_line_error(r)
        assert (out / LOCK).exists() and os.listdir(out) == [LOCK]


@pytest.mark.slow
def test_two_concurrent_dataset_runs_evaluate_each_input_once(tmp_path):
    ds = _npz_folder(tmp_path / "inputs", 40)
    out = tmp_path / "race"
    cmd = [sys.executable, "-m", "toolkit", "compare", "transformer_block", "--inputs", str(ds), "--out", str(out)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
             for _ in range(2)]
    res = [(p.wait(TIMEOUT_S), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(c for c, _, _ in res)
    refused = [e for c, _, e in res if c == 1]
    # either the second start was refused, or it came after the first finished and reused every result
    assert codes in ([0, 1], [0, 0]), res
    if refused:
        assert "in use by another dataset run" in refused[0]
    else:
        assert any("(0 evaluated now, 40 reused)" in o for _, o, _ in res)
    assert _ok_lines(out) == 40 and not (out / LOCK).exists()


# --------------------------------------------------------------------------------------------- 5. doctor
@pytest.fixture(scope="module")
def bad_models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("doctor")
    (tmp / "garbage.onnx").write_bytes(b"\x08\x07garbage, not a protobuf \xff\xfe")
    (tmp / "folder.onnx").mkdir()
    m = onnx.load(TB)
    m.opset_import[0].version = 99
    onnx.save(m, tmp / "opset99.onnx")
    return tmp


@pytest.mark.parametrize("arg,code", [("missing.onnx", 2), ("garbage.onnx", 2), ("folder.onnx", 2),
                                      ("opset99.onnx", 1), ("resnet_small", 0)])
def test_doctor_json_for_every_outcome(bad_models, arg, code):
    target = arg if arg == "resnet_small" else bad_models / arg
    plain = cli("doctor", target)
    js = cli("doctor", "--json", target)
    assert plain.returncode == js.returncode == code, plain.stderr + js.stderr
    doc = json.loads(js.stdout)
    assert doc["ok"] is (code == 0)
    assert js.stderr.strip() == ""
    if arg in ("missing.onnx", "garbage.onnx", "folder.onnx"):
        assert doc["exit_code"] == code and arg in doc["error"]
    if arg == "opset99.onnx":  # read anyway: the opset check itself says why
        bad = {c["name"]: c for c in doc["checks"] if not c["passed"]}
        assert bad["opset99 opset"]["found"] == "99" and "opset99 loads" in bad
