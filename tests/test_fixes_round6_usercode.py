"""Round-6 fixes: user code, input sets and input dtypes; one fault kind per block, expected values by hand/numpy.

1. User code that ends the interpreter (sys.exit(any code), another BaseException but KeyboardInterrupt) in
   any hook — task checks (--task-metric, policy [tasks], tune --task-metric, dataset runs), tune loader
   scripts (import, call, iteration), profile --pre/--post, value conversion — is a one-line error (exit 1)
   naming the hook, never the user's exit code with no report (toolkit.core.usercode).
2. Input sets are never silently cut: tune uses every file of a folder / every set of a loader, more than
   --max-inputs is refused naming the count and the option (a never-ending generator included); the
   single-run commands refuse a folder of several files instead of taking the first.
6. tune refuses a target condition no output dtype admits (ExactMatchRate on float outputs, float metrics
   on integer outputs: exit 2), and checks ExactMatchRate on integer outputs when it applies.
10. String inputs: the advice works (str arrays in the npz are accepted), no removed numpy name in advice.
13. profile --pre results are checked as an npz is (extra / missing keys, dtypes): same message after the
    source.
Cosmetic: big-endian npz arrays are read in native byte order (all numeric dtypes, every reader).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.core.errors import InputError, UsageError, UserError

X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


def _cli(*args, cwd, env_path: Path | None = None, timeout=300):
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
    from graphs import affine_and

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
    np.savez(tmp_path / "in.npz", x=X)
    return tmp_path


# =========================================================================== 1. user code ending npuscope
TASK_MODULE = """
import sys
def check(golden, npu, model):
    sys.exit(0)
"""
LOADER = """
import sys
import numpy as np
def exits():
    yield {"x": np.zeros((4, 8), np.float32)}
    sys.exit(0)
"""
PREPOST = """
import sys
import numpy as np
def pre(i):
    sys.exit(0)
def pre_ok(i):
    return {"x": np.zeros((4, 8), np.float32)}
def post(outputs):
    sys.exit(0)
"""


def _write_hooks(d: Path) -> None:
    (d / "tm_exit.py").write_text(TASK_MODULE)
    (d / "loader.py").write_text(LOADER)
    (d / "import_exits.py").write_text("import sys\nsys.exit(0)\ndef inputs():\n    return []\n")
    (d / "pp.py").write_text(PREPOST)
    (d / "pol.toml").write_text('[tasks]\nrequired_pass_rate = 1.0\nmetrics = ["tm_exit:check"]\n')
    (d / "ds").mkdir()
    for i in range(2):
        np.savez(d / "ds" / f"a{i}.npz", x=X + i)


#: hook -> (CLI arguments after the model, text the one-line error must hold besides "SystemExit(0)")
CLI_HOOKS = {
    "compare --task-metric": (["compare", "--inputs", "in.npz", "--task-metric", "tm_exit:check"],
                              "task check tm_exit:check raised SystemExit(0)"),
    "diagnose --task-metric": (["diagnose", "--inputs", "in.npz", "--task-metric", "tm_exit:check"],
                               "task check tm_exit:check raised SystemExit(0)"),
    "compare FOLDER --task-metric (dataset run)": (["compare", "--inputs", "ds", "--task-metric", "tm_exit:check"],
                                                   "task check tm_exit:check raised SystemExit(0)"),
    "signoff policy [tasks] metrics": (["signoff", "--policy", "pol.toml", "--inputs", "in.npz"],
                                       "task check tm_exit:check raised SystemExit(0)"),
    "signoff FOLDER policy [tasks] metrics": (["signoff", "--policy", "pol.toml", "--inputs", "ds"],
                                              "task check tm_exit:check raised SystemExit(0)"),
    "tune --task-metric": (["tune", "--inputs", "in.npz", "--task-metric", "tm_exit:check"],
                           "task check tm_exit:check raised SystemExit(0)"),
    "tune --inputs loader (iteration)": (["tune", "--inputs", "loader.py:exits"],
                                         "exits() raised SystemExit(0) while producing set 1"),
    "tune --inputs loader (import)": (["tune", "--inputs", "import_exits.py"],
                                      "'import_exits.py' raised SystemExit(0) on import"),
    "profile --pre": (["profile", "--pre", "pp.py:pre", "--requests", "2"], "--pre raised SystemExit(0) on request 0"),
    "profile --post": (["profile", "--pre", "pp.py:pre_ok", "--post", "pp.py:post", "--requests", "2"],
                       "--post raised SystemExit(0) on request 0"),
}


@pytest.mark.parametrize("hook", sorted(CLI_HOOKS))
def test_cli_sys_exit_in_any_user_hook_is_a_one_line_error_exit_1(m1, hook):
    _write_hooks(m1)
    args, expect = CLI_HOOKS[hook]
    res = _cli(args[0], "m1.onnx", *args[1:], "--out", "o", cwd=m1, env_path=m1)
    line = _error_line(res, 2)
    assert expect in line and "sys.exit() would end npuscope" in line, line
    assert not (m1 / "o").exists()  # no partial report


class Custom(BaseException):
    """A BaseException that is neither Exception, SystemExit nor KeyboardInterrupt."""


#: what user code raises -> the text the error shows for it
RAISERS = {"sys.exit(0)": (SystemExit(0), "SystemExit(0)"), "sys.exit(3)": (SystemExit(3), "SystemExit(3)"),
           "sys.exit('bye')": (SystemExit("bye"), "SystemExit('bye')"),
           "GeneratorExit": (GeneratorExit("g"), "GeneratorExit"), "custom BaseException": (Custom("c"), "Custom")}


def _raise(exc):
    raise exc


def _hook_run_check(tmp_path, exc):
    from toolkit.compare.tasks import run_check

    def check(golden, npu, model):
        _raise(exc)
    run_check(check, {}, {}, None)


def _hook_load_task(tmp_path, exc, monkeypatch=None):
    from toolkit.compare.tasks import load_task

    name = f"tm_import_{abs(hash((str(tmp_path), repr(exc))))}"
    (tmp_path / f"{name}.py").write_text(f"from {__name__} import _raise, RAISERS\n_raise(RAISERS[{_key(exc)!r}][0])\n"
                                         "def f(g, n, m):\n    return {}\n")
    load_task(f"{name}:f")


def _hook_loader_call(tmp_path, exc):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text(f"from {__name__} import _raise, RAISERS\n"
                                   f"def inputs():\n    _raise(RAISERS[{_key(exc)!r}][0])\n")
    load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"))


def _hook_loader_iteration(tmp_path, exc):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text(f"import numpy as np\nfrom {__name__} import _raise, RAISERS\n"
                                   "def inputs():\n    yield {'x': np.zeros((4, 8), np.float32)}\n"
                                   f"    _raise(RAISERS[{_key(exc)!r}][0])\n")
    load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"))


def _hook_loader_import(tmp_path, exc):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text(f"from {__name__} import _raise, RAISERS\n_raise(RAISERS[{_key(exc)!r}][0])\n")
    load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"))


def _hook_profile_call(tmp_path, exc):
    from toolkit.profile import e2e

    e2e.time_call(lambda i: _raise(exc), (0,), "--pre", 0)


def _hook_profile_import(tmp_path, exc):
    from toolkit.profile import e2e

    (tmp_path / "pp.py").write_text(f"from {__name__} import _raise, RAISERS\n_raise(RAISERS[{_key(exc)!r}][0])\n")
    e2e.load_callable(str(tmp_path / "pp.py") + ":pre", "--pre", "pre")


def _hook_array_conversion(tmp_path, exc):
    from toolkit.profile import e2e

    class Arr:
        def __array__(self, dtype=None, copy=None):
            _raise(exc)
    e2e.as_feed({"x": Arr()}, ["x"])


def _key(exc) -> str:
    return next(k for k, (e, _) in RAISERS.items() if e is exc)


LIB_HOOKS = {"task check call": _hook_run_check, "task module import": _hook_load_task,
             "loader call": _hook_loader_call, "loader iteration": _hook_loader_iteration,
             "loader import": _hook_loader_import, "profile --pre call": _hook_profile_call,
             "profile --pre import": _hook_profile_import, "feed value conversion": _hook_array_conversion}


@pytest.mark.parametrize("raiser", sorted(RAISERS))
@pytest.mark.parametrize("hook", sorted(LIB_HOOKS))
def test_every_hook_turns_every_non_keyboard_base_exception_into_a_user_error(tmp_path, monkeypatch, hook, raiser):
    monkeypatch.syspath_prepend(str(tmp_path))
    exc, shown = RAISERS[raiser]
    with pytest.raises(UserError) as err:
        LIB_HOOKS[hook](tmp_path, exc)
    msg = str(err.value)
    assert f"raised {shown}" in msg and "\n" not in msg, msg


def test_keyboard_interrupt_in_user_code_keeps_its_meaning():
    from toolkit.core import usercode
    from toolkit.compare.tasks import run_check

    def check(g, n, m):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_check(check, {}, {}, None)
    with pytest.raises(KeyboardInterrupt):
        usercode.call(check, 1, 2, 3, what="x", exceptions=True)


def test_ordinary_exceptions_keep_each_hooks_contract():
    """A task check raising ValueError is a failing check (not an error); --pre raising one is an error."""
    from toolkit.compare.tasks import run_check
    from toolkit.profile import e2e

    def check(g, n, m):
        raise ValueError("boom")
    res = run_check(check, {}, {}, None)
    assert res["passed"] is False and "raised ValueError: boom" in res["detail"]
    with pytest.raises(InputError, match="--pre raised ValueError on request 2: nope"):
        e2e.time_call(lambda i: _raise(ValueError("nope")), (2,), "--pre", 2)


def test_loader_raising_an_exception_mid_iteration_is_an_input_error(tmp_path):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text("import numpy as np\ndef inputs():\n    yield {'x': np.zeros((4, 8), np.float32)}\n"
                                   "    raise ValueError('late')\n")
    with pytest.raises(InputError, match=r"inputs\(\) raised ValueError: late while producing set 1"):
        load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"))


# =========================================================================== 2. no silent cap on input sets
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
    res = _cli("tune", "m1.onnx", "--precision-mode", "force_fp16", "--inputs", "ds", "--no-html", "--out", "o",
               cwd=m1)
    assert res.returncode == 0, res.stderr
    summary = json.loads((m1 / "o" / "summary.json").read_text())
    assert sorted(summary["inputs"]) == sorted(p.name for p in (m1 / "ds").glob("*.npz"))
    assert len(summary["inputs"]) == N_SETS
    assert "exp" in summary["keep_dtype"]  # only z_bad.npz (sorted last) needs it: exp(12) overflows FP16
    assert res.stdout.startswith(f"target MET on {N_SETS} input(s)")


def test_cli_tune_more_sets_than_max_inputs_is_refused_naming_count_and_option(m1):
    _folder_with_late_overflow(m1)
    line = _error_line(_cli("tune", "m1.onnx", "--inputs", "ds", "--max-inputs", "10", "--out", "o", cwd=m1), 2)
    assert f"holds {N_SETS} .npz files" in line and "--max-inputs 10" in line and f"--max-inputs {N_SETS}" in line
    assert not (m1 / "o").exists()


def test_cli_tune_never_ending_loader_is_refused_not_cut(m1):
    (m1 / "inf.py").write_text("import itertools\nimport numpy as np\ndef inputs():\n"
                               "    for i in itertools.count():\n        yield {'x': np.full((4, 8), i, np.float32)}\n")
    line = _error_line(_cli("tune", "m1.onnx", "--inputs", "inf.py", "--max-inputs", "5", "--out", "o", cwd=m1), 2)
    assert "gives more than 5 input sets" in line and "--max-inputs" in line


def test_loader_with_exactly_max_sets_gives_them_all(tmp_path):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text("import numpy as np\ndef inputs():\n"
                                   "    for i in range(5):\n        yield {'x': np.full((4, 8), i, np.float32)}\n")
    sets = load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"), max_sets=5)
    assert [float(f["x"][0, 0]) for _, f in sets] == [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("cmd", [["run"], ["memcheck", "--no-html"]])  # profile takes every set now (in turn)
def test_cli_single_run_commands_refuse_a_folder_of_several_sets(m1, cmd):
    (m1 / "ds").mkdir()
    for i in range(3):
        np.savez(m1 / "ds" / f"a{i}.npz", x=X)
    line = _error_line(_cli(cmd[0], "m1.onnx", *cmd[1:], "--inputs", "ds", "--out", "o", cwd=m1), 2)
    assert "holds 3 .npz files" in line and "one input set" in line


def test_cli_run_takes_a_folder_holding_one_set(m1):
    (m1 / "ds").mkdir()
    np.savez(m1 / "ds" / "only.npz", x=X)
    res = _cli("run", "m1.onnx", "--precision-mode", "force_fp32", "--inputs", "ds", "--out", "o", cwd=m1)
    assert res.returncode == 0, res.stderr
    np.testing.assert_allclose(np.load(m1 / "o" / "outputs.npz")["y"], 3 * X + 1, rtol=1e-6)


# =========================================================================== 6. target metric vs output dtype
def test_cli_tune_exact_match_rate_on_float_outputs_is_a_usage_error(m1):
    line = _error_line(_cli("tune", "m1.onnx", "--inputs", "in.npz", "--target", "ExactMatchRate>=1",
                            "--out", "o", cwd=m1), 2)
    assert "ExactMatchRate applies to integer/bool outputs only" in line and "'y' float32" in line
    assert not (m1 / "o").exists()


def test_cli_tune_float_target_on_integer_outputs_is_a_usage_error(tmp_path):
    _argmax_model(tmp_path / "am.onnx")
    np.savez(tmp_path / "in.npz", x=np.array([[1, 2], [3, 1], [0, 5], [2, 2.5]], np.float32))
    line = _error_line(_cli("tune", "am.onnx", "--inputs", "in.npz", "--out", "o", cwd=tmp_path), 2)
    assert "default target" in line and "CosineSimilarity applies to float outputs only" in line
    assert "'am' int64" in line and "ExactMatchRate>=1" in line


def test_tune_checks_exact_match_rate_on_integer_outputs():
    """check_outputs: an integer output with one of four positions differing has ExactMatchRate 3/4."""
    from toolkit.tuning.tune import check_outputs, parse_target

    golden = {"am": np.array([0, 1, 1, 0], np.int64), "y": np.ones(3, np.float32)}
    npu = {"am": np.array([0, 1, 0, 0], np.int64), "y": np.ones(3, np.float32)}
    met, rows, _ = check_outputs(npu, golden, parse_target("ExactMatchRate>=1,CosineSimilarity>=0.99"))
    by = {r["Output"]: r for r in rows}
    assert not met and by["am"]["ExactMatchRate"] == 0.75 and not by["am"]["Met"]
    assert by["am"]["Failed"] == "ExactMatchRate>=1.0"  # the float condition does not apply to it
    assert by["y"]["Met"] and by["y"]["Failed"] == ""
    met, _, _ = check_outputs(npu, golden, parse_target("ExactMatchRate>=0.75"))
    assert met


def test_tune_library_refuses_inapplicable_target_before_running(tmp_path):
    from toolkit.tuning.tune import tune

    m = onnx.load(_m1(tmp_path / "m.onnx"))
    with pytest.raises(UsageError, match="ExactMatchRate applies to integer/bool outputs only"):
        tune(m, [("a", {"x": X})], target="ExactMatchRate>=1")


# =========================================================================== 10. string inputs, numpy names
def _string_model(path: Path) -> Path:
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="i")], "s",
                          [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def test_string_input_advice_works_str_array_npz_is_accepted(tmp_path):
    from toolkit.inputs import input_specs, load_npz

    m = onnx.load(_string_model(tmp_path / "s.onnx"))
    np.savez(tmp_path / "u.npz", x=np.array(["hello", "wörld"]))
    np.savez(tmp_path / "b.npz", x=np.array([b"ab", b"c"]))
    for name, want in (("u.npz", ["hello", "wörld"]), ("b.npz", ["ab", "c"])):
        feed = load_npz(tmp_path / name, input_specs(m))
        assert feed["x"].dtype == object and feed["x"].tolist() == want
        assert all(type(v) is str for v in feed["x"])


def test_cli_string_input_runs_end_to_end(tmp_path):
    _string_model(tmp_path / "s.onnx")
    np.savez(tmp_path / "u.npz", x=np.array(["hello", "wörld"]))
    res = _cli("run", "s.onnx", "--inputs", "u.npz", "--out", "o", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = np.load(tmp_path / "o" / "outputs.npz", allow_pickle=True)["y"]  # our own file (Identity of x)
    assert out.tolist() == ["hello", "wörld"]


def test_cli_string_input_of_wrong_kind_gets_working_advice(tmp_path):
    _string_model(tmp_path / "s.onnx")
    np.savez(tmp_path / "n.npz", x=np.array([1.0, 2.0]))
    line = _error_line(_cli("compare", "s.onnx", "--inputs", "n.npz", "--out", "o", cwd=tmp_path), 2)
    assert "np.object" not in line and "str array" in line


ONNX_TYPES = [t for t in onnx.TensorProto.DataType.values() if t not in (0,)]


@pytest.mark.parametrize("elem", ONNX_TYPES)
def test_dtype_advice_names_only_what_numpy_has(elem):
    from toolkit.inputs.validate import cast_hint

    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    except (KeyError, TypeError, ValueError):
        pytest.skip("no numpy dtype for this ONNX type")
    hint = cast_hint(dtype)
    for name in re.findall(r"\bnp\.(\w+)", hint):
        assert callable(getattr(np, name, None)), (elem, hint)  # exists in the installed numpy
    assert "np.object" not in hint


# =========================================================================== 13. --pre result checked as an npz
PRE = """
import numpy as np
X = np.load("x.npy")
def extra(i):
    return {"x": X, "bogus": np.ones(1, np.float32)}
def missing(i):
    return {"nope": X}
def f64(i):
    return {"x": X.astype(np.float64)}
def shape(i):
    return {"x": X[:2]}
"""


@pytest.mark.parametrize("kind", ["extra", "missing", "f64", "shape"])
def test_cli_pre_result_is_refused_as_the_same_npz_is(m1, kind):
    np.save(m1 / "x.npy", X)
    (m1 / "pp.py").write_text(PRE)
    bad = {"extra": {"x": X, "bogus": np.ones(1, np.float32)}, "missing": {"nope": X},
           "f64": {"x": X.astype(np.float64)}, "shape": {"x": X[:2]}}[kind]
    np.savez(m1 / "bad.npz", **bad)
    pre = _error_line(_cli("profile", "m1.onnx", "--pre", f"pp.py:{kind}", "--requests", "2", "--out", "o",
                           cwd=m1), 2)
    npz = _error_line(_cli("compare", "m1.onnx", "--inputs", "bad.npz", "--out", "o2", cwd=m1), 2)
    assert pre.startswith("npuscope: error: --pre result of request 0: ")
    assert npz.startswith("npuscope: error: npz file 'bad.npz': ")
    assert pre.split(": ", 3)[3] == npz.split(": ", 3)[3]  # same message after the source
    assert not (m1 / "o").exists()


# =========================================================================== cosmetic: big-endian npz
NUMERIC = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
           "uint64", "bool", "complex64", "complex128"]


@pytest.mark.parametrize("dt", NUMERIC)
def test_big_endian_npz_is_read_native_with_equal_values(tmp_path, dt):
    from toolkit.dataset.source import load_feed
    from toolkit.inputs.npz import load_npz
    from toolkit.inputs.spec import InputSpec

    values = (np.arange(12).reshape(3, 4) % 2 == 0) if dt == "bool" else np.arange(12).reshape(3, 4).astype(dt)
    big = values.astype(np.dtype(dt).newbyteorder(">"))
    np.savez(tmp_path / "b.npz", x=big)
    spec = [InputSpec("x", np.dtype(dt), (3, 4))]
    for feed in (load_npz(tmp_path / "b.npz", spec), load_feed("b.npz", (tmp_path / "b.npz").read_bytes(), spec)):
        assert feed["x"].dtype == np.dtype(dt) and feed["x"].dtype.isnative
        np.testing.assert_array_equal(feed["x"], values)


def test_cli_big_endian_inputs_compute_the_right_outputs(m1):
    np.savez(m1 / "be.npz", x=X.astype(">f4"))
    res = _cli("run", "m1.onnx", "--precision-mode", "force_fp32", "--inputs", "be.npz", "--out", "o", cwd=m1)
    assert res.returncode == 0, res.stderr
    out = np.load(m1 / "o" / "outputs.npz")
    np.testing.assert_allclose(out["y"], 3 * X + 1, rtol=1e-6)
    np.testing.assert_allclose(out["z"], np.exp(X), rtol=1e-6)


def test_cli_big_endian_in_dataset_folder_loader_and_pre(m1):
    (m1 / "ds").mkdir()
    for i in range(2):
        np.savez(m1 / "ds" / f"a{i}.npz", x=(X + i).astype(">f4"))
    res = _cli("compare", "m1.onnx", "--precision-mode", "force_fp32", "--inputs", "ds", "--out", "o", cwd=m1)
    assert res.returncode == 0 and "verdict: PASS" in res.stdout, (res.stdout, res.stderr)
    (m1 / "l.py").write_text(textwrap.dedent("""
        import numpy as np
        def inputs():
            return [{"x": np.ones((4, 8), ">f4")}]
        def pre(i):
            return {"x": np.ones((4, 8), ">f4")}
        """))
    res = _cli("tune", "m1.onnx", "--precision-mode", "force_fp32", "--inputs", "l.py", "--no-html", "--out", "t",
               cwd=m1)
    assert res.returncode == 0, res.stderr
    res = _cli("profile", "m1.onnx", "--pre", "l.py:pre", "--requests", "2", "--no-html", "--out", "p", cwd=m1)
    assert res.returncode == 0, res.stderr
