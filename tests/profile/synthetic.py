"""A synthetic device for the attribution and calibration tests: a graph whose kernels are bound by every figure
of a device profile (cube / vector FP16 and FP32, memory bandwidth, launch, AI_CPU), and op_summary /
kernel_details files written from a hidden device profile through our own cost model (docs: GUIDE §4, the
Ascend PyTorch Profiler guide's kernel_details table)."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from toolkit.config.schema import Config
from toolkit.engine import compile_model
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import load_device

#: The hidden device: every figure differs from atlas300i_pro's (70, 17.5, 2.2, 1.1, 204.8, 4, 50, 20, 2).
HIDDEN = {"cube_fp16_tflops": 25.0, "cube_fp32_tflops": 6.0, "vector_fp16_tflops": 0.08, "vector_fp32_tflops": 0.04,
          "memory_bandwidth_gbps": 150.0, "launch_overhead_us": 6.0, "host_gflops": 20.0,
          "host_memory_bandwidth_gbps": 8.0, "host_op_overhead_us": 5.0}
MATMULS = [(64, 64, 64), (128, 256, 128), (256, 256, 256), (384, 512, 256), (512, 512, 512), (256, 1024, 512),
           (1024, 512, 256), (512, 1024, 1024), (96, 96, 96), (768, 768, 384), (200, 300, 400), (640, 320, 960),
           (1024, 1024, 1024), (2048, 512, 1024), (768, 1536, 768), (1024, 2048, 512), (1536, 1024, 1024),
           (1024, 1024, 2048), (2048, 1024, 768)]
ELEMENTWISE = [1 << 10, 1 << 12, 3 << 12, 1 << 14, 5 << 13, 1 << 16, 3 << 15, 1 << 18, 5 << 16, 1 << 20, 3 << 17,
               1 << 11]


def synthetic_model() -> tuple[onnx.ModelProto, Config]:
    """(model, config): MatMuls (19 sizes), Sigmoid / Add / Tanh on inputs of 12 sizes and 6 tiny Relus; config
    (force_fp16) keeps a third of them in FP32 (keep_dtype) and places another set, and the Relus, on the CPU."""
    rng = np.random.default_rng(0)
    nodes, inputs, outputs, inits = [], [], [], []
    keep, cpu = [], {}
    for i, (m, k, n) in enumerate(MATMULS):
        inputs.append(helper.make_tensor_value_info(f"a{i}", TensorProto.FLOAT, [m, k]))
        inits.append(numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [f"a{i}", f"w{i}"], [f"mm{i}"], name=f"matmul{i}"))
        outputs.append(helper.make_tensor_value_info(f"mm{i}", TensorProto.FLOAT, [m, n]))
        if i % 3 == 1:
            keep.append(f"matmul{i}")
        elif i % 4 == 3:
            cpu[f"matmul{i}"] = "CPU"
    for j, size in enumerate(ELEMENTWISE):
        inputs.append(helper.make_tensor_value_info(f"x{j}", TensorProto.FLOAT, [1, size]))
        for op in ("Sigmoid", "Add", "Tanh"):
            name = f"{op.lower()}{j}"
            ins = [f"x{j}", f"x{j}"] if op == "Add" else [f"x{j}"]
            nodes.append(helper.make_node(op, ins, [name + "_out"], name=name))
            outputs.append(helper.make_tensor_value_info(name + "_out", TensorProto.FLOAT, [1, size]))
        if j % 3 == 1:
            keep += [f"sigmoid{j}", f"add{j}"]
        if j % 3 == 2:
            cpu.update({f"add{j}": "CPU", f"tanh{j}": "CPU"})
    for j in range(6):  # tiny CPU ops: the AI_CPU's per-op overhead
        inputs.append(helper.make_tensor_value_info(f"s{j}", TensorProto.FLOAT, [1, 16 << j]))
        nodes.append(helper.make_node("Relu", [f"s{j}"], [f"relu{j}_out"], name=f"relu{j}"))
        outputs.append(helper.make_tensor_value_info(f"relu{j}_out", TensorProto.FLOAT, [1, 16 << j]))
        cpu[f"relu{j}"] = "CPU"
    graph = helper.make_graph(nodes, "synthetic", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, Config(precision_mode="force_fp16", keep_dtype=keep, op_placement=cpu)


def hidden_device():
    return dataclasses.replace(load_device("atlas300i_pro"), name="hidden", **HIDDEN)


def compiled_synthetic():
    model, config = synthetic_model()
    return compile_model(model, config), config, model


def device_rows(costs, noise: float = 0.03, seed: int = 1, iterations: int = 1) -> list[dict]:
    """One op_summary row per timed kernel of ``costs`` (a cost table on the hidden device) and iteration, in plan
    order: Op Name = kernel, times multiplied by exp(N(0, noise)), CPU kernels as AI_CPU tasks."""
    rng = np.random.default_rng(seed)
    rows, t = [], 0.0
    for it in range(iterations):
        for k in costs.itertuples(index=False):
            if k.Stream == "copy" or k.IsView:
                continue
            dur = float(k.DurationUs) * float(np.exp(rng.normal(0.0, noise)))
            rows.append({"Op Name": k.Kernel, "OP Type": k.OpType,
                         "Task Type": "AI_CPU" if k.Stream == "host" else k.TaskType, "Task Start Time(us)": t,
                         "Task Duration(us)": dur, "Block Dim": 8, "Input Shapes": k.InputShapes,
                         "Output Shapes": k.OutputShapes, "Input Data Types": k.InputDtypes, "Iteration": it})
            t += dur + 1.0
    return rows


OP_SUMMARY_HEADER = ["Model Name", "Task ID", "Stream ID", "Infer ID", "Op Name", "OP Type", "Task Type",
                     "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes",
                     "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types", "Output Formats",
                     "aicore_time(us)", "total_cycles"]
KERNEL_DETAILS_HEADER = ["Step Id", "Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
                         "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Num",
                         "Mix Block Num", "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats",
                         "Output Shapes", "Output Data Types", "Output Formats"]
CORES = {"AI_CORE": "AI Core", "AI_VECTOR_CORE": "AI_VECTOR_CORE", "AI_CPU": "AI CPU", "MIX_AIC": "MIXED_AIC"}


def write_op_summary(path, rows: list[dict]) -> None:
    """msprof op_summary_*.csv (GUIDE §4 columns plus aicore_time(us) / total_cycles, which readers ignore)."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(OP_SUMMARY_HEADER)
        for i, r in enumerate(rows):
            w.writerow(["m", i, 1, r.get("Iteration", 0), r["Op Name"], r["OP Type"], r["Task Type"],
                        f"{r['Task Start Time(us)']:.3f}\t", f"{r['Task Duration(us)']:.4f}", "0", r["Block Dim"],
                        r["Input Shapes"], r.get("Input Data Types", ""), "ND", r["Output Shapes"], "", "ND",
                        f"{r['Task Duration(us)']:.4f}", 1000])


def write_kernel_details(path, rows: list[dict]) -> None:
    """torch_npu kernel_details.csv (the Ascend PyTorch Profiler guide's Table 1 columns, Block Num spelling)."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(KERNEL_DETAILS_HEADER)
        for i, r in enumerate(rows):
            w.writerow([r.get("Iteration", 0), 0, 1, i, 2, r["Op Name"], r["OP Type"], "static",
                        CORES.get(r["Task Type"], r["Task Type"]), f"{r['Task Start Time(us)']:.3f}",
                        f"{r['Task Duration(us)']:.4f}", "0", r["Block Dim"], "N/A", "NO", r["Input Shapes"],
                        r.get("Input Data Types", ""), "ND", r["Output Shapes"], "", "ND"])


def hidden_costs(compiled):
    return kernel_costs(compiled.plan, compiled.model, hidden_device())
