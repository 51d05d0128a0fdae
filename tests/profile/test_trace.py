"""The Chrome trace (toolkit/profile/trace.py): tracks and flows."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd

from toolkit.compiler.plan import KernelSpec, Plan, TensorSpec
from toolkit.profile.device import load_device
from toolkit.profile.schedule import device_graph, simulate
from toolkit.profile.trace import chrome_trace

DEV = dataclasses.replace(load_device("atlas300i_pro"), memory_bandwidth_gbps=1.0, vector_fp32_tflops=1000.0,
                          vector_fp16_tflops=1000.0, launch_overhead_us=5.0, host_device_latency_us=10.0,
                          h2d_bandwidth_gbps=1.0, d2h_bandwidth_gbps=1.0, host_gflops=1000.0,
                          host_memory_bandwidth_gbps=1000.0, host_op_overhead_us=1.0)


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


def test_chrome_trace_tracks_and_flows():
    plan = _hand_plan()
    costs = pd.DataFrame({"Stream": ["npu", "host", "npu", "npu"], "DurationUs": [20.0, 30.0, 50.0, 6.0],
                          "Bytes": [8000.0] * 4})
    ev = simulate(device_graph(plan, costs, DEV).tasks)
    trace = json.loads(json.dumps(chrome_trace(ev)))
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"npu", "host", "copy"}
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(ev)
    assert len({e["tid"] for e in slices}) == 3
    starts = {e["id"] for e in events if e["ph"] == "s"}
    ends = {e["id"] for e in events if e["ph"] == "f"}
    # 4 copies: H2D x (no writer: 1 flow out), D2H a, H2D b (in + out), D2H y (in only): 1 + 2 + 2 + 1
    assert starts == ends and len(starts) == 6
