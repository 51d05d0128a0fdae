"""regress (toolkit/signoff/regress.py): a planted regression (c08: FP32 fallback of exp/add_one/log as
baseline, force_fp16 without it as new) is found; two runs with the same inputs and config show none;
improvements, tolerances, inputs that differ between runs, policy changes, and damaged folders."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from tests.dataset.helpers import FP16
from tests.dtype_models import _compare_run
from toolkit.config.schema import Config
from toolkit.core.errors import InputError, UsageError
from toolkit.signoff.regress import DEFAULT_TOLERANCE, parse_tolerance, policy_changes, regress
from tests.signoff.helpers import V, IR, write_model, report, damaged_copy, KEEP, NO_KEEP
from tests.signoff.helpers import STRICT, LENIENT, save_checked, conv_relu, npz, write_utf8, signoff_fp16, policy_text, conv_runs, C08


def _run_folder(folder: Path, inputs, seed=0, dataset=None) -> Path:
    folder.mkdir()
    summary = {"verdict": "PASS", "model_sha256": "abc", "model_name": "m", "counts": {}, "triage": {},
               "inputs": inputs, "seed": seed, "config": {}, "environment": {"numpy": "2"}}
    if dataset is not None:
        summary["dataset"] = dataset
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_dataset_runs_on_different_folders(tmp_path):
    from toolkit.signoff.regress import regress

    a = _run_folder(tmp_path / "a", None, dataset={"inputs_dir": "/d1", "inputs": 10})
    b = _run_folder(tmp_path / "b", None, dataset={"inputs_dir": "/d2", "inputs": 12})
    keys = {c["key"] for c in regress(a, b)["environment_changes"]}
    assert keys == {"dataset.inputs_dir", "dataset.inputs"}


def _summary_folder(folder: Path, inputs: str, digests: dict | None) -> Path:
    folder.mkdir()
    s = {"verdict": "PASS", "model_sha256": "abc", "model_name": "m", "counts": {}, "triage": {},
         "inputs": inputs, "seed": 0, "config": {}, "environment": {}}
    if digests is not None:
        s["inputs_sha256"] = digests
    (folder / "summary.json").write_text(json.dumps(s))
    return folder


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_without_digests_falls_back_to_the_description_with_a_note(tmp_path):
    from toolkit.signoff.regress import regress

    old = _summary_folder(tmp_path / "old", "file in/x.npz", None)
    new = _summary_folder(tmp_path / "new", "file /abs/in/x.npz", {"x": "1" * 64})
    rep = regress(old, new)
    assert any(c["key"] == "inputs" for c in rep["environment_changes"])
    assert any("different inputs" in w for w in rep["warnings"])
    assert len(rep["notes"]) == 1 and str(old) in rep["notes"][0] and str(new) not in rep["notes"][0]
    assert "(a diagnose/compare run written before digests were recorded)" in rep["notes"][0]
    both = regress(new, _summary_folder(tmp_path / "new2", "file elsewhere.npz", {"x": "1" * 64}))
    assert both["warnings"] == [] and both["notes"] == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_names_an_input_only_one_run_has(tmp_path):
    from toolkit.signoff.regress import regress

    a = _summary_folder(tmp_path / "a", "f", {"x": "1" * 64})
    b = _summary_folder(tmp_path / "b", "f", {"x": "1" * 64, "mask": "2" * 64})
    rep = regress(a, b)
    assert {"key": "inputs_sha256.mask", "baseline": None, "new": "2" * 64} in rep["environment_changes"]
    assert any("inputs_sha256.mask" in w for w in rep["warnings"])


def _dataset_folder(folder: Path, shas: dict[str, str], inputs_dir: str) -> Path:
    folder.mkdir()
    s = {"verdict": "PASS", "model_sha256": "abc", "model_name": "m", "counts": {}, "triage": {},
         "inputs": "x", "config": {}, "environment": {}, "dataset": {"inputs_dir": inputs_dir, "inputs": len(shas)}}
    (folder / "summary.json").write_text(json.dumps(s))
    pd.DataFrame({"Input": list(shas), "Sha256": list(shas.values())}).to_csv(folder / "inputs.csv", index=False)
    return folder


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_dataset_runs_compare_input_file_digests(tmp_path):
    from toolkit.signoff.regress import regress

    a = _dataset_folder(tmp_path / "a", {"in0.npz": "a" * 64, "in1.npz": "b" * 64}, "/d1")
    moved = _dataset_folder(tmp_path / "b", {"in0.npz": "a" * 64, "in1.npz": "b" * 64}, "/d2")
    changed = _dataset_folder(tmp_path / "c", {"in0.npz": "a" * 64, "in1.npz": "c" * 64}, "/d1")
    rep = regress(a, moved)
    assert rep["warnings"] == [] and rep["environment_changes"] == []
    rep = regress(a, changed)
    assert [c["key"] for c in rep["environment_changes"]] == ["inputs_sha256.in1.npz"]
    assert any("different inputs" in w for w in rep["warnings"])


def verdict(folder: Path) -> str:
    return json.loads((folder / "summary.json").read_text())["verdict"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_lists_a_changed_policy_first_with_a_warning(conv_runs):
    r = conv_runs
    assert (verdict(r["ok"]), verdict(r["strict"])) == ("PASS", "FAIL")  # the fixture is what the test assumes
    rep = regress(r["ok"], r["strict"])
    sha = {n: hashlib.sha256(p.read_bytes()).hexdigest() for n, p in r["policies"].items()}
    env = rep["environment_changes"]
    assert env[0] == {"key": "policy.outputs.*.CosineSimilarity", "baseline": LENIENT, "new": STRICT}
    keys = [c["key"] for c in env]
    assert keys.index("policy_sha256") < 3 and keys.index("policy_path") < 3  # policy changes come first
    assert {"key": "policy_sha256", "baseline": sha["ok"], "new": sha["strict"]} in env
    assert {"key": "policy_path", "baseline": str(r["policies"]["ok"]), "new": str(r["policies"]["strict"])} in env
    warn = [w for w in rep["warnings"] if "different policies" in w]
    assert len(warn) == 1 and "may come from the policy, not from the build" in warn[0]
    assert sha["ok"][:12] in warn[0] and sha["strict"][:12] in warn[0]
    # the verdict change is still reported as a regression (the build may have changed too)
    assert rep["regressed"] and "verdict: PASS -> FAIL" in rep["reasons"] and rep["improvements"] == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_lists_improvements(conv_runs):
    rep = regress(conv_runs["strict"], conv_runs["ok"])
    assert not rep["regressed"] and rep["reasons"] == []
    assert rep["improvements"] == ["verdict: FAIL -> PASS", "criterion outputs.y.CosineSimilarity: FAIL -> PASS"]
    v = [c for c in rep["verdict_changes"] if c["what"] == "verdict"]
    assert v == [{"what": "verdict", "baseline": "FAIL", "new": "PASS", "regression": False, "improvement": True}]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_same_policy_text_elsewhere_is_no_policy_change(conv_runs):
    rep = regress(conv_runs["ok"], conv_runs["ok_copy"])
    assert [c["key"] for c in rep["environment_changes"] if c["key"].startswith("policy")] == ["policy_path"]
    assert not any("different policies" in w for w in rep["warnings"])
    assert not rep["regressed"] and rep["improvements"] == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_policy_changes_of_runs_without_a_policy_is_empty():
    assert policy_changes({"verdict": "PASS", "triage": {}}, {"verdict": "FAIL", "triage": {}}) == []
    a = {"policy": {"outputs": {"*": {"CosineSimilarity": 0.9}}}, "policy_path": "a.toml", "policy_sha256": "1"}
    b = {"policy": {"outputs": {"*": {"CosineSimilarity": 0.9}, "y": {"MaxAbsoluteError": 0.1}}},
         "policy_path": "a.toml", "policy_sha256": "2"}
    assert policy_changes(a, b) == [{"key": "policy.outputs.y.MaxAbsoluteError", "baseline": None, "new": 0.1},
                                    {"key": "policy_sha256", "baseline": "1", "new": "2"}]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_regress_prints_close_baseline_and_new_values_apart(tmp_path):
    from toolkit.signoff.regress import regress

    (tmp_path / "a").mkdir()
    base = _compare_run(tmp_path / "a")
    new = tmp_path / "new"
    shutil.copytree(base, new)
    for folder, value in ((base, 0.12345649), (new, 0.12345651)):
        df = pd.read_csv(folder / "result.csv")
        df.loc[df["TensorName"] == "y", "MaxAbsoluteError"] = value
        df.to_csv(folder / "result.csv", index=False)
    rep = regress(base, new, tolerance={"MaxAbsoluteError": 1e-8})
    line = next(r for r in rep["reasons"] if "MaxAbsoluteError" in r)
    assert "0.12345649 -> 0.12345651" in line and "(tolerance 1e-08)" in line


def half(b: bytes) -> bytes:
    return b[: len(b) // 2]


def summary_with(**change):
    def edit(raw: bytes) -> bytes:
        s = json.loads(raw)
        for k, v in change.items():
            if v is KeyError:
                s.pop(k, None)
            else:
                s[k] = v
        return json.dumps(s).encode()
    return edit


def csv_edit(fn):
    def edit(raw: bytes) -> bytes:
        import io

        import pandas as pd

        t = pd.read_csv(io.BytesIO(raw))
        return fn(t).to_csv(index=False).encode()
    return edit


DAMAGES = {
    "summary.json": {
        "truncated": half, "empty": b"", "not json": "garbage{", "not utf8": b"\xff\xfe\x00{",
        "top-level array": [1, 2], "top-level number": 5, "top-level string": '"PASS"',
        "no verdict": summary_with(verdict=KeyError), "no model_sha256": summary_with(model_sha256=KeyError),
        "no counts/triage": summary_with(counts=KeyError, triage=KeyError),
        "verdict number": summary_with(verdict=5), "verdict unknown": summary_with(verdict="MAYBE"),
        "environment array": summary_with(environment=[1]), "config string": summary_with(config="x"),
        "dataset array": summary_with(dataset=[1]), "model_sha256 number": summary_with(model_sha256=5),
        "criteria items": summary_with(criteria=[5]), "criterion name": summary_with(criteria=[{"name": 1, "status": "PASS"}]),
        "inputs_sha256 array": summary_with(inputs_sha256=[1]),
    },
    "result.csv": {
        "truncated row": lambda b: b[: b.rindex(b"\n", 0, len(b) - 1) + 20], "unclosed quote": 'garbage,"\n',
        "empty": b"", "header only blank": b"\n\n", "not utf8": b"\xff\xfe\x00a,b\n",
        "no TensorName": csv_edit(lambda t: t.drop(columns=["TensorName"])),
        "no NodeName": csv_edit(lambda t: t.drop(columns=["NodeName"])),
        "no OpType": csv_edit(lambda t: t.drop(columns=["OpType"])),
        "empty TensorName": csv_edit(lambda t: t.assign(TensorName=[None] + list(t["TensorName"][1:]))),
        "Abnormal not bool": csv_edit(lambda t: t.assign(Abnormal="maybe")),
        "metric not number": csv_edit(lambda t: t.assign(CosineSimilarity="abc")),
    },
    "plan.json": {
        "truncated": half, "not json": "{", "top-level array": [1], "kernels number": {"kernels": 5},
        "no kernels": {"tensors": []}, "kernel not object": {"kernels": [5]},
        "kernel without name": {"kernels": [{"nodes": ["a"]}]}, "nodes string": {"kernels": [{"name": "k", "nodes": "ab"}]},
        "node number": {"kernels": [{"name": "k", "nodes": [1]}]},
        "precision number": {"kernels": [{"name": "k", "nodes": ["a"], "precision": 16}]},
    },
    "fusion_result.json": {
        "truncated": half, "top-level array": [], "graph number": {"g": 5}, "level number": {"g": {"graph_fusion": 5}},
        "pass number": {"g": {"graph_fusion": {"p": 5}}},
        "count array": {"g": {"graph_fusion": {"p": {"match_times": [1], "effect_times": "1"}}}},
    },
}
CASES = [(f, d) for f, kinds in DAMAGES.items() for d in kinds]


@pytest.mark.parametrize("fname,damage", CASES, ids=[f"{f}-{d}" for f, d in CASES])
def test_regress_names_each_damaged_file(report, tmp_path, fname, damage):
    from toolkit.signoff.regress import regress

    bad = damaged_copy(report, tmp_path, fname, DAMAGES[fname][damage])
    for a, b in ((report, bad), (bad, report)):
        with pytest.raises(InputError) as err:
            regress(a, b)
        msg = str(err.value)
        assert "\n" not in msg and f"'{bad / fname}'" in msg and "re-run" in msg, msg
        assert "compile result" not in msg and "another command" not in msg, msg


def test_regress_dataset_inputs_csv_damage(report, tmp_path):
    """A dataset run's inputs.csv (read for input digests): unparsable and ragged files are named."""
    from toolkit.signoff.regress import regress

    for i, content in enumerate([b'Input,Sha256\n"a.npz,1\n', b"Input,Sha256\na.npz\n", b"\xff\xfe"]):
        folders = []
        for side in ("a", "b"):
            f = tmp_path / f"{side}{i}"
            shutil.copytree(report, f)
            s = json.loads((f / "summary.json").read_text())
            s["dataset"] = {"inputs_dir": "ds", "inputs": 1}
            (f / "summary.json").write_text(json.dumps(s))
            (f / "inputs.csv").write_text("Input,Sha256\na.npz,00\n")
            folders.append(f)
        (folders[1] / "inputs.csv").write_bytes(content)
        with pytest.raises(InputError, match="inputs.csv"):
            regress(*folders)


@pytest.mark.parametrize("missing", ["result.csv"])
def test_regress_refuses_a_folder_missing_the_file_the_other_compares_by(report, tmp_path, missing):
    """A single-input run without result.csv beside one with it: the per-tensor comparison would be skipped and
    the verdict say NO REGRESSION on nothing; refused on either side, naming the folder without it."""
    from toolkit.signoff.regress import regress

    shutil.copytree(report, tmp_path / "cut")
    (tmp_path / "cut" / missing).unlink()
    for a, b in ((report, tmp_path / "cut"), (tmp_path / "cut", report)):
        with pytest.raises(InputError, match=f"'{tmp_path / 'cut'}' has no {missing}"):
            regress(a, b)


def test_regress_undamaged_copy_still_compares(report, tmp_path):
    """The checks refuse nothing a real report holds (this test fails if a validator is too strict)."""
    from toolkit.signoff.regress import regress

    shutil.copytree(report, tmp_path / "same")
    rep = regress(report, tmp_path / "same")
    assert rep["verdict"] == "NO REGRESSION"


@pytest.mark.parametrize("tolerance,column", [("CosineSimilarity>=0.999", "CosineSimilarity"),
                                              ("y:MaxAbsoluteError<=1", "MaxAbsoluteError"),
                                              (None, "RelativeEuclideanDistance"),  # a default allowed change
                                              ("KullbackLeiblerDivergence=0.1", "KullbackLeiblerDivergence")])
@pytest.mark.parametrize("side", ["baseline", "new"])
def test_regress_refuses_a_result_csv_without_a_column_the_tolerance_checks(report, tmp_path, tolerance, column,
                                                                           side):
    """A result.csv without the column of a metric the tolerance checks (hand-edited, another tool's) had been
    skipped silently: NO REGRESSION on a check that never ran. Refused in one line naming the file and the
    column; leaving the metric out (METRIC=off) runs the rest."""
    from toolkit.signoff.regress import regress

    for name in ("baseline", "new"):
        shutil.copytree(report, tmp_path / name)
    table = pd.read_csv(tmp_path / side / "result.csv")
    table.drop(columns=[column]).to_csv(tmp_path / side / "result.csv", index=False)
    with pytest.raises(InputError) as err:
        regress(tmp_path / "baseline", tmp_path / "new", parse_tolerance(tolerance))
    msg = str(err.value)
    assert f"{side}/result.csv' has no {column} column" in msg and "\n" not in msg
    if tolerance is None:  # a default metric: turned off, the rest is compared
        rep = regress(tmp_path / "baseline", tmp_path / "new", parse_tolerance(f"{column}=off"))
        assert rep["verdict"] == "NO REGRESSION"


def compare_run(tmp: Path, name: str, cfg: dict) -> Path:
    from toolkit import api

    api.diagnose_command(str(C08 / "model.onnx"), Config.from_dict(cfg), inputs=str(C08 / "inputs.npz"),
                         out=str(tmp / name), html=False)
    return tmp / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("regress")
    return {"base": compare_run(tmp, "base", KEEP), "same": compare_run(tmp, "same", KEEP),
            "fp16": compare_run(tmp, "fp16", NO_KEEP), "tmp": tmp}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_planted_regression_is_found(runs):
    rep = regress(runs["base"], runs["fp16"])
    assert rep["regressed"] and rep["verdict"] == "REGRESSION"
    assert {r["TensorName"] for r in rep["newly_abnormal"]} >= {"e", "e1", "y"}
    assert any(v["what"] == "verdict" and v["regression"] for v in rep["verdict_changes"])
    changed = {(d["node"], d["what"]): (d["baseline"], d["new"]) for d in rep["decision_changes"]}
    assert changed[("exp", "precision")] == ("fp32", "fp16")
    keys = [c["key"] for c in rep["environment_changes"]]
    assert "config.keep_dtype" in keys  # the config change is called out with the environment, first
    assert any("'e'" in r and "newly abnormal" in r for r in rep["reasons"])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_identical_runs_show_no_regression(runs):
    rep = regress(runs["base"], runs["same"])
    assert not rep["regressed"], rep["reasons"]
    assert not rep["environment_changes"] and not rep["decision_changes"] and not rep["layer_deltas"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_improvement_is_not_a_regression(runs):
    rep = regress(runs["fp16"], runs["base"])
    assert not rep["regressed"], rep["reasons"]


def _worse_copy(runs, tmp_path) -> Path:
    """A copy of the base run whose tensor e1 has a CosineSimilarity 0.01 lower."""
    import pandas as pd

    worse = tmp_path / "worse"
    worse.mkdir()
    for f in runs["base"].iterdir():
        if f.is_file():
            (worse / f.name).write_bytes(f.read_bytes())
    df = pd.read_csv(worse / "result.csv")
    df.loc[df["TensorName"] == "e1", "CosineSimilarity"] -= 0.01
    df.to_csv(worse / "result.csv", index=False)
    return worse


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_tolerance_metric_delta(runs, tmp_path):
    worse = _worse_copy(runs, tmp_path)
    rep = regress(runs["base"], worse)
    assert rep["regressed"] and rep["layer_deltas"][0]["TensorName"] == "e1"
    assert not regress(runs["base"], worse, parse_tolerance("CosineSimilarity=0.1"))["regressed"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_parse_tolerance():
    assert parse_tolerance(None) == DEFAULT_TOLERANCE
    assert parse_tolerance("CosineSimilarity=1e-5")["CosineSimilarity"] == 1e-5
    with pytest.raises(UsageError, match="did you mean 'RelativeEuclideanDistance'"):
        parse_tolerance("RelativeEuclidean=0.1")
    with pytest.raises(UsageError, match="not 'Metric=value"):
        parse_tolerance("CosineSimilarity=-1")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_missing_folder_is_one_line_input_error(tmp_path):
    with pytest.raises(InputError, match="no summary.json"):
        regress(tmp_path, tmp_path)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_improvements_mirror_the_regressions(runs, tmp_path):
    """Every change that regress calls a regression one way is an improvement the other way: tensors newly
    abnormal from base to fp16 are normal again from fp16 to base, and a metric made worse beyond the tolerance
    is a metric improvement when the runs are swapped; regress.html lists them in its Improvements section."""
    from toolkit.report.signoff_html import render_regress

    forward, backward = regress(runs["base"], runs["fp16"]), regress(runs["fp16"], runs["base"])
    assert not backward["regressed"]
    assert {r["TensorName"] for r in backward["newly_normal"]} == {r["TensorName"] for r in forward["newly_abnormal"]}
    for r in forward["newly_abnormal"]:
        assert any(f"'{r['TensorName']}'" in i and "normal again" in i for i in backward["improvements"])
    rep = regress(_worse_copy(runs, tmp_path), runs["base"])
    assert not rep["regressed"] and not rep["layer_deltas"]
    assert [(d["TensorName"], d["metric"]) for d in rep["layer_improvements"]] == [("e1", "CosineSimilarity")]
    assert abs(rep["layer_improvements"][0]["delta"] - 0.01) < 1e-9
    html = render_regress(backward, tmp_path).read_text()
    section = html[html.index('<section id="improvements">'):]
    section = section[:section.index("</section>")]
    assert all(f"'{r['TensorName']}'" in section or f"&#39;{r['TensorName']}&#39;" in section
               for r in forward["newly_abnormal"])


# ------------------------------------------------------------------------------ dump comparisons (compare-dumps)
def _dumps_run(folder: Path, golden: str, target: str, model: str | None, tensors=("y",)) -> Path:
    """A compare-dumps report folder: summary.json with its golden / target sections, a result.csv."""
    folder.mkdir()
    s = {"verdict": "PASS", "command": "compare-dumps", "model": f"{model}.onnx" if model else "",
         "model_name": model or "", "model_sha256": hashlib.sha256(model.encode()).hexdigest() if model else "",
         "inputs": f"golden {golden} (onnx file names) vs target {target} (device file names)",
         "golden": {"path": golden, "format": "onnx", "dumps": len(tensors)},
         "target": {"path": target, "format": "device", "dumps": len(tensors)},
         "counts": {}, "triage": {}, "config": {}, "environment": {}}
    (folder / "summary.json").write_text(json.dumps(s))
    pd.DataFrame({"TensorName": list(tensors), "NodeName": list(tensors), "OpType": ["Mul"] * len(tensors),
                  "CosineSimilarity": [1.0] * len(tensors),
                  "RelativeEuclideanDistance": [0.0] * len(tensors), "Abnormal": [False] * len(tensors)}
                 ).to_csv(folder / "result.csv", index=False)
    return folder


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dump_comparisons_take_the_golden_dumps_as_inputs_not_the_target(tmp_path):
    """Kind: the target of a dump comparison is what is under test: two targets against one golden folder are
    runs on the same inputs (no warning); another golden folder is another input; the note says these runs are
    dump comparisons, not runs written before digests existed."""
    a = _dumps_run(tmp_path / "a", "golden", "device_v1", "tiny")
    b = _dumps_run(tmp_path / "b", "golden", "device_v2", "tiny")
    rep = regress(a, b)
    assert not any("different inputs" in w for w in rep["warnings"]), rep["warnings"]
    assert not any(c["key"] in ("inputs", "target.path") for c in rep["environment_changes"])
    assert len(rep["notes"]) == 1 and "compare-dumps" in rep["notes"][0]
    assert "written before digests were recorded" not in rep["notes"][0]
    other = regress(a, _dumps_run(tmp_path / "c", "golden_other", "device_v1", "tiny"))
    assert {"key": "golden.path", "baseline": "golden", "new": "golden_other"} in other["environment_changes"]
    assert any("different inputs" in w for w in other["warnings"])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_run_without_a_model_beside_one_with_a_model_is_refused_as_such(tmp_path):
    """Kind: one compare-dumps run without --model: it is not "another model" (no empty name, no
    --allow-different-models advice); the error names the run and the --model to re-run it with."""
    a = _dumps_run(tmp_path / "a", "golden", "device", "tiny")
    b = _dumps_run(tmp_path / "b", "golden", "device", None, tensors=("head_sq:0",))
    for base, new, lacking in ((a, b, b), (b, a, b)):
        with pytest.raises(InputError) as e:
            regress(base, new)
        msg = str(e.value)
        assert f"'{lacking}' records no model" in msg and "--model tiny.onnx" in msg
        assert "different models" not in msg and "allow-different-models" not in msg and "''" not in msg
    both = regress(b, _dumps_run(tmp_path / "c", "golden", "device2", None, tensors=("head_sq:0",)))
    assert both["warnings"] == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("text", ["nosuch:Cosine=1e-3", "nosuch:CosineSimilarity>=0.99", "y:Cosine=1e-3,yy:RED=0.1"])
def test_a_tolerance_for_a_tensor_neither_run_has_is_refused(tmp_path, text):
    """Kind: a ``TENSOR:`` tolerance item naming no tensor of the runs is refused as compare and compare-dumps
    refuse it (the same check: the valid names listed), never silently replaced by the defaults."""
    a = _dumps_run(tmp_path / "a", "golden", "device_v1", "tiny", tensors=("x", "y"))
    b = _dumps_run(tmp_path / "b", "golden", "device_v2", "tiny", tensors=("x", "y"))
    bad = [item.split(":")[0] for item in text.split(",") if item.split(":")[0] not in ("x", "y")][0]
    with pytest.raises(UsageError) as e:
        regress(a, b, parse_tolerance(text))
    assert f"no tensor '{bad}'" in str(e.value) and "x, y" in str(e.value)
    assert regress(a, b, parse_tolerance("y:Cosine=1e-3"))["verdict"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("spoil,regressed", [("truncated", True), ("misshaped", True), ("listed_missing", True),
                                              ("absent", False)])
def test_a_tensor_compared_before_whose_dump_is_broken_now_is_a_regression(tmp_path, spoil, regressed):
    """compare-dumps of one golden against a good target (baseline) and against one whose dump of 'u' is spoiled
    (new): a dump that cannot be compared now (cut short, misshaped, listed in index.json without its file) is a
    regression naming the tensor, never "normal again"; a dump not taken (absent) is a change of what was dumped,
    listed in tensor_changes (not as a broken comparison)."""
    from tests.dumps.builders import dump_model, dump_sides
    from toolkit.commands.compare_dumps import compare_dumps_command

    model = dump_model(tmp_path / "m.onnx")
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    g, t_good = dump_sides(good, model, "none", "u")
    _, t_bad = dump_sides(bad, model, spoil, "u")
    for target, out in ((t_good, tmp_path / "base"), (t_bad, tmp_path / "new")):
        compare_dumps_command(str(g), str(target), model=str(model), out=str(out), html=False)
    base = pd.read_csv(tmp_path / "base" / "result.csv", keep_default_na=False).set_index("TensorName")
    assert base.at["u", "CompareFailReason"] == ""  # compared in the baseline (read here from its table)
    rep = regress(tmp_path / "base", tmp_path / "new")
    # (a missing dump also turns the verdict PASS -> WARN, a regression of its own; the tensor's line is ours)
    assert any("'u'" in r and "compared in the baseline and is not now" in r for r in rep["reasons"]) is regressed, \
        rep["reasons"]
    assert rep["regressed"] or not regressed
    assert not any("'u'" in r for r in rep["improvements"]), rep["improvements"]
    assert any(c["TensorName"] == "u" and c["change"].startswith("compared only in baseline")
               for c in rep["tensor_changes"]), rep["tensor_changes"]


def test_a_row_that_could_not_be_compared_is_never_normal_again():
    """An abnormal baseline row whose new row holds no metrics (unreadable) is not "normal again"; one compared
    and normal now is."""
    from toolkit.signoff.regress import layer_changes

    base = pd.DataFrame({"TensorName": ["a", "b"], "NodeName": ["na", "nb"], "OpType": ["Add", "Add"],
                         "Abnormal": [True, True], "CompareFailReason": ["", ""],
                         "CosineSimilarity": [0.5, 0.5], "AbnormalMetrics": ["CosineSimilarity", "CosineSimilarity"]})
    new = base.assign(Abnormal=[False, False], CompareFailReason=["target dump unreadable (x.npy): truncated", ""],
                      CosineSimilarity=[float("nan"), 1.0])
    got = layer_changes(base, new, dict(DEFAULT_TOLERANCE))
    assert [r["TensorName"] for r in got["newly_normal"]] == ["b"]
    assert [r["TensorName"] for r in got["lost_comparisons"]] == ["a"]


@pytest.mark.parametrize("item", ["Cosine=abc", "RED=x", "RelativeEuclideanDistance=nan"])
def test_a_bad_allowed_change_is_answered_with_an_allowed_change(item):
    """regress's METRIC=CHANGE is an allowed worsening: the corrected example is a small change (1e-3), never a
    metric value such as 0.999, which would allow almost any worsening; and the example parses."""
    with pytest.raises(UsageError) as info:
        parse_tolerance(item)
    msg = str(info.value)
    example = msg.split("e.g. '", 1)[1].split("'", 1)[0]
    metric, change = example.split("=")
    assert float(change) == 1e-3 and parse_tolerance(example)[metric] == 1e-3, msg
