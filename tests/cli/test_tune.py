"""``npuscope tune`` in a subprocess: artifacts and the tuned config, loader scripts and input folders,
--max-inputs, targets that cannot apply to the outputs, unmet targets and the printed values."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli.helpers import (
    BIG,
    npuscope_run,
    quiet_cli_with_warnings,
)
from toolkit.config.schema import Config
from toolkit.engine import Session, shapes_of
from toolkit.inputs import input_specs, load_npz

TIMEOUT_S = 600


ENV = dict(os.environ, PYTHONWARNINGS="ignore")


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV, timeout=600)


def one_line_error(res: subprocess.CompletedProcess, code: int) -> str:
    """The error line of a run that must fail with ``code`` and a one-line message (no traceback)."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


LOADERS = {
    "l_int.py": ("def inputs():\n    return 5\n", "inputs", "5"),
    "l_gen.py": ("import numpy as np\ndef inputs():\n    yield {'x': np.zeros((1, 3, 32, 32), np.float32)}\n"
                 "    raise ValueError('boom after one')\n", "inputs", "ValueError: boom after one"),
    "l_arg.py": ("def load(a):\n    yield {}\n", "load", "missing 1 required positional argument"),
    "l_dict.py": ("import numpy as np\ndef inputs():\n    return {'x': np.zeros((1, 3, 32, 32), np.float32)}\n",
                  "inputs", "returned one dict"),
    "l_iter.py": ("class Bad:\n    def __iter__(self):\n        raise RuntimeError('no iter')\n"
                  "def inputs():\n    return Bad()\n", "inputs", "not a list or generator"),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", ["l_int.py", "l_gen.py", "l_arg.py"])
def test_cli_tune_loader_failures_exit_1(tmp_path, name):
    text, fn, expect = LOADERS[name]
    (tmp_path / name).write_text(text)
    spec = name + (f":{fn}" if fn != "inputs" else "")
    line = one_line_error(cli("tune", "resnet_small", "--inputs", spec, "--out", "o", "--no-html", cwd=tmp_path), 2)
    assert f"--inputs loader script '{name}'" in line and f"{fn}()" in line and expect in line


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_tune_unmet_target_prints_distinguishable_values(tmp_path):
    res = cli("tune", "resnet_small", "--target", "CosineSimilarity>=1", "--out", "o", "--no-html", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["met"] is False
    worst = min(r["CosineSimilarity"] for r in summary["after"])
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("worst output after:"))
    printed = line.split("CosineSimilarity ", 1)[1].split(",", 1)[0]
    # the printed number reads back close to the stored one and, like it, below the limit 1
    assert abs(float(printed) - worst) <= 1e-9 * max(1.0, abs(worst))
    assert (float(printed) < 1.0) == (worst < 1.0)
    assert "without it the target fails" not in res.stdout
    assert all(e["without_it"] in ("not decisive: the target is not met with it either", "not tried")
               for e in summary["evidence"])


def test_cli_tune_prints_casts_removed(tmp_path):
    """x * 1e5 / 1e5 overflows in FP16: tune keeps both nodes in FP32, so the input Cast to FP16 disappears."""
    w = numpy_helper.from_array(np.full(8, 1e5, np.float32), "w")
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"], name="mul"),
                           helper.make_node("Div", ["t", "w"], ["y"], name="div")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "ov.onnx")
    res = quiet_cli_with_warnings("tune", tmp_path / "ov.onnx", "--precision-mode", "force_fp16", "--no-html", "--out", tmp_path / "o")
    assert res.returncode in (0, 1), res.stderr
    delta = json.loads((tmp_path / "o" / "summary.json").read_text())["cost"]["casts_added"]
    assert delta < 0  # every node back in FP32: fewer Casts than the all-FP16 plan
    assert f"Casts removed {-delta}" in res.stdout and "added -" not in res.stdout, res.stdout


X_4_8 = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


def _cli_user_path(*args, cwd, env_path: Path | None = None, timeout=300):
    import os

    env = dict(os.environ)
    if env_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(env_path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


def _error_line(res, code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("npuscope: error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def _m1(path: Path) -> Path:
    """y = 3x + 1, z = exp(x) on x float32[4, 8] (two float outputs)."""
    from tests.graphs import affine_and

    m = affine_and("Exp")
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def _argmax_model(path: Path) -> Path:
    """am = ArgMax(x * 1, axis 1): one int64 output."""
    nodes = [helper.make_node("Mul", ["x", "one"], ["xm"], name="mul"),
             helper.make_node("ArgMax", ["xm"], ["am"], axis=1, keepdims=0, name="argmax")]
    g = helper.make_graph(nodes, "am", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
                          [helper.make_tensor_value_info("am", TensorProto.INT64, [4])],
                          [numpy_helper.from_array(np.array(1, np.float32), "one")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


@pytest.fixture()
def m1(tmp_path) -> Path:
    _m1(tmp_path / "m1.onnx")
    np.savez(tmp_path / "in.npz", x=X_4_8)
    return tmp_path


N_SETS = 70


def _folder_with_late_overflow(d: Path) -> Path:
    """N_SETS .npz files; only the last (by name) has x = 12, where exp(12) = 162754.79 > 65504 (FP16 max)."""
    ds = d / "ds"
    ds.mkdir()
    rng = np.random.default_rng(1)
    for i in range(N_SETS - 1):
        np.savez(ds / f"a{i:02d}.npz", x=rng.uniform(-1, 1, (4, 8)).astype(np.float32))
    np.savez(ds / "z_bad.npz", x=np.full((4, 8), 12, np.float32))
    assert np.exp(np.float32(12)) > 65504
    return ds


def test_cli_tune_uses_every_file_of_a_folder(m1):
    _folder_with_late_overflow(m1)
    res = _cli_user_path("tune", "m1.onnx", "--precision-mode", "force_fp16", "--inputs", "ds", "--no-html", "--out", "o",
               cwd=m1)
    assert res.returncode == 0, res.stderr
    summary = json.loads((m1 / "o" / "summary.json").read_text())
    assert sorted(summary["inputs"]) == sorted(p.name for p in (m1 / "ds").glob("*.npz"))
    assert len(summary["inputs"]) == N_SETS
    assert "exp" in summary["keep_dtype"]  # only z_bad.npz (sorted last) needs it: exp(12) overflows FP16
    assert res.stdout.startswith(f"target MET on {N_SETS} input(s)")


def test_cli_tune_more_sets_than_max_inputs_is_refused_naming_count_and_option(m1):
    _folder_with_late_overflow(m1)
    line = _error_line(_cli_user_path("tune", "m1.onnx", "--inputs", "ds", "--max-inputs", "10", "--out", "o", cwd=m1), 2)
    assert f"holds {N_SETS} .npz files" in line and "--max-inputs 10" in line and f"--max-inputs {N_SETS}" in line
    assert not (m1 / "o").exists()


def test_cli_tune_never_ending_loader_is_refused_not_cut(m1):
    (m1 / "inf.py").write_text("import itertools\nimport numpy as np\ndef inputs():\n"
                               "    for i in itertools.count():\n        yield {'x': np.full((4, 8), i, np.float32)}\n")
    line = _error_line(_cli_user_path("tune", "m1.onnx", "--inputs", "inf.py", "--max-inputs", "5", "--out", "o", cwd=m1), 2)
    assert "gives more than 5 input sets" in line and "--max-inputs" in line


def test_cli_tune_exact_match_rate_on_float_outputs_is_a_usage_error(m1):
    line = _error_line(_cli_user_path("tune", "m1.onnx", "--inputs", "in.npz", "--target", "ExactMatchRate>=1",
                            "--out", "o", cwd=m1), 2)
    assert "ExactMatchRate applies to integer/bool outputs only" in line and "'y' float32" in line
    assert not (m1 / "o").exists()


def test_cli_tune_float_target_on_integer_outputs_is_a_usage_error(tmp_path):
    """An explicit float --target on a model whose outputs are all integer is refused; without --target the
    default target is ExactMatchRate alone there, and tune runs."""
    _argmax_model(tmp_path / "am.onnx")
    np.savez(tmp_path / "in.npz", x=np.array([[1, 2], [3, 1], [0, 5], [2, 2.5]], np.float32))
    line = _error_line(_cli_user_path("tune", "am.onnx", "--inputs", "in.npz", "--target", "CosineSimilarity>=0.99",
                                      "--out", "o", cwd=tmp_path), 2)
    assert "--target" in line and "CosineSimilarity applies to float outputs only" in line
    assert "'am' int64" in line and "ExactMatchRate>=1" in line
    r = _cli_user_path("tune", "am.onnx", "--inputs", "in.npz", "--out", "d", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].endswith(": ExactMatchRate>=1.0"), r.stdout


def cli_no_warnings(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=TIMEOUT_S, cwd=cwd, check=False)


def refusal_line(proc) -> str:
    """The single stderr line of a refused command."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_tune_records_the_target_as_given(tmp_path):
    r = cli_no_warnings("tune", "resnet_small", "--target", "CosineSimilarity>=0.9999999", "--out", tmp_path / "t")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("target,threshold", OUT_OF_RANGE)
def test_tune_target_range_matches_thresholds(tmp_path, target, threshold):
    r = cli_no_warnings("tune", "resnet_small", "--target", target, "--out", tmp_path / "t")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"target '{target}'" in refusal_line(r)
    assert not (tmp_path / "t").exists() and r.stdout == ""
    t = cli_no_warnings("compare", "resnet_small", "--thresholds", threshold, "--out", tmp_path / "c")
    assert t.returncode == 2, t.stdout + t.stderr


CASES = Path("/work/shared/cases/fp16")


TARGET = "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2"


def ort_outputs(model: onnx.ModelProto, feed: dict) -> dict:
    """Plain onnxruntime, no graph optimisation (options compatible with a process-wide global thread pool,
    which an in-process CLI test of the same worker may have switched on)."""
    from toolkit.ort.ort_env import session_options

    sess = ort.InferenceSession(model.SerializeToString(), session_options(optimize=False),
                                providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


def assert_meets(model, feed, cfg: Config, cos_min=0.9999, mae_max=1e-2):
    """Compile ``cfg`` from scratch, run, and check the target against plain onnxruntime with numpy."""
    got = Session(model, cfg, input_shapes=shapes_of(feed)).run(feed).outputs
    for name, ref in ort_outputs(model, feed).items():
        x, y = np.asarray(got[name], np.float64).ravel(), np.asarray(ref, np.float64).ravel()
        assert np.isfinite(x).all() == np.isfinite(y).all(), name
        cos = float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y))) if np.any(y) else 1.0 - float(np.abs(x).max())
        assert cos >= cos_min, (name, cos)
        assert float(np.abs(x - y).max()) <= mae_max, (name, float(np.abs(x - y).max()))


# ------------------------------------------------------------------ the command
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_writes_artifacts_and_the_tuned_config_is_accepted(tmp_path):
    folder = CASES / "c08_softplus_exp_overflow"
    if not folder.is_dir():
        pytest.skip("shared case missing")
    out = tmp_path / "t"
    r = npuscope("tune", folder / "model.onnx", "--inputs", folder / "inputs.npz", "--precision-mode", "force_fp16",
                 "--target", TARGET, "--out", out)
    assert r.returncode == 0, r.stderr
    keep = (out / "keep_dtype.txt").read_text().split()
    assert "exp" in keep
    summary = json.loads((out / "summary.json").read_text())
    assert summary["met"] and summary["keep_dtype"] == keep
    # a given config's own keep_dtype entry: in keep_dtype.txt and summary.json's keep_dtype, not among the added
    cfg = tmp_path / "given.toml"
    cfg.write_text('precision_mode = "force_fp16"\nkeep_dtype = ["log"]\n')
    r = npuscope("tune", folder / "model.onnx", "--inputs", folder / "inputs.npz", "--config", cfg, "--target", TARGET,
                 "--out", tmp_path / "g")
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "g" / "keep_dtype.txt").read_text().split()
    given = json.loads((tmp_path / "g" / "summary.json").read_text())
    assert given["keep_dtype"] == lines and "log" in lines and "exp" in lines
    assert given["added_keep_dtype"] == [x for x in lines if x != "log"]
    html = (out / "tune.html").read_text()
    assert "Nodes kept in FP32" in html and "FP16 coverage" in html
    assert re.findall(r"<script[^>]*\bsrc\s*=\s*\"([^\"]*)\"", html) == ["plotly.min.js"]  # beside the page
    assert (out / "plotly.min.js").is_file()
    cfg = Config.load(out / "tuned_config.json")
    assert cfg.keep_dtype == keep and cfg.precision_mode == "force_fp16"
    model = onnx.load(folder / "model.onnx")
    assert_meets(model, load_npz(folder / "inputs.npz", input_specs(model)), cfg)
    r = npuscope("tune", folder / "model.onnx", "--inputs", folder / "inputs.npz", "--precision-mode", "force_fp16",
                 "--target", "CosineSimilarity>1", "--no-html", "--out", tmp_path / "u")  # clipped to [-1, 1]: never met
    assert r.returncode == 1 and "NOT MET" in r.stdout
    r = npuscope("tune", folder / "model.onnx", "--target", "Cosin>=0.9", "--out", tmp_path / "v")
    assert r.returncode == 2 and "CosineSimilarity" in r.stderr


def npuscope(*args):
    """The CLI in a fresh process (it switches onnxruntime to a global thread pool)."""
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


# ---- Long searches show their progress: tune prints each trial with the best set so far (with -v, or on a
TRIAL = re.compile(r"trial (\d+): (\d+) node\(s\) in FP32, target (met|not met) .*; best so far: (.+)$")


def _two_overflows(folder):
    """y = x * 1e5 (node mul1), z = x * 1e5 (mul2): in FP16 both overflow, so both must stay in FP32."""
    nodes = [helper.make_node("Mul", ["x", "s"], [o], name=n) for o, n in (("y", "mul1"), ("z", "mul2"))]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 4]) for o in ("y", "z")],
                              [numpy_helper.from_array(np.array(BIG, np.float32), "s")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), folder / "two.onnx")
    np.savez(folder / "x.npz", x=(1 + np.random.default_rng(2).random((2, 4))).astype(np.float32))
    assert float(np.max(np.load(folder / "x.npz")["x"])) * BIG > 65504  # every output overflows FP16


def test_tune_shows_each_trial_and_the_best_so_far(tmp_path):
    _two_overflows(tmp_path)
    proc = npuscope_run("tune", "two.onnx", "--inputs", "x.npz", "--precision-mode", "force_fp16", "--no-html", "-v",
                    "--out", "t", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = [m.groups() for m in map(TRIAL.search, proc.stderr.splitlines()) if m]
    assert [int(t[0]) for t in trials] == list(range(1, len(trials) + 1)) and len(trials) >= 2
    met = [t for t in trials if t[2] == "met"]
    assert met and all(int(t[1]) == 2 for t in met)  # one node in FP32 leaves the other output overflowing
    first_met = trials.index(met[0])
    assert all(t[3].startswith("target not met yet") for t in trials[:first_met])
    assert all(t[3] == "2 node(s) in FP32 meet the target" for t in trials[first_met:])
    assert "2 node(s) kept in FP32" in proc.stdout


# ------------------------------------------------------------------ --output-shares
def _rotation_chain(path: Path, layers: int = 6, width: int = 16) -> dict:
    """``layers`` MatMuls by orthogonal matrices: FP16 rounding error accumulates evenly, no overflow."""
    rng = np.random.default_rng(5)
    inits, nodes, prev = [], [], "x"
    for i in range(layers):
        q, _ = np.linalg.qr(rng.standard_normal((width, width)))
        inits.append(numpy_helper.from_array(q.astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        prev = f"h{i}"
    g = helper.make_graph(nodes, "rot", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, width])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path / "rot.onnx")
    feed = {"x": rng.standard_normal((4, width)).astype(np.float32)}
    np.savez(path / "x.npz", **feed)
    return feed


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_tune_output_shares_measures_the_first_ranked_kernels_as_asked(tmp_path):
    feed = _rotation_chain(tmp_path)
    model = onnx.load(tmp_path / "rot.onnx")
    out = model.graph.output[0].name
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    cfg = Config(precision_mode="force_fp16", fusion_level=0)

    def red(keep):  # independently: ‖npu − ref‖ / ‖ref‖ with ``keep`` in FP32
        c = Config(precision_mode="force_fp16", fusion_level=0, keep_dtype=list(keep))
        y = Session(model, c, input_shapes=shapes_of(feed)).run(feed).outputs[out].astype(np.float64)
        return float(np.linalg.norm(y - ref) / np.linalg.norm(ref.astype(np.float64)))

    target = "CosineSimilarity>=0.99999999"  # missed in FP16: a search over the six MatMuls
    assert 1 - red([]) > 0 and cfg.precision_mode == "force_fp16"
    for n, folder in ((0, "a"), (2, "b")):
        r = cli("tune", "rot.onnx", "--inputs", "x.npz", "--precision-mode", "force_fp16", "--fusion-level", "0",
                "--target", target, "--no-html", "--output-shares", n, "--out", folder, cwd=tmp_path)
        assert r.returncode in (0, 1), r.stderr
        rows = list(csv.DictReader(open(tmp_path / folder / "ranking.csv")))
        measured = {x["KeepName"]: float(x["OutputShare"]) for x in rows if x["OutputShare"] not in ("", "nan")}
        assert [x["KeepName"] for x in rows[:n]] == list(measured)  # the first n ranked kernels, none else
        for name, share in measured.items():
            assert share == pytest.approx(max(0.0, 1 - red([name]) / red([])), abs=1e-6), name
    r = cli("tune", "rot.onnx", "--output-shares", "-1", "--out", "c", cwd=tmp_path)
    assert r.returncode == 2 and "--output-shares" in r.stderr


# ------------------------------------------------------------------ the default target's FP16 noise allowance
def _large_chain(path: Path) -> tuple[Path, Path]:
    """3 MatMuls on positive data: outputs up to ~3e3 whose only error is FP16 rounding (max |x - y| > 1e-2)."""
    rng = np.random.default_rng(11)
    ws = [numpy_helper.from_array(np.abs(rng.normal(0, 1 / 8, (64, 64))).astype(np.float32), f"W{i}")
          for i in range(3)]
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W0"], ["a"], name="mm0"),
                           helper.make_node("MatMul", ["a", "W1"], ["b"], name="mm1"),
                           helper.make_node("MatMul", ["b", "W2"], ["y"], name="mm2")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], ws)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path / "chain.onnx")
    np.savez(path / "x.npz", x=np.abs(rng.normal(0, 1, (8, 64)) * 10).astype(np.float32))
    return path / "chain.onnx", path / "x.npz"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_tune_default_target_allows_fp16_rounding_and_says_so(tmp_path):
    model, inputs = _large_chain(tmp_path)
    feed = {"x": np.load(inputs)["x"]}
    ref = ort_outputs(onnx.load(model), feed)["y"].astype(np.float64)
    got = Session(onnx.load(model), Config(), input_shapes=shapes_of(feed)).run(feed).outputs["y"].astype(np.float64)
    d, rms = np.abs(got - ref), np.sqrt(np.mean(ref * ref))
    assert d.max() > 1e-2 and (d <= np.maximum(1e-2, 2.0 ** -10 * np.maximum(np.abs(ref), rms))).all()  # numpy
    r = cli("tune", model, "--inputs", inputs, "--out", tmp_path / "d", "--no-html")
    assert r.returncode == 0, r.stdout + r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("target MET") and "CosineSimilarity>=0.9999, MaxAbsoluteError<=0.01|fp16" in first
    assert "0 node(s) kept in FP32" in r.stdout and "of max(limit, FP16 rounding of the value over" in r.stdout
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert summary["target"] == ["CosineSimilarity>=0.9999", "MaxAbsoluteError<=0.01|fp16",
                                 "KullbackLeiblerDivergence<=0.005"]
    assert summary["met"] and summary["keep_dtype"] == []
    # the user's absolute line, as written: FP16 rounding of ~3e3 crosses it, so MatMuls are kept
    e = cli("tune", model, "--inputs", inputs, "--target", TARGET, "--out", tmp_path / "e", "--no-html")
    assert e.returncode in (0, 1), e.stderr
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["target"] == ["CosineSimilarity>=0.9999", "MaxAbsoluteError<=0.01"] and summary["keep_dtype"]
    assert "|fp16" not in e.stdout.splitlines()[0]
    # --thresholds-style consumers refuse the suffix: it is tune's only
    c = cli("compare", model, "--inputs", inputs, "--thresholds", "MaxAbsoluteError>1e-2|fp16", "--out", tmp_path / "c")
    assert c.returncode == 2 and "only in tune's --target" in c.stderr, c.stderr
