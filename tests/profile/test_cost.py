"""The cost model (toolkit/profile/cost.py), against hand-computed values."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.profile.cost import as_placed, copy_time, kernel_costs
from toolkit.profile.device import load_device

# round numbers so the expected times are easy to compute by hand
DEV = dataclasses.replace(load_device("atlas300i_pro"), cube_fp16_tflops=10.0, cube_fp32_tflops=2.0,
                          vector_fp16_tflops=1.0, vector_fp32_tflops=0.5, memory_bandwidth_gbps=100.0,
                          launch_overhead_us=3.0, host_gflops=20.0, host_memory_bandwidth_gbps=10.0,
                          host_op_overhead_us=2.0, h2d_bandwidth_gbps=8.0, d2h_bandwidth_gbps=4.0,
                          host_device_latency_us=7.0)


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
