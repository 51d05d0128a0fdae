"""The discrete-event schedule: streams, dependencies, copies (explicit and derived) and overlap."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from tests.graphs import N, make_model
from toolkit.compiler.pipeline import compile_model
from toolkit.compiler.plan import KernelSpec, Plan, TensorSpec
from toolkit.config import Config
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import load_device
from toolkit.profile.schedule import Task, device_graph, makespan_us, schedule_plan, simulate
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


def _cpu_model():
    # x -> a = x*2 -> b = Sigmoid(a) [CPU] -> y = b + c ; c = x + 1 (independent NPU branch)
    nodes = [N("Mul", ["x", "two"], ["a"], "mul"), N("Sigmoid", ["a"], ["b"], "sig"),
             N("Add", ["x", "one"], ["c"], "add_c"), N("Add", ["b", "c"], ["y"], "add_y")]
    return make_model(nodes, [("x", [1, 4096])], ["y"], {"two": np.float32(2), "one": np.float32(1)})


def test_device_unsupported_ops_run_on_the_host():
    from toolkit.profile.workflow import device_config

    dev = dataclasses.replace(DEV, unsupported_ops=("Sigmoid", "LSTM"))
    cfg = device_config(_cpu_model(), Config(precision_mode="force_fp32", op_placement={"Sigmoid": "NPU"}), dev)
    assert cfg.op_placement == {"Sigmoid": "CPU"}  # LSTM is not in the model; the device wins over the config
    c = compile_model(_cpu_model(), cfg)
    costs = kernel_costs(c.plan, c.model, dev).set_index("Kernel")
    assert costs.loc["sig", "Stream"] == "host" and costs.loc["sig", "TaskType"] == "HOST_CPU"
