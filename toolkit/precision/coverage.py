"""FP16 coverage of a plan (share of ops and of FLOPs left in FP16) and the estimated cost of an FP32 fallback.

FLOPs are estimated for the cube ops only, from tensor shapes (a multiply-add counts 2):

- Conv: 2 · |Y| · (C/group) · kH · kW …  = 2 · |Y| · prod(W.shape[1:])
- ConvTranspose: 2 · |X| · (M/group) · kH · kW … = 2 · |X| · prod(W.shape[1:])
- MatMul: 2 · |Y| · K (K = last dim of A)
- Gemm: 2 · M · N · K (K = A's dim 1, or dim 0 with transA)

Other ops count 0 FLOPs (their cost is memory traffic, covered by the byte counts).
"""

from __future__ import annotations

import numpy as np
import onnx


def node_flops(model: onnx.ModelProto, shapes: dict[str, tuple]) -> dict[str, float]:
    """{node name: estimated FLOPs} of the Conv/ConvTranspose/MatMul/Gemm nodes whose shapes are known.

    Args:
        model: the original model.
        shapes: {tensor: shape} of runtime tensors (e.g. from the reference run); initializer shapes are added.
    """
    shp = {i.name: tuple(i.dims) for i in model.graph.initializer}
    shp.update({k: tuple(v) for k, v in shapes.items()})
    out: dict[str, float] = {}
    for n in model.graph.node:
        ins = [shp.get(i) for i in n.input]
        y = shp.get(n.output[0]) if n.output else None
        try:
            if n.op_type == "Conv" and y is not None and ins[1] is not None:
                out[n.name] = 2.0 * np.prod(y) * np.prod(ins[1][1:])
            elif n.op_type == "ConvTranspose" and ins[0] is not None and ins[1] is not None:
                out[n.name] = 2.0 * np.prod(ins[0]) * np.prod(ins[1][1:])
            elif n.op_type == "MatMul" and y is not None and ins[0] is not None:
                out[n.name] = 2.0 * np.prod(y) * ins[0][-1]
            elif n.op_type == "Gemm" and y is not None and ins[0] is not None:
                trans_a = next((a.i for a in n.attribute if a.name == "transA"), 0)
                out[n.name] = 2.0 * np.prod(y) * (ins[0][0] if trans_a else ins[0][1])
        except (IndexError, TypeError):
            continue
    return {k: float(v) for k, v in out.items()}


def coverage(plan, flops: dict[str, float]) -> dict:
    """FP16 coverage of ``plan``: ops (original nodes executed by kernels), FLOPs, kernels and Casts.

    Returns {"ops_fp16", "ops_total", "ops_fp16_share", "flops_fp16", "flops_total", "flops_fp16_share",
    "kernels_fp16", "kernels_fp32", "casts", "activation_bytes"}; activation_bytes = bytes of every
    arena/dynamic tensor the plan stores once per run (FP16 tensors count 2 bytes an element).
    """
    ops16 = ops = 0
    fl16 = fl = 0.0
    k16 = k32 = casts = 0
    for k in plan.kernels:
        if k.fusion == "cast":
            casts += 1
            continue
        if k.fusion == "copy":  # host-device copies (placement) compute nothing
            continue
        half = k.precision == "fp16"
        k16 += half
        k32 += not half
        for n in k.nodes:
            ops += 1
            ops16 += half
            f = flops.get(n, 0.0)
            fl += f
            fl16 += f if half else 0.0
    act = sum(t.nbytes for t in plan.tensors.values() if t.storage in ("arena", "dynamic"))
    return {"ops_fp16": ops16, "ops_total": ops, "ops_fp16_share": ops16 / ops if ops else 1.0,
            "flops_fp16": fl16, "flops_total": fl, "flops_fp16_share": fl16 / fl if fl else 1.0,
            "kernels_fp16": k16, "kernels_fp32": k32, "casts": casts, "activation_bytes": int(act)}


#: assumed throughput of FP32 cube work relative to FP16 (the cube unit's FP16 rate is the reference; FP32
#: matmuls run on the vector unit or in multi-pass mode, a quarter of the rate is a common rule of thumb)
FP32_CUBE_RATE = 0.25


def fallback_cost(before: dict, after: dict, host_ms_before: float, host_ms_after: float,
                  host_runs: int = 1) -> dict:
    """The estimated cost of the fallback: Casts added, activation bytes added, FP32 cube FLOPs added and their
    estimated extra cube time relative to the FP16 plan (:data:`FP32_CUBE_RATE`), and the measured host time
    ratio of the simulation (host time, not device time). ``host_ms_*``: ms per run, the median of
    ``host_runs`` runs after an untimed warm-up (toolkit.tuning.tune.host_time_ms); ``host_time_measure``
    says so in the result."""
    fp32_flops = (after["flops_total"] - after["flops_fp16"]) - (before["flops_total"] - before["flops_fp16"])
    cube = before["flops_total"] or 1.0
    return {"casts_added": after["casts"] - before["casts"],
            "kernels_to_fp32": after["kernels_fp32"] - before["kernels_fp32"],
            "activation_bytes_added": after["activation_bytes"] - before["activation_bytes"],
            "fp32_flops_added": fp32_flops,
            "est_cube_time_increase": fp32_flops * (1.0 / FP32_CUBE_RATE - 1.0) / cube,
            "host_ms_before": host_ms_before, "host_ms_after": host_ms_after,
            "host_time_measure": f"median of {host_runs} run(s) after a warm-up; host time of the simulation, "
                                 "not device time",
            "host_time_ratio": host_ms_after / host_ms_before if host_ms_before else float("nan")}
