"""``npuscope diagnose`` / ``compare`` end to end, a planted compile-stage fault, and the minimal reproducer.

The planted faults are registered only inside a test (context managers that restore the registries), and
run in process through toolkit.diagnose.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import helper

from tests.faultkinds import builders as fk
from toolkit.config import Config
from toolkit.diagnose import diagnose, prepare

C02 = Path("/work/shared/cases/fp16/c02_decomposed_layernorm_pow_overflow")
TIMEOUT_S = 300

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def npuscope(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"))


METRIC_COLUMNS = ["CosineSimilarity", "MaxAbsoluteError", "RelativeEuclideanDistance", "RootMeanSquareError",
                  "MeanAbsoluteError", "KullbackLeiblerDivergence"]


def check_result_csv(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path, keep_default_na=True)
    assert len(df) > 0
    reason = df["CompareFailReason"].fillna("").astype(str).str.strip()
    has_metrics = df[METRIC_COLUMNS].notna().any(axis=1)
    bad = df[~has_metrics & (reason == "")]
    assert bad.empty, f"rows with neither metrics nor a CompareFailReason:\n{bad[['NodeName', 'TensorName']]}"
    return df


# ------------------------------------------------------------------ diagnose / compare on the bundled sample
needs_tables = pytest.mark.skipif(not has_module("toolkit.report.csvjson"),
                                  reason="toolkit.report.csvjson (CSV/JSON writer) not written yet")


@needs_tables
def test_diagnose_bundled_sample_end_to_end(tmp_path):
    if not has_module("toolkit.report.html"):
        pytest.skip("toolkit.report.html not written yet: `diagnose` renders HTML")
    proc = npuscope("diagnose", "--out", "rep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = tmp_path / "rep"
    summary = json.loads((rep / "summary.json").read_text())
    assert summary["verdict"] in ("PASS", "WARN")
    assert summary["model_name"] and Path(summary["model"]).is_file()
    df = check_result_csv(rep / "result.csv")
    assert (df["CompareFailReason"].fillna("") == "").sum() >= 2  # something was really compared
    json.loads((rep / "findings.json").read_text())
    html = rep / "index.html"
    assert html.is_file() and html.stat().st_size > 0
    text = html.read_text(encoding="utf-8")
    assert "<html" in text.lower() and summary["verdict"] in text
    assert 'src="http' not in text and "src='http" not in text  # opens offline: no CDN scripts
    assert f"report: {html.resolve()}" in proc.stdout
    assert proc.stdout.splitlines()[0] == f"verdict: {summary['verdict']}"


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


# ------------------------------------------------------------------ planted compile-stage faults
def scale_model() -> fk.Built:
    """x → Relu('act') → Mul(·, k=0.5) 'scale_mul' → Add(·, b) 'bias_add' → y."""
    rng = np.random.default_rng(0)
    x = fk.fp16_exact(rng.standard_normal((1, 8, 16)))
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="act"),
             helper.make_node("Mul", ["r", "k"], ["m"], name="scale_mul"),
             helper.make_node("Add", ["m", "b"], ["y"], name="bias_add")]
    model = fk._model(nodes, [fk._vi("x", (1, 8, 16))], [fk._vi("y", (1, 8, 16))],
                      [fk._c("k", 0.5), fk._c("b", np.full(16, 0.25))], "planted")
    return fk.Built(model, {"x": x}, ["scale_mul"])


@contextlib.contextmanager
def planted_rule(target: str, factor: float):
    """Register (for the with-block only) a graph-fusion rule that 'fuses' ``target`` alone and, while at
    it, multiplies its constant operand by ``factor``: a rewrite that changes the math."""
    from toolkit.compiler import rules

    rules.load_rules()

    def match(g, node):
        if node.name != target:
            return None
        cname = next(i for i in node.input if g.const(i) is not None)
        g.consts[cname] = (g.consts[cname] * np.float32(factor)).astype(np.float32)
        return rules.Match([node], "PlantedScale")

    before = list(rules.RULES)
    rule = rules.Rule("PlantedScaleFusionPass", frozenset({"Mul"}), match)
    rules.RULES.append(rule)
    try:
        yield rule
    finally:
        rules.RULES[:] = before


def _diag(tmp_path, built, stem, **cfg):
    mp, ip = built.save(tmp_path, stem)
    return diagnose(prepare(str(mp), str(ip)), Config(**cfg))


# ------------------------------------------------------------------ the minimal reproducer
@pytest.fixture(scope="module")
def c02_report(tmp_path_factory):
    if not C02.is_dir():
        pytest.skip(f"{C02} not present")
    if not has_module("toolkit.report.csvjson"):
        pytest.skip("toolkit.report.csvjson not written yet")
    from toolkit import api

    out = tmp_path_factory.mktemp("c02") / "report"
    cfg = Config(precision_mode="force_fp16", fusion_level=0)
    res = api.diagnose_command(str(C02 / "model.onnx"), cfg, inputs=str(C02 / "inputs.npz"), out=str(out), html=False)
    return out, res, cfg


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


