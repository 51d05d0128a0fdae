"""The first-divergence advisor: findings in the compare tool's order.

1. static: FP16-unrepresentable constants reported by the compiler (before any run), then (when ``advise``
   is given the model) one warning ``nondeterministic_op`` per op drawing random numbers
   (toolkit.compare.nondeterminism: its dependent tensors are not compared);
2. where FP16 overflow / NaN / Inf first appears (device non-finite where the reference is finite, or a
   finite reference value passing 65504 in a tensor stored in FP16 — which saturation mode would hide);
   NaN/Inf the FP32 reference already holds is not FP16 overflow: a graph output whose reference holds
   NaN/Inf is its own error finding, ``golden_nonfinite`` (:func:`golden_nonfinite`, when ``advise`` is given
   the graph outputs), listed right after the static findings;
3. inputs that already differ;
4. the origin: the first abnormal tensor whose producing kernel's inputs are all normal, as distinct from
   tensors that only inherit an upstream error (propagated; counted in the evidence).

Each finding carries evidence (metric values, value ranges) and a recommendation.
"""

from __future__ import annotations

import math

import pandas as pd

from toolkit.compare import nondeterminism
from toolkit.compiler.pipeline import Finding
from toolkit.precision.contract import FP16_MAX

EVIDENCE_COLS = ["CosineSimilarity", "RelativeEuclideanDistance", "MaxAbsoluteError", "MeanRelativeError",
                 "KullbackLeiblerDivergence", "GoldenMin", "GoldenMax", "GoldenAbsMax", "GoldenFP16OverflowRatio",
                 "DeviceNaN", "DeviceInf", "GoldenNaN", "GoldenInf"]


def _evidence(row) -> dict:
    ev = {}
    for c in EVIDENCE_COLS:
        v = row.get(c)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        ev[c] = float(v) if not isinstance(v, (bool, str)) else v
    ev["tensor"] = row["TensorName"]
    ev["kernel"] = row.get("Kernel", "")
    ev["precision"] = row.get("Precision", "")
    if row.get("AbnormalMetrics"):
        ev["abnormal_metrics"] = list(row["AbnormalMetrics"]) if not isinstance(row["AbnormalMetrics"], str) else row["AbnormalMetrics"]
    return ev


def _beyond_fp16(absmax) -> str:
    """|x| for a message next to 'FP16 max 65504': past the max it is rounded up (never reads 65504)."""
    from toolkit.report.console import show, show_crossed

    if absmax is not None and float(absmax) > FP16_MAX:
        return show_crossed(absmax, False, FP16_MAX, digits=4)
    return show(absmax, FP16_MAX, digits=4)


#: The advice without a graph (compare-dumps without --model): keep_dtype names ONNX nodes, device dumps do not.
NO_GRAPH_ADVICE = ("pass --model (the ONNX model the dumps come from) to check the inputs of each abnormal tensor, "
                   "find where the error starts and get a precision recommendation")


def _what(row, plan_kernels) -> str:
    """"'node'", or "kernel 'k' (node, node)" when the row's kernel groups several original nodes."""
    k = plan_kernels.get(row.get("Kernel", ""))
    nodes = k.nodes if k is not None else [row["NodeName"]]
    return f"'{row['NodeName']}'" if len(nodes) <= 1 else f"kernel '{k.name}' ({', '.join(nodes)})"


def _keep_advice(row, plan_kernels) -> str:
    return f"keep {_what(row, plan_kernels)} in FP32 (keep_dtype)"


def nonfinite_inputs(df: pd.DataFrame) -> bool:
    """Whether a graph input already holds NaN/Inf (in the reference's feed)."""
    inp = df[df["OpType"] == "Input"]
    counts = [pd.to_numeric(inp.get(c, pd.Series(0, index=inp.index)), errors="coerce").fillna(0)
              for c in ("GoldenNaN", "GoldenInf")]
    return bool(len(inp) and ((counts[0] > 0) | (counts[1] > 0)).any())


def overflow_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows where FP16 overflow/NaN/Inf shows: device non-finite where the golden is finite (``OverFlow``),
    or a *finite* golden value beyond the FP16 range (``GoldenAbsMax`` > 65504, over the finite values only)
    in a tensor stored as FP16. NaN/Inf the reference itself holds is never FP16 overflow, on either side:
    the same NaN/Inf on the device at those positions is the FP32 model's own (see
    :func:`golden_nonfinite_rows`). When a graph input already holds NaN/Inf, non-finite values downstream
    follow from it (kernels spread them differently, e.g. inf·0 in a blocked convolution), so only the
    golden-range evidence counts as FP16 overflow then."""
    stored16 = df.get("NPUDump", pd.Series("", index=df.index)).astype(str) == "float16"
    absmax = pd.to_numeric(df.get("GoldenAbsMax", pd.Series(float("nan"), index=df.index)), errors="coerce")
    beyond = stored16 & (absmax > FP16_MAX)
    if not nonfinite_inputs(df):
        return df[df["OverFlow"] | beyond]
    return df[beyond]


def golden_nonfinite_rows(df: pd.DataFrame, outputs) -> pd.DataFrame:
    """Rows of graph outputs (``outputs``: tensor names) whose FP32 reference holds NaN or Inf
    (GoldenNaN + GoldenInf > 0)."""
    counts = [pd.to_numeric(df.get(c, pd.Series(0, index=df.index)), errors="coerce").fillna(0)
              for c in ("GoldenNaN", "GoldenInf")]
    return df[df["TensorName"].isin(list(outputs)) & ((counts[0] + counts[1]) > 0) & (df["OpType"] != "Input")]


def golden_nonfinite(df: pd.DataFrame, outputs) -> list[Finding]:
    """One error finding ``golden_nonfinite`` per graph output whose FP32 reference holds NaN/Inf: the model
    itself computes NaN/Inf in FP32 (or is fed it), so no precision setting of the NPU plan can fix those
    positions and the comparison covers only the finite ones. Evidence: counts of NaN/Inf on both sides."""
    out = []
    for _, r in golden_nonfinite_rows(df, outputs).iterrows():
        ev = _evidence(r)
        nan, inf = int(r.get("GoldenNaN", 0) or 0), int(r.get("GoldenInf", 0) or 0)
        cause = ("a graph input holds NaN/Inf: fix the inputs" if nonfinite_inputs(df)
                 else "fix the model (weights, a division by zero, log of 0, ...) or its inputs")
        out.append(Finding("error", "golden_nonfinite", r["TensorName"], ev,
                           f"the FP32 reference output '{r['TensorName']}' already holds {nan} NaN and {inf} Inf: "
                           f"the model computes NaN/Inf in FP32, so no NPU precision setting can help; {cause}"))
    return out


def advise(df: pd.DataFrame, plan, compile_findings=(), fusion_hint: dict | None = None,
           outputs=None, model=None, values: dict | None = None, graph_known: bool = True) -> list[Finding]:
    """Findings, most important first (see module docstring). ``outputs``: the graph output tensor names,
    when known: adds a ``golden_nonfinite`` finding per output whose FP32 reference holds NaN/Inf. ``model``
    (the original onnx.ModelProto), when given: adds a ``nondeterministic_op`` warning per random op;
    ``values``: the reference run's tensors (to read a Dropout ``training_mode`` that is not a constant).
    ``graph_known=False`` (compare-dumps without --model: rows in dump order, producers' inputs unknown): the
    origin is only the first abnormal tensor in dump order, and the advice is to pass --model, not keep_dtype."""
    kernels = {k.name: k for k in plan.kernels}
    out: list[Finding] = list(f for f in compile_findings)
    if model is not None:
        out += nondeterminism.findings(model, outputs, values)
    if outputs is not None:
        out += golden_nonfinite(df, outputs)
    ov = overflow_rows(df)
    if len(ov):
        r = ov.iloc[0]
        out.append(Finding("error", "fp16_overflow", r["NodeName"], _evidence(r),
                           f"FP16 overflow/NaN/Inf first appears at '{r['NodeName']}' (golden |x| up to "
                           f"{_beyond_fp16(r.get('GoldenAbsMax', float('nan')))}, FP16 max {FP16_MAX:.0f}): "
                           + (_keep_advice(r, kernels) if graph_known else NO_GRAPH_ADVICE)
                           + (f", or {fusion_hint[r['NodeName']]}"
                                                         if fusion_hint and r["NodeName"] in fusion_hint else "")))
    inp = df[(df["OpType"] == "Input") & df["Abnormal"]]
    for _, r in inp.iterrows():
        out.append(Finding("error", "inconsistent_input", r["NodeName"], _evidence(r),
                           f"input '{r['NodeName']}' already differs between the two runs: feed both the same data"))
    origins = df[(df["Role"] == "origin") & (df["OpType"] != "Input")]
    propagated = int((df["Role"] == "propagated").sum())
    for i, (_, r) in enumerate(origins.iterrows()):
        ev = _evidence(r)
        ev["propagated_tensors"] = propagated
        advice = _keep_advice(r, kernels)
        if fusion_hint and r["NodeName"] in fusion_hint:
            advice += f", or {fusion_hint[r['NodeName']]}"
        kind = "first_divergence" if i == 0 else "divergence_origin"
        group = _what(r, kernels)
        where = ("is where the error starts; its inputs are normal. " + advice if graph_known else
                 "is the first abnormal tensor in dump order" + (f" (device op {group})" if group.startswith("kernel")
                                                                 else "")
                 + "; without --model its inputs cannot be checked, so the error may start earlier (in a tensor "
                 "not dumped); " + NO_GRAPH_ADVICE)
        out.append(Finding("error" if i == 0 else "warning", kind, r["NodeName"], ev,
                           f"'{r['NodeName']}' ({r['OpType']}, kernel {r.get('Kernel', '')} in {r.get('Precision', '')}) "
                           + where))
    return out


def first_divergence(df: pd.DataFrame) -> dict | None:
    """{node, op_type, tensor, kernel, kind} of the earliest overflow or origin row (None if all is normal)."""
    ov = overflow_rows(df)
    org = df[(df["Role"] == "origin") & (df["OpType"] != "Input")]
    cands = []
    if len(ov):
        cands.append((int(ov.iloc[0]["Index"]), ov.iloc[0], "fp16_overflow"))
    if len(org):
        cands.append((int(org.iloc[0]["Index"]), org.iloc[0], "abnormal"))
    if not cands:
        return None
    _, r, kind = min(cands, key=lambda c: c[0])
    return {"node": r["NodeName"], "op_type": r["OpType"], "tensor": r["TensorName"], "kernel": r.get("Kernel", ""),
            "precision": r.get("Precision", ""), "kind": kind, "evidence": _evidence(r)}
