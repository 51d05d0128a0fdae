"""One condition grammar on the command line: every command that takes accuracy conditions (compare/diagnose and
signoff --thresholds, tune --target, regress --tolerance, compare-dumps --thresholds, a policy's strings, --atol /
--rtol) accepts the same strings, and every correction an error suggests is accepted."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from tests.cli.clirun import error_line, m1, npuscope
from toolkit.compare.metrics.grammar import parse_conditions

SAME = "CosineSimilarity>=0.999,MaxAbsErr<=0.5"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("thresholds")
    m1(folder)
    (folder / "policy.toml").write_text(f'[outputs]\n"*" = "{SAME}"\n')
    return folder


def test_the_string_of_the_report_is_accepted(work):
    """--thresholds "CosineSimilarity>=0.999" was refused with a suggestion (CosineSimilarity<=0.999) that was
    refused too."""
    proc = npuscope("compare", "m1.onnx", "--inputs", "x.npz", "--thresholds", "CosineSimilarity>=0.999",
                    "--out", "reported", cwd=work)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((work / "reported" / "summary.json").read_text())
    assert summary["thresholds"]["CosineSimilarity"] == 0.999
    assert summary["threshold_origins"]["CosineSimilarity"] == "user"


def test_every_command_accepts_the_same_string(work):
    runs = {
        "compare": ["compare", "m1.onnx", "--inputs", "x.npz", "--thresholds", SAME, "--out", "c"],
        "tune": ["tune", "m1.onnx", "--inputs", "x.npz", "--target", SAME, "--no-html", "--out", "t"],
        "signoff": ["signoff", "m1.onnx", "--policy", "policy.toml", "--inputs", "x.npz", "--thresholds", SAME,
                    "--no-html", "--out", "s"],
        "run": ["run", "m1.onnx", "--inputs", "x.npz", "--dump", "d", "--out", "r"],
    }
    for name, args in runs.items():
        proc = npuscope(*args, cwd=work)
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
    after = {
        "regress": ["regress", "c", "c", "--tolerance", SAME, "--no-html", "--out", "g"],
        "compare-dumps": ["compare-dumps", "d", "d", "--thresholds", SAME, "--no-html", "--out", "cd"],
    }
    for name, args in after.items():
        proc = npuscope(*args, cwd=work)
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)

    compare = json.loads((work / "c" / "summary.json").read_text())["thresholds"]
    assert (compare["CosineSimilarity"], compare["MaxAbsoluteError"]) == (0.999, 0.5)
    dumps = json.loads((work / "cd" / "summary.json").read_text())["thresholds"]
    assert (dumps["CosineSimilarity"], dumps["MaxAbsoluteError"]) == (0.999, 0.5)
    assert json.loads((work / "t" / "summary.json").read_text())["target"] == ["CosineSimilarity>=0.999",
                                                                               "MaxAbsoluteError<=0.5"]
    criteria = {c["name"]: c for c in json.loads((work / "s" / "summary.json").read_text())["criteria"]}
    assert {n: c["evidence"]["limit"] for n, c in criteria.items()} == {
        "outputs.y.CosineSimilarity": 0.999, "outputs.y.MaxAbsoluteError": 0.5,
        "outputs.z.CosineSimilarity": 0.999, "outputs.z.MaxAbsoluteError": 0.5}
    tolerance = json.loads((work / "g" / "regress.json").read_text())["tolerance"]
    assert tolerance["bounds"] == ["CosineSimilarity>=0.999", "MaxAbsoluteError<=0.5"]


def _fixes(line: str) -> list[str]:
    return [q for q in re.findall(r"'([^']+)'", line) if re.match(r"^(.*:)?[A-Za-z_]\w*(<=|>=|<|>|=)\S+$", q)]


@pytest.mark.parametrize("bad", ["Cosin>=0.999", "CosineSimilarity 0.999", "CosineSimilarity>=1.5"])
def test_a_bad_string_is_a_usage_error_whose_fix_is_accepted(work, bad):
    (work / "bad.toml").write_text(f'[outputs]\n"*" = "{bad}"\n')
    commands = {
        "compare": ["compare", "m1.onnx", "--thresholds", bad, "--out", "x1"],
        "tune": ["tune", "m1.onnx", "--target", bad, "--out", "x2"],
        "signoff --thresholds": ["signoff", "m1.onnx", "--policy", "policy.toml", "--thresholds", bad, "--out", "x3"],
        "signoff policy": ["signoff", "m1.onnx", "--policy", "bad.toml", "--out", "x4"],
        "regress": ["regress", "nowhere", "nowhere", "--tolerance", bad, "--out", "x5"],
        "compare-dumps": ["compare-dumps", "nowhere", "nowhere", "--thresholds", bad, "--out", "x6"],
    }
    for name, args in commands.items():
        proc = npuscope(*args, cwd=work)
        assert proc.returncode == 2, (name, proc.stderr)
        line = error_line(proc)
        fixes = [f for f in _fixes(line) if f != bad]
        assert fixes, (name, line)
        for fix in fixes:
            parse_conditions(fix)
        assert not any((work / f"x{i}").exists() for i in range(1, 7))


def test_per_output_lines_and_atol_outside_a_policy(work):
    x = np.load(work / "x.npz")["x"]
    y = 3 * x.astype(np.float64) + 1
    assert np.max(np.abs(y.astype(np.float16).astype(np.float64) - y)) > 0  # FP16 storage moves y: --atol y:0 fails
    proc = npuscope("compare", "m1.onnx", "--inputs", "x.npz", "--precision-mode", "force_fp16", "--atol", "y:0",
                    "--out", "pa", cwd=work)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the graph output y is abnormal: FAIL
    rows = pd.read_csv(work / "pa" / "result.csv", keep_default_na=False).set_index("TensorName")
    assert "MaxAbsoluteError" in rows.loc["y", "AbnormalMetrics"] and str(rows.loc["y", "Abnormal"]) == "True"
    assert "MaxAbsoluteError" not in rows.loc["z", "AbnormalMetrics"]  # no line on z's MaxAbsoluteError
    summary = json.loads((work / "pa" / "summary.json").read_text())
    assert summary["thresholds_per_tensor"]["y"]["MaxAbsoluteError"] == 0 and "MaxAbsoluteError" not in \
        summary["thresholds"]


def test_tune_target_per_output_with_a_shorthand(work):
    proc = npuscope("tune", "m1.onnx", "--inputs", "x.npz", "--target", "y:CosineSimilarity>=0.99", "--atol", "z:1",
                    "--no-html", "--out", "tp", cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((work / "tp" / "summary.json").read_text())["target"] == ["y:CosineSimilarity>=0.99",
                                                                                "z:MaxAbsoluteError<=1.0"]


@pytest.mark.parametrize("args, named", [
    (["tune", "m1.onnx", "--target", "w:CosineSimilarity>=0.9", "--out", "n1"], "no output 'w'"),
    (["compare", "m1.onnx", "--thresholds", "q:RMSE=off", "--out", "n2"], "'q'"),
])
def test_a_name_that_is_not_in_the_model_is_refused(work, args, named):
    proc = npuscope(*args, cwd=work)
    assert proc.returncode == 2 and named in error_line(proc), proc.stderr
