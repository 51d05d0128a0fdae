"""One --inputs grammar: an .npz, a folder of .npz or a loader script ``file.py[:function]`` on every command that
feeds a model, and --seed / --val-range / --input-shape wherever inputs are generated."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli.clirun import error_line, loader, loader_sets, m1, npuscope
from tests.graphs import N


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    m1(folder)
    loader(folder)
    (folder / "policy.toml").write_text('[outputs]\n"*" = "CosineSimilarity>=0.99"\n[layers]\nmax_abnormal = 0\n')
    return folder


def test_run_and_memcheck_take_a_loader_of_one_set(work):
    proc = npuscope("run", "m1.onnx", "--inputs", "loader.py:one", "--precision-mode", "force_fp32",
                    "--save-outputs", "one.npz", "--out", "r", cwd=work)
    assert proc.returncode == 0, proc.stderr
    y = np.load(work / "one.npz")["y"]
    np.testing.assert_allclose(y, np.full((4, 8), 3 * 0.5 + 1, np.float32), rtol=1e-6)  # y = 3x + 1 of x = 0.5
    proc = npuscope("memcheck", "m1.onnx", "--inputs", "loader.py:one", "--no-html", "--out", "mc", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "loader loader.py:one" in json.loads((work / "mc" / "memcheck.json").read_text())["inputs"]


def test_a_single_run_command_refuses_a_loader_of_two_sets(work):
    proc = npuscope("run", "m1.onnx", "--inputs", "loader.py:make", "--out", "r2", cwd=work)
    assert proc.returncode == 2
    line = error_line(proc)
    assert "loader.py" in line and "make()" in line and "more than 1 input sets" in line and "compare" in line
    assert not (work / "r2").exists()


def test_compare_runs_a_loader_as_a_dataset_and_resumes_it(work):
    proc = npuscope("compare", "m1.onnx", "--inputs", "loader.py:make", "--out", "ds", cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = pd.read_csv(work / "ds" / "inputs.csv")
    assert table["Input"].tolist() == ["loader-00000.npz", "loader-00001.npz"]
    facts = json.loads((work / "ds" / "summary.json").read_text())["dataset"]
    assert facts["inputs"] == 2 and facts["inputs_dir"] == "loader.py:make" and facts["evaluated_this_run"] == 2
    again = npuscope("compare", "m1.onnx", "--inputs", "loader.py:make", "--out", "ds", cwd=work)
    assert again.returncode == 0, again.stderr
    facts = json.loads((work / "ds" / "summary.json").read_text())["dataset"]
    assert facts["evaluated_this_run"] == 0 and facts["resumed"]  # the same sets give the same files


def test_signoff_and_tune_take_every_set_of_a_loader(work):
    proc = npuscope("signoff", "m1.onnx", "--policy", "policy.toml", "--inputs", "loader.py:make", "--no-html",
                    "--out", "s", cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((work / "s" / "summary.json").read_text())["dataset"]["inputs"] == 2
    proc = npuscope("tune", "m1.onnx", "--inputs", "loader.py:make", "--no-html", "--out", "t", cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((work / "t" / "summary.json").read_text())["inputs"] == ["loader.py[0]", "loader.py[1]"]


def test_diagnose_names_a_broken_loader_in_one_line(work):
    proc = npuscope("diagnose", "m1.onnx", "--inputs", "loader.py:broken", "--out", "b", cwd=work)
    assert proc.returncode == 2
    line = error_line(proc)
    assert "loader.py" in line and "broken()" in line and "no data today" in line and not (work / "b").exists()


def test_profile_takes_inputs_in_turn_and_keeps_pre(work):
    proc = npuscope("profile", "m1.onnx", "--inputs", "loader.py:make", "--requests", "4", "--no-advise",
                    "--no-html", "-v", "--out", "p", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "inputs: 2 sets from loader.py:make, taken in turn" in proc.stderr
    assert len(pd.read_csv(work / "p" / "requests.csv")) == 4
    (work / "pre.py").write_text("import numpy as np\n\ndef pre(i):\n    return np.full((4, 8), i, np.float32)\n")
    proc = npuscope("profile", "m1.onnx", "--pre", "pre.py:pre", "--requests", "3", "--no-advise", "--no-html",
                    "--out", "p2", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert pd.read_csv(work / "p2" / "requests.csv")["Pre(ms)"].notna().all()
    both = npuscope("profile", "m1.onnx", "--pre", "pre.py:pre", "--inputs", "x.npz", "--out", "p3", cwd=work)
    assert both.returncode == 2 and "--pre and --inputs" in error_line(both)


def _dyn_model(node, inits=()):
    """x float32[n, 4] -> node -> y float32[n, 4] (n dynamic)."""
    ins, outs = ([helper.make_tensor_value_info(t, TensorProto.FLOAT, ["n", 4])] for t in ("x", "y"))
    graph = helper.make_graph([node], "dyn", ins, outs, [numpy_helper.from_array(np.asarray(v), k)
                                                         for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_profile_cycles_the_files_of_a_folder_and_their_shapes(tmp_path):
    onnx.save(_dyn_model(N("Relu", ["x"], ["y"], "relu")), tmp_path / "relu.onnx")
    (tmp_path / "in").mkdir()
    for i, n in enumerate((1, 2, 1)):
        np.savez(tmp_path / "in" / f"{i}.npz", x=np.ones((n, 4), np.float32))
    proc = npuscope("profile", "relu.onnx", "--inputs", "in", "--requests", "5", "--no-advise", "--no-html",
                    "--out", "p", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shapes = pd.read_csv(tmp_path / "p" / "requests.csv")["FeedShapes"].tolist()
    assert shapes == ["x:1,4", "x:2,4", "x:1,4", "x:1,4", "x:2,4"]  # request i takes file i mod 3


def _dynamic(folder):
    onnx.save(_dyn_model(N("Mul", ["x", "two"], ["y"], "mul"), {"two": np.float32(2)}), folder / "dyn.onnx")
    return folder / "dyn.onnx"


@pytest.mark.parametrize("command", ["tune", "signoff", "profile", "memcheck"])
def test_generated_inputs_take_seed_val_range_and_input_shape(tmp_path, command):
    _dynamic(tmp_path)
    (tmp_path / "policy.toml").write_text('[outputs]\n"*" = "CosineSimilarity>=0.99"\n')
    extra = {"tune": ["--no-html"], "signoff": ["--policy", "policy.toml", "--no-html"],
             "profile": ["--requests", "1", "--no-advise", "--no-html"], "memcheck": ["--no-html"]}[command]
    proc = npuscope(command, "dyn.onnx", *extra, "--seed", "7", "--val-range", "x:[2,3]", "--input-shape", "x:3,4",
                    "-v", "--out", "o", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "random seed=7 range=x:[2,3]" in proc.stderr + proc.stdout + "".join(
        p.read_text() for p in (tmp_path / "o").glob("*.json"))
    bad = npuscope(command, "dyn.onnx", *extra, "--val-range", "w:[0,1]", "--input-shape", "x:3,4", "--out", "o2",
                   cwd=tmp_path)
    assert bad.returncode == 2 and "--val-range names 'w'" in error_line(bad)


def test_run_keeps_output_as_a_hidden_alias(work):
    help_text = npuscope("run", "--help").stdout
    assert "--save-outputs" in help_text and "--output " not in help_text
    proc = npuscope("run", "m1.onnx", "--inputs", "x.npz", "--output", "old.npz", "--out", "ro", cwd=work)
    assert proc.returncode == 0 and (work / "old.npz").is_file(), proc.stderr
    both = npuscope("run", "m1.onnx", "--output", "a.npz", "--save-outputs", "b.npz", "--out", "rb", cwd=work)
    assert both.returncode == 2 and "--save-outputs" in error_line(both)


def test_loader_sets_are_written_exactly_and_alike_each_time(work, tmp_path):
    """A loader's sets become .npz files holding its arrays exactly, byte-identical from one call to the next
    (what lets a dataset run over a loader resume)."""
    from toolkit.dataset.source import write_loader_sets
    from toolkit.inputs import input_specs

    specs = input_specs(onnx.load(work / "m1.onnx"))
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        assert write_loader_sets(str(work / "loader.py") + ":make", specs, tmp_path / name) == \
            ["loader-00000.npz", "loader-00001.npz"]
    for i, x in enumerate(loader_sets()):
        f = f"loader-{i:05d}.npz"
        np.testing.assert_array_equal(np.load(tmp_path / "a" / f)["x"], x)
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
