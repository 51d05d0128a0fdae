"""``npuscope memcheck``: static, dynamic and differential checks of a memory plan, and a verified fix.

- static: :func:`toolkit.memcheck.static_check.static_conflicts` (writer, victim, late reader);
- dynamic: :func:`toolkit.memcheck.dynamic_check.dynamic_check` (poisoned, owner-tagged run);
- differential: the same plan with reuse off (every tensor its own range) vs. the plan under check; the first
  tensor (in kernel order, then the graph outputs) that is not bitwise equal is attributed to the conflict
  whose late read produced it;
- fix: the victims get exclusive ranges (``disable_reuse``), and all three checks run again on that plan.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from toolkit.compiler.passes.plan_memory import place
from toolkit.engine import npu_runtime
from toolkit.memcheck.dynamic_check import dynamic_check
from toolkit.memcheck.planio import attach_plan, no_reuse_plan, relocate
from toolkit.memcheck.static_check import Conflict, static_conflicts
from toolkit.ort.terminate import reraise_if_terminated

#: Columns of conflicts.csv (one row per static conflict).
CONFLICT_COLUMNS = ["Writer", "WriterStep", "Written", "Victim", "Reader", "ReaderStep", "Kind", "OverlapStart",
                    "OverlapEnd", "SeenDynamically", "Detail"]


@dataclass
class CheckRound:
    """One plan checked three ways. divergence: {tensor, step, kernel, max_abs_diff, conflict} or None;
    error: a kernel failure under poisoned memory (text) or None."""

    plan: object
    conflicts: list[Conflict]
    events: list
    divergence: dict | None
    error: str | None = None

    @property
    def clean(self) -> bool:
        return not self.conflicts and not self.events and self.divergence is None and self.error is None


@dataclass
class MemcheckResult:
    check: CheckRound
    fix: dict = field(default_factory=dict)  # {"disable_reuse": [...], "verified": bool, "arena_bytes": int, ...}

    def conflicts_table(self) -> pd.DataFrame:
        seen = {(e.tensor, e.reader_step) for e in self.check.events}
        rows = [[c.writer, c.writer_step, c.written, c.victim, c.reader, c.reader_step, c.kind, c.overlap_start,
                 c.overlap_end, (c.victim, c.reader_step) in seen, c.detail] for c in self.check.conflicts]
        return pd.DataFrame(rows, columns=CONFLICT_COLUMNS)


def _equal(a, b) -> bool:
    if a is None or b is None or isinstance(a, list) or isinstance(b, list):
        return True
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def _diff(a, b) -> float:
    """Largest |a - b| over elements that differ (equal values, equal infinities and NaN against NaN count 0);
    inf when an infinity meets another value, NaN when the only differences involve one NaN, or when the two
    cannot be subtracted (strings, shapes that do not broadcast). Never emits a numpy RuntimeWarning."""
    try:
        a, b = (np.asarray(v) for v in (a, b))
        wide = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
        a, b = a.astype(wide), b.astype(wide)
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.abs(a - b))
    except (TypeError, ValueError):
        return float("nan")
    known = d[~np.isnan(d)]
    return float(known.max()) if known.size else (0.0 if not d.size else float("nan"))


def first_divergence(plan, ref, got, conflicts) -> dict | None:
    """The first tensor (kernel order, then graph outputs) whose value differs between the reuse-off run
    ``ref`` and ``got`` (RunResults with dumps), with the conflict that explains it: the one whose late reader
    is the kernel that wrote it, else the latest conflict read at or before that step."""
    hit = None
    for i, k in enumerate(plan.kernels):
        for t in k.outputs:
            if t in ref.dumps and t in got.dumps and not _equal(ref.dumps[t], got.dumps[t]):
                hit = (t, i, k.name, _diff(ref.dumps[t], got.dumps[t]))
                break
        if hit:
            break
    if hit is None:
        n = len(plan.kernels)
        for t in plan.graph_outputs:
            if t in ref.outputs and not _equal(ref.outputs[t], got.outputs.get(t)):
                hit = (t, n, "<graph outputs>", _diff(ref.outputs[t], got.outputs[t]))
                break
    if hit is None:
        return None
    t, step, kernel, d = hit
    cands = [c for c in conflicts if c.reader_step == step] or \
            sorted((c for c in conflicts if c.reader_step <= step), key=lambda c: -c.reader_step)
    c = cands[0] if cands else None
    return {"tensor": t, "step": step, "kernel": kernel, "max_abs_diff": d,
            "conflict": c.to_dict() if c is not None else None}


def check_plan(compiled, plan, feeds) -> CheckRound:
    """Static + dynamic + differential check of ``plan`` (same kernels as ``compiled``) on ``feeds``."""
    conflicts = static_conflicts(plan)
    ref = npu_runtime(attach_plan(compiled, no_reuse_plan(plan))).run(feeds, dump=True)
    rt = npu_runtime(attach_plan(compiled, plan))
    try:
        got, events = dynamic_check(rt, feeds, dump=True)
    except Exception as exc:  # a kernel failed on poisoned bytes: that is a finding, not a crash
        reraise_if_terminated(exc)
        return CheckRound(plan, conflicts, list(getattr(exc, "memcheck_events", [])), None,
                          f"{type(exc).__name__}: {exc}")
    return CheckRound(plan, conflicts, events, first_divergence(plan, ref, got, conflicts))


def memcheck(compiled, plan, feeds, verify_fix: bool = True) -> MemcheckResult:
    """Check ``plan`` and, when it has conflicts, propose and verify the disable_reuse fix."""
    rnd = check_plan(compiled, plan, feeds)
    res = MemcheckResult(rnd)
    victims = sorted({c.victim for c in rnd.conflicts} | {e.tensor for e in rnd.events})
    if victims:
        fixed = relocate(plan, victims)
        res.fix = {"disable_reuse": victims, "arena_bytes": fixed.arena_bytes, "verified": None}
        if verify_fix:
            again = check_plan(compiled, fixed, feeds)
            res.fix.update(verified=again.clean, remaining_conflicts=len(again.conflicts),
                           remaining_events=len(again.events), divergence=again.divergence, error=again.error)
    return res


def policy_totals(plan) -> list[dict]:
    """Arena and lower bound of the plan's kernels under each policy (re-placed, not recompiled)."""
    out = []
    for policy in ("off", "conservative", "aggressive"):
        tensors = copy.deepcopy(plan.tensors)
        arena, lb, _ = place(tensors, plan.kernels, plan.graph_inputs, plan.graph_outputs, policy, plan.alignment,
                             plan.config.get("disable_reuse", []))
        out.append({"policy": policy, "arena_bytes": arena, "lower_bound_bytes": lb})
    return out
