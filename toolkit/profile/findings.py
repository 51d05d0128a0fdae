"""Profile findings: small registered rules over the cost table, the schedule and the measured host times.

Each rule is ``fn(data: ProfileData) -> list[Finding]`` registered with :func:`finding_rule`; :func:`run_rules`
runs them in registration order. Rules and their thresholds (module constants):

- ``launch_overhead``: launch-bound NPU kernels (launch overhead >= their roofline time) together spend at
  least :data:`LAUNCH_SHARE` of the device time on launches. The advice follows the config (:func:`launch_advice`):
  raise ``fusion_level`` or switch fusion rules back on only when they are lower / off.
- ``cpu_fallback`` / ``cpu_placement``: one per CPU-placed kernel. ``cpu_fallback`` (warning) when the op cannot
  run on the NPU (the compiler's unsupported-op finding, or an op type the device profile lists in
  ``unsupported_ops``); ``cpu_placement`` (info) when the user's op_placement put it there (by node name, an
  original node name, or op type), worded "placed on the CPU by op_placement".
- ``cast_islands``: Cast kernels take at least :data:`CAST_SHARE` of the device time; names the FP32 kernels
  surrounded by Casts (islands of FP32 in FP16 code) and the graph inputs cast on the device. The
  recommendation follows the evidence (:func:`cast_advice`): drop FP32 islands from the black list only when
  there are islands; for Casts of FP32 graph inputs, feed the model FP16 (cast on the host); for other Casts,
  fewer, larger FP32 regions.
- ``transfers``: host-device copies take at least :data:`TRANSFER_SHARE` of one request's schedule.
- ``prepost_bottleneck``: measured pre + post time per request exceeds the simulated device schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from toolkit.core.records import Finding
from toolkit.profile.device import DeviceProfile

LAUNCH_SHARE = 0.10
CAST_SHARE = 0.05
TRANSFER_SHARE = 0.20
RULES: list[tuple[str, Callable]] = []


@dataclass
class ProfileData:
    """What the rules read. ``costs``: toolkit.profile.cost.COST_COLUMNS; ``events``: one request's schedule
    (toolkit.profile.schedule.EVENT_COLUMNS); ``pre_ms``/``post_ms``: measured per request (empty if not
    given); ``user_placed``: the keys (node names or op types) the user's op_placement sets to "CPU" (not the
    entries ``profile`` adds for the device's unsupported_ops); ``readers``: {tensor: kernel names reading it};
    ``config``: the compile config (fusion_level, fusion_switch_file: what the launch advice may suggest)."""

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
    config: object = None

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


@finding_rule("nothing_timed")
def nothing_timed(d: ProfileData) -> list[Finding]:
    """No kernel in the plan (every output folded at compile time or a graph input passed through): a device
    time of 0 ms and an unbounded throughput say nothing of the device."""
    if len(d.costs):
        return []
    return [Finding("warning", "nothing_timed", "plan", {"kernels": 0},
                    "no kernel runs: every output is a constant folded at compile time or a graph input passed "
                    "through, so the simulated device time is 0 ms and the throughput unbounded; they say nothing of "
                    "the device: profile a model whose outputs depend on its inputs")]


@finding_rule("launch_overhead")
def launch_overhead(d: ProfileData) -> list[Finding]:
    small = d.npu[d.npu["Bound"] == "launch"]
    total = d.device_us
    launch = float(small["LaunchUs"].sum())
    if not len(small) or total <= 0 or launch / total < LAUNCH_SHARE:
        return []
    top = small.groupby("OpType")["DurationUs"].agg(["count", "sum"]).sort_values("sum", ascending=False).head(5)
    level = getattr(d.config, "fusion_level", None)
    return [Finding("warning", "launch_overhead", f"{len(small)} small NPU kernels",
                    {"kernels": len(small), "launch_ms": _ms(launch), "device_ms": _ms(total),
                     "share": round(launch / total, 4), "launch_overhead_us": d.device.launch_overhead_us,
                     "top_op_types": {k: int(v) for k, v in top["count"].items()}, "fusion_level": level,
                     "fusion_switched_off": _switched_off(d.config)},
                    launch_advice(d.config))]


def _switched_off(config) -> list[str]:
    """'GraphFusion.Rule' / 'UBFusion.Rule' entries the config's fusion_switch_file sets to "off"."""
    sw = (getattr(config, "fusion_switch_file", None) or {}).get("Switch", {})
    return [f"{lvl}.{name}" for lvl, table in sw.items() if isinstance(table, dict)
            for name, val in table.items() if val == "off"]


def launch_advice(config) -> str:
    """What to do about launch-bound kernels, given the compile ``config`` (None: unknown): fuse more only when
    ``fusion_level`` < 2 or fusion rules are switched off; otherwise the kernels are already fused wherever a
    rule matches, so batch requests or move the tiniest ops to the CPU."""
    rest = "batch requests (one launch then covers several inputs), or move the tiniest ops to the CPU (see the " \
           "placement advisor)"
    if config is None:
        return f"launch overhead dominates these kernels: check fusion is on (fusion_level 2), {rest}"
    level, off = getattr(config, "fusion_level", 2), _switched_off(config)
    fixes = []
    if level < 2:
        fixes.append(f"raise fusion_level from {level} to 2 (fusion merges small kernels into one launch)")
    if off:
        fixes.append(f"switch back on the fusion rules fusion_switch_file turns off ({', '.join(off[:4])}"
                     f"{', ...' if len(off) > 4 else ''})")
    if fixes:
        return f"launch overhead dominates these kernels: {'; '.join(fixes)}; or {rest}"
    return (f"launch overhead dominates these kernels, although fusion is fully on (fusion_level {level}, no rule "
            f"switched off): {rest}")


def _copies_around(d: ProfileData, kernel: str) -> pd.DataFrame:
    ev = d.events
    ids = set(ev.index[ev["Kernel"] == kernel])
    if not ids:
        return ev.iloc[0:0]
    task = int(ev.loc[next(iter(ids)), "Task"])
    deps = {int(x) for x in str(ev.loc[next(iter(ids)), "Deps"]).split(";") if x}
    near = ev["Deps"].astype(str).str.split(";").apply(lambda xs: str(task) in xs)
    return ev[(ev["Stream"] == "copy") & (ev["Task"].isin(deps) | near)]


def placement_cause(d: ProfileData, kernel: str, op_type: str, nodes: list[str]) -> tuple[str, str]:
    """(kind, why) of a CPU-placed kernel: ("cpu_fallback", reason) when the compiler found the op unsupported on
    the NPU or the device profile lists its op type in unsupported_ops (these win over op_placement);
    ("cpu_placement", the op_placement key) when the user's op_placement names one of its nodes or its op type;
    else ("cpu_fallback", "placed on the CPU by the compiler")."""
    if d.reasons.get(kernel):
        return "cpu_fallback", d.reasons[kernel]
    if op_type in d.device.unsupported_ops:
        return "cpu_fallback", f"device profile {d.device.name} lists {op_type} in unsupported_ops"
    key = next((n for n in nodes if n in d.user_placed), op_type if op_type in d.user_placed else None)
    if key is not None:
        return "cpu_placement", key
    return "cpu_fallback", "placed on the CPU by the compiler"


@finding_rule("cpu_fallback")
def cpu_kernels(d: ProfileData) -> list[Finding]:
    out = []
    for r in d.costs[d.costs["Stream"] == "host"].itertuples(index=False):
        copies = _copies_around(d, r.Kernel)
        kind, why = placement_cause(d, r.Kernel, r.OpType, str(r.Nodes).split(";"))
        ev = {"op_type": r.OpType, "cpu_ms": _ms(r.DurationUs), "transfers": len(copies),
              "transfer_ms": _ms(float(copies["DurationUs"].sum())), "reason": why}
        if kind == "cpu_placement":
            ev["op_placement_key"] = why
            ev["reason"] = f"op_placement['{why}'] = 'CPU'"
            out.append(Finding("info", "cpu_placement", r.Kernel, ev,
                               f"{r.OpType} placed on the CPU by op_placement['{why}'] (runs in FP32 on the host, "
                               f"{len(copies)} transfer(s) around it); remove the entry to run it on the NPU"))
        else:
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
    inputs = _input_casts(d, casts)
    return [Finding("warning", "cast_islands", f"{len(casts)} Cast kernels",
                    {"casts": len(casts), "cast_ms": _ms(cast_us), "share": round(cast_us / total, 4),
                     "fp32_islands": islands[:10], "islands": len(islands),
                     "input_casts": sorted(inputs.values())[:10], "input_cast_ms": _ms(_us_of(casts, inputs)),
                     "other_casts": len(casts) - len(inputs)},
                    cast_advice(islands, sorted(inputs.values()), len(casts) - len(inputs)))]


def _input_casts(d: ProfileData, casts: pd.DataFrame) -> dict[str, str]:
    """{Cast kernel: graph input it converts} for the Casts that read a graph input (no kernel produces it)."""
    out = {}
    for k in casts["Kernel"]:
        ins = d.kernel_io.get(k, ([], []))[0]
        if ins and all(d.producers.get(t) is None for t in ins):
            out[k] = ";".join(ins)
    return out


def _us_of(casts: pd.DataFrame, kernels) -> float:
    return float(casts[casts["Kernel"].isin(list(kernels))]["DurationUs"].sum())


def cast_advice(islands: list[str], input_casts: list[str], other: int) -> str:
    """The cast_islands recommendation for what the evidence holds: FP32 islands (FP32 kernels with Casts on
    both sides), Casts of FP32 graph inputs, and ``other`` Casts (at the borders of FP32 regions longer than one
    kernel, or before CPU-placed ops). Only the parts present are named."""
    parts = []
    if islands:
        parts.append("Casts around FP32 kernels cost time: if these FP32 islands are not needed for accuracy, drop "
                     "them from the black list (modify_mixlist) or keep_dtype; otherwise keep whole regions in FP32")
    if input_casts:
        parts.append(f"the device casts the FP32 graph input(s) {', '.join(input_casts[:4])}"
                     f"{', ...' if len(input_casts) > 4 else ''} to FP16 for every request: export the model with "
                     "FP16 inputs and cast on the host in pre-processing (this also halves the host-to-device copy)")
    if other and not islands:
        parts.append(f"{other} Cast(s) sit at the borders of FP32 regions or before CPU-placed ops: fewer, larger "
                     "FP32 regions (modify_mixlist / keep_dtype) or keeping CPU ops at the graph's edges need fewer "
                     "Casts")
    return "; ".join(parts)


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
