"""Placement advisor: which short ops to move from the NPU to the host CPU.

It automates the manual procedure: start with everything on the NPU; take the short NPU kernels (simulated
duration at most ``short_factor`` launch overheads; Casts and views excluded), in plan order; for each, try
moving it alone and together with its next one or two short consumer kernels (groups of neighbours: two
transfers around a group can cost less than two around each op); keep the best try if it lowers the
end-to-end latency by more than the threshold: ``max(min_gain_us, min_gain_share · simulated latency of one
request)`` (defaults 1 µs and 1%: a move worth less is within the cost model's error). A try is a what-if on the schedule: the moved kernels are
re-timed as CPU kernels (toolkit.profile.cost.as_placed: FP32 on the host) and the schedule derives the
transfers their tensors now need (toolkit.profile.schedule).

The recommendation is an ``op_placement`` {node name: "CPU"} for every node of the moved kernels. When the
Config has the ``op_placement`` field, :func:`verify` re-checks each kept move on a plan recompiled with it
(the compiler inserts its own copies and may add Casts around the moved ops) and re-runs the schedule; only
moves that still pay off stay. The verified latency is the one to trust; the predicted one is the what-if's.

The steps table has columns :data:`PLACEMENT_COLUMNS`: Step, Moved (what-if rows: kernel names; verify rows:
node names; ';'-joined), Kind (``single`` / ``group``: what-if tries; ``verify``: a recompiled check),
LatencyBefore(ms), LatencyAfter(ms), Kept (bool). Latencies are serial end-to-end (mean measured pre +
simulated schedule of one request + mean measured post).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd

from toolkit.compiler.pipeline import recompile_precision
from toolkit.compiler.plan import Plan
from toolkit.engine import compile_model
from toolkit.profile.cost import as_placed, kernel_costs
from toolkit.profile.device import DeviceProfile
from toolkit.profile.schedule import makespan_us, schedule_plan

PLACEMENT_COLUMNS = ["Step", "Moved", "Kind", "LatencyBefore(ms)", "LatencyAfter(ms)", "Kept"]


@dataclass
class Advice:
    """The advisor's result: ``steps`` (PLACEMENT_COLUMNS), the moved kernel names, the recommended
    op_placement, and latencies in µs (serial end-to-end; ``verified_us`` None until :func:`verify` ran)."""

    steps: pd.DataFrame
    moved: list[str]
    op_placement: dict[str, str]
    baseline_us: float
    predicted_us: float
    verified_us: float | None = None
    notes: list[str] = field(default_factory=list)
    #: node names of each kept what-if move, in the order it was kept
    groups: list[list[str]] = field(default_factory=list)
    #: smallest gain (µs) a move must bring to be kept
    threshold_us: float = 1.0
    #: the op_placement the search started from (set by the caller)
    start_placement: dict[str, str] = field(default_factory=dict)

    @property
    def predicted_gain_us(self) -> float:
        return self.baseline_us - self.predicted_us

    def to_dict(self) -> dict:
        return {"moved": self.moved, "op_placement": self.op_placement, "baseline_ms": self.baseline_us / 1e3,
                "predicted_ms": self.predicted_us / 1e3, "predicted_gain_ms": self.predicted_gain_us / 1e3,
                "verified_ms": None if self.verified_us is None else self.verified_us / 1e3, "notes": self.notes}


class WhatIf:
    """Latency (µs) of a plan with some kernels re-placed on the CPU, with fixed host time around it."""

    def __init__(self, plan: Plan, costs: pd.DataFrame, device: DeviceProfile, fixed_us: float = 0.0):
        self.plan, self.device, self.fixed_us = plan, device, fixed_us
        self.rows = costs.to_dict("records")
        self.columns = list(costs.columns)

    def latency_us(self, moved: set[int]) -> float:
        rows = [as_placed(r, "CPU", self.device) if i in moved else r for i, r in enumerate(self.rows)]
        events, _ = schedule_plan(self.plan, pd.DataFrame(rows, columns=self.columns), self.device)
        return makespan_us(events) + self.fixed_us


def candidates(plan: Plan, costs: pd.DataFrame, device: DeviceProfile, short_factor: float = 3.0,
               limit: int = 64) -> list[int]:
    """Plan indices of short NPU kernels worth trying on the CPU (module docstring), in plan order; at most
    ``limit``, the shortest first."""
    limit_us = short_factor * device.launch_overhead_us
    ok = costs[(costs["Stream"] == "npu") & (costs["Fusion"] != "cast") & (~costs["IsView"].astype(bool))
               & (costs["DurationUs"] <= limit_us) & (costs["Nodes"] != "")]
    return sorted(ok.sort_values("DurationUs", kind="stable")["Index"].astype(int).head(limit).tolist())


def neighbour_groups(plan: Plan, start: int, pool: set[int], max_size: int = 3) -> list[list[int]]:
    """Groups [start, c1], [start, c1, c2] where each next member is the first short (in ``pool``) consumer
    of the group's outputs, in plan order."""
    readers: dict[str, list[int]] = {}
    for i, k in enumerate(plan.kernels):
        for t in k.inputs:
            readers.setdefault(t, []).append(i)
    group, out = [start], []
    while len(group) < max_size:
        nxt = sorted({r for g in group for t in plan.kernels[g].outputs for r in readers.get(t, [])
                      if r in pool and r not in group})
        if not nxt:
            break
        group = group + [nxt[0]]
        out.append(list(group))
    return out


def advise(plan: Plan, costs: pd.DataFrame, device: DeviceProfile, *, fixed_us: float = 0.0,
           short_factor: float = 3.0, min_gain_us: float = 1.0, min_gain_share: float = 0.01,
           max_group: int = 3) -> Advice:
    """Greedy search (module docstring). ``fixed_us``: measured host time per request (pre + post) added to
    every latency so that the table shows end-to-end figures."""
    what = WhatIf(plan, costs, device, fixed_us)
    pool = set(candidates(plan, costs, device, short_factor))
    moved: set[int] = set()
    best = base = what.latency_us(moved)
    threshold = max(min_gain_us, min_gain_share * (base - fixed_us))
    rows, groups = [], []
    for i in sorted(pool):
        if i in moved:
            continue
        tries = [[i]] + [g for g in neighbour_groups(plan, i, pool - moved, max_group)]
        results = [(g, what.latency_us(moved | set(g))) for g in tries]
        pick = min(results, key=lambda r: r[1])
        keep = pick[1] < best - threshold
        for g, lat in results:
            rows.append([len(rows) + 1, ";".join(plan.kernels[j].name for j in g), "single" if len(g) == 1 else "group",
                         best / 1e3, lat / 1e3, bool(keep and g is pick[0])])
        if keep:
            moved |= set(pick[0])
            best = pick[1]
            groups.append([n for j in pick[0] for n in plan.kernels[j].nodes])
    names = [plan.kernels[j].name for j in sorted(moved)]
    placement = {n: "CPU" for j in sorted(moved) for n in plan.kernels[j].nodes}
    return Advice(pd.DataFrame(rows, columns=PLACEMENT_COLUMNS), names, placement, base, best, groups=groups,
                  threshold_us=threshold)


def supports_placement(config) -> bool:
    """Whether this Config has the ``op_placement`` field (the compiler can place ops on the CPU)."""
    return dataclasses.is_dataclass(config) and "op_placement" in {f.name for f in dataclasses.fields(config)}


def _latency(compiled, device: DeviceProfile, fixed_us: float) -> float:
    events, _ = schedule_plan(compiled.plan, kernel_costs(compiled.plan, compiled.model, device), device)
    return makespan_us(events) + fixed_us


def verify(advice: Advice, compiled, config, device: DeviceProfile, fixed_us: float = 0.0, model=None):
    """Re-check every kept what-if move on a recompiled plan, in the order it was kept: recompile with the
    moves verified so far plus this one (the compiler adds its own copies and Casts), re-run the schedule, and
    keep the move only if the latency drops by more than ``advice.threshold_us``. Updates ``advice`` (moved,
    op_placement, verified_us; one ``verify`` row per move in ``steps``) and returns the final CompileResult
    (``None`` when nothing was moved or the Config cannot place ops)."""
    if not advice.op_placement:
        advice.verified_us = advice.baseline_us
        return None
    if not supports_placement(config):
        advice.notes.append("not verified: this build's Config has no op_placement field")
        return None
    base_placement = dict(getattr(config, "op_placement") or {})
    best, kept, final, rows = _latency(compiled, device, fixed_us), {}, None, []
    for group in advice.groups:
        trial = {**kept, **{n: "CPU" for n in group}}
        new = recompile(compiled, dataclasses.replace(config, op_placement={**base_placement, **trial}), model)
        lat = _latency(new, device, fixed_us)
        ok = lat < best - advice.threshold_us
        rows.append([len(advice.steps) + len(rows) + 1, ";".join(group), "verify", best / 1e3, lat / 1e3, ok])
        if ok:
            kept, best, final = trial, lat, new
    advice.steps = pd.concat([advice.steps, pd.DataFrame(rows, columns=PLACEMENT_COLUMNS)], ignore_index=True)
    dropped = len(advice.groups) - sum(r[5] for r in rows)
    if dropped:
        advice.notes.append(f"{dropped} what-if move(s) did not pay off on the recompiled plan (Casts and copies "
                            "the compiler adds) and were dropped")
    advice.op_placement = kept
    advice.moved = [k.name for k in (final.plan.kernels if final else []) if set(k.nodes) & set(kept)
                    and k.placement == "CPU" and k.fusion != "copy"]
    advice.verified_us = best
    return final


def recompile(compiled, config, model=None):
    """``recompile_precision`` (from place_ops on) when it accepts the config, else a full compile of
    ``model`` (the original ModelProto; default the compiled graph)."""
    try:
        return recompile_precision(compiled, config)
    except ValueError:
        plan = compiled.plan
        shapes = {n: tuple(plan.tensors[n].shape) for n in plan.graph_inputs
                  if n in plan.tensors and plan.tensors[n].shape is not None}
        return compile_model(model if model is not None else compiled.model, config, input_shapes=shapes,
                             model_path=plan.model)
