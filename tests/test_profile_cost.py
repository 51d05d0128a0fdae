"""Device profiles and the cost model, against hand-computed values."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tests.graphs import N, make_model
from toolkit.compiler.pipeline import compile_model
from toolkit.config import Config
from toolkit.errors import ConfigError
from toolkit.profile.cost import as_placed, copy_time, kernel_costs
from toolkit.profile.device import RATE_FIELDS, COST_FIELDS, builtin_devices, load_device

# round numbers so the expected times are easy to compute by hand
DEV = dataclasses.replace(load_device("atlas300i_pro"), cube_fp16_tflops=10.0, cube_fp32_tflops=2.0,
                          vector_fp16_tflops=1.0, vector_fp32_tflops=0.5, memory_bandwidth_gbps=100.0,
                          launch_overhead_us=3.0, host_gflops=20.0, host_memory_bandwidth_gbps=10.0,
                          host_op_overhead_us=2.0, h2d_bandwidth_gbps=8.0, d2h_bandwidth_gbps=4.0,
                          host_device_latency_us=7.0)


# ---------------------------------------------------------------- device profiles
def test_builtins_load_and_cite_every_figure():
    assert set(builtin_devices()) >= {"atlas300i_pro", "ascend910"}
    for name in builtin_devices():
        dev = load_device(name)
        for f in RATE_FIELDS + COST_FIELDS:
            assert getattr(dev, f) >= 0
            assert dev.source.get(f), f"{name}: no source for {f}"
    assert load_device(None).name == "atlas300i_pro"
    assert load_device("ascend910").cube_fp16_tflops > load_device("atlas300i_pro").cube_fp16_tflops


def test_user_profile_with_base_overrides(tmp_path):
    p = tmp_path / "mine.json"
    p.write_text(json.dumps({"base": "ascend910", "name": "mine", "launch_overhead_us": 6.5}))
    dev = load_device(str(p))
    assert (dev.name, dev.launch_overhead_us) == ("mine.json", 6.5)  # labelled by its file: name == file stem
    assert dev.memory_bandwidth_gbps == load_device("ascend910").memory_bandwidth_gbps
    assert "overridden" in dev.source["launch_overhead_us"]


@pytest.mark.parametrize("content, needle", [
    ({"base": "atlas300i_pro", "launch_overhead": 3}, "unknown field 'launch_overhead' (did you mean 'launch_overhead_us'"),
    ({"base": "atlas300i_pro", "host_gflops": 0}, "host_gflops = 0; expected a number in 0.01..1e+06 GFLOPS"),
    ({"base": "atlas300i_pro", "launch_overhead_us": -1}, "launch_overhead_us = -1; expected a number in 0..100000 µs"),
    ({"base": "atlas300i_pro", "cube_fp16_tflops": "fast"}, "cube_fp16_tflops = 'fast'"),
    ({"base": "nope"}, "base 'nope' is not a built-in device"),
    ({"name": "x", "cube_fp16_tflops": 1}, "missing field(s)"),
    ([1, 2], "must hold a JSON object"),
])
def test_bad_profiles_one_line_errors(tmp_path, content, needle):
    p = tmp_path / "dev.json"
    p.write_text(json.dumps(content))
    with pytest.raises(ConfigError) as ei:
        load_device(str(p))
    assert needle in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize("field", RATE_FIELDS + COST_FIELDS)
@pytest.mark.parametrize("where", ["below", "above"])
def test_every_numeric_field_has_a_sanity_range(tmp_path, field, where):
    # bounds written here from docs/profile.md, not read from the code
    unit = "µs" if field.endswith("_us") else "GFLOPS" if field == "host_gflops" else \
        "TFLOPS" if field.endswith("tflops") else "GB/s"
    lo, hi = {"µs": (0.0, 1e5), "GFLOPS": (0.01, 1e6), "TFLOPS": (0.001, 1e5), "GB/s": (0.01, 1e5)}[unit]
    bad = {"below": lo - 1 if lo == 0 else lo / 10, "above": hi * 10}[where]
    p = tmp_path / "dev.json"
    p.write_text(json.dumps({"base": "atlas300i_pro", field: bad}))
    with pytest.raises(ConfigError) as ei:
        load_device(str(p))
    msg = str(ei.value)
    assert f"{field} = {bad!r}" in msg and f"{lo:g}..{hi:g} {unit}" in msg and "\n" not in msg
    for ok in (lo, hi):  # the bounds themselves are accepted
        p.write_text(json.dumps({"base": "atlas300i_pro", field: ok}))
        assert getattr(load_device(str(p)), field) == ok


@pytest.mark.parametrize("value", [1e-300, 1e300, float("nan"), float("inf")])
def test_absurd_bandwidth_is_refused(tmp_path, value):
    p = tmp_path / "dev.json"
    p.write_text(json.dumps({"base": "atlas300i_pro", "memory_bandwidth_gbps": value}))
    with pytest.raises(ConfigError, match="memory_bandwidth_gbps = .*0.01..100000 GB/s"):
        load_device(str(p))


def test_bad_device_names(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'ascend910'"):
        load_device("ascend91")
    with pytest.raises(ConfigError, match="does not exist"):
        load_device(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_device(str(tmp_path / "bad.json"))


# ---------------------------------------------------------------- the roofline by hand
def _costs(model, mode="force_fp16", level=0):
    c = compile_model(model, Config(precision_mode=mode, fusion_level=level))
    return c, kernel_costs(c.plan, c.model, DEV).set_index("Kernel")


def _roofline(flops_cube, flops_vec, nbytes, cube_tflops, vec_tflops):
    compute = flops_cube / (cube_tflops * 1e12) * 1e6 + flops_vec / (vec_tflops * 1e12) * 1e6
    memory = nbytes / (DEV.memory_bandwidth_gbps * 1e9) * 1e6
    return max(compute, memory) + DEV.launch_overhead_us


def test_matmul_flops_bytes_and_time_fp16():
    m, k, n = 64, 256, 128
    w = np.ones((k, n), np.float32)
    model = make_model([N("MatMul", ["x", "w"], ["y"], "mm")], [("x", [m, k])], ["y"], {"w": w})
    _, costs = _costs(model)
    row = costs.loc["mm"]
    assert row["CubeFlops"] == 2 * m * n * k
    assert row["Precision"] == "fp16" and row["TaskType"] == "AI_CORE"
    nbytes = (m * k + k * n + m * n) * 2  # FP16 input, FP16 weight (converted at compile time), FP16 output
    assert row["Bytes"] == nbytes
    assert row["DurationUs"] == pytest.approx(_roofline(2 * m * n * k, 0, nbytes, 10.0, 1.0))


def test_conv_flops_and_fp32_rate():
    cin, cout, h, wd, kk = 32, 64, 64, 64, 3
    w = np.zeros((cout, cin, kk, kk), np.float32)
    model = make_model([N("Conv", ["x", "w"], ["y"], "conv", pads=[1, 1, 1, 1])], [("x", [1, cin, h, wd])], ["y"],
                       {"w": w})
    _, costs = _costs(model, "force_fp32")
    row = costs.loc["conv"]
    flops = 2 * cout * h * wd * cin * kk * kk  # same-padding: output H x W
    nbytes = (cin * h * wd + cout * cin * kk * kk + cout * h * wd) * 4
    assert row["CubeFlops"] == flops and row["Bytes"] == nbytes
    assert row["DurationUs"] == pytest.approx(_roofline(flops, 0, nbytes, 2.0, 0.5))
    assert flops / 2e6 > nbytes / 1e5 > DEV.launch_overhead_us and row["Bound"] == "compute"


def test_elementwise_is_launch_bound_and_views_are_free():
    model = make_model([N("Sigmoid", ["x"], ["s"], "sig"), N("Reshape", ["s", "shape"], ["y"], "rs")],
                       [("x", [4, 8])], ["y"], {"shape": np.array([32], np.int64)})
    _, costs = _costs(model, "force_fp32")
    sig = costs.loc["sig"]
    assert sig["VectorFlops"] == 4 * 32  # transcendental: 4 FLOPs per element
    assert sig["Bound"] == "launch"
    assert sig["DurationUs"] == pytest.approx(_roofline(0, 4 * 32, 2 * 32 * 4, 2.0, 0.5))
    assert costs.loc["rs"]["DurationUs"] == 0.0 and costs.loc["rs"]["Bound"] == "view"


def test_cpu_placement_and_copy_formulas():
    model = make_model([N("Sigmoid", ["x"], ["y"], "sig")], [("x", [1000])], ["y"])
    _, costs = _costs(model, "force_fp16")
    row = costs.loc["sig"].to_dict()
    row["Kernel"] = "sig"
    cpu = as_placed(row, "CPU", DEV)
    host_bytes = 1000 * 4 * 2  # FP32 on the host: input + output
    want = max(4000 / (20.0 * 1e9) * 1e6, host_bytes / (10.0 * 1e9) * 1e6) + 2.0
    assert cpu["Stream"] == "host" and cpu["DurationUs"] == pytest.approx(want)
    assert copy_time(4000, "h2d", DEV) == pytest.approx(7.0 + 4000 / 8e9 * 1e6)
    assert copy_time(4000, "d2h", DEV) == pytest.approx(7.0 + 4000 / 4e9 * 1e6)


@pytest.mark.parametrize("content, label", [
    ({"base": "atlas300i_pro", "launch_overhead_us": 50.0}, "slow.json (name 'atlas300i_pro')"),  # name kept
    ({"base": "ascend910", "name": "ascend910", "host_gflops": 5}, "slow.json (name 'ascend910')"),
    ({"base": "atlas300i_pro", "name": "lab-card"}, "slow.json (name 'lab-card')"),
    ({"base": "atlas300i_pro", "name": "slow"}, "slow.json"),
])
def test_user_device_files_are_labelled_by_their_file(tmp_path, content, label):
    """The defect: a file changing fields but not `name` was labelled with the built-in's name."""
    p = tmp_path / "slow.json"
    p.write_text(json.dumps(content))
    dev = load_device(str(p))
    assert dev.name == label and dev.name not in builtin_devices()
    assert load_device(content["base"]).name == content["base"]  # built-ins keep their names


def test_user_device_label_reaches_the_signoff_evidence(tmp_path):
    from toolkit.compiler.pipeline import compile_model
    from toolkit.profile.budget import device_timing

    p = tmp_path / "slow.json"
    p.write_text(json.dumps({"base": "atlas300i_pro", "launch_overhead_us": 50.0}))
    model = make_model([N("Sigmoid", ["x"], ["y"], "sig")], [("x", [1000])], ["y"])
    t = device_timing(compile_model(model, Config()), str(p))
    assert t["device"] == "slow.json (name 'atlas300i_pro')"
    assert t["latency_ms"] > device_timing(compile_model(model, Config()))["latency_ms"]  # 50 µs launches
