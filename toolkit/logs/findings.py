"""Findings over an op summary (toolkit.profile.optable schema), one small registered rule each.

``op_summary_findings(summary) -> list[Finding]`` runs every rule per Source (one profile at a time). Times
are µs; shares are of the source's summed Task Duration(us). Rules and their lines:

- ``cpu_fallback`` (warning): a source with accelerator tasks (AI_CORE, AI_VECTOR_CORE, MIX_AIC, MIX_AIV or
  any other non-CPU, non-MEMCPY task type) also has AI_CPU / HOST_CPU tasks — ops that fell back to the CPU.
- ``cast_overhead`` (warning): Cast / TransData tasks take >= :data:`CAST_SHARE` of the time — the Casts around
  FP32 islands inside an FP16 graph.
- ``transfer_overhead`` (warning): MEMCPY tasks (or Memcpy* op types) take >= :data:`TRANSFER_SHARE`.
- ``launch_overhead`` (warning): at least :data:`MIN_TASKS` tasks, at least half shorter than
  :data:`SMALL_KERNEL_US`, and the streams idle (gaps between tasks, or Task Wait Time(us)) for at least
  :data:`IDLE_SHARE` of their span: launching small kernels costs more than running them.
- ``hotspot`` (info): one op type takes >= :data:`HOTSPOT_SHARE` of the time.

``breakdown_findings(breakdown)`` (columns Stage, Ms, TimeKind) adds ``pre_post_bottleneck`` (warning) when
the pre + post stages take longer than the device stage.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from toolkit.core.records import Finding

CAST_SHARE = 0.05
TRANSFER_SHARE = 0.10
SMALL_KERNEL_US = 20.0
MIN_TASKS = 20
IDLE_SHARE = 0.5
HOTSPOT_SHARE = 0.5
CPU_TYPES = {"AI_CPU", "HOST_CPU"}
CAST_TYPES = {"cast", "transdata"}
MEMCPY_OPS = {"memcpyfromhost", "memcpytohost", "memcpy", "memcpyasync"}

_RULES: list[Callable[[pd.DataFrame, str], list[Finding]]] = []


def rule(fn):
    """Register an op-summary rule ``fn(rows_of_one_source, source) -> list[Finding]``."""
    _RULES.append(fn)
    return fn


def _total(df: pd.DataFrame) -> float:
    return float(df["Task Duration(us)"].sum())


def _share_evidence(part: pd.DataFrame, total: float) -> dict:
    t = _total(part)
    return {"tasks": len(part), "time_us": round(t, 3), "share_pct": round(100 * t / total, 2) if total else 0.0}


def _top_types(df: pd.DataFrame, n: int = 5) -> str:
    s = df.groupby("OP Type")["Task Duration(us)"].sum().sort_values(ascending=False).head(n)
    return ", ".join(f"{k or '?'} {v:.4g} us" for k, v in s.items())


@rule
def cpu_fallback(df: pd.DataFrame, source: str) -> list[Finding]:
    types = df["Task Type"].astype(str)
    cpu = types.isin(CPU_TYPES)
    accel = ~cpu & (types != "MEMCPY") & (types != "")
    if not cpu.any() or not accel.any():
        return []
    ev = _share_evidence(df[cpu], _total(df)) | {"op_types": _top_types(df[cpu])}
    return [Finding("warning", "cpu_fallback", source, ev,
                    "these ops ran on the CPU next to device kernels (unsupported op, dtype or dynamic shape): "
                    "replace them, make their shapes static, or move them into pre/post-processing")]


@rule
def cast_overhead(df: pd.DataFrame, source: str) -> list[Finding]:
    casts = df[df["OP Type"].astype(str).str.lower().isin(CAST_TYPES)]
    total = _total(df)
    if casts.empty or total <= 0 or _total(casts) / total < CAST_SHARE:
        return []
    return [Finding("warning", "cast_overhead", source, _share_evidence(casts, total),
                    "Casts surround FP32 islands in the FP16 graph: keep the whole island's neighbours in one "
                    "precision (widen the FP16 region or merge the FP32 ops) to drop the conversions")]


@rule
def transfer_overhead(df: pd.DataFrame, source: str) -> list[Finding]:
    mask = (df["Task Type"] == "MEMCPY") | df["OP Type"].astype(str).str.lower().isin(MEMCPY_OPS)
    total = _total(df)
    if not mask.any() or total <= 0 or _total(df[mask]) / total < TRANSFER_SHARE:
        return []
    return [Finding("warning", "transfer_overhead", source, _share_evidence(df[mask], total),
                    "host-device copies take a large share: keep data on the device between ops, avoid CPU ops "
                    "in the middle of the graph, overlap copies with compute")]


def idle_share(df: pd.DataFrame) -> tuple[float, float]:
    """(idle µs, span µs) summed over streams: span = last end − first start, idle = span − busy (union of
    [start, start + duration) intervals). Rows without a start time are ignored."""
    idle = span = 0.0
    timed = df.dropna(subset=["Task Start Time(us)"])
    for _, s in timed.groupby(timed["Stream ID"].fillna(-1)):
        start = s["Task Start Time(us)"].to_numpy(float)
        end = start + s["Task Duration(us)"].to_numpy(float)
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
        reach = np.maximum.accumulate(end)
        gaps = np.clip(start[1:] - reach[:-1], 0, None).sum() if len(start) > 1 else 0.0
        span += float(reach[-1] - start[0])
        idle += float(gaps)
    return idle, span


@rule
def launch_overhead(df: pd.DataFrame, source: str) -> list[Finding]:
    if len(df) < MIN_TASKS:
        return []
    small = df["Task Duration(us)"] < SMALL_KERNEL_US
    if small.mean() < 0.5:
        return []
    idle, span = idle_share(df)
    busy = _total(df)
    wait = float(df["Task Wait Time(us)"].sum(skipna=True))
    share = idle / span if span > 0 else (wait / (wait + busy) if wait + busy > 0 else 0.0)
    if share < IDLE_SHARE:
        return []
    ev = {"tasks": len(df), "small_tasks": int(small.sum()), "small_kernel_us": SMALL_KERNEL_US,
          "median_us": round(float(df["Task Duration(us)"].median()), 3), "idle_us": round(idle, 3),
          "span_us": round(span, 3), "wait_us": round(wait, 3), "idle_pct": round(100 * share, 1)}
    return [Finding("warning", "launch_overhead", source, ev,
                    "most kernels are shorter than their launch gap: fuse small ops (buffer fusion), batch more "
                    "work per call, or run fewer, larger kernels")]


@rule
def hotspot(df: pd.DataFrame, source: str) -> list[Finding]:
    total = _total(df)
    if total <= 0:
        return []
    by_type = df.groupby("OP Type")["Task Duration(us)"].sum().sort_values(ascending=False)
    if by_type.empty or by_type.iloc[0] / total < HOTSPOT_SHARE:
        return []
    op = str(by_type.index[0])
    return [Finding("info", "hotspot", source,
                    {"op_type": op, "time_us": round(float(by_type.iloc[0]), 3),
                     "share_pct": round(100 * float(by_type.iloc[0]) / total, 1)},
                    f"{op or 'one op type'} dominates: optimise it first (shapes, format, precision, fusion)")]


def op_summary_findings(summary: pd.DataFrame) -> list[Finding]:
    """Every registered rule over the rows of each (Source, Time Kind) — times of different clocks (e.g. a
    profile's simulated device tasks and its measured host kernels) are never analysed together; the subject
    is the Source, with ``[Time Kind]`` appended when the Source holds several. Rows with a NaN duration are
    left out."""
    df = summary.dropna(subset=["Task Duration(us)"])
    kinds = df.groupby("Source", sort=False)["Time Kind"].nunique()
    out = []
    for (source, kind), rows in df.groupby(["Source", "Time Kind"], sort=False):
        subject = str(source) if kinds[source] <= 1 else f"{source} [{kind}]"
        for fn in _RULES:
            out.extend(fn(rows, subject))
    return out


def breakdown_findings(breakdown: pd.DataFrame | None) -> list[Finding]:
    """``pre_post_bottleneck`` when stages pre + post (Stage names containing "pre"/"post") exceed the
    device stage(s) (Stage containing "device" but not "to"); Ms in milliseconds."""
    if breakdown is None or breakdown.empty:
        return []
    stage = breakdown["Stage"].astype(str).str.lower()
    ms = pd.to_numeric(breakdown["Ms"], errors="coerce").fillna(0.0)
    prepost = float(ms[stage.str.startswith(("pre", "post"))].sum())
    device = float(ms[stage.str.contains("device") & ~stage.str.contains("to")].sum())
    if device <= 0 or prepost <= device:
        return []
    return [Finding("warning", "pre_post_bottleneck", "end to end",
                    {"pre_post_ms": round(prepost, 3), "device_ms": round(device, 3)},
                    "pre/post-processing takes longer than the model on the device: move it to the device "
                    "(e.g. normalisation into the graph), vectorise it, or overlap it with inference")]
