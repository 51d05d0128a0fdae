"""The discrete-event schedule (toolkit/profile/schedule.py): streams, dependencies, copies (explicit and
derived) and overlap."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.compiler.plan import KernelSpec, Plan, TensorSpec
from toolkit.config.schema import Config
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import load_device
from toolkit.profile.schedule import Task, device_graph, makespan_us, schedule_plan, simulate

DEV = dataclasses.replace(load_device("atlas300i_pro"), memory_bandwidth_gbps=1.0, vector_fp32_tflops=1000.0,
                          vector_fp16_tflops=1000.0, launch_overhead_us=5.0, host_device_latency_us=10.0,
                          h2d_bandwidth_gbps=1.0, d2h_bandwidth_gbps=1.0, host_gflops=1000.0,
                          host_memory_bandwidth_gbps=1000.0, host_op_overhead_us=1.0)


def test_simulate_streams_and_dependencies_by_hand():
    tasks = [Task("a", "npu", 5.0), Task("b", "npu", 3.0), Task("c", "host", 4.0, [0]), Task("d", "npu", 2.0, [2])]
    ev = simulate(tasks).set_index("Name")
    # a [0,5]; b [5,8] (same stream, after a); c waits for a: [5,9]; d waits for c: [9,11]
    assert ev.loc[["a", "b", "c", "d"], "StartUs"].tolist() == [0.0, 5.0, 5.0, 9.0]
    assert ev.loc["d", "EndUs"] == 11.0
    with pytest.raises(ValueError, match="not an earlier task"):
        simulate([Task("x", "npu", 1.0, [0])])


def test_ready_task_issued_later_runs_while_the_first_waits():
    # npu: k0 waits for the host task; k1 (independent, issued later) runs meanwhile
    tasks = [Task("h", "host", 10.0), Task("k0", "npu", 2.0, [0]), Task("k1", "npu", 4.0)]
    ev = simulate(tasks).set_index("Name")
    assert ev.loc["k1", "StartUs"] == 0.0 and ev.loc["k0", "StartUs"] == 10.0
    assert makespan_us(simulate(tasks)) == 12.0


def _hand_plan():
    """x -> a (NPU) -> b (CPU) -> y (NPU, with c); x -> c (NPU). No copy kernels: transfers are derived."""
    def t(name, producer, stream="npu"):
        return TensorSpec(name, "float32", [1000], 4000, producer=producer, stream=stream)
    kernels = [KernelSpec("ka", "Relu", "data_movement", ["ka"], inputs=["x"], outputs=["a"]),
               KernelSpec("kb", "Sigmoid", "vector", ["kb"], inputs=["a"], outputs=["b"], placement="CPU"),
               KernelSpec("kc", "Relu", "data_movement", ["kc"], inputs=["x"], outputs=["c"]),
               KernelSpec("ky", "Add", "vector", ["ky"], inputs=["b", "c"], outputs=["y"])]
    tensors = {"x": t("x", None), "a": t("a", "ka"), "b": t("b", "kb", "cpu"), "c": t("c", "kc"), "y": t("y", "ky")}
    return Plan("hand", {}, kernels, tensors, ["x"], ["y"])


def test_derived_copies_and_overlap_on_a_hand_built_plan():
    plan = _hand_plan()
    costs = pd.DataFrame({"Stream": ["npu", "host", "npu", "npu"], "DurationUs": [20.0, 30.0, 50.0, 6.0],
                          "Bytes": [8000.0] * 4})
    g = device_graph(plan, costs, DEV)
    ev = simulate(g.tasks).set_index("Name")
    copy = 10.0 + 4000 / 1e9 * 1e6  # latency + 4000 bytes at 1 GB/s = 14 µs
    assert list(ev.index) == ["MemcpyH2D:x", "ka", "MemcpyD2H:a", "kb", "kc", "MemcpyH2D:b", "ky", "MemcpyD2H:y"]
    assert ev.loc[ev["Stream"] == "copy", "DurationUs"].tolist() == pytest.approx([copy] * 4)
    # by hand: H2D x [0,14]; ka [14,34]; D2H a [34,48]; kb (host) [48,78]; kc (npu) [34,84] overlaps both;
    # H2D b [78,92]; ky waits for kc and H2D b: [92,98]; D2H y [98,112]
    assert ev.loc["kc", "StartUs"] == pytest.approx(34.0)
    assert ev.loc["kb", "StartUs"] == pytest.approx(48.0) and ev.loc["ky", "StartUs"] == pytest.approx(92.0)
    assert makespan_us(simulate(g.tasks)) == pytest.approx(112.0)
    host = ev.loc["kb"]
    assert ev.loc["kc", "StartUs"] < host["EndUs"] and ev.loc["kc", "EndUs"] > host["StartUs"]  # overlap
    assert any("derived from the stream changes" in n and "no copy kernels" in n for n in g.notes)


def _cpu_model():
    # x -> a = x*2 -> b = Sigmoid(a) [CPU] -> y = b + c ; c = x + 1 (independent NPU branch)
    nodes = [N("Mul", ["x", "two"], ["a"], "mul"), N("Sigmoid", ["a"], ["b"], "sig"),
             N("Add", ["x", "one"], ["c"], "add_c"), N("Add", ["b", "c"], ["y"], "add_y")]
    return make_model(nodes, [("x", [1, 4096])], ["y"], {"two": np.float32(2), "one": np.float32(1)})


def test_compiled_cpu_op_gets_real_copies_and_overlaps_npu_work():
    c = compile_model(_cpu_model(), Config(precision_mode="force_fp32", fusion_level=0, op_placement={"sig": "CPU"}))
    costs = kernel_costs(c.plan, c.model, DEV)
    ev, notes = schedule_plan(c.plan, costs, DEV)
    ev = ev.set_index("Name")
    assert ev.loc["sig", "Stream"] == "host"
    copies = ev[(ev["Stream"] == "copy") & ~ev["Derived"]]
    assert sorted(copies["OpType"]) == ["MemcpyD2H", "MemcpyH2D"]  # the compiler's own copy kernels
    d2h = copies[copies["OpType"] == "MemcpyD2H"].iloc[0]
    h2d = copies[copies["OpType"] == "MemcpyH2D"].iloc[0]
    nbytes = 4096 * 4
    assert d2h["DurationUs"] == pytest.approx(10.0 + nbytes / 1e3)
    assert d2h["EndUs"] <= ev.loc["sig", "StartUs"] and h2d["StartUs"] >= ev.loc["sig", "EndUs"]
    # the independent NPU branch runs while the CPU op and its copies do
    assert ev.loc["add_c", "StartUs"] < h2d["EndUs"] and ev.loc["add_c", "EndUs"] > d2h["StartUs"]
    assert not any("no copy kernels" in n for n in notes)
