"""Round-6 defects 3, 4 and 8, each tested as a kind.

4. Identical tensors get exact metric values (cosine 1, every error 0, KL 0) over every metric, dtypes, shapes
   and memory layouts; exactly proportional tensors (x = ±2^k·y) get a cosine of exactly ±1.
3. User-set abnormal lines are applied as given: the FP16 expected-noise allowance excuses default lines only;
   crossed lines are always listed in AbnormalMetrics; compare and compare-dumps agree on user-set lines.
8. A value printed next to its line or limit reads on the same side of it, about as far from it, and the limit
   is printed exactly (one shared function: toolkit.report.console.show_vs).

Expected values are computed here (numpy, onnxruntime, by hand), never copied from npuscope's output.
"""

from __future__ import annotations

import math
import os
import pickle
import re
import subprocess
import sys
import zlib
from decimal import ROUND_CEILING, Context, Decimal
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest

from tests.faultkinds import builders as fk
from toolkit.compare.metrics import (DEFAULT_THRESHOLDS, METRICS, Thresholds, compare_tensors, noise_covers,
                                     parse_thresholds, resolve_thresholds)
from toolkit.compare.metrics.spec import HIGHER_IS_BETTER, INFORMATIONAL
from toolkit.report.console import show, show_crossed, show_line, show_vs

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300
ERRORS = [m for m, s in METRICS.items() if s.dtype_class == "float" and s.direction != INFORMATIONAL
          and m != "CosineSimilarity"]


def npuscope(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"))


def strictest_lines() -> dict[str, float]:
    """Lines that only an exact match passes: cosine below 1 or any error above 0 is abnormal."""
    return {"CosineSimilarity": 1.0, **{m: 0.0 for m in ERRORS}}


# =============================================================================== 4. identical tensors
def _golden(rng, shape, dtype, scale):
    y = rng.standard_normal(shape) * scale
    flat = y.reshape(-1)
    flat[:: 7] = 0.0  # exact zeros mixed in (relative errors skip them)
    return y.astype(dtype)


def _misaligned_copy(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` whose data starts one element into a fresh buffer (different alignment than ``a``)."""
    buf = np.empty(a.size + 1, dtype=a.dtype)
    buf[1:] = a.reshape(-1)
    return buf[1:].reshape(a.shape)


DTYPES = [np.float16, np.float32, np.float64, "bfloat16"]
SHAPES = [(1,), (2,), (7,), (3, 5, 17), (1000,), (64, 64), (2, 3, 4, 1021)]


def _dtype(name):
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return ml_dtypes.bfloat16
    return name


# =============================================================================== 3. lines vs expected noise
NOISE = {"rtol": 4e-3, "atol": 1e-3}


def _fp16_rounded():
    """Values around 1e4 and their FP16 rounding: ordinary noise that crosses the default RMSE > 1 line."""
    y = np.random.default_rng(6).uniform(1e4, 3e4, 4096).astype(np.float32)
    x = y.astype(np.float16).astype(np.float32)
    d = x.astype(np.float64) - y.astype(np.float64)
    rmse, maxabs = float(np.sqrt(np.mean(d * d))), float(np.abs(d).max())
    assert rmse > 1.0 and maxabs > 1e-3  # precondition, computed here
    assert np.all(np.abs(d) <= NOISE["atol"] + NOISE["rtol"] * np.abs(y.astype(np.float64)))  # within noise
    return x, y, rmse, maxabs


# ------------------------------------------------------------------ layer table, compare vs compare-dumps
def _scale_model(low: float, high: float):
    """x[4,8] -> t = 3x (Mul 'mul') -> y = t + 1 (Add 'add'); z = |x| (Abs 'abs'). Values ``low``..``high``."""
    from tests.graphs import affine_and

    m = affine_and("Abs", name="g")
    onnx.checker.check_model(m)
    x = np.random.default_rng(7).uniform(low, high, (4, 8)).astype(np.float32)
    return m, {"x": x}


def _diagnose(tmp_path: Path, model, feeds, thresholds):
    from toolkit.config import Config
    from toolkit.diagnose import diagnose, prepare

    tmp_path.mkdir(parents=True, exist_ok=True)
    mp, ip = tmp_path / "m.onnx", tmp_path / "in.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    lines = resolve_thresholds(thresholds) if thresholds else None  # as toolkit.api.diagnose_command does
    diag, extra = diagnose(prepare(str(mp), str(ip)), Config(precision_mode="force_fp16", fusion_level=0),
                           thresholds=lines)
    return diag, extra, mp


def _compare_dumps(tmp_path: Path, model_path: Path, model, feeds, extra, thresholds):
    """compare-dumps of the same device tensors against an onnxruntime golden written here."""
    from toolkit.artifacts import write_dumps
    from toolkit.dumps.readers import SideSpec
    from toolkit.dumps.workflow import compare_dumps

    gold = tmp_path / "golden"
    gold.mkdir()
    ref = fk.reference(model, feeds)
    for node in model.graph.node:
        np.save(gold / f"{node.name}.0.1700000000000000.npy", ref[node.output[0]])
    target = write_dumps({t: a for t, a in extra["device"].items() if t not in feeds}, extra["compiled"].plan,
                         tmp_path / "target")
    d = compare_dumps(SideSpec(str(gold), "golden"), SideSpec(str(target), "target"), model=str(model_path),
                      thresholds=thresholds)
    return d, ref


def _by_tensor(df: pd.DataFrame) -> dict[str, dict]:
    rows = df[df["ComparedCount"].fillna(0).astype(float) > 0]
    return {r["TensorName"]: r for r in rows.to_dict("records") if r["OpType"] != "Input"}


def _assert_agree(a: dict, b: dict, lines) -> None:
    """compare (``a``) and compare-dumps (``b``) rows list the same crossed lines; their Abnormal differs only
    where compare excuses default lines within the expected noise (docs/thresholds.md)."""
    for n in a:
        assert list(a[n]["AbnormalMetrics"]) == list(b[n]["AbnormalMetrics"]), n  # the same lines, listed
        assert b[n]["Abnormal"] == bool(list(b[n]["AbnormalMetrics"])), n  # compare-dumps: no allowance
        if a[n]["Abnormal"] != b[n]["Abnormal"]:
            assert b[n]["Abnormal"] and a[n]["WithinExpectedNoise"] is True, n
            assert all(noise_covers(m, lines) for m in a[n]["AbnormalMetrics"]), (n, a[n]["AbnormalMetrics"])


# =============================================================================== 8. value next to its limit
def _near(line: float) -> list[float]:
    out = [line]
    v = lo = hi = line
    for _ in range(3):
        lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
        out += [lo, hi]
    for j in range(1, 16):
        out += [line * (1 + 10.0 ** -j), line * (1 - 10.0 ** -j), line + 10.0 ** -j, line - 10.0 ** -j]
    return [x for x in out if math.isfinite(x)] + [v * 0.5]


LIMITS = [0.99, 0.9999999749, 0.99999999, 1.0, 0.0059595, 1e-3, 0.0, 5.0, 65504.0, 1 / 3, 2e-9, 0.6667, 123456.789,
          -0.5]


def _evidence(rows, layers=None, run_ms=()):
    from toolkit.signoff.criteria import Evidence

    return Evidence(outputs=["y"], output_rows={"y": rows}, layers=layers, tasks=[], plan=None, run_ms=list(run_ms),
                    inputs=[f"in{i}" for i in range(len(rows))])


NUM = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"


# ------------------------------------------------------------------ end to end (CLI)
def _m1(folder: Path) -> tuple[Path, Path]:
    """The tester's m1: x[4,8] -> y = 3x + 1 (Mul 'mul', Add 'add'), z = exp(x) (Exp 'exp')."""
    from tests.graphs import affine_and

    m = affine_and("Exp")
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(m, folder / "m1.onnx")
    np.savez(folder / "in.npz", x=np.random.default_rng(9).uniform(-1, 6, (4, 8)).astype(np.float32))
    return folder / "m1.onnx", folder / "in.npz"


@pytest.mark.slow
def test_cli_bit_exact_run_passes_the_strictest_lines_and_policy(tmp_path):
    import onnxruntime as ort

    mp, ip = _m1(tmp_path)
    ran = npuscope("run", mp, "--precision-mode", "force_fp32", "--inputs", ip, "--out", tmp_path / "run", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    dev = np.load(tmp_path / "run" / "outputs.npz")
    ref = dict(zip(["y", "z"], ort.InferenceSession(str(mp), providers=["CPUExecutionProvider"]).run(
        ["y", "z"], {"x": np.load(ip)["x"]})))
    assert all(np.array_equal(dev[o], ref[o]) for o in ref)  # precondition: bit-identical outputs
    res = npuscope("compare", mp, "--inputs", ip, "--precision-mode", "force_fp32", "--thresholds",
                   "CosineSimilarity<1,MaxAbsoluteError>0,RelativeEuclideanDistance>0,KullbackLeiblerDivergence>0",
                   "--out", tmp_path / "c", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("verdict: PASS"), res.stdout + res.stderr
    pol = tmp_path / "exact.toml"
    pol.write_text('[outputs."*"]\nCosineSimilarity = 1.0\nMaxAbsoluteError = 0.0\n')
    res = npuscope("signoff", mp, "--policy", pol, "--inputs", ip, "--precision-mode", "force_fp32", "--no-html",
                   "--out", tmp_path / "s", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_cli_fp16_user_lines_fail_and_signoff_messages_read_right(tmp_path):
    import onnxruntime as ort

    mp, ip = _m1(tmp_path)
    x = np.load(ip)["x"]
    ref = dict(zip(["y", "z"], ort.InferenceSession(str(mp), providers=["CPUExecutionProvider"]).run(["y", "z"],
                                                                                                       {"x": x})))
    res = npuscope("compare", mp, "--inputs", ip, "--precision-mode", "force_fp16", "--thresholds",
                   "MaxAbsoluteError>1e-3", "--out", tmp_path / "c", cwd=tmp_path)
    assert res.returncode == 1 and res.stdout.startswith("verdict: FAIL"), res.stdout + res.stderr
    table = pd.read_csv(tmp_path / "c" / "result.csv").set_index("TensorName")
    run = npuscope("run", mp, "--precision-mode", "force_fp16", "--inputs", ip, "--out", tmp_path / "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    dev = np.load(tmp_path / "run" / "outputs.npz")
    for o in ("y", "z"):
        err = float(np.abs(dev[o].astype(np.float64) - ref[o].astype(np.float64)).max())
        assert (err > 1e-3) == bool(table.loc[o, "Abnormal"]), (o, err)
        if err > 1e-3:
            assert "MaxAbsoluteError" in str(table.loc[o, "AbnormalMetrics"])
    # a signoff limit between the measured cosine and the next 9-digit decimal: its message must read right
    cos = float(np.dot(dev["y"].astype(np.float64).ravel(), ref["y"].astype(np.float64).ravel())
                / (np.linalg.norm(dev["y"].astype(np.float64)) * np.linalg.norm(ref["y"].astype(np.float64))))
    limit = float(f"{cos:.10g}")
    pol = tmp_path / "p.toml"
    pol.write_text(f'[outputs.y]\nCosineSimilarity = {limit!r}\n')
    res = npuscope("signoff", mp, "--policy", pol, "--inputs", ip, "--precision-mode", "force_fp16", "--no-html",
                   "--out", tmp_path / "s", cwd=tmp_path)
    line = next(ln for ln in res.stdout.splitlines() if "outputs.y.CosineSimilarity" in ln)
    m = re.search(rf"(PASS|FAIL) .* worst {NUM} .*needs >= {NUM}\)", line)
    assert m and float(m.group(3)) == limit, line
    assert (m.group(1) == "PASS") == (float(m.group(2)) >= float(m.group(3))), line


@pytest.mark.slow
def test_cli_compare_reason_prints_the_line_exactly(tmp_path):
    import onnxruntime as ort

    mp, ip = _m1(tmp_path)
    (y,) = ort.InferenceSession(str(mp), providers=["CPUExecutionProvider"]).run(["y"], {"x": np.load(ip)["x"]})
    y = y.astype(np.float64).ravel()
    run = npuscope("run", mp, "--precision-mode", "force_fp16", "--inputs", ip, "--out", tmp_path / "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    dev = np.load(tmp_path / "run" / "outputs.npz")["y"].astype(np.float64).ravel()
    cos = float(np.dot(dev, y) / (np.linalg.norm(dev) * np.linalg.norm(y)))
    assert 0.99 < cos < 1 - 1e-9
    line = float(Context(prec=10, rounding=ROUND_CEILING).plus(Decimal(repr(cos + 1e-12))))  # 10 digits, above cos
    res = npuscope("compare", mp, "--inputs", ip, "--precision-mode", "force_fp16", "--thresholds",
                   f"CosineSimilarity<{line!r}", "--out", tmp_path / "c", cwd=tmp_path)
    table = pd.read_csv(tmp_path / "c" / "result.csv").set_index("TensorName")
    reasons = [ln for ln in res.stdout.splitlines() if "CosineSimilarity" in ln and "<" in ln]
    assert reasons, res.stdout
    for r in reasons:
        m = re.search(rf"CosineSimilarity {NUM} < {NUM}", r)
        assert m and float(m.group(2)) == line and float(m.group(1)) < line, r
    assert table["Abnormal"].any()
