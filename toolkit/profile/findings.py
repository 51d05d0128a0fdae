"""Profile findings: small registered rules over the cost table, the schedule and the measured host times.

Each rule is ``fn(data: ProfileData) -> list[Finding]`` registered with :func:`finding_rule`; :func:`run_rules`
runs them in registration order. Rules and their thresholds (module constants):

- ``launch_overhead``: launch-bound NPU kernels (launch overhead >= their roofline time) together spend at
  least :data:`LAUNCH_SHARE` of the device time on launches.
- ``cpu_fallback`` / ``cpu_placed``: one per CPU-placed kernel (``cpu_placed`` when the config's op_placement
  names it, ``cpu_fallback`` otherwise), with its time and the transfers around it.
- ``cast_islands``: Cast kernels take at least :data:`CAST_SHARE` of the device time; names the FP32 kernels
  surrounded by Casts (islands of FP32 in FP16 code).
- ``transfers``: host-device copies take at least :data:`TRANSFER_SHARE` of one request's schedule.
- ``prepost_bottleneck``: measured pre + post time per request exceeds the simulated device schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from toolkit.compiler.pipeline import Finding
from toolkit.profile.device import DeviceProfile

LAUNCH_SHARE = 0.10
CAST_SHARE = 0.05
TRANSFER_SHARE = 0.20
RULES: list[tuple[str, Callable]] = []


@dataclass
class ProfileData:
    """What the rules read. ``costs``: toolkit.profile.cost.COST_COLUMNS; ``events``: one request's schedule
    (toolkit.profile.schedule.EVENT_COLUMNS); ``pre_ms``/``post_ms``: measured per request (empty if not
    given); ``user_placed``: node names the config's op_placement puts on the CPU; ``cast_of``: {Cast
    kernel: tensor it converts}; ``readers``: {tensor: kernel names reading it}."""

    costs: pd.DataFrame
    events: pd.DataFrame
    device: DeviceProfile
    pre_ms: list[float] = field(default_factory=list)
    post_ms: list[float] = field(default_factory=list)
    user_placed: set[str] = field(default_factory=set)
    producers: dict[str, str] = field(default_factory=dict)
    readers: dict[str, list[str]] = field(default_factory=dict)
    kernel_io: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    #: {kernel: why the compiler put it on the CPU} (the compile's cpu_fallback findings)
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def npu(self) -> pd.DataFrame:
        return self.costs[self.costs["Stream"] == "npu"]

    @property
    def device_us(self) -> float:
        return float(self.npu["DurationUs"].sum())

    @property
    def makespan_us(self) -> float:
        ev = self.events
        return float(ev["EndUs"].max() - ev["StartUs"].min()) if len(ev) else 0.0


def finding_rule(name: str):
    """Register ``fn(data) -> list[Finding]`` under ``name``."""
    def deco(fn):
        RULES.append((name, fn))
        return fn
    return deco


def run_rules(data: ProfileData) -> list[Finding]:
    """Every registered rule's findings, in registration order."""
    out: list[Finding] = []
    for _name, fn in RULES:
        out += fn(data)
    return out


def _ms(us: float) -> float:
    return round(us / 1e3, 4)


@finding_rule("launch_overhead")
def launch_overhead(d: ProfileData) -> list[Finding]:
    small = d.npu[d.npu["Bound"] == "launch"]
    total = d.device_us
    launch = float(small["LaunchUs"].sum())
    if not len(small) or total <= 0 or launch / total < LAUNCH_SHARE:
        return []
    top = small.groupby("OpType")["DurationUs"].agg(["count", "sum"]).sort_values("sum", ascending=False).head(5)
    return [Finding("warning", "launch_overhead", f"{len(small)} small NPU kernels",
                    {"kernels": len(small), "launch_ms": _ms(launch), "device_ms": _ms(total),
                     "share": round(launch / total, 4), "launch_overhead_us": d.device.launch_overhead_us,
                     "top_op_types": {k: int(v) for k, v in top["count"].items()}},
                    "launch overhead dominates these kernels: enable fusion (fusion_level 2), batch requests, or "
                    "move the tiniest ops to the CPU (see the placement advisor)")]


def _copies_around(d: ProfileData, kernel: str) -> pd.DataFrame:
    ev = d.events
    ids = set(ev.index[ev["Kernel"] == kernel])
    if not ids:
        return ev.iloc[0:0]
    task = int(ev.loc[next(iter(ids)), "Task"])
    deps = {int(x) for x in str(ev.loc[next(iter(ids)), "Deps"]).split(";") if x}
    near = ev["Deps"].astype(str).str.split(";").apply(lambda xs: str(task) in xs)
    return ev[(ev["Stream"] == "copy") & (ev["Task"].isin(deps) | near)]


@finding_rule("cpu_fallback")
def cpu_kernels(d: ProfileData) -> list[Finding]:
    out = []
    for r in d.costs[d.costs["Stream"] == "host"].itertuples(index=False):
        copies = _copies_around(d, r.Kernel)
        user = bool(set(str(r.Nodes).split(";")) & d.user_placed)
        ev = {"op_type": r.OpType, "cpu_ms": _ms(r.DurationUs), "transfers": len(copies),
              "transfer_ms": _ms(float(copies["DurationUs"].sum())), "reason": d.reasons.get(r.Kernel, "")}
        if user:
            out.append(Finding("info", "cpu_placed", r.Kernel, ev, "placed on the CPU by op_placement"))
        else:
            why = d.reasons.get(r.Kernel) or "the device does not run it"
            out.append(Finding("warning", "cpu_fallback", r.Kernel, ev,
                               f"{r.OpType} runs on the host CPU in FP32 ({why}); keep such ops at the start or end "
                               "of the graph, or replace them, to avoid transfers"))
    return out


def _islands(d: ProfileData, casts: set[str]) -> list[str]:
    out = []
    for r in d.npu[(d.npu["Precision"] == "fp32") & (d.npu["Fusion"] != "cast")].itertuples(index=False):
        ins, outs = d.kernel_io.get(r.Kernel, ([], []))
        fed = any(d.producers.get(t) in casts for t in ins)
        feeds = any(k in casts for t in outs for k in d.readers.get(t, []))
        if fed and feeds:
            out.append(r.Kernel)
    return out


@finding_rule("cast_islands")
def cast_islands(d: ProfileData) -> list[Finding]:
    casts = d.npu[d.npu["Fusion"] == "cast"]
    total = d.device_us
    cast_us = float(casts["DurationUs"].sum())
    if not len(casts) or total <= 0 or cast_us / total < CAST_SHARE:
        return []
    islands = _islands(d, set(casts["Kernel"]))
    return [Finding("warning", "cast_islands", f"{len(casts)} Cast kernels",
                    {"casts": len(casts), "cast_ms": _ms(cast_us), "share": round(cast_us / total, 4),
                     "fp32_islands": islands[:10], "islands": len(islands)},
                    "Casts around FP32 kernels cost time: if these FP32 islands are not needed for accuracy, drop them "
                    "from the black list (modify_mixlist) or keep_dtype; otherwise keep whole regions in FP32")]


@finding_rule("transfers")
def transfers(d: ProfileData) -> list[Finding]:
    copies = d.events[d.events["Stream"] == "copy"]
    span = d.makespan_us
    copy_us = float(copies["DurationUs"].sum())
    if not len(copies) or span <= 0 or copy_us / span < TRANSFER_SHARE:
        return []
    big = copies.sort_values("DurationUs", ascending=False).head(5)
    return [Finding("warning", "transfers", f"{len(copies)} host-device copies",
                    {"copies": len(copies), "copy_ms": _ms(copy_us), "schedule_ms": _ms(span),
                     "share": round(copy_us / span, 4),
                     "largest": {str(r.Name): _ms(r.DurationUs) for r in big.itertuples(index=False)}},
                    "transfers take a large share of each request: keep CPU-placed ops at the graph's edges, send "
                    "smaller dtypes (uint8 images, FP16), or fuse the ops that force the round trips")]


@finding_rule("prepost_bottleneck")
def prepost_bottleneck(d: ProfileData) -> list[Finding]:
    if not d.pre_ms and not d.post_ms:
        return []
    pre = sum(d.pre_ms) / len(d.pre_ms) if d.pre_ms else 0.0
    post = sum(d.post_ms) / len(d.post_ms) if d.post_ms else 0.0
    dev_ms = d.makespan_us / 1e3
    if pre + post <= dev_ms:
        return []
    worst = "pre-processing" if pre >= post else "post-processing"
    return [Finding("warning", "prepost_bottleneck", worst,
                    {"pre_ms_measured": round(pre, 4), "post_ms_measured": round(post, 4),
                     "device_ms_simulated": round(dev_ms, 4), "host_share": round((pre + post) / (pre + post + dev_ms), 4)},
                    f"{worst} on the host takes longer than the simulated device work: overlap it with the device "
                    "(pipelined schedule), vectorise or move resize/normalise/box-finding into the model or "
                    "onto device media engines, or run several host workers")]
