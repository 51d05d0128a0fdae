"""compare_tensors (toolkit/compare/metrics/compare.py).

Every expected value is either a closed form derived by hand (stated next to the assertion) or the
output of the pure-Python reference implementations below, which loop element by element with
math.fsum and share no code with the vectorised implementation."""

from __future__ import annotations

import math
import pickle
import zlib

import ml_dtypes
import numpy as np
import pytest

from toolkit.compare.metrics import (
    DEFAULT_THRESHOLDS,
    METRICS,
    ROW_KEYS,
    compare_tensors,
    noise_covers,
    parse_thresholds,
    resolve_thresholds,
    tolerance_that_would_pass,
)
from toolkit.compare.metrics.spec import HIGHER_IS_BETTER, INFORMATIONAL
from toolkit.core.errors import UsageError


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_compare_tensors_text_and_subbyte_kinds():
    words = np.array(["a", "bb", "ç"], dtype=object)
    assert compare_tensors(words, np.array(["a", "bb", "ç"]))["ExactMatchRate"] == 1.0  # object vs <U
    assert compare_tensors(np.array([b"a", b"bb"]), np.array(["a", "bb"], dtype=object))["ExactMatchRate"] == 1.0
    row = compare_tensors(words, np.array(["a", "b", "ç"], dtype=object))
    assert row["ExactMatchRate"] == 2 / 3 and row["Abnormal"]
    mixed = compare_tensors(np.array(["1", "2"], dtype=object), np.array([1, 2]))
    assert mixed["CompareFailReason"].startswith("dtype class mismatch") and "text" in mixed["CompareFailReason"]
    odd = compare_tensors(np.array([{}, 1], dtype=object), np.array([{}, 1], dtype=object))
    assert odd["CompareFailReason"].startswith("unsupported dtype")
    i4 = np.array([-8, 7, 0, -1], ml_dtypes.int4)
    assert compare_tensors(i4, i4.copy())["ExactMatchRate"] == 1.0
    assert compare_tensors(i4, np.array([-8, 7, 0, -1], np.int8))["ExactMatchRate"] == 1.0
    assert compare_tensors(i4, np.array([-8, 7, 0, 1], ml_dtypes.int4))["ExactMatchRate"] == 0.75
    u2 = np.array([0, 1, 2, 3], ml_dtypes.uint2)
    assert compare_tensors(u2, np.array([0, 1, 2, 2], ml_dtypes.uint2))["ExactMatchRate"] == 0.75
    bf = np.array([1.0, 2.0, 3.0], ml_dtypes.bfloat16)
    row = compare_tensors(bf, np.array([1.0, 2.0, 3.0], np.float32))
    assert row["CosineSimilarity"] == 1.0 and row["MaxAbsoluteError"] == 0.0


ERRORS = [m for m, s in METRICS.items() if s.dtype_class == "float" and s.direction != INFORMATIONAL
          and m != "CosineSimilarity"]


def strictest_lines() -> dict[str, float]:
    """Lines that only an exact match passes: cosine below 1 or any error above 0 is abnormal."""
    return {"CosineSimilarity": 1.0, **{m: 0.0 for m in ERRORS}}


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
        # correctly rounded sums (math.fsum), independent of any summation order; our sums are numpy's
        # pairwise sums, whose relative error is at most about log2(n)·u each (Higham, Accuracy and Stability
        # of Numerical Algorithms, §4.2): 3 sums, n = 257, u = 2**-53
        want = math.fsum(x * y) / math.sqrt(math.fsum(x * x) * math.fsum(y * y))
        got = compare_tensors(x, y, thresholds={})["CosineSimilarity"]
        assert abs(got - want) <= 3 * math.log2(257) * 2.0 ** -53 and got <= 1.0


def test_cosine_of_huge_and_tiny_values_stays_finite_and_exact_when_identical():
    for scale in (1e150, 1e-150):  # Σx²·Σy² overflows / underflows: the two-root form
        y = np.random.default_rng(5).standard_normal(64) * scale
        assert compare_tensors(y.copy(), y, thresholds={})["CosineSimilarity"] == 1.0
        x = y.copy()
        x[0] *= 1.5
        want = float(np.dot(x / scale, y / scale) / (np.linalg.norm(x / scale) * np.linalg.norm(y / scale)))
        assert compare_tensors(x, y, thresholds={})["CosineSimilarity"] == pytest.approx(want, abs=1e-15)


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


EPS = 1e-6  # the documented default |y| floor of the relative errors
KL_FLOOR = 2.0 ** -23  # float32 machine epsilon, written independently of the implementation


# ----------------------------------------------------------------------------- pure-Python references
def _pairs(x, y):
    return [(float(a), float(b)) for a, b in zip(np.ravel(x), np.ravel(y))]


def ref_cosine(x, y):
    p = _pairs(x, y)
    nx, ny = math.sqrt(math.fsum(a * a for a, _ in p)), math.sqrt(math.fsum(b * b for _, b in p))
    return math.fsum(a * b for a, b in p) / (nx * ny)


def ref_abs(x, y):
    d = [abs(a - b) for a, b in _pairs(x, y)]
    return {"MaxAbsoluteError": max(d), "MeanAbsoluteError": math.fsum(d) / len(d),
            "RootMeanSquareError": math.sqrt(math.fsum(t * t for t in d) / len(d))}


def ref_red(x, y):
    p = _pairs(x, y)
    return math.sqrt(math.fsum((a - b) ** 2 for a, b in p) / math.fsum(b * b for _, b in p))


def ref_relative(x, y, eps=EPS):
    errs = [abs(a / b - 1.0) for a, b in _pairs(x, y) if abs(b) > eps]
    if not errs:
        return {"MaxRelativeError": 0.0, "MeanRelativeError": 0.0, "AccumulatedRelativeError": 0.0}
    return {"MaxRelativeError": max(errs), "MeanRelativeError": math.fsum(errs) / len(errs),
            "AccumulatedRelativeError": math.fsum(errs)}


def ref_kl(x, y):
    def distribution(values):
        lo, hi = min(values), max(values)
        scaled = [(v - lo) / (hi - lo) if hi > lo else 1.0 for v in values]
        floored = [max(v, KL_FLOOR) for v in scaled]
        total = math.fsum(floored)
        return [v / total for v in floored]

    p = distribution([float(v) for v in np.ravel(y)])
    q = distribution([float(v) for v in np.ravel(x)])
    return math.fsum(qi * math.log(qi / pi) for pi, qi in zip(p, q))  # device first, as msaccucmp sums it


def ref_pstd(values):
    values = [float(v) for v in np.ravel(values)]
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def reference_metrics(x, y, eps=EPS):
    out = {"CosineSimilarity": ref_cosine(x, y), "RelativeEuclideanDistance": ref_red(x, y),
           "KullbackLeiblerDivergence": ref_kl(x, y), "GoldenStd": ref_pstd(y), "DeviceStd": ref_pstd(x)}
    out.update(ref_abs(x, y))
    out.update(ref_relative(x, y, eps))
    return out


@pytest.fixture
def noisy_pair():
    rng = np.random.default_rng(7)
    y = rng.standard_normal(257).astype(np.float32)
    y[:3] = [0.0, 3e-7, -5e-7]  # below the relative-error floor: skipped by the relative metrics
    x = (y * (1 + 0.03 * rng.standard_normal(257)) + 0.01 * rng.standard_normal(257)).astype(np.float32)
    return x, y


# ----------------------------------------------------------------------------- each metric vs reference
FLOAT_METRICS = [name for name, spec in METRICS.items() if spec.dtype_class == "float"]


@pytest.mark.parametrize("name", FLOAT_METRICS)
def test_metric_matches_pure_python_reference(noisy_pair, name):
    x, y = noisy_pair
    expected = reference_metrics(x, y)[name]
    assert METRICS[name].fn(x, y) == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert compare_tensors(x, y)[name] == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_scale_by_two_closed_forms():
    y = np.array([1.0, -2.0, 0.5, 4.0, 0.0])
    row = compare_tensors(2 * y, y)
    # x = 2y: same direction; ‖x − y‖ = ‖y‖; every qualifying |x/y − 1| = 1 (four non-zero golden values)
    assert row["CosineSimilarity"] == pytest.approx(1.0)
    assert row["RelativeEuclideanDistance"] == pytest.approx(1.0)
    assert row["MaxRelativeError"] == pytest.approx(1.0)
    assert row["MeanRelativeError"] == pytest.approx(1.0)
    assert row["AccumulatedRelativeError"] == pytest.approx(4.0)
    assert row["KullbackLeiblerDivergence"] == pytest.approx(0.0, abs=1e-12)  # min-max removes the scale
    assert row["DeviceStd"] == pytest.approx(2 * row["GoldenStd"])


def test_kl_ignores_affine_change_but_not_shape():
    y = np.linspace(-3.0, 5.0, 11) ** 3
    assert compare_tensors(3.0 * y + 2.0, y)["KullbackLeiblerDivergence"] == pytest.approx(0.0, abs=1e-12)
    assert compare_tensors(y[::-1].copy(), y)["KullbackLeiblerDivergence"] > 0.005


def test_kl_two_element_closed_form():
    # p = [e, 1]/(1+e) (golden), q = [1, e]/(1+e) → KL(q‖p) = KL(p‖q) = (1 − e)/(1 + e)·ln(1/e)
    e = KL_FLOOR
    expected = (1 - e) / (1 + e) * math.log(1 / e)
    assert compare_tensors(np.array([1.0, 0.0]), np.array([0.0, 1.0]))["KullbackLeiblerDivergence"] == \
        pytest.approx(expected, rel=1e-12)


def test_kl_sums_device_over_golden_as_the_compare_tool_does():
    """msaccucmp sums device·ln(device/golden): an asymmetric pair tells the direction apart."""
    e = KL_FLOOR
    q = [e / (2 + e), 1 / (2 + e), 1 / (2 + e)]  # device x = [0, 1, 1]
    p = [e / (1 + 2 * e), e / (1 + 2 * e), 1 / (1 + 2 * e)]  # golden y = [0, 0, 1]
    device_first = math.fsum(qi * math.log(qi / pi) for pi, qi in zip(p, q))
    golden_first = math.fsum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
    got = compare_tensors(np.array([0.0, 1.0, 1.0]), np.array([0.0, 0.0, 1.0]))["KullbackLeiblerDivergence"]
    assert got == pytest.approx(device_first, rel=1e-12) and abs(device_first - golden_first) > 1.0


def test_orthogonal_and_opposite_vectors():
    row = compare_tensors(np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    assert row["CosineSimilarity"] == 0.0
    assert row["RelativeEuclideanDistance"] == pytest.approx(math.sqrt(2.0))
    assert compare_tensors(np.array([1.0, -2.0]), np.array([-1.0, 2.0]))["CosineSimilarity"] == pytest.approx(-1.0)


def test_absolute_errors_closed_form():
    row = compare_tensors(np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0]))
    # d = [0, 1, 2]
    assert row["MaxAbsoluteError"] == 2.0
    assert row["MeanAbsoluteError"] == pytest.approx(1.0)
    assert row["RootMeanSquareError"] == pytest.approx(math.sqrt(5.0 / 3.0))


def test_standard_deviations_closed_form():
    row = compare_tensors(np.array([1.0, 2.0, 3.0, 4.0]), np.full(4, 7.0))
    assert row["DeviceStd"] == pytest.approx(math.sqrt(1.25))  # deviations ±0.5, ±1.5
    assert row["GoldenStd"] == 0.0


def test_eight_percent_channel_scale_error_passes_cosine_but_not_red():
    rng = np.random.default_rng(3)
    c0 = rng.standard_normal(1000)
    y = np.stack([c0, -c0[::-1]])  # two channels of exactly equal energy
    x = y.copy()
    x[1] *= 1.08
    row = compare_tensors(x, y)
    # energy share s = 1/2, k = 1.08: cos = (1 − s + k·s)/sqrt(1 − s + k²·s), RED = (k − 1)·sqrt(s)
    assert row["CosineSimilarity"] == pytest.approx(1.04 / math.sqrt(0.5 + 0.5 * 1.08 ** 2), rel=1e-12)
    assert row["CosineSimilarity"] > 0.99
    assert row["RelativeEuclideanDistance"] == pytest.approx(0.08 * math.sqrt(0.5), rel=1e-12)
    assert row["AbnormalMetrics"] == ["RelativeEuclideanDistance"]
    assert row["Abnormal"] is True


def test_global_scale_error_keeps_cosine_at_one():
    y = np.random.default_rng(4).standard_normal(500)
    row = compare_tensors(1.08 * y, y)
    assert row["CosineSimilarity"] == pytest.approx(1.0, abs=1e-12)
    assert row["RelativeEuclideanDistance"] == pytest.approx(0.08)
    assert "CosineSimilarity" not in row["AbnormalMetrics"]
    assert "RelativeEuclideanDistance" in row["AbnormalMetrics"]


def test_rel_eps_decides_which_elements_count():
    x, y = np.array([2e-7, 1.1]), np.array([1e-7, 1.0])
    assert compare_tensors(x, y)["MaxRelativeError"] == pytest.approx(0.1)  # 1e-7 <= 1e-6: skipped
    assert compare_tensors(x, y, rel_eps=1e-8)["MaxRelativeError"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- zeros
def test_both_all_zero_is_a_perfect_match():
    row = compare_tensors(np.zeros(5), np.zeros(5))
    assert row["CosineSimilarity"] == 1.0
    assert row["RelativeEuclideanDistance"] == 0.0
    assert row["KullbackLeiblerDivergence"] == 0.0
    assert row["MaxRelativeError"] == row["MeanRelativeError"] == row["AccumulatedRelativeError"] == 0.0
    assert row["Abnormal"] is False and row["CompareFailReason"] == ""


def test_zero_golden_with_nonzero_device():
    row = compare_tensors(np.array([0.0, 1.0]), np.zeros(2))
    assert row["CosineSimilarity"] == 0.0
    assert row["RelativeEuclideanDistance"] == math.inf
    assert row["MeanRelativeError"] == 0.0  # no golden element qualifies
    assert {"CosineSimilarity", "RelativeEuclideanDistance"} <= set(row["AbnormalMetrics"])
    assert compare_tensors(np.zeros(2), np.array([0.0, 1.0]))["CosineSimilarity"] == 0.0


# ----------------------------------------------------------------------------- NaN / Inf / overflow
def test_nonfinite_positions_are_counted_and_excluded():
    x = np.array([1.0, np.nan, np.inf, 4.0, 5.0, -np.inf])
    y = np.array([1.0, 2.0, 3.0, np.inf, 5.5, -np.inf])
    row = compare_tensors(x, y)
    assert (row["DeviceNaN"], row["DeviceInf"], row["GoldenNaN"], row["GoldenInf"]) == (1, 2, 0, 2)
    assert row["NonFiniteMasked"] is True
    assert row["OverFlow"] is True  # device NaN/inf at positions 1 and 2 where golden is finite
    assert row["ComparedCount"] == 2  # positions 0 and 4
    for name, value in reference_metrics([1.0, 5.0], [1.0, 5.5]).items():
        assert row[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name
    assert "OverFlow" in row["AbnormalMetrics"] and row["Abnormal"] is True


def test_same_inf_on_both_sides_is_not_overflow():
    row = compare_tensors(np.array([1.0, np.inf, 2.0]), np.array([1.0, np.inf, 2.0]), expected_noise={})
    assert row["OverFlow"] is False and row["NonFiniteMasked"] is True
    assert row["WithinExpectedNoise"] is True and row["Abnormal"] is False


def test_opposite_infinities_are_not_within_noise():
    row = compare_tensors(np.array([1.0, np.inf]), np.array([1.0, -np.inf]), expected_noise={"rtol": 1.0})
    assert row["OverFlow"] is False
    assert row["WithinExpectedNoise"] is False


def test_no_finite_pair_is_a_fail_reason():
    row = compare_tensors(np.full(3, np.nan), np.array([1.0, 2.0, 3.0]))
    assert row["CompareFailReason"] == "no position where both tensors are finite"
    assert math.isnan(row["CosineSimilarity"])
    assert row["OverFlow"] is True and row["Abnormal"] is True


def test_golden_fp16_overflow_ratio():
    y = np.array([1.0, 70000.0, -70000.0, 65504.0, np.inf, np.nan, 3.0, 4.0])
    row = compare_tensors(y.copy(), y)
    assert row["GoldenFP16OverflowRatio"] == pytest.approx(3 / 8)  # 70000, -70000, inf; 65504 is finite FP16


# ----------------------------------------------------------------------------- shapes, dtypes, empties
def test_shape_mismatch_returns_reason_and_no_metrics():
    row = compare_tensors(np.ones((2, 3)), np.ones(6))
    assert row["CompareFailReason"] == "shape mismatch: device (2, 3) vs golden (6,)"
    assert all(math.isnan(row[name]) for name in METRICS)
    assert row["Abnormal"] is False
    assert set(row) == set(ROW_KEYS)


def test_integer_tensors_use_exact_match_rate():
    x, y = np.array([1, 2, 3, 4]), np.array([1, 2, 0, 4])
    row = compare_tensors(x, y)
    assert row["ExactMatchRate"] == sum(a == b for a, b in zip(x.tolist(), y.tolist())) / 4
    assert row["AbnormalMetrics"] == ["ExactMatchRate"] and row["Abnormal"] is True
    assert math.isnan(row["CosineSimilarity"])
    assert compare_tensors(np.array([True, False]), np.array([True, False]))["Abnormal"] is False


def test_integer_compare_is_exact_beyond_float64_precision():
    big = 2 ** 53
    row = compare_tensors(np.array([big + 1], dtype=np.int64), np.array([big], dtype=np.int64))
    assert row["ExactMatchRate"] == 0.0


def test_float_vs_int_is_a_reason():
    row = compare_tensors(np.ones(3, np.float16), np.ones(3, np.int64))
    assert "dtype class mismatch" in row["CompareFailReason"]
    assert "float16" in row["CompareFailReason"] and "int64" in row["CompareFailReason"]


# Empty tensors (e.g. NMS boxes (0, 4) on both sides): an exact match by convention, never a fail reason.
_ERRORS = ("MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance", "KullbackLeiblerDivergence",
           "MeanAbsoluteError", "RootMeanSquareError", "MaxRelativeError", "MeanRelativeError")


@pytest.mark.parametrize("shape", [(0,), (0, 4), (2, 0, 3)])
@pytest.mark.parametrize("dx, dy", [(np.float32, np.float32), (np.float16, np.float64), (ml_dtypes.bfloat16, np.float32)])
def test_two_empty_float_tensors_are_an_exact_match(shape, dx, dy):
    row = compare_tensors(np.zeros(shape, dx), np.zeros(shape, dy), expected_noise={"atol": 0.0})
    assert row["CompareFailReason"] == "" and row["ComparedCount"] == 0
    assert row["CosineSimilarity"] == 1.0 and all(row[m] == 0.0 for m in _ERRORS)
    assert math.isnan(row["ExactMatchRate"]) and math.isnan(row["GoldenStd"]) and math.isnan(row["DeviceStd"])
    assert row["Abnormal"] is False and row["AbnormalMetrics"] == [] and row["WithinExpectedNoise"] is True
    assert not row["OverFlow"] and row["GoldenFP16OverflowRatio"] == 0.0
    strict = compare_tensors(np.zeros(shape, dx), np.zeros(shape, dy),  # the strictest possible lines
                             thresholds={"CosineSimilarity": 1.0, "MaxAbsoluteError": 0.0, "ExactMatchRate": 1.0})
    assert strict["Abnormal"] is False
    assert tolerance_that_would_pass(np.zeros(shape, dx), np.zeros(shape, dy))["atol"] == 0.0


@pytest.mark.parametrize("shape", [(0,), (0, 4), (2, 0, 3)])
@pytest.mark.parametrize("dx, dy", [(np.int64, np.int64), (np.int32, np.int64), (np.bool_, np.uint8)])
def test_two_empty_integer_tensors_are_an_exact_match(shape, dx, dy):
    row = compare_tensors(np.zeros(shape, dx), np.zeros(shape, dy))
    assert row["CompareFailReason"] == "" and row["ComparedCount"] == 0
    assert row["ExactMatchRate"] == 1.0 and row["Abnormal"] is False
    assert all(math.isnan(row[m]) for m in ("CosineSimilarity",) + _ERRORS)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("empty, full", [((0, 4), (1, 4)), ((0,), (3,)), ((2, 0, 3), (2, 1, 3)), ((0, 4), (4, 0))])
def test_empty_vs_other_shape_is_a_shape_mismatch(dtype, empty, full):
    for x, y in ((np.zeros(empty, dtype), np.ones(full, dtype)), (np.ones(full, dtype), np.zeros(empty, dtype))):
        row = compare_tensors(x, y)
        assert row["CompareFailReason"].startswith("shape mismatch"), row["CompareFailReason"]
        assert all(math.isnan(row[m]) for m in METRICS)


def test_empty_tensors_of_other_dtype_classes_are_reasons():
    assert "dtype class mismatch" in compare_tensors(np.zeros((0, 4), np.float32),
                                                     np.zeros((0, 4), np.int64))["CompareFailReason"]
    assert "unsupported dtype" in compare_tensors(np.ones(0, complex), np.ones(0, complex))["CompareFailReason"]


def test_unsupported_tensors_are_reasons():
    assert "unsupported dtype" in compare_tensors(np.ones(2, complex), np.ones(2, complex))["CompareFailReason"]


def test_low_precision_and_strided_inputs_are_accepted_and_not_modified():
    y = np.arange(12, dtype=np.float32).reshape(3, 4).T  # non-contiguous view
    x = y.astype(ml_dtypes.bfloat16)
    before = y.copy()
    row = compare_tensors(x, y)
    assert row["CompareFailReason"] == ""
    assert row["MaxAbsoluteError"] == pytest.approx(ref_abs(x.astype(np.float64), y)["MaxAbsoluteError"])
    np.testing.assert_array_equal(y, before)


def test_threshold_overrides_change_the_verdict():
    x, y = np.array([1.0, 2.0]), np.array([1.0, 2.02])
    assert compare_tensors(x, y)["Abnormal"] is False
    row = compare_tensors(x, y, thresholds="MaxAbsoluteError>1e-2")
    assert row["AbnormalMetrics"] == ["MaxAbsoluteError"]
    with pytest.raises(UsageError, match="did you mean 'MaxAbsoluteError'"):
        compare_tensors(x, y, thresholds={"MaxAbsError": 1.0})


# ----------------------------------------------------------------------------- expected noise
def test_fp16_rounding_is_not_abnormal_with_expected_noise():
    y = np.random.default_rng(5).uniform(1e4, 3e4, 4096).astype(np.float32)
    x = y.astype(np.float16).astype(np.float32)  # FP16 spacing is 8 or 16 here: RMSE well above 1.0
    plain = compare_tensors(x, y)
    assert "RootMeanSquareError" in plain["AbnormalMetrics"] and plain["Abnormal"] is True
    row = compare_tensors(x, y, expected_noise={"rtol": 1e-3, "atol": 1e-3})  # FP16 unit roundoff 2**-11
    assert row["WithinExpectedNoise"] is True
    assert row["Abnormal"] is False
    assert "RootMeanSquareError" in row["AbnormalMetrics"]  # still listed, verdict suppressed


def test_real_error_stays_abnormal_with_expected_noise():
    y = np.random.default_rng(6).uniform(1e4, 3e4, 4096)
    x = y.copy()
    x[::2] *= 1.05
    row = compare_tensors(x, y, expected_noise={"rtol": 1e-3, "atol": 1e-3})
    assert row["WithinExpectedNoise"] is False and row["Abnormal"] is True


def test_expected_noise_does_not_excuse_overflow():
    row = compare_tensors(np.array([1.0, np.inf]), np.array([1.0, 2.0]), expected_noise={"rtol": 10.0})
    assert row["WithinExpectedNoise"] is False and row["Abnormal"] is True


@pytest.mark.parametrize("noise", [{"rtl": 1e-3}, {"rtol": -1.0}, {"atol": "loose"}])
def test_bad_expected_noise_is_a_usage_error(noise):
    with pytest.raises(UsageError):
        compare_tensors(np.ones(2), np.ones(2), expected_noise=noise)


# ----------------------------------------------------------------------------- tolerance that would pass
def test_tolerance_that_would_pass_is_the_tightest_passing_line(noisy_pair):
    x, y = noisy_pair
    tol = tolerance_that_would_pass(x, y)
    assert tol["atol"] == pytest.approx(ref_abs(x, y)["MaxAbsoluteError"], rel=1e-12)
    for name, spec in METRICS.items():
        if name not in tol:
            continue
        line = tol[name]
        assert name not in compare_tensors(x, y, thresholds={name: line})["AbnormalMetrics"]
        stricter = np.nextafter(line, math.inf if spec.direction == "higher_is_better" else -math.inf)
        assert name in compare_tensors(x, y, thresholds={name: float(stricter)})["AbnormalMetrics"]
    d = np.abs(x.astype(np.float64) - y.astype(np.float64))
    assert np.all(d <= tol["atol"]) and not np.all(d <= 0.9 * tol["atol"])  # element-wise, as Polygraphy checks
    assert compare_tensors(x, y, expected_noise={"atol": tol["atol"]})["WithinExpectedNoise"] is True  # sufficient
    assert tol["rtol"] == math.inf  # y[0] == 0 while x[0] != 0: no relative tolerance covers it


def test_tolerance_rtol_passes_when_golden_has_no_zero(noisy_pair):
    x, y = noisy_pair
    x, y = x[3:], y[3:]
    rtol = tolerance_that_would_pass(x, y)["rtol"]
    assert rtol == pytest.approx(max(abs(a - b) / abs(b) for a, b in _pairs(x, y)), rel=1e-12)
    d, ay = np.abs(x.astype(np.float64) - y.astype(np.float64)), np.abs(y.astype(np.float64))
    assert np.all(d <= rtol * ay) and not np.all(d <= 0.99 * rtol * ay)
    assert compare_tensors(x, y, expected_noise={"rtol": rtol})["WithinExpectedNoise"] is True


def test_tolerance_rtol_is_inf_when_a_zero_golden_differs():
    assert tolerance_that_would_pass(np.array([1.0, 0.5]), np.array([1.0, 0.0]))["rtol"] == math.inf
    assert tolerance_that_would_pass(np.ones(2), np.ones(3)) == {}
