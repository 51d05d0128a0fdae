"""The first-divergence advisor: findings in the compare tool's order.

1. static: FP16-unrepresentable constants reported by the compiler (before any run);
2. where FP16 overflow / NaN / Inf first appears (device non-finite where the reference is finite, or the
   reference itself passing 65504 in a tensor stored in FP16 — which saturation mode would hide);
3. inputs that already differ;
4. the origin: the first abnormal tensor whose producing kernel's inputs are all normal, as distinct from
   tensors that only inherit an upstream error (propagated; counted in the evidence).

Each finding carries evidence (metric values, value ranges) and a recommendation.
"""

from __future__ import annotations

import math

import pandas as pd

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


def _keep_advice(row, plan_kernels) -> str:
    k = plan_kernels.get(row.get("Kernel", ""))
    nodes = k.nodes if k is not None else [row["NodeName"]]
    what = f"'{row['NodeName']}'" if len(nodes) <= 1 else f"kernel '{k.name}' ({', '.join(nodes)})"
    return f"keep {what} in FP32 (keep_dtype)"


def nonfinite_inputs(df: pd.DataFrame) -> bool:
    """Whether a graph input already holds NaN/Inf (in the reference's feed)."""
    inp = df[df["OpType"] == "Input"]
    counts = [pd.to_numeric(inp.get(c, pd.Series(0, index=inp.index)), errors="coerce").fillna(0)
              for c in ("GoldenNaN", "GoldenInf")]
    return bool(len(inp) and ((counts[0] > 0) | (counts[1] > 0)).any())


def overflow_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows where FP16 overflow/NaN/Inf shows: device non-finite with finite golden, or golden beyond the
    FP16 range in a tensor stored as FP16. When a graph input already holds NaN/Inf, non-finite values
    downstream follow from it (kernels spread them differently, e.g. inf·0 in a blocked convolution), so
    only the golden-range evidence counts as FP16 overflow then."""
    stored16 = df.get("NPUDump", pd.Series("", index=df.index)).astype(str) == "float16"
    ratio = pd.to_numeric(df.get("GoldenFP16OverflowRatio", pd.Series(float("nan"), index=df.index)), errors="coerce")
    beyond = stored16 & (ratio > 0)
    if not nonfinite_inputs(df):
        return df[df["OverFlow"] | beyond]
    # the ratio counts the reference's own inf too: require a *finite* reference value beyond the FP16 range
    absmax = pd.to_numeric(df.get("GoldenAbsMax", pd.Series(float("nan"), index=df.index)), errors="coerce")
    return df[stored16 & (absmax > FP16_MAX)]


def advise(df: pd.DataFrame, plan, compile_findings=(), fusion_hint: dict | None = None) -> list[Finding]:
    """Findings, most important first (see module docstring)."""
    kernels = {k.name: k for k in plan.kernels}
    out: list[Finding] = list(f for f in compile_findings)
    ov = overflow_rows(df)
    if len(ov):
        r = ov.iloc[0]
        out.append(Finding("error", "fp16_overflow", r["NodeName"], _evidence(r),
                           f"FP16 overflow/NaN/Inf first appears at '{r['NodeName']}' (golden |x| up to "
                           f"{r.get('GoldenAbsMax', float('nan')):.4g}, FP16 max {FP16_MAX:.0f}): "
                           + _keep_advice(r, kernels) + (f", or {fusion_hint[r['NodeName']]}"
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
        out.append(Finding("error" if i == 0 else "warning", kind, r["NodeName"], ev,
                           f"'{r['NodeName']}' ({r['OpType']}, kernel {r.get('Kernel', '')} in {r.get('Precision', '')}) "
                           f"is where the error starts; its inputs are normal. {advice}"))
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
