"""The profile command (toolkit/commands/profile.py), in process: op placement reported as the user's, and
device-unsupported ops run on the host."""

from __future__ import annotations

import dataclasses

import numpy as np

from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import load_device


def test_profile_reports_op_placement_as_user_placement_and_unsupported_ops_as_fallback():
    from toolkit.config.schema import Config
    from toolkit.commands.profile import profile_model

    placed = profile_model("transformer_block", Config(op_placement={"Softmax": "CPU"}), requests=2, advise=False)
    kinds = {(f.kind, f.subject) for f in placed.findings if f.kind in ("cpu_fallback", "cpu_placement")}
    assert kinds == {("cpu_placement", "attn_softmax")}
    nms = profile_model("detector_head", Config(), requests=2, advise=False)  # NonMaxSuppression: data-dependent
    kinds = {(f.kind, f.subject) for f in nms.findings if f.kind in ("cpu_fallback", "cpu_placement")}
    assert ("cpu_fallback", "nms") in kinds and not any(k == "cpu_placement" for k, _ in kinds)


DEV = dataclasses.replace(load_device("atlas300i_pro"), memory_bandwidth_gbps=1.0, vector_fp32_tflops=1000.0,
                          vector_fp16_tflops=1000.0, launch_overhead_us=5.0, host_device_latency_us=10.0,
                          h2d_bandwidth_gbps=1.0, d2h_bandwidth_gbps=1.0, host_gflops=1000.0,
                          host_memory_bandwidth_gbps=1000.0, host_op_overhead_us=1.0)


def _cpu_model():
    # x -> a = x*2 -> b = Sigmoid(a) [CPU] -> y = b + c ; c = x + 1 (independent NPU branch)
    nodes = [N("Mul", ["x", "two"], ["a"], "mul"), N("Sigmoid", ["a"], ["b"], "sig"),
             N("Add", ["x", "one"], ["c"], "add_c"), N("Add", ["b", "c"], ["y"], "add_y")]
    return make_model(nodes, [("x", [1, 4096])], ["y"], {"two": np.float32(2), "one": np.float32(1)})


def test_device_unsupported_ops_run_on_the_host():
    from toolkit.commands.profile import device_config

    dev = dataclasses.replace(DEV, unsupported_ops=("Sigmoid", "LSTM"))
    cfg = device_config(_cpu_model(), Config(precision_mode="force_fp32", op_placement={"Sigmoid": "NPU"}), dev)
    assert cfg.op_placement == {"Sigmoid": "CPU"}  # LSTM is not in the model; the device wins over the config
    c = compile_model(_cpu_model(), cfg)
    costs = kernel_costs(c.plan, c.model, dev).set_index("Kernel")
    assert costs.loc["sig", "Stream"] == "host" and costs.loc["sig", "TaskType"] == "HOST_CPU"
