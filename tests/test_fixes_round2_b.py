"""Round-2 fixes (b), each fault kind covered (CLI cases run in a subprocess):

- fusion_switch_file: a level that is not an object, or a value that is not "on"/"off", is a config error
  naming the config file (exit 2), not an internal error;
- tune --inputs loader script: any failure while calling or iterating the function is one line naming the
  script and the function (exit 1);
- tune: the printed worst metric never reads as the limit it misses, and no node is said to make the target
  fail when the target is not met with it either;
- signoff policy: [placement] allowed_cpu_ops op types checked against onnx.defs (did-you-mean), [tasks] metrics
  loaded at policy load naming the file and key, [outputs] METRIC = ... explained;
- config keep_dtype / op_placement names checked against the model name the config (and keep_dtype) file;
- compare-dumps: mapping and index.json files read with or without a BOM; a mapping node not in --model refused;
- regress: runs on different inputs give a warning and an input change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pandas as pd
import pytest

from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ENV = dict(os.environ, PYTHONWARNINGS="ignore")
BOM = b"\xef\xbb\xbf"


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


# ------------------------------------------------------------------ 1. fusion switch file level types
@pytest.mark.parametrize("level", [["ALL"], "off", 3, None])
def test_fusion_switch_level_not_an_object_is_a_config_error(tmp_path, level):
    (tmp_path / "fs.json").write_text(json.dumps({"Switch": {"GraphFusion": level}}))
    (tmp_path / "c.toml").write_text('fusion_switch_file = "fs.json"\n')
    with pytest.raises(ConfigError) as exc:
        Config.load(tmp_path / "c.toml")
    msg = str(exc.value)
    assert f"config '{tmp_path / 'c.toml'}'" in msg
    assert 'fusion_switch_file must be {"Switch": {"GraphFusion": {...}' in msg
    assert json.dumps(level) in msg


@pytest.mark.parametrize("state", [True, ["on"], "ON", 1])
def test_fusion_switch_value_must_be_on_or_off(tmp_path, state):
    (tmp_path / "fs.json").write_text(json.dumps({"Switch": {"UBFusion": {"ALL": state}}}))
    (tmp_path / "c.toml").write_text('fusion_switch_file = "fs.json"\n')
    with pytest.raises(ConfigError, match='expected "on" or "off"') as exc:
        Config.load(tmp_path / "c.toml")
    assert "c.toml" in str(exc.value) and json.dumps(state) in str(exc.value)


def test_fusion_switch_valid_file_still_loads(tmp_path):
    (tmp_path / "fs.json").write_text(json.dumps({"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {}}}))
    (tmp_path / "c.toml").write_text('fusion_switch_file = "fs.json"\n')
    cfg = Config.load(tmp_path / "c.toml")
    assert cfg.switch("GraphFusion", "anything") is False and cfg.switch("UBFusion", "x") is True


def test_cli_fusion_switch_list_level_exit_2(tmp_path):
    (tmp_path / "fs_type.json").write_text('{"Switch": {"GraphFusion": ["ALL"]}}')
    (tmp_path / "c.toml").write_text('fusion_switch_file = "fs_type.json"\n')
    line = one_line_error(cli("compile", "resnet_small", "--config", "c.toml", "--out", "o", cwd=tmp_path), 2)
    assert "config 'c.toml': fusion_switch_file must be {\"Switch\"" in line
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ 2. tune --inputs loader scripts
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


@pytest.fixture(scope="module")
def resnet():
    from toolkit.samples import build_resnet_small

    return build_resnet_small()


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_loader_failures_are_input_errors_naming_script_and_function(tmp_path, resnet, name):
    from toolkit.tuning.feeds import load_feed_sets

    text, fn, expect = LOADERS[name]
    (tmp_path / name).write_text(text)
    spec = str(tmp_path / name) + (f":{fn}" if fn != "inputs" else "")
    with pytest.raises(InputError) as exc:
        load_feed_sets(resnet, None, spec)
    msg = str(exc.value)
    assert "\n" not in msg and name in msg and f"{fn}()" in msg and expect in msg


def test_loader_good_generator_gives_its_feeds(tmp_path, resnet):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "ok.py").write_text("import numpy as np\ndef make():\n    for k in range(3):\n"
                                   "        yield {'x': np.full((1, 3, 32, 32), k, np.float32)}\n")
    sets = load_feed_sets(resnet, None, str(tmp_path / "ok.py") + ":make")
    assert [lbl for lbl, _ in sets] == ["ok.py[0]", "ok.py[1]", "ok.py[2]"]
    for k, (_, feed) in enumerate(sets):
        np.testing.assert_array_equal(feed["x"], np.full((1, 3, 32, 32), k, np.float32))


@pytest.mark.parametrize("name", ["l_int.py", "l_gen.py", "l_arg.py"])
def test_cli_tune_loader_failures_exit_1(tmp_path, name):
    text, fn, expect = LOADERS[name]
    (tmp_path / name).write_text(text)
    spec = name + (f":{fn}" if fn != "inputs" else "")
    line = one_line_error(cli("tune", "resnet_small", "--inputs", spec, "--out", "o", "--no-html", cwd=tmp_path), 2)
    assert f"--inputs loader script '{name}'" in line and f"{fn}()" in line and expect in line


# ------------------------------------------------------------------ 3. tune: never met, printed values
def _fake_tuner(trials: dict):
    return SimpleNamespace(cache={k: SimpleNamespace(met=met, rows=rows) for k, (met, rows) in trials.items()})


def test_without_it_is_not_claimed_when_the_set_fails_too():
    from toolkit.tuning.tune import NOT_MET_WITH_IT, _without_it

    fail = [{"Failed": "CosineSimilarity>=1.0"}]
    tuner = _fake_tuner({("a", "b"): (False, fail), ("b",): (False, fail)})
    assert _without_it(["a", "b"], "a", tuner) == NOT_MET_WITH_IT
    tuner = _fake_tuner({("a", "b"): (True, []), ("b",): (False, fail), ("a",): (True, [])})
    assert _without_it(["a", "b"], "a", tuner) == "fails CosineSimilarity>=1.0"
    assert _without_it(["a", "b"], "b", tuner) == "met"
    assert _without_it(["a", "b", "c"], "c", _fake_tuner({})) == "not tried"


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


def test_show_rule_used_by_tune_summary():
    from toolkit.signoff.criteria import show

    v = 0.9999999999999741
    text = show(v, 1.0, digits=10)
    assert float(text) != 1.0 and float(text) < 1.0
    assert show(0.5, 1.0, digits=10) == "0.5"


# ------------------------------------------------------------------ 4 + 6. policy checks
def _policy(tmp_path, text: str) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


def test_policy_allowed_cpu_ops_typo_suggests(tmp_path):
    from toolkit.signoff.policy import load_policy

    with pytest.raises(ConfigError) as exc:
        load_policy(_policy(tmp_path, '[placement]\nallowed_cpu_ops = ["Sofmax"]\n'))
    msg = str(exc.value)
    assert "p.toml" in msg and "[placement] allowed_cpu_ops" in msg and "did you mean 'Softmax'" in msg
    known = {s.name for s in onnx.defs.get_all_schemas()}
    assert "NonMaxSuppression" in known
    assert load_policy(_policy(tmp_path, '[placement]\nallowed_cpu_ops = ["NonMaxSuppression"]\n')) is not None


def test_cli_signoff_policy_op_typo_exit_2(tmp_path):
    _policy(tmp_path, '[placement]\nallowed_cpu_ops = ["Sofmax"]\n')
    line = one_line_error(cli("signoff", "resnet_small", "--policy", "p.toml", "--out", "o", cwd=tmp_path), 2)
    assert "policy 'p.toml'" in line and "'Softmax'" in line


def test_policy_task_metric_names_the_policy_not_the_option(tmp_path):
    from toolkit.signoff.policy import load_policy

    for spec, expect in (("nomod_xyz:fn", "cannot be loaded"), ("nocolon", "is not 'module:function'"),
                         ("json:JSONDecoder.nope", "cannot be loaded"), ("json:__doc__", "is not callable")):
        with pytest.raises(ConfigError) as exc:
            load_policy(_policy(tmp_path, f'[tasks]\nmetrics = ["{spec}"]\n'))
        msg = str(exc.value)
        assert "p.toml" in msg and "[tasks] metrics" in msg and spec in msg and expect in msg
        assert "--task-metric" not in msg
    assert load_policy(_policy(tmp_path, '[tasks]\nmetrics = ["json:dumps"]\n')) is not None


def test_cli_signoff_policy_task_metric_exit_2(tmp_path):
    _policy(tmp_path, '[tasks]\nmetrics = ["nomod:fn"]\n')
    line = one_line_error(cli("signoff", "resnet_small", "--policy", "p.toml", "--out", "o", cwd=tmp_path), 2)
    assert "policy 'p.toml': [tasks] metrics entry 'nomod:fn'" in line and "--task-metric" not in line


@pytest.mark.parametrize("metric,value", [("CosineSimilarity", '">=0.99"'), ("MaxAbsoluteError", "0.1")])
def test_policy_outputs_metric_key_explained(tmp_path, metric, value):
    from toolkit.signoff.policy import load_policy

    with pytest.raises(ConfigError) as exc:
        load_policy(_policy(tmp_path, f"[outputs]\n{metric} = {value}\n"))
    msg = str(exc.value)
    assert f"'{metric}' was read as an output name" in msg and '[outputs."*"]' in msg and "p.toml" in msg


# ------------------------------------------------------------------ 6. keep_dtype / op_placement name the file
def test_keep_dtype_empty_entry_refused(tmp_path):
    (tmp_path / "c.toml").write_text('keep_dtype = [""]\n')
    with pytest.raises(ConfigError) as exc:
        Config.load(tmp_path / "c.toml")
    assert "c.toml" in str(exc.value) and "keep_dtype" in str(exc.value) and "empty" in str(exc.value)


def test_cli_keep_dtype_file_unknown_node_names_both_files(tmp_path):
    (tmp_path / "kd.txt").write_text("stem_cnv\n")
    (tmp_path / "c.toml").write_text('keep_dtype = "kd.txt"\n')
    line = one_line_error(cli("compile", "resnet_small", "--config", "c.toml", "--out", "o", cwd=tmp_path), 2)
    assert "config 'c.toml': keep_dtype file 'kd.txt' names node 'stem_cnv'" in line
    assert "did you mean 'stem_conv'" in line


def test_cli_keep_dtype_list_unknown_node_names_config(tmp_path):
    (tmp_path / "c.toml").write_text('keep_dtype = ["nodeX"]\n')
    line = one_line_error(cli("compile", "resnet_small", "--config", "c.toml", "--out", "o", cwd=tmp_path), 2)
    assert "config 'c.toml': keep_dtype names node 'nodeX'" in line


def test_cli_op_placement_unknown_names_config(tmp_path):
    (tmp_path / "c.toml").write_text('[op_placement]\nstem_cnv = "CPU"\n')
    line = one_line_error(cli("compile", "resnet_small", "--config", "c.toml", "--out", "o", cwd=tmp_path), 2)
    assert "config 'c.toml': op_placement names 'stem_cnv'" in line and "'stem_conv'" in line


def test_where_names_option_file_only_when_read_from_file(tmp_path):
    (tmp_path / "kd.txt").write_text("a\n")
    (tmp_path / "c.toml").write_text('keep_dtype = "kd.txt"\n')
    cfg = Config.load(tmp_path / "c.toml")
    assert cfg.where("keep_dtype") == f"config '{tmp_path / 'c.toml'}': keep_dtype file 'kd.txt'"
    assert cfg.where("op_placement") == f"config '{tmp_path / 'c.toml'}': op_placement"
    assert cfg.with_overrides(keep_dtype=["b"]).where("keep_dtype") == "command line: keep_dtype"
    assert Config().where("keep_dtype") == "keep_dtype"


# ------------------------------------------------------------------ 5. compare-dumps BOM + mapping nodes
def _npuscope_dump(folder: Path, arrays: dict, bom: bool = False) -> Path:
    folder.mkdir()
    index = {}
    for k, (tensor, arr) in enumerate(arrays.items()):
        np.save(folder / f"t{k}.npy", arr)
        index[f"t{k}.npy"] = {"tensor": tensor, "kernel": f"k{k}"}
    data = json.dumps(index).encode()
    (folder / "index.json").write_bytes((BOM if bom else b"") + data)
    return folder


def test_mapping_with_bom_reads_as_without(tmp_path):
    from toolkit.dumps.mapping import load_mapping

    m = {"fused": ["a", "b"]}
    (tmp_path / "bom.json").write_bytes(BOM + json.dumps(m).encode())
    assert load_mapping(tmp_path / "bom.json") == m


def test_cli_compare_dumps_index_json_with_bom(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = a + np.float32(0.5)
    _npuscope_dump(tmp_path / "g", {"y": a})
    _npuscope_dump(tmp_path / "t", {"y": b}, bom=True)
    res = cli("compare-dumps", "g", "t", "--out", "o", "--no-html", cwd=tmp_path)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    row = pd.read_csv(tmp_path / "o" / "result.csv").iloc[0]
    assert row["MaxAbsoluteError"] == pytest.approx(float(np.abs(b - a).max()), rel=1e-6)


def test_cli_compare_dumps_mapping_node_not_in_model(tmp_path):
    from toolkit.samples import resnet_small_inputs

    x = resnet_small_inputs()["x"]
    _npuscope_dump(tmp_path / "g", {"x": x})
    _npuscope_dump(tmp_path / "t", {"x": x})
    (tmp_path / "m.json").write_bytes(BOM + b'{"fused": ["stem_cnv", "stem_relu"]}')
    line = one_line_error(cli("compare-dumps", "g", "t", "--mapping", "m.json", "--model", "resnet_small",
                              "--out", "o", "--no-html", cwd=tmp_path), 2)
    assert "mapping file 'm.json'" in line and "'stem_cnv'" in line and "did you mean 'stem_conv'" in line
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ 7. regress on different inputs
def _run_folder(folder: Path, inputs, seed=0, dataset=None) -> Path:
    folder.mkdir()
    summary = {"verdict": "PASS", "model_sha256": "abc", "model_name": "m", "counts": {}, "triage": {},
               "inputs": inputs, "seed": seed, "config": {}, "environment": {"numpy": "2"}}
    if dataset is not None:
        summary["dataset"] = dataset
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def test_regress_warns_on_different_inputs(tmp_path):
    from toolkit.signoff.regress import regress

    a = _run_folder(tmp_path / "a", "sample generator seed=0")
    b = _run_folder(tmp_path / "b", "random seed=0 range=x:[0,100]")
    c = _run_folder(tmp_path / "c", "sample generator seed=0")
    rep = regress(a, b)
    assert any("different inputs" in w and "x:[0,100]" in w for w in rep["warnings"])
    assert {"key": "inputs", "baseline": "sample generator seed=0",
            "new": "random seed=0 range=x:[0,100]"} in rep["environment_changes"]
    same = regress(a, c)
    assert same["warnings"] == [] and same["environment_changes"] == []


def test_regress_dataset_runs_on_different_folders(tmp_path):
    from toolkit.signoff.regress import regress

    a = _run_folder(tmp_path / "a", None, dataset={"inputs_dir": "/d1", "inputs": 10})
    b = _run_folder(tmp_path / "b", None, dataset={"inputs_dir": "/d2", "inputs": 12})
    keys = {c["key"] for c in regress(a, b)["environment_changes"]}
    assert keys == {"dataset.inputs_dir", "dataset.inputs"}


def test_cli_regress_compare_runs_different_inputs(tmp_path):
    assert cli("compare", "transformer_block", "--out", "c", cwd=tmp_path).returncode in (0, 1)
    assert cli("compare", "transformer_block", "--seed", "0", "--val-range", "x:[0,100]", "--out", "c2",
               cwd=tmp_path).returncode in (0, 1)
    res = subprocess.run([sys.executable, "-m", "toolkit", "regress", "c", "c2", "--out", "o"], capture_output=True,
                         text=True, cwd=tmp_path, env=ENV, timeout=600)
    assert res.returncode in (0, 1), res.stderr
    assert "WARNING: the two runs used different inputs" in res.stdout
    rep = json.loads((tmp_path / "o" / "regress.json").read_text())
    assert any("different inputs" in w for w in rep["warnings"])
