"""``npuscope regress``: a planted regression (c08: FP32 fallback of exp/add_one/log as baseline, force_fp16
without it as new) is found; two runs with the same inputs and config show none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.config import Config
from toolkit.errors import InputError, UsageError
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


