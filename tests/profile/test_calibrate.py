"""Calibration against a synthetic device: times generated from a hidden device profile (tests/profile/synthetic.py)
through our own cost model plus 3% log-normal noise, written as a device profile, attributed and fitted."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toolkit.config.schema import Config
from toolkit.core.errors import InputError
from toolkit.engine import compile_model
from toolkit.profile.attribution import attribute, read_device_profile
from toolkit.profile.calibrate import (PARAMS, calibrate, device_json, kernel_times, predict_units, split,
                                       unit_features)
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import load_device
from toolkit.ir.load import load_model
from toolkit.profile.whatif import gear_changes, latency_us, placement_change, precision_change, whatif_table
from toolkit.source import resolve_model

from tests.profile import synthetic as S


@pytest.fixture(scope="module")
def setup():
    compiled, config, model = S.compiled_synthetic()
    base = load_device("atlas300i_pro")
    return compiled, config, model, base, kernel_costs(compiled.plan, compiled.model, base)


@pytest.fixture(scope="module")
def fitted(setup, tmp_path_factory):
    compiled, _config, _model, base, costs = setup
    path = tmp_path_factory.mktemp("cal") / "op_summary_0_1.csv"
    S.write_op_summary(path, S.device_rows(S.hidden_costs(compiled)))
    rows, _notes = read_device_profile(path)
    attr = attribute(rows, costs)
    return attr, calibrate(attr, costs, base, holdout=0.25, seed=0)


def test_every_figure_is_recovered_within_10_percent(fitted):
    _attr, cal = fitted
    p = cal.params.set_index("Field")
    for name, hidden in S.HIDDEN.items():
        assert p.at[name, "Status"] == "calibrated", (name, p.loc[name].to_dict())
        assert abs(p.at[name, "Calibrated"] / hidden - 1) < 0.10, (name, p.at[name, "Calibrated"], hidden)
        assert getattr(cal.device, name) == pytest.approx(p.at[name, "Calibrated"], rel=1e-5)


def test_held_out_error_drops_below_10_percent(fitted):
    _attr, cal = fitted
    held = cal.errors.set_index("Set").loc["held-out"]
    assert held["Units"] >= 15
    assert held["MdAPE before(%)"] > 20.0  # the base profile really is another device
    assert held["MdAPE after(%)"] < 10.0 and held["Total error after(%)"] < 10.0
    assert cal.heldout_mdape == held["MdAPE after(%)"]
    # the held-out units are those the seeded split holds out, and none was fitted
    units = cal.units
    _train, test = split(len(units), 0.25, 0)
    assert sorted(units.index[units["Set"] == "held-out"]) == sorted(test.tolist())
    # errors recomputed from the per-unit table
    h = units[units["Set"] == "held-out"]
    mdape = np.median(np.abs(h["AfterUs"] - h["DeviceUs"]) / h["DeviceUs"]) * 100
    assert held["MdAPE after(%)"] == pytest.approx(mdape)


def test_the_vectorised_model_is_the_cost_model(setup):
    compiled, _config, _model, _base, costs = setup
    hidden = S.hidden_device()
    ref = kernel_costs(compiled.plan, compiled.model, hidden)
    rows = pd.DataFrame({"Op Name": ref["Kernel"], "Task Duration(us)": 1.0,
                         "Task Type": ["AI_CPU" if s == "host" else "AI_CORE" for s in ref["Stream"]]})
    attr = attribute(rows, costs)
    feats, _notes = unit_features(attr, costs)
    pred = predict_units(feats, {p: getattr(hidden, p) for p in PARAMS})
    by_kernel = dict(zip(ref["Kernel"], ref["DurationUs"]))
    assert len(feats.kernels) > 60
    np.testing.assert_allclose(pred, [by_kernel[k] for k in feats.kernels], rtol=1e-12)
    assert kernel_times(feats, {p: getattr(hidden, p) for p in PARAMS}).shape == feats.unit.shape


def test_the_calibrated_profile_is_a_device_file_profile_and_policies_accept(fitted, tmp_path):
    from toolkit.signoff.policy import load_policy

    _attr, cal = fitted
    path = tmp_path / "calibrated.json"
    path.write_text(device_json(cal.device))
    dev = load_device(str(path))
    for name in PARAMS:
        assert getattr(dev, name) == getattr(cal.device, name)
    assert dev.source["cube_fp16_tflops"].startswith("calibrated: least-squares fit")
    (tmp_path / "policy.toml").write_text('[latency]\ndevice = "calibrated.json"\nmax_ms = 5.0\n')
    policy = load_policy(tmp_path / "policy.toml")
    assert Path(policy.section("latency")["device"]) == path.resolve()


def test_a_figure_no_kernel_depends_on_is_not_fitted(setup):
    compiled, _config, _model, base, costs = setup
    rows = pd.DataFrame(S.device_rows(S.hidden_costs(compiled)))
    npu = rows[rows["Task Type"] != "AI_CPU"]
    cal = calibrate(attribute(npu, costs), costs, base, seed=3)
    p = cal.params.set_index("Field")
    for name in ("host_gflops", "host_memory_bandwidth_gbps", "host_op_overhead_us"):
        assert p.at[name, "Status"] == "not fitted" and p.at[name, "Kernels"] == 0
        assert getattr(cal.device, name) == getattr(base, name)


def test_a_figure_no_unit_is_bound_by_keeps_its_base_value(setup):
    compiled, _config, _model, base, costs = setup
    fast_vector = dataclasses.replace(S.hidden_device(), vector_fp16_tflops=50.0, vector_fp32_tflops=50.0)
    truth = kernel_costs(compiled.plan, compiled.model, fast_vector)
    cal = calibrate(attribute(pd.DataFrame(S.device_rows(truth)), costs), costs, base, seed=0)
    p = cal.params.set_index("Field")
    assert p.at["vector_fp16_tflops", "Bound"] == 0
    assert p.at["vector_fp16_tflops", "Status"].startswith("not identified")
    assert p.at["memory_bandwidth_gbps", "Status"] == "calibrated"
    assert abs(p.at["memory_bandwidth_gbps", "Calibrated"] / 150.0 - 1) < 0.10


def test_too_few_rows_and_a_bad_holdout_are_refused(setup):
    _compiled, _config, _model, base, costs = setup
    rows = pd.DataFrame({"Op Name": costs["Kernel"].head(3), "Task Duration(us)": 5.0})
    with pytest.raises(InputError, match="only 3 matched device unit"):
        calibrate(attribute(rows, costs), costs, base)
    rows = pd.DataFrame({"Op Name": costs["Kernel"].head(8), "Task Duration(us)": 5.0})
    with pytest.raises(ValueError, match="holdout 1.5"):
        calibrate(attribute(rows, costs), costs, base, holdout=1.5)


def test_whatif_effects_are_differences_of_scheduled_latencies(setup, fitted):
    _compiled, _config, model, base, _costs = setup
    _attr, cal = fitted
    config = Config(precision_mode="force_fp16")  # all on the NPU: the host's CPU MatMuls would hide the change
    compiled = compile_model(model, config)
    ch = precision_change(compiled, config, ["OpType::MatMul"], model)
    assert "FP32 NPU kernels" in ch.detail
    fp32 = [k for k in ch.after.plan.kernels if k.op_type == "MatMul" and k.placement == "NPU"]
    assert fp32 and all(k.precision == "fp32" for k in fp32)
    table = whatif_table([ch], cal.device, base, fixed_us=100.0, confidence=cal.confidence())
    row = table.iloc[0]
    before, after = latency_us(compiled, cal.device, 100.0), latency_us(ch.after, cal.device, 100.0)
    assert row["BaselineMs"] == pytest.approx(before / 1e3) and row["PredictedMs"] == pytest.approx(after / 1e3)
    assert row["EffectMs"] == pytest.approx((after - before) / 1e3) and row["EffectMs"] > 0  # FP32 cube is slower
    assert row["BaseEffectMs"] == pytest.approx((latency_us(ch.after, base) - latency_us(compiled, base)) / 1e3)
    assert "held-out error" in row["Confidence"]


def test_gear_whatif_compiles_one_plan_per_gear(fitted):
    _attr, cal = fitted
    model = load_model(resolve_model("transformer_seq").path)  # x: [1, seq, 64]
    config = Config(input_shape="x:1,-1,64", dynamic_dims="16;32")
    current = compile_model(model, Config(), input_shapes={"x": (1, 32, 64)})
    changes = gear_changes(current, model, config, {"16": {"x": (1, 16, 64)}, "32": {"x": (1, 32, 64)}})
    assert [c.name for c in changes] == ["gear 16", "gear 32"]
    assert "0.5x the current plan's input elements" in changes[0].detail
    table = whatif_table(changes, cal.device, cal.base).set_index("Change")
    alone = compile_model(model, Config(), input_shapes={"x": (1, 16, 64)})
    assert table.at["gear 16", "PredictedMs"] == pytest.approx(latency_us(alone, cal.device) / 1e3)
    assert table.at["gear 32", "EffectMs"] == pytest.approx(0.0, abs=1e-12)
    assert table.at["gear 16", "EffectMs"] < 0


def test_placement_whatif_is_the_verified_advice_on_the_given_profile():
    model = load_model(resolve_model("resnet_small").path)
    config = Config()
    compiled = compile_model(model, config)
    slow_launch = dataclasses.replace(load_device("atlas300i_pro"), launch_overhead_us=7.5)
    move = placement_change(compiled, config, slow_launch, 0.0, model)
    assert move is not None and move.advice.op_placement == {"classifier": "CPU"}
    assert [k.placement for k in move.after.plan.kernels if k.name == "classifier"] == ["CPU"]
    before, after = latency_us(compiled, slow_launch), latency_us(move.after, slow_launch)
    assert after < before - move.advice.threshold_us
    assert move.advice.verified_us == pytest.approx(after)


def test_a_figure_is_needed_only_when_it_improves_the_fit_beyond_noise():
    """The likelihood-ratio test of one fitted figure (chi-square, 1 dof, 95%): with the residual variance
    sigma^2 = 2 cost / (n - k), a cost drop of 0.5% over 62 units is noise, a drop of 80% is not."""
    from toolkit.profile.calibrate import needed

    sigma2 = 2 * 0.0150 / (62 - 9)
    assert not needed(0.0150, 0.0151, 62, 9)  # statistic 2*0.0001/sigma2 = 0.35 < 3.84
    assert needed(0.0150, 0.0150 + 3.9 * sigma2 / 2, 62, 9) and not needed(0.0150, 0.0150 + 3.8 * sigma2 / 2, 62, 9)
    assert needed(0.0150, 0.08, 62, 9)
    assert not needed(0.02, 0.019, 62, 9)  # held at base fits better: not needed
    assert needed(0.0, 1e-9, 10, 3) and not needed(0.0, 0.0, 10, 3)  # an exact fit


@pytest.mark.parametrize("before, after, worse", [
    ((37.7, 46.1), (63.8, 68.7), ["per-kernel median 37.7% -> 63.8%", "summed time 46.1% -> 68.7%"]),
    ((37.7, 46.1), (12.0, 68.7), ["summed time 46.1% -> 68.7%"]),
    ((37.7, 46.1), (63.8, 10.0), ["per-kernel median 37.7% -> 63.8%"]),
    ((37.7, 46.1), (12.0, 10.0), []),
])
def test_a_calibration_that_predicts_held_out_units_worse_says_so(before, after, worse):
    """The fit is judged on units it never saw: when either held-out error grows, the terminal, profile.json and
    the report carry a warning naming both numbers; when both fall, nothing is said."""
    from types import SimpleNamespace

    from toolkit.profile.device_fit import DeviceFit

    cal = SimpleNamespace(heldout_mdape_before=before[0], heldout_total_before=before[1], heldout_mdape=after[0],
                          heldout_total=after[1])
    text = DeviceFit.warning(SimpleNamespace(calibration=cal))
    assert bool(text) == bool(worse)
    for part in worse:
        assert part in text
