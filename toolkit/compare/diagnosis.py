"""The data a diagnosis produces, before anything renders it.

:class:`Diagnosis` is what ``npuscope diagnose`` / ``compare`` compute and what the HTML report, the CSV and
the JSON are made from. Everything in it is plain data (DataFrames, dicts, lists of Findings).

``table`` (result.csv) has one row per ONNX tensor of the reference run, in execution order, and always the
same columns in the same order (toolkit.compare.layerwise.RESULT_COLUMNS), whatever the model; a value that
does not apply to a row is an empty cell:

- Index, OpType, NodeName, TensorName, TensorIndex, Kernel, KernelIndex, KernelOpType, FusedNodes (';'-joined
  original node names of the kernel), Rule (the fusion rule, or "fold_constants" for a graph output the
  compiler computed at compile time and the plan returns as a constant), Precision, ImplMode, NPUDump
  (the NPU op name: the kernel that stored it), DataType (its storage dtype), GroundTruth (the ONNX node),
  GroundTruthDataType (the reference dtype), Shape — the compare tool's column meanings;
- GoldenMin, GoldenMax, GoldenAbsMax (over the reference's finite values);
- the row of toolkit.compare.metrics.compare_tensors (ROW_KEYS): CompareFailReason (why a row has no
  metrics, e.g. "fused into kernel conv_1"), OverFlow, DeviceNaN, DeviceInf, GoldenNaN, GoldenInf,
  NonFiniteMasked, ComparedCount, GoldenFP16OverflowRatio, the metrics (CosineSimilarity, MaxAbsoluteError,
  ... ExactMatchRate), WithinExpectedNoise, Abnormal, AbnormalMetrics;
- Role ("origin", "propagated" or "");
- LocalCosineSimilarity, LocalRelativeEuclideanDistance, LocalAbnormal (single-kernel isolation of origin
  rows; empty elsewhere).

``npuscope compare-dumps`` writes these columns but the Local* ones, plus GoldenDump and TargetDump, in the
fixed order of toolkit.dumps.table.COLUMNS.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from toolkit.core.records import Finding


@dataclass
class Diagnosis:
    """Everything one diagnosis found.

    Attributes:
        summary: {"verdict": PASS|WARN|FAIL, "reasons": [str], "model": str, "model_sha256": str,
            "inputs": str, "seed": int|None, "config": dict, "stage": "compile"|"precision"|"none",
            "first_divergence": {...}|None, "timings_ms": {...}, "counts": {...}}.
        table: per-tensor comparison (see module docstring).
        findings: advisor findings, most important first.
        passes: DataFrame of compiler passes (name, ran, reason, ops_before, ops_after, kernels_after,
            changed, ms).
        fusion_result: fusion_result.json content (converter format).
        precision: DataFrame (OpType, FP16, FP32) of kernel precisions by original op type, plus Casts.
        memory: {"arena_bytes", "lower_bound_bytes", "tensors_in_arena", "tensors_outside"}.
        kernel_times: DataFrame (Kernel, OpType, Precision, Nodes, HostMs) sorted by HostMs desc.
        tasks: list of {"name", "passed", "value", "detail"} task-level checks.
        triage: {"stage", "fp32_first_divergence", "evidence"} of the force_fp32 re-run.
        environment: package versions, CPU, threads, relevant environment variables.
        artifacts: {label: relative file name} of every file written next to the report.
        artifact_dirs: folders that hold artifacts the report lists but does not write itself, looked in when a
            name is not in the report's own folder (a dataset report, staged in a folder of its own before it is
            moved in: the run folder with the store's manifest.json).
        neighbourhood: DataFrame (Src, Dst, Tensor) of the edges around the origin nodes and on to the graph
            outputs (toolkit.ir.neighbourhood); empty when no origin was found. Drawn by the report's graph view.
    """

    summary: dict
    table: pd.DataFrame
    findings: list[Finding] = field(default_factory=list)
    passes: pd.DataFrame = field(default_factory=pd.DataFrame)
    fusion_result: dict = field(default_factory=dict)
    precision: pd.DataFrame = field(default_factory=pd.DataFrame)
    memory: dict = field(default_factory=dict)
    kernel_times: pd.DataFrame = field(default_factory=pd.DataFrame)
    tasks: list[dict] = field(default_factory=list)
    triage: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    artifacts: dict = field(default_factory=dict)
    neighbourhood: pd.DataFrame = field(default_factory=pd.DataFrame)
    artifact_dirs: list = field(default_factory=list)
