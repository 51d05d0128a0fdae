"""Signoff criteria: one small registered unit per policy section.

A criterion kind is ``check(section: dict, ev: Evidence) -> list[Result]`` registered under its policy section
name in :data:`CRITERIA`. Each :class:`Result` is PASS or FAIL with its evidence (plain JSON-able data) and a
one-line message naming the criterion, the measured value and the limit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Callable

import pandas as pd

from toolkit.compare.counts import abnormal_mask
from toolkit.compare.layerwise import not_compared_reason
from toolkit.core.text import show, show_line, show_vs  # noqa: F401 - the message number formats; also imported from here
from toolkit.memory.planner import Block, find_conflicts
from toolkit.profile.budget import DEFAULT_REQUESTS, device_timing
from toolkit.signoff.limits import bound_of, output_limits

FP16_MAX = 65504.0
LATENCY_SOURCE = "host-measured wall time of the simulated NPU run (NpuRuntime.run on this CPU), not device time"
SCHEDULE_SOURCE = ("simulated device time: roofline cost per kernel and the stream schedule of toolkit.profile "
                   "(Time Kind 'simulated')")


@dataclass
class Result:
    """One criterion's outcome. ``name`` is unique in a signoff (e.g. ``outputs.y.CosineSimilarity``)."""

    name: str
    kind: str
    passed: bool
    message: str
    evidence: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


@dataclass
class Evidence:
    """What the signoff run measured, over all input sets.

    Attributes:
        outputs: graph output names.
        output_rows: {output: [compare_tensors row per input set]}.
        layers: worst case per tensor over the input sets: NodeName, TensorName, OpType, Kernel, Precision,
            DataType (storage dtype), CosineSimilarity (min), Abnormal (any), OverFlow (any),
            GoldenAbsMax (max), DeviceInf/DeviceNaN (any), CompareFailReason.
        tasks: per input set, the list of task results ({"name", "passed", "value", "detail"}).
        plan: the compiled Plan (toolkit.compiler.plan).
        run_ms: NPU run wall time per input set, ms.
        inputs: the input set labels (file names or a description).
        compiled: the CompileResult (plan + compiled graph) of the first input set's shapes.
        shapes: per input set (same order as ``inputs``), its input shapes {input name: dims}; empty when
            unknown (then [latency] is simulated on ``compiled`` alone).
        compiled_by_shape: {shape key (:func:`shape_key`): CompileResult} of every distinct shape in ``shapes``
            (toolkit.signoff.run.conclude fills the missing ones); [latency] is simulated on each.
        output_classes: {output: dtype class ("float", "integer", "other")} of the graph outputs whose type
            the model declares (toolkit.signoff.run.conclude fills it); an ``[outputs."*"]`` metric bounds the
            outputs of its class only (toolkit.signoff.policy.output_limits). Empty: every output.
    """

    outputs: list[str]
    output_rows: dict[str, list[dict]]
    layers: pd.DataFrame
    tasks: list[list[dict]]
    plan: object
    run_ms: list[float]
    inputs: list[str]
    compiled: object = None
    shapes: list[dict] = field(default_factory=list)
    compiled_by_shape: dict = field(default_factory=dict)
    output_classes: dict = field(default_factory=dict)


def shape_key(shapes: dict) -> tuple:
    """Hashable key of {input name: dims}: sorted (name, dims tuple) pairs."""
    return tuple(sorted((str(k), tuple(int(d) for d in v)) for k, v in shapes.items()))


def shape_label(key: tuple) -> str:
    """'x 1x1024x64, mask 1x1024' for a :func:`shape_key`."""
    return ", ".join(f"{name} {'x'.join(map(str, dims)) or 'scalar'}" for name, dims in key) or "no tensor inputs"


def not_comparable(row) -> str | None:
    """Why ``row`` (a layer-table row: CosineSimilarity, CompareFailReason, DataType / GroundTruthDataType) has no
    CosineSimilarity although it should, or None. A tensor fused into a kernel or folded at compile time needs
    no comparison; an integer / bool tensor is compared by ExactMatchRate instead. Any other tensor without a
    cosine — its CompareFailReason (non-finite everywhere, shape or dtype mismatch, not stored, not exposed...),
    or a float tensor whose cosine is NaN — is not comparable."""
    if _num(row.get("CosineSimilarity")) is not None:
        return None
    why = row.get("CompareFailReason")
    if isinstance(why, str) and why.strip():
        return not_compared_reason(row)
    dtype = str(row.get("DataType") or "") + " " + str(row.get("GroundTruthDataType") or "")
    return "CosineSimilarity is NaN" if "float" in dtype else None


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _worst(values: list, bound: str):
    """(worst value, index of the input set) for a 'min' (take the smallest) or 'max' bound; NaN counts worst."""
    worst, at = None, -1
    for i, v in enumerate(values):
        f = _num(v)
        if f is None:
            return float("nan"), i
        if worst is None or (f < worst if bound == "min" else f > worst):
            worst, at = f, i
    return worst, at


# ------------------------------------------------------------------------------------------------ criteria
def check_outputs(section: dict, ev: Evidence) -> list[Result]:
    """One ``outputs.NAME.METRIC`` criterion per output and metric of toolkit.signoff.policy.output_limits
    ([outputs.NAME] overrides "*" metric by metric, so a name is never built twice)."""
    out = []
    for name, limits in output_limits(section, ev.outputs, ev.output_classes).items():
        for metric, limit in limits.items():
            crit = f"outputs.{name}.{metric}"
            rows = ev.output_rows.get(name)
            if rows is None:
                out.append(Result(crit, "outputs", False, f"{crit}: the model has no output '{name}' "
                                  f"(outputs: {', '.join(ev.outputs)})", {"outputs": ev.outputs}))
                continue
            out.append(_output_result(crit, metric, limit, rows, ev))
    return out


def _output_result(crit: str, metric: str, limit: float, rows: list[dict], ev: Evidence) -> Result:
    """One output limit: the worst value over the input sets; a NaN value (not computable: non-finite, empty,
    shape mismatch... see its CompareFailReason), no input set, or FP16 overflow fails. So does an output with
    no element compared on any input set (every one empty: every metric would hold on nothing), and every output
    of a plan that runs no kernel (every output a constant folded at compile time or a graph input passed
    through: nothing of the device computes it)."""
    unchecked = _unchecked(rows, ev)
    if unchecked:
        op = ">=" if bound_of(metric) == "min" else "<="
        return Result(crit, "outputs", False, f"{crit}: not computable: {unchecked} (needs {op} "
                      f"{show_line(limit)})", {"metric": metric, "bound": bound_of(metric), "limit": limit,
                                               "worst": None, "not_computable": unchecked})
    bound = bound_of(metric)
    worst, at = _worst([r.get(metric) for r in rows], bound)
    finite = worst is not None and not math.isnan(worst)
    overflow = any(bool(r.get("OverFlow")) for r in rows)
    ok = finite and (worst >= limit if bound == "min" else worst <= limit) and not overflow
    reasons = sorted({str(r.get("CompareFailReason")) for r in rows if r.get("CompareFailReason")})
    evid = {"metric": metric, "bound": bound, "limit": limit, "worst": worst,
            "worst_input": ev.inputs[at] if 0 <= at < len(ev.inputs) else "",
            "values": [_num(r.get(metric)) for r in rows], "overflow": overflow, "compare_fail_reasons": reasons}
    op = ">=" if bound == "min" else "<="
    if worst is None:
        return Result(crit, "outputs", False, f"{crit}: no input set was evaluated (needs {op} {show_line(limit)})",
                      evid)
    why = "" if finite else f", not computable{': ' + '; '.join(reasons) if reasons else ''} at {evid['worst_input']!r}"
    value, line = show_vs(worst, limit)
    return Result(crit, "outputs", ok, f"{crit}: worst {value} over {len(rows)} input set(s) "
                  f"(needs {op} {line}){why}{' with FP16 overflow' if overflow else ''}", evid)


def _unchecked(rows: list[dict], ev: Evidence) -> str:
    """'' unless nothing of the output was checked on the device: why not (no kernel runs; or every input set
    gave an empty output, compared with ComparedCount 0 and no CompareFailReason)."""
    if ev.plan is not None and not ev.plan.kernels:
        return ("no kernel runs: every output is a constant folded at compile time or a graph input passed through, "
                "so nothing of the device computes it")
    compared = [r for r in rows if not str(r.get("CompareFailReason") or "").strip()]
    if compared and len(compared) == len(rows) and all(_num(r.get("ComparedCount")) == 0 for r in compared):
        return (f"no element was compared: the output is empty on all {len(rows)} input set(s); give input sets on "
                "which the model produces data (no dimension of size 0)")
    return ""


def _layer_rows(section: dict, ev: Evidence) -> pd.DataFrame:
    df = ev.layers
    ignore = set(section.get("ignore", []))
    return df[~df["NodeName"].isin(ignore)] if ignore else df


def check_layers(section: dict, ev: Evidence) -> list[Result]:
    df = _layer_rows(section, ev)
    out = []
    if "max_abnormal" in section:
        bad = df[abnormal_mask(df)]  # compare's rule (docs/thresholds.md)
        lim = section["max_abnormal"]
        names = bad["TensorName"].astype(str).tolist()
        out.append(Result("layers.max_abnormal", "layers", len(bad) <= lim,
                          f"layers.max_abnormal: {len(bad)} abnormal tensor(s) (allowed {lim})"
                          + (f": {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}" if names else ""),
                          {"abnormal": len(bad), "limit": lim, "tensors": names}))
    if "min_cosine" in section:
        out.append(_min_cosine(df, section["min_cosine"]))
    return out


def _min_cosine(df: pd.DataFrame, lim: float) -> Result:
    """Every tensor's CosineSimilarity >= ``lim``; a tensor that could not be compared (:func:`not_comparable`)
    fails too, and so does a table where no tensor besides the graph inputs was compared."""
    cos = pd.to_numeric(df["CosineSimilarity"], errors="coerce")
    below = df[cos < lim]
    bad = [(str(r["TensorName"]), why) for r in df.to_dict("records") if (why := not_comparable(r))]
    inner = cos.notna() & (df["OpType"].astype(str) != "Input") if "OpType" in df.columns else cos.notna()
    worst = float(cos.min()) if cos.notna().any() else float("nan")
    at = str(df.loc[cos.idxmin(), "TensorName"]) if cos.notna().any() else ""
    ok = below.empty and not bad and bool(inner.any())
    value, line = show_vs(worst, lim)
    msg = (f"layers.min_cosine: lowest CosineSimilarity {value} at '{at}' (needs >= {line}) over "
           f"{int(cos.notna().sum())} compared tensor(s); {len(below)} tensor(s) below")
    if bad:
        msg += (f", {len(bad)} not comparable: " + ", ".join(f"{t} ({why})" for t, why in bad[:4])
                + (" ..." if len(bad) > 4 else ""))
    elif not inner.any():
        msg += "; no tensor besides the graph inputs could be compared"
    return Result("layers.min_cosine", "layers", ok, msg,
                  {"worst": worst, "tensor": at, "limit": lim, "compared": int(cos.notna().sum()),
                   "below": below["TensorName"].astype(str).tolist(),
                   "not_comparable": [{"tensor": t, "reason": why} for t, why in bad]})


def check_tasks(section: dict, ev: Evidence) -> list[Result]:
    need = section.get("required_pass_rate", 1.0)
    per_input = [all(t["passed"] for t in ts) for ts in ev.tasks if ts]
    if not per_input:
        return [Result("tasks.pass_rate", "tasks", False, "tasks.pass_rate: no task check ran; the model is not a zoo "
                       "model with a built-in check and [tasks] metrics is empty", {"limit": need})]
    rate = sum(per_input) / len(per_input)
    failed = [{"input": ev.inputs[i], "checks": [t for t in ts if not t["passed"]]}
              for i, ts in enumerate(ev.tasks) if ts and not all(t["passed"] for t in ts)]
    value, line = show_vs(rate, need, digits=3)
    return [Result("tasks.pass_rate", "tasks", rate >= need,
                   f"tasks.pass_rate: {sum(per_input)}/{len(per_input)} input set(s) pass = {value} (needs >= {line})",
                   {"pass_rate": rate, "limit": need, "passed": sum(per_input), "total": len(per_input),
                    "failed": failed[:20]})]


def check_fp16_overflow(section: dict, ev: Evidence) -> list[Result]:
    allow = set(section.get("allow", []))
    df = ev.layers
    fp16 = df[df["DataType"].astype(str) == "float16"]
    absmax = pd.to_numeric(fp16.get("GoldenAbsMax", pd.Series(dtype=float)), errors="coerce").fillna(0)
    hit = fp16[(fp16["OverFlow"] | fp16["DeviceInf"] | (absmax > FP16_MAX)) & ~fp16["TensorName"].isin(allow)]
    names = hit["TensorName"].astype(str).tolist()
    evid = {"fp16_tensors": int(len(fp16)), "overflowing": names, "allowed": sorted(allow),
            "golden_absmax": {str(t): _num(v) for t, v in zip(hit["TensorName"], hit.get("GoldenAbsMax", []))}}
    msg = (f"fp16_overflow: {len(names)} FP16-stored tensor(s) overflow (|x| > {FP16_MAX:g} or inf): {', '.join(names[:8])}"
           if names else f"fp16_overflow: none of {len(fp16)} FP16-stored tensor(s) overflow")
    return [Result("fp16_overflow", "fp16_overflow", not names, msg, evid)]


def arena_conflicts(plan) -> list[tuple[str, str]]:
    """Overlapping live arena byte ranges of ``plan`` (toolkit.memory.planner.find_conflicts). Tensors the
    planner made share storage on purpose (``alias_of`` chains: views and in-place outputs) form one block
    spanning their joint lifetime, as the planner placed them."""
    arena = {n: t for n, t in plan.tensors.items() if t.storage == "arena" and t.nbytes > 0 and t.offset >= 0}
    groups: dict[str, Block] = {}
    for n, t in arena.items():
        root, seen = n, set()
        while getattr(arena.get(root), "alias_of", None) in arena and root not in seen:
            seen.add(root)
            root = arena[root].alias_of
        b = groups.get(root)
        if b is None:
            groups[root] = Block(root, int(t.nbytes), int(t.first), int(t.last), int(t.offset))
        else:
            b.first, b.last = min(b.first, int(t.first)), max(b.last, int(t.last))
            b.size = max(b.size, int(t.nbytes) + int(t.offset) - b.offset)
    return find_conflicts(list(groups.values()))


def shape_groups(ev: Evidence, done: str) -> list[dict]:
    """{"compiled" (CompileResult), "shape" (label), "key", "inputs" (labels of the input sets with that shape)}
    of every distinct input shape of ``ev`` (its compiled plan in ``ev.compiled_by_shape``), in first-seen order.
    Without shapes or plans per shape: one entry for ``ev.compiled`` with ``key`` () and a "shape_note" saying
    the check was ``done`` ("simulated", "checked") on the first input set's plan only."""
    groups: dict[tuple, list[str]] = {}
    for label, shapes in zip(ev.inputs, ev.shapes):
        groups.setdefault(shape_key(shapes), []).append(label)
    if not groups or any(k not in ev.compiled_by_shape for k in groups):
        return [{"compiled": ev.compiled, "shape": "", "key": (), "inputs": list(ev.inputs),
                 "shape_note": f"input shapes not recorded: {done} on the first input set's plan only"}]
    return [{"compiled": ev.compiled_by_shape[k], "shape": shape_label(k), "key": k, "inputs": labels}
            for k, labels in groups.items()]


def shape_plans(ev: Evidence) -> list[dict]:
    """:func:`shape_groups` with each group's "plan" (``ev.plan`` for the single entry without shapes)."""
    return [{**g, "plan": g["compiled"].plan if g["key"] else ev.plan} for g in shape_groups(ev, "checked")]


def check_memory(section: dict, ev: Evidence) -> list[Result]:
    """[memory]: the arena budget and the absence of conflicts, on the plan of every distinct input shape (the
    largest arena is the one bounded)."""
    out = []
    plans = shape_plans(ev)
    if "max_arena_bytes" in section:
        lim = section["max_arena_bytes"]
        worst = max(plans, key=lambda p: p["plan"].arena_bytes)
        plan = worst["plan"]
        out.append(Result("memory.peak_arena_bytes", "memory", plan.arena_bytes <= lim,
                          f"memory.peak_arena_bytes: arena {plan.arena_bytes} bytes{_at(worst, plans)} (budget {lim})",
                          {"arena_bytes": plan.arena_bytes, "lower_bound_bytes": plan.lower_bound_bytes, "limit": lim,
                           "shape": worst["shape"], "per_shape": [{"shape": p["shape"], "input_sets": len(p["inputs"]),
                                                                   "arena_bytes": p["plan"].arena_bytes}
                                                                  for p in plans]}))
    if not section.get("allow_conflicts", False):
        found = [(p, pairs) for p in plans if (pairs := arena_conflicts(p["plan"]))]
        pairs = found[0][1] if found else []
        where = _at(found[0][0], plans) if found else ""
        out.append(Result("memory.no_conflicts", "memory", not pairs,
                          f"memory.no_conflicts: {len(pairs)} pair(s) of live tensors share arena bytes{where}"
                          + (f": {pairs[0][0]} / {pairs[0][1]}" if pairs else ""),
                          {"conflicts": [list(p) for p in pairs[:50]], "source": "toolkit.memory.planner.find_conflicts"}))
    return out


def check_latency(section: dict, ev: Evidence) -> list[Result]:
    """[latency]: the simulated device schedule (default) or, with source = "host", host wall time."""
    if section.get("source", "schedule") == "host":
        return [_host_latency(section, ev)]
    timings = shape_timings(section, ev)
    out = []
    if "max_ms" in section:
        lim, t = section["max_ms"], max(timings, key=lambda t: t["latency_ms"])
        value = t["latency_ms"]
        shown, line = show_vs(value, lim, digits=4)
        out.append(Result("latency.device_ms", "latency", value <= lim,
                          f"latency.device_ms: {shown} ms simulated per inference{_at(t, timings)} "
                          f"(budget {line} ms; {t['device']}, {SCHEDULE_SOURCE})",
                          {**_latency_evidence(t, timings, ev), "value_ms": value, "limit_ms": lim}))
    if "min_throughput" in section:
        lim, t = section["min_throughput"], min(timings, key=lambda t: t["throughput_rps"])
        value = t["throughput_rps"]
        shown, line = show_vs(value, lim, digits=5)
        out.append(Result("latency.throughput", "latency", value >= lim,
                          f"latency.throughput: {shown} requests/s simulated over {t['requests']} "
                          f"pipelined requests{_at(t, timings)} (at least {line}; {t['device']}, {SCHEDULE_SOURCE})",
                          {**_latency_evidence(t, timings, ev), "value_rps": value, "limit_rps": lim}))
    return out


def shape_timings(section: dict, ev: Evidence) -> list[dict]:
    """toolkit.profile.budget.device_timing of every distinct input shape of ``ev`` (:func:`shape_groups`), each
    with "shape" (label), "key" and "inputs" (labels of the input sets with that shape), in first-seen order.
    Without shapes or plans per shape: one entry for ``ev.compiled``."""
    requests = int(section.get("requests", DEFAULT_REQUESTS))
    return [{**device_timing(g["compiled"], section.get("device"), requests),
             **{k: v for k, v in g.items() if k != "compiled"}} for g in shape_groups(ev, "simulated")]


def _at(t: dict, timings: list[dict]) -> str:
    if not t["shape"]:
        return f" ({t['shape_note']})" if t.get("shape_note") and len(t["inputs"]) > 1 else ""
    first = t["inputs"][0] if t["inputs"] else ""
    return (f" at {t['shape']} (input set {first!r}"
            + (f"; worst of {len(timings)} input shapes)" if len(timings) > 1 else ")"))


def _latency_evidence(t: dict, timings: list[dict], ev: Evidence) -> dict:
    per_shape = [{"shape": x["shape"], "inputs": x["inputs"][:20], "input_sets": len(x["inputs"]),
                  "latency_ms": x["latency_ms"], "throughput_rps": x["throughput_rps"]} for x in timings]
    return {**{k: v for k, v in t.items() if k not in ("key", "inputs")}, "input": t["inputs"][0] if t["inputs"] else "",
            "per_shape": per_shape, "source": SCHEDULE_SOURCE, "host_runs_ms": ev.run_ms}


def _host_latency(section: dict, ev: Evidence) -> Result:
    stat = section.get("statistic", "p50")
    ms = ev.run_ms
    value = {"p50": statistics.median, "mean": statistics.fmean, "max": max}[stat](ms) if ms else float("nan")
    lim = section["max_ms"]
    shown, line = show_vs(value, lim, digits=4)
    return Result("latency", "latency", bool(ms) and value <= lim,
                  f"latency: {stat} {shown} ms per input set (budget {line} ms; {LATENCY_SOURCE})",
                  {"statistic": stat, "value_ms": value, "limit_ms": lim, "runs_ms": ms, "source": LATENCY_SOURCE})


def check_placement(section: dict, ev: Evidence) -> list[Result]:
    allowed = set(section.get("allowed_cpu_ops", []))
    cpu = [k for k in ev.plan.kernels if k.placement == "CPU" and k.fusion != "copy"]  # not MemcpyD2H copies
    bad = [k for k in cpu if k.op_type not in allowed]
    return [Result("placement.cpu_ops", "placement", not bad,
                   f"placement.cpu_ops: {len(bad)} CPU-placed kernel(s) not allowed"
                   + (": " + ", ".join(f"{k.name} ({k.op_type})" for k in bad[:8]) if bad else
                      f" ({len(cpu)} CPU kernel(s), all allowed)"),
                   {"cpu_kernels": [{"kernel": k.name, "op_type": k.op_type} for k in cpu],
                    "not_allowed": [k.name for k in bad], "allowed": sorted(allowed)})]


#: {policy section: check}; evaluated in this order.
CRITERIA: dict[str, Callable[[dict, Evidence], list[Result]]] = {
    "outputs": check_outputs, "layers": check_layers, "tasks": check_tasks, "fp16_overflow": check_fp16_overflow,
    "memory": check_memory, "latency": check_latency, "placement": check_placement,
}


def evaluate(policy, ev: Evidence) -> list[Result]:
    """Every criterion of ``policy`` (toolkit.signoff.policy.Policy) against ``ev``, in CRITERIA order.
    Raises RuntimeError (an internal error, exit 3) if two criteria share a name (:func:`check_unique`)."""
    out: list[Result] = []
    for sec, check in CRITERIA.items():
        body = policy.section(sec)
        if body is not None:
            out.extend(check(body, ev))
    return check_unique(out)


def check_unique(results: list[Result]) -> list[Result]:
    """``results`` unchanged when every criterion name is unique (regress, JUnit and the report pair criteria
    by name); else RuntimeError naming the duplicates: a bug in a check, not in the user's policy."""
    seen: set[str] = set()
    dup = sorted({r.name for r in results if r.name in seen or seen.add(r.name)})
    if dup:
        raise RuntimeError(f"signoff built criteria with the same name twice: {', '.join(dup)}")
    return results
