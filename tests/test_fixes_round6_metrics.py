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


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("scale", [1e-3, 1.0, 3e3])
def test_identical_tensors_give_exact_values_for_every_metric(dtype, shape, scale):
    dt = _dtype(dtype)
    rng = np.random.default_rng(zlib.crc32(repr((str(dtype), shape, scale)).encode()))
    y = _golden(rng, shape, dt, scale)
    x = _misaligned_copy(y)
    assert np.array_equal(x.astype(np.float64), y.astype(np.float64))  # precondition: bit-identical values
    row = compare_tensors(x, y, thresholds=strictest_lines())
    assert row["CosineSimilarity"] == 1.0
    for m in ERRORS:
        assert row[m] == 0.0, (m, row[m])
    y64 = y.astype(np.float64).reshape(-1)
    assert row["GoldenStd"] == row["DeviceStd"] == pytest.approx(float(np.std(y64)), rel=1e-12, abs=0)
    assert row["Abnormal"] is False and row["AbnormalMetrics"] == []
    # the standalone metric functions agree, in float64 and on the mixed-dtype pair (float16 device vs float32)
    for name, spec in METRICS.items():
        if spec.dtype_class != "float" or spec.direction == INFORMATIONAL:
            continue
        want = 1.0 if spec.direction == HIGHER_IS_BETTER else 0.0
        assert spec.fn(_misaligned_copy(y64), y64) == want, name


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_identical_values_in_different_dtypes_are_exact(dtype):
    y = np.random.default_rng(1).uniform(-300, 300, (16, 33)).astype(dtype)
    row = compare_tensors(y.astype(np.float16) if dtype == np.float16 else y, y.astype(np.float64),
                          thresholds=strictest_lines())
    assert row["CosineSimilarity"] == 1.0 and row["MaxAbsoluteError"] == 0.0 and not row["Abnormal"]


def test_identical_tensors_with_nonfinite_positions_are_exact():
    y = np.random.default_rng(2).standard_normal(500).astype(np.float32)
    y[[3, 77, 400]] = [np.nan, np.inf, -np.inf]
    row = compare_tensors(y.copy(), y, thresholds=strictest_lines())
    assert row["NonFiniteMasked"] and row["ComparedCount"] == 497
    assert row["CosineSimilarity"] == 1.0 and all(row[m] == 0.0 for m in ERRORS)
    assert row["Abnormal"] is False


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.bool_])
def test_identical_integer_tensors_match_exactly(dtype):
    y = (np.random.default_rng(3).integers(0, 2, (9, 11)) if dtype == np.bool_
         else np.random.default_rng(3).integers(-100, 100, (9, 11))).astype(dtype)
    row = compare_tensors(y.copy(), y, thresholds={"ExactMatchRate": 1.0})
    assert row["ExactMatchRate"] == 1.0 and row["Abnormal"] is False


@pytest.mark.parametrize("k", [-4, -1, 1, 3, 10])
@pytest.mark.parametrize("shape", [(5,), (999,), (32, 48)], ids=str)
def test_power_of_two_proportional_tensors_have_cosine_exactly_one(k, shape):
    y = np.random.default_rng(k + 20).uniform(0.5, 4.0, shape) * np.where(
        np.random.default_rng(k + 10).random(shape) < 0.5, -1.0, 1.0)
    x = y * 2.0 ** k
    assert np.array_equal(x / 2.0 ** k, y)  # precondition: exactly proportional (no rounding)
    row = compare_tensors(x, y, thresholds={})
    assert row["CosineSimilarity"] == 1.0
    assert row["KullbackLeiblerDivergence"] == 0.0  # invariant to a positive scale: same distribution
    assert compare_tensors(-x, y, thresholds={})["CosineSimilarity"] == -1.0


def test_cosine_of_different_tensors_matches_an_independent_computation():
    rng = np.random.default_rng(4)
    for _ in range(50):
        y = rng.standard_normal(257)
        x = y + rng.standard_normal(257) * 10.0 ** rng.uniform(-9, 0)
        want = float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)))
        got = compare_tensors(x, y, thresholds={})["CosineSimilarity"]
        assert abs(got - want) <= 4e-16 and got <= 1.0


def test_cosine_of_huge_and_tiny_values_stays_finite_and_exact_when_identical():
    for scale in (1e150, 1e-150):  # Σx²·Σy² overflows / underflows: the two-root form
        y = np.random.default_rng(5).standard_normal(64) * scale
        assert compare_tensors(y.copy(), y, thresholds={})["CosineSimilarity"] == 1.0
        x = y.copy()
        x[0] *= 1.5
        want = float(np.dot(x / scale, y / scale) / (np.linalg.norm(x / scale) * np.linalg.norm(y / scale)))
        assert compare_tensors(x, y, thresholds={})["CosineSimilarity"] == pytest.approx(want, abs=1e-15)


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


def test_default_lines_crossed_within_noise_are_excused_but_listed():
    x, y, _, _ = _fp16_rounded()
    row = compare_tensors(x, y, expected_noise=NOISE)
    assert row["WithinExpectedNoise"] is True and row["Abnormal"] is False
    assert row["AbnormalMetrics"] == ["RootMeanSquareError"]


@pytest.mark.parametrize("text", ["RootMeanSquareError>1", "RootMeanSquareError>1.0", "MaxAbsoluteError>1e-3",
                                  "RootMeanSquareError>2,CosineSimilarity<0.5", "MeanAbsoluteError>1e-3"])
def test_user_set_lines_are_applied_as_given_within_noise(text):
    x, y, rmse, maxabs = _fp16_rounded()
    d = np.abs(x.astype(np.float64) - y.astype(np.float64))
    values = {"RootMeanSquareError": rmse, "MaxAbsoluteError": maxabs, "MeanAbsoluteError": float(d.mean())}
    row = compare_tensors(x, y, thresholds=text, expected_noise=NOISE)
    user = parse_thresholds(text)
    crossed = [m for m in user.explicit if m in values and values[m] > user[m]]
    assert crossed  # precondition: each case crosses a line the user set
    assert row["WithinExpectedNoise"] is True and row["Abnormal"] is True
    assert set(crossed) <= set(row["AbnormalMetrics"])


def test_a_user_line_not_crossed_does_not_make_default_lines_strict():
    x, y, _, _ = _fp16_rounded()
    row = compare_tensors(x, y, thresholds="CosineSimilarity<0.999", expected_noise=NOISE)
    assert row["AbnormalMetrics"] == ["RootMeanSquareError"] and row["Abnormal"] is False


def test_plain_mapping_lines_are_user_lines_unless_at_the_default_value():
    x, y, rmse, _ = _fp16_rounded()
    assert compare_tensors(x, y, thresholds={"RootMeanSquareError": 1.0}, expected_noise=NOISE)["Abnormal"] is False
    assert compare_tensors(x, y, thresholds={"RootMeanSquareError": rmse / 2}, expected_noise=NOISE)["Abnormal"] is True
    lines = resolve_thresholds("RootMeanSquareError>1")  # named at the default value: strict, also after a copy
    assert compare_tensors(x, y, thresholds=lines, expected_noise=NOISE)["Abnormal"] is True
    assert compare_tensors(x, y, thresholds=resolve_thresholds(lines), expected_noise=NOISE)["Abnormal"] is True
    assert compare_tensors(x, y, thresholds=pickle.loads(pickle.dumps(lines)), expected_noise=NOISE)["Abnormal"]


def test_overflow_is_never_excused():
    row = compare_tensors(np.array([1.0, np.inf]), np.array([1.0, 2.0]), thresholds={}, expected_noise={"rtol": 9.0})
    assert row["AbnormalMetrics"] == ["OverFlow"] and row["Abnormal"] is True
    assert not noise_covers("OverFlow", DEFAULT_THRESHOLDS)


def test_which_lines_the_allowance_covers():
    assert all(noise_covers(m, DEFAULT_THRESHOLDS) for m in DEFAULT_THRESHOLDS)
    t = parse_thresholds("KullbackLeiblerDivergence>0.005,MaxAbsoluteError>1,CosineSimilarity<0.9")
    assert isinstance(t, Thresholds) and t.explicit == {"KullbackLeiblerDivergence", "MaxAbsoluteError",
                                                        "CosineSimilarity"}
    assert [m for m in t if noise_covers(m, t)] == [m for m in DEFAULT_THRESHOLDS if m not in t.explicit]
    off = parse_thresholds("RootMeanSquareError=off")
    assert "RootMeanSquareError" not in off and not noise_covers("RootMeanSquareError", off)


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


def test_layer_table_applies_user_lines_and_lists_excused_default_lines(tmp_path):
    model, feeds = _scale_model(5000.0, 10000.0)  # y up to 3e4: FP16 spacing 16, RMSE of the rounding > 1
    diag, extra, _ = _diagnose(tmp_path / "default", model, feeds, None)
    ref = fk.reference(model, feeds)
    d = extra["device"]["y"].astype(np.float64) - ref["y"].astype(np.float64)
    assert np.sqrt(np.mean(d * d)) > 1.0  # precondition: the default RMSE line is crossed, by FP16 rounding
    t = diag.table.set_index("TensorName")
    assert t.loc["y", "WithinExpectedNoise"] is True and not t.loc["y", "Abnormal"]
    assert "RootMeanSquareError" in t.loc["y", "AbnormalMetrics"]  # listed although excused
    assert diag.summary["verdict"] == "PASS"
    strict, _, _ = _diagnose(tmp_path / "strict", model, feeds, "RootMeanSquareError>1")
    s = strict.table.set_index("TensorName")
    assert s.loc["y", "Abnormal"] and "RootMeanSquareError" in s.loc["y", "AbnormalMetrics"]
    assert strict.summary["verdict"] == "FAIL"


@pytest.mark.parametrize("lines", ["MaxAbsoluteError>1e-3,CosineSimilarity<0.99999999", "RootMeanSquareError>1",
                                   "MeanRelativeError>1e-4,RelativeEuclideanDistance>1e-5", "MaxAbsoluteError>100"])
def test_compare_and_compare_dumps_agree_on_user_lines(tmp_path, lines):
    model, feeds = _scale_model(1.0, 10000.0)
    diag, extra, mp = _diagnose(tmp_path, model, feeds, lines)
    dumps, ref = _compare_dumps(tmp_path, mp, model, feeds, extra, lines)
    a, b = _by_tensor(diag.table), _by_tensor(dumps.table)
    assert set(a) == set(b) == {"t", "y", "z"}
    user = parse_thresholds(lines)
    _assert_agree(a, b, user)
    strict_a = {n for n in a if set(a[n]["AbnormalMetrics"]) & user.explicit}
    assert strict_a == {n for n in b if set(b[n]["AbnormalMetrics"]) & user.explicit}
    assert all(a[n]["Abnormal"] and b[n]["Abnormal"] for n in strict_a)  # a crossed user line: abnormal in both
    # and the verdict follows from lines checked here, on the device values and the onnxruntime reference
    for name in ("y", "z"):
        x64, y64 = extra["device"][name].astype(np.float64).ravel(), ref[name].astype(np.float64).ravel()
        diff = np.abs(x64 - y64)
        val = {"MaxAbsoluteError": diff.max(), "RootMeanSquareError": np.sqrt(np.mean(diff ** 2)),
               "MeanRelativeError": np.mean(diff / np.abs(y64)),
               "RelativeEuclideanDistance": np.linalg.norm(x64 - y64) / np.linalg.norm(y64),
               "CosineSimilarity": np.dot(x64, y64) / (np.linalg.norm(x64) * np.linalg.norm(y64))}
        crossed = {m for m in user.explicit
                   if (val[m] < user[m] if m == "CosineSimilarity" else val[m] > user[m])}
        assert crossed <= set(a[name]["AbnormalMetrics"]), (name, crossed)
        if crossed:
            assert a[name]["Abnormal"]


def test_compare_and_compare_dumps_differ_only_where_default_lines_are_excused(tmp_path):
    model, feeds = _scale_model(5000.0, 10000.0)
    diag, extra, mp = _diagnose(tmp_path, model, feeds, None)
    dumps, _ = _compare_dumps(tmp_path, mp, model, feeds, extra, None)
    a, b = _by_tensor(diag.table), _by_tensor(dumps.table)
    assert {n for n in a if a[n]["Abnormal"] != b[n]["Abnormal"]}  # this model crosses the default RMSE line
    _assert_agree(a, b, resolve_thresholds(None))


def _assert_agree(a: dict, b: dict, lines) -> None:
    """compare (``a``) and compare-dumps (``b``) rows list the same crossed lines; their Abnormal differs only
    where compare excuses default lines within the expected noise (docs/thresholds.md)."""
    for n in a:
        assert list(a[n]["AbnormalMetrics"]) == list(b[n]["AbnormalMetrics"]), n  # the same lines, listed
        assert b[n]["Abnormal"] == bool(list(b[n]["AbnormalMetrics"])), n  # compare-dumps: no allowance
        if a[n]["Abnormal"] != b[n]["Abnormal"]:
            assert b[n]["Abnormal"] and a[n]["WithinExpectedNoise"] is True, n
            assert all(noise_covers(m, lines) for m in a[n]["AbnormalMetrics"]), (n, a[n]["AbnormalMetrics"])


def test_docs_explain_the_allowance_where_thresholds_are_explained():
    text = (REPO / "docs" / "thresholds.md").read_text(encoding="utf-8")
    assert "--thresholds" in text and "default lines only" in text.lower() and "applied as given" in text
    for m, v in DEFAULT_THRESHOLDS.items():
        assert m in text and (show_line(v) in text or f"{v:.1f}" in text), m
    dumps = (REPO / "docs" / "compare-dumps.md").read_text(encoding="utf-8")
    assert "thresholds.md" in dumps


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


@pytest.mark.parametrize("metric, limit, worst", [
    ("CosineSimilarity", 0.9999999749, 0.9999999748911433), ("CosineSimilarity", 0.9999999749, 0.99999997490001),
    ("CosineSimilarity", 1.0, 0.9999999999999998), ("CosineSimilarity", 0.99, 0.98999999),
    ("MaxAbsoluteError", 0.0059595, 0.005959510803222656), ("MaxAbsoluteError", 0.0059595, 0.0059594999999),
    ("MaxAbsoluteError", 1e-3, 1e-3)])
def test_signoff_output_messages_never_contradict_their_status(metric, limit, worst):
    from toolkit.signoff.criteria import check_outputs

    (r,) = check_outputs({"y": {metric: limit}}, _evidence([{metric: worst}]))
    m = re.search(rf"worst {NUM} over .* \(needs (>=|<=) {NUM}\)", r.message)
    assert m, r.message
    value, op, line = float(m.group(1)), m.group(2), float(m.group(3))
    assert line == limit
    assert r.passed == (value >= line if op == ">=" else value <= line) == (worst >= limit if op == ">=" else
                                                                            worst <= limit), r.message


def test_signoff_layer_and_latency_messages_print_limits_exactly():
    from toolkit.signoff.criteria import check_latency, check_layers

    layers = pd.DataFrame([{"NodeName": "n", "TensorName": "t", "OpType": "Relu", "CosineSimilarity": 0.9999999748,
                            "CompareFailReason": "", "DataType": "float32", "NPUDump": "float16", "Abnormal": False,
                            "OverFlow": False}])
    (r,) = check_layers({"min_cosine": 0.9999999749}, _evidence([], layers))
    m = re.search(rf"lowest CosineSimilarity {NUM} at 't' \(needs >= {NUM}\)", r.message)
    assert m and float(m.group(2)) == 0.9999999749 and float(m.group(1)) < float(m.group(2)) and not r.passed
    (r,) = check_latency({"source": "host", "max_ms": 5.0, "statistic": "max"}, _evidence([], run_ms=[5.0000001]))
    m = re.search(rf"max {NUM} ms per input set \(budget {NUM} ms", r.message)
    assert m and float(m.group(2)) == 5.0 and float(m.group(1)) > 5.0 and not r.passed


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
