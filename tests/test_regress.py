"""``npuscope regress``: a planted regression (c08: FP32 fallback of exp/add_one/log as baseline, force_fp16
without it as new) is found; two runs with the same inputs and config show none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.config.schema import Config
from toolkit.core.errors import InputError, UsageError
from toolkit.signoff.regress import DEFAULT_TOLERANCE, parse_tolerance, regress

C08 = Path("/work/shared/cases/fp16/c08_softplus_exp_overflow")
KEEP = {"precision_mode": "force_fp16", "keep_dtype": ["exp", "add_one", "log"]}
NO_KEEP = {"precision_mode": "force_fp16"}

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")]


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


def test_identical_runs_show_no_regression(runs):
    rep = regress(runs["base"], runs["same"])
    assert not rep["regressed"], rep["reasons"]
    assert not rep["environment_changes"] and not rep["decision_changes"] and not rep["layer_deltas"]


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


def test_tolerance_metric_delta(runs, tmp_path):
    worse = _worse_copy(runs, tmp_path)
    rep = regress(runs["base"], worse)
    assert rep["regressed"] and rep["layer_deltas"][0]["TensorName"] == "e1"
    assert not regress(runs["base"], worse, parse_tolerance("CosineSimilarity=0.1"))["regressed"]


def test_parse_tolerance():
    assert parse_tolerance(None) == DEFAULT_TOLERANCE
    assert parse_tolerance("CosineSimilarity=1e-5")["CosineSimilarity"] == 1e-5
    with pytest.raises(UsageError, match="did you mean 'RelativeEuclideanDistance'"):
        parse_tolerance("RelativeEuclidean=0.1")
    with pytest.raises(UsageError, match="not 'Metric=value"):
        parse_tolerance("CosineSimilarity=-1")


def test_missing_folder_is_one_line_input_error(tmp_path):
    with pytest.raises(InputError, match="no summary.json"):
        regress(tmp_path, tmp_path)


def test_cli_exit_codes_and_html(runs):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    tmp = runs["tmp"]

    def run(a, b, out):
        return subprocess.run([sys.executable, "-m", "toolkit", "regress", str(a), str(b), "--out", str(tmp / out)],
                              capture_output=True, text=True, env=env, timeout=300)

    bad = run(runs["base"], runs["fp16"], "r1")
    assert bad.returncode == 1 and "REGRESSION" in bad.stdout, bad.stdout + bad.stderr
    assert bad.stdout.index("changed config.keep_dtype") < bad.stdout.index("newly abnormal")
    html = (tmp / "r1" / "regress.html").read_text()
    assert "Environment changes" in html and "exp" in html
    assert json.loads((tmp / "r1" / "regress.json").read_text())["regressed"] is True
    ok = run(runs["base"], runs["same"], "r2")
    assert ok.returncode == 0 and "NO REGRESSION" in ok.stdout


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
