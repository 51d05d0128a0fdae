"""The placement advisor on planted cases: a tiny tail op that wins on the CPU, a tiny middle op that loses
(two transfers), and a group of three neighbours that wins only together. Expected latencies are computed
here from the roofline formulas with the test's device figures."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.profile.advisor import advise, verify
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import load_device

L, HOST_OVH, BW = 20.0, 1.0, 1.0  # launch µs, host op overhead µs, every bandwidth GB/s (1 byte = 1e-3 µs)
BIG = 16384  # elements of the big tensor: 64 KiB in FP32
CFG = dict(precision_mode="force_fp32", fusion_level=0)


def device(copy_latency):
    return dataclasses.replace(load_device("atlas300i_pro"), memory_bandwidth_gbps=BW, launch_overhead_us=L,
                               vector_fp32_tflops=1e6, vector_fp16_tflops=1e6, cube_fp32_tflops=1e6,
                               cube_fp16_tflops=1e6, host_gflops=1e9, host_memory_bandwidth_gbps=1e9,
                               host_op_overhead_us=HOST_OVH, h2d_bandwidth_gbps=BW, d2h_bandwidth_gbps=BW,
                               host_device_latency_us=copy_latency)


def _copy(nbytes, lat):
    return lat + nbytes / 1e3


def _compile(model, placement=None):
    return compile_model(model, Config(**CFG, op_placement=placement or {}))


def _head(tail_nodes, outputs, inits):
    """x [1, BIG] -> a = x * 2 (big) -> s = ReduceSum(a) [1, 1] -> tail nodes."""
    nodes = [N("Mul", ["x", "two"], ["a"], "big_mul"), N("ReduceSum", ["a"], ["s"], "reduce", keepdims=1)]
    return make_model(nodes + tail_nodes, [("x", [1, BIG])], outputs, {"two": np.float32(2), **inits})


def _npu_big_part(lat):
    """Latency (µs) of H2D x, big_mul, reduce (all memory-bound at 1 GB/s)."""
    nbytes = BIG * 4
    return _copy(nbytes, lat) + (2 * nbytes + 4) / 1e3 + L + (nbytes + 4) / 1e3 + L


def test_tiny_tail_op_moves_to_the_cpu_and_the_gain_is_verified():
    lat = 10.0
    model = _head([N("Mul", ["s", "three"], ["y"], "tail")], ["y"], {"three": np.float32(3)})
    dev = device(lat)
    c = _compile(model)
    adv = advise(c.plan, kernel_costs(c.plan, c.model, dev), dev, min_gain_share=0.0)
    tail_npu = (4 + 4 + 4) / 1e3 + L  # s, the constant, y; launch bound
    before = _npu_big_part(lat) + tail_npu + _copy(4, lat)  # + D2H of y
    after = _npu_big_part(lat) + _copy(4, lat) + HOST_OVH  # D2H of s instead, then the CPU op
    assert adv.baseline_us == pytest.approx(before)
    assert adv.moved == ["tail"] and adv.op_placement == {"tail": "CPU"}
    assert adv.predicted_us == pytest.approx(after, rel=1e-6)
    new = verify(adv, c, Config(**CFG), dev, model=model)
    assert [k.placement for k in new.plan.kernels if k.nodes == ["tail"]] == ["CPU"]
    assert adv.verified_us == pytest.approx(after, rel=1e-6)
    assert adv.steps["Kept"].any()


def test_tiny_middle_op_stays_because_two_transfers_cost_more():
    lat = 50.0
    nodes = [N("Mul", ["s", "three"], ["t"], "tiny"), N("Add", ["a", "t"], ["y"], "big_add")]
    model = _head(nodes, ["y"], {"three": np.float32(3)})
    dev = device(lat)
    c = _compile(model)
    adv = advise(c.plan, kernel_costs(c.plan, c.model, dev), dev, min_gain_share=0.0)
    assert adv.moved == [] and adv.op_placement == {}
    row = adv.steps[adv.steps["Moved"] == "tiny"].iloc[0]
    # moving it: + D2H s + H2D t (4 bytes each) + host op, - the NPU kernel
    extra = 2 * _copy(4, lat) + HOST_OVH - ((4 + 4 + 4) / 1e3 + L)
    assert (row["LatencyAfter(ms)"] - row["LatencyBefore(ms)"]) * 1e3 == pytest.approx(extra, rel=1e-6)
    assert not row["Kept"] and extra > 0


def test_group_of_neighbours_wins_where_each_alone_loses():
    lat = 25.0  # one round trip (2 x 25 µs) > 1 or 2 saved launches (19 µs each), < 3 (57 µs)
    nodes = [N("Mul", ["s", "three"], ["t1"], "t1"), N("Add", ["t1", "three"], ["t2"], "t2"),
             N("Mul", ["t2", "three"], ["t3"], "t3"), N("Add", ["a", "t3"], ["y"], "big_add")]
    model = _head(nodes, ["y"], {"three": np.float32(3)})
    dev = device(lat)
    c = _compile(model)
    adv = advise(c.plan, kernel_costs(c.plan, c.model, dev), dev, min_gain_share=0.0)
    tries = adv.steps.set_index("Moved")
    assert not tries.loc["t1", "Kept"] and not tries.loc["t1;t2", "Kept"]
    assert tries.loc["t1;t2;t3", "Kept"] and tries.loc["t1;t2;t3", "Kind"] == "group"
    assert sorted(adv.moved) == ["t1", "t2", "t3"]
    saved = 3 * ((4 + 4 + 4) / 1e3 + L) - 2 * _copy(4, lat) - 3 * HOST_OVH
    assert (adv.baseline_us - adv.predicted_us) == pytest.approx(saved, rel=1e-6)
    verify(adv, c, Config(**CFG), dev, model=model)
    assert adv.verified_us == pytest.approx(adv.predicted_us, rel=1e-6)
