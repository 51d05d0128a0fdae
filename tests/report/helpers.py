"""Helpers of the report tests (not a test module): a small hand-made Diagnosis and the hostile names it holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.compare.diagnosis import Diagnosis
from toolkit.core.records import Finding

ROOT = Path(__file__).resolve().parents[2]
EVIL = "<img src=x onerror=alert(1)>"
EVIL_ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"
SCRIPT_BREAK = "</script><script>window.__pwned=1</script>"


def synthetic_diagnosis() -> Diagnosis:
    """Ten tensors in execution order; row 5 is the origin (named EVIL), row 6 propagates its error."""
    n = 10
    cos = [1.0, 1.0, 0.999999, 0.9999, 1.0, 0.91, 0.95, np.nan, 0.9995, 0.99999994]
    red = [0.0, 0.0, 1e-4, 5e-3, 0.0, 0.4, 0.2, np.nan, 0.01, 3e-4]
    names = ["x", "conv_1", "relu_1", "conv_2", "add_1", EVIL, "ln_var", "fused_mul", "softmax", SCRIPT_BREAK]
    table = pd.DataFrame({
        "Index": range(n),
        "OpType": ["Input", "Conv", "Relu", "Conv", "Add", "Pow", "ReduceMean", "Mul", "Softmax", "MatMul"],
        "NodeName": names,
        "TensorName": [f"t{i}" for i in range(n - 1)] + ["out\nwith newline, and comma"],
        "TensorIndex": [0] * n,
        "Kernel": ["", "conv_1", "conv_1", "conv_2", "conv_2", EVIL, "ln", "ln", "softmax", "mm"],
        "Precision": ["fp32", "fp16", "fp16", "fp16", "fp16", "fp16", "fp32", "fp32", "fp32", "fp16"],
        "CosineSimilarity": cos,
        "RelativeEuclideanDistance": red,
        "MaxAbsoluteError": [0.0, 1e-3, 1e-3, 2e-2, 0.0, 7e4, 3.0, np.nan, 1e-3, 1e-3],
        "Abnormal": [False, False, False, False, False, True, True, False, False, False],
        "AbnormalMetrics": [[], [], [], [], [], ["CosineSimilarity", "RelativeEuclideanDistance"],
                            ["CosineSimilarity"], [], [], []],
        "OverFlow": [False] * 5 + [True] + [False] * 4,
        "CompareFailReason": [""] * 7 + ["fused into kernel ln"] + [""] * 2,
        "Role": [""] * 5 + ["origin", "propagated"] + [""] * 3,
        "GoldenAbsMax": [1.0, 2.0, 2.0, 5.0, 6.0, 7.2e4, 3e3, np.nan, 1.0, 9.0],
    })
    first = {"node": EVIL, "op_type": "Pow", "tensor": "t5", "kernel": EVIL, "precision": "fp16",
             "kind": "fp16_overflow", "evidence": {"GoldenAbsMax": 7.2e4, "CosineSimilarity": 0.91}}
    findings = [
        Finding("error", "fp16_overflow", EVIL, {"absmax": 7.2e4, "ratio": float("nan"), "tensor": "t5"},
                f"keep '{EVIL}' in FP32 (keep_dtype)"),
        Finding("warning", "fp16_constant", "w_big", {"values": [70000.0, float("inf")]}, "scale the weights"),
    ]
    return Diagnosis(
        summary={"verdict": "FAIL", "reasons": [f"output 'out' is abnormal after {EVIL}"], "model": "m.onnx",
                 "model_name": "synthetic", "model_sha256": "ab" * 32, "inputs": "random seed=0", "seed": 0,
                 "config": {"precision_mode": "allow_mix_precision", "keep_dtype": []}, "stage": "precision",
                 "first_divergence": first, "origin_nodes": [EVIL],
                 "timings_ms": {"compile_ms": 12.5, "triage_ms": float("nan")},
                 "counts": {"tensors": n, "abnormal": 2}},
        table=table,
        findings=findings,
        passes=pd.DataFrame({"Pass": ["fold_batchnorm", "graph_fusion"], "Ran": [True, True], "Reason": ["", ""],
                             "OpsBefore": [12, 11], "OpsAfter": [11, 11], "KernelsAfter": [0, 0],
                             "Changes": [1, 2], "Ms": [0.1, 0.5]}),
        fusion_result={"0_0": {"graph_fusion": {"LayerNormFusionPass": {"match_times": "1", "effect_times": "1"}},
                               "ub_fusion": {"TbeCubeElemwiseFusionPass": {"match_times": "2", "effect_times": "1"}}}},
        precision=pd.DataFrame({"OpType": ["Conv", "Pow", EVIL], "FP16": [2, 1, 0], "FP32": [0, 0, 1]}),
        memory={"arena_bytes": 3 * 1024 * 1024, "lower_bound_bytes": 2 * 1024 * 1024, "tensors_in_arena": 8,
                "tensors_outside": 1},
        kernel_times=pd.DataFrame({"Kernel": [f"k{i}" for i in range(24)] + [EVIL],
                                   "OpType": ["Conv"] * 25, "Precision": ["fp16", "fp32"] * 12 + ["fp16"],
                                   "Nodes": [1] * 25, "HostMs": [float(i) for i in range(24)] + [99.0]}),
        tasks=[{"name": "cls_argmax", "passed": False, "value": [1, 0], "detail": f"FP32 argmax [1], NPU {EVIL}"}],
        triage={"stage": "precision", "fp32_first_divergence": None, "fp32_tensors_checked": 12,
                "npu_first_divergence": first},
        environment={"packages": {"numpy": "2.0"}, "python": "3.11", "cpu": "test cpu", "cpu_count": 2,
                     "env": {"OMP_NUM_THREADS": "1"}},
        artifacts={"result": "result.csv", "summary": "summary.json", "evil": "javascript:alert(1)",
                   "outside": "../secret.txt", "dumps": "dumps dir/index.json"},
    )
