"""`tune`: find a small set of nodes to keep in FP32 so that every input meets an accuracy target.

The loop (all on one compiled graph; only the precision passes re-run per try, see
toolkit.compiler.pipeline.recompile_precision, and only kernels whose precision changed are rebuilt, since
kernel sessions are cached by model digest):

1. FP32 reference of every input: final outputs (the target is on them), a range analysis
   (toolkit.precision.ranges) and, from input 0, the tensor shapes for the FLOP estimate (coverage).
2. The plan in the given config (default allow_mix_precision) on every input, each right after its
   reference: if the target holds, the set is empty.
3. Sensitivity (toolkit.tuning.sensitivity) on the worst input, whose full reference step 1 kept:
   single-kernel isolation for every FP16 kernel, ranked by overflow evidence, then local error.
4. Search over the ranked list: the shortest prefix that meets the target, found by doubling then bisection
   (about 2·log2(p) tries instead of p); then each chosen node is dropped again if the target still holds
   without it (least sensitive first; a try inside a set that already missed the target is known to miss it
   too and is not run). Among sets that meet the target the search prefers the one of least
   FP32 cost, cube-op FLOPs first, then number of nodes (:func:`search_cheapest`): it searches the
   candidates without cube ops first (an Add that produces large values instead of the MatMul before it),
   and only when they cannot meet the target the whole ranking, then tries to replace each chosen cube node
   by its cheaper graph neighbours among the candidates.
5. Verification: the tuned config compiled from scratch and run on every input.
6. With ``top_k``: the share of the output error each of the first ``top_k`` ranked kernels removes when kept
   alone in FP32 (toolkit.tuning.sensitivity.output_shares, one try each), for the ranking and evidence tables.

A try "meets the target" when, on every input, every graph output satisfies every target condition that
applies to its dtype (float metrics on float outputs, ExactMatchRate on integer/bool outputs; no NaN/inf where
the reference is finite) and every task check passes. A condition that applies to no output of the model is
refused up front (:func:`check_target_outputs`, UsageError), as signoff refuses such a policy. Inputs are tried worst first and a
try stops at the first failing input.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
import pandas as pd

from toolkit.cache.kernel_entries import session_source
from toolkit.compare.layerwise import sequence_as_tensor
from toolkit.compare.metrics import METRICS, dtype_class
from toolkit.compare.metrics.applies import metric_applies, output_dtypes
from toolkit.compare.metrics.grammar import FP16_NOISE, overridden, parse_conditions
from toolkit.compare.tasks import load_task, run_check
from toolkit.compiler.pipeline import recompile_precision
from toolkit.config.schema import Config
from toolkit.core.errors import InputError, UsageError
from toolkit.core.text import suggest
from toolkit.engine import Session, compile_model, shapes_of
from toolkit.ir.load import file_names_of, twins_index, unnamed_in_file
from toolkit.ort.reference import ReferenceRunner
from toolkit.precision import coverage as cov
from toolkit.precision.contract import CUBE
from toolkit.precision.ranges import RangeStats, range_findings
from toolkit.runtime.npu import NpuRuntime
from toolkit.tuning.allowance import fp16_check, rounding_depths
from toolkit.tuning.resume import KernelMemo, ResumeCache
from toolkit.tuning.sensitivity import (
    compare_metrics,
    kernel_sensitivity,
    output_shares,
    rank_kernels,
)

#: The default target on float outputs: cosine, an absolute error of 1e-2 per element that grows with the
#: value and the output's rounding depth where FP16 rounding alone exceeds it (the ``|fp16`` suffix,
#: toolkit.tuning.allowance; issue 17: large outputs and deep networks are not flagged for rounding), and the
#: KullbackLeiblerDivergence line of diagnose's verdict (0.005, never excused as noise: it compares the outputs'
#: shapes, which FP16 rounding of values on a large common offset erases while cosine and the |fp16 line hold).
#: A ``--target`` the user writes is applied as written: its MaxAbsoluteError is absolute unless it carries
#: ``|fp16`` itself.
DEFAULT_TARGET = "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2|fp16,KullbackLeiblerDivergence<=0.005"
#: Added to the default target when a graph output may be integer or bool: such an output is right only when
#: every element matches (the abnormal line of ExactMatchRate, toolkit.compare.metrics.exact).
INTEGER_OUTPUT_TARGET = "ExactMatchRate>=1"
_OPS = {">=": lambda v, t: v >= t, ">": lambda v, t: v > t, "<=": lambda v, t: v <= t, "<": lambda v, t: v < t}


def default_target(model: onnx.ModelProto) -> str:
    """The default target of ``model``: :data:`DEFAULT_TARGET` on float outputs plus :data:`INTEGER_OUTPUT_TARGET`
    on integer/bool ones (a float metric applies to float outputs only, ExactMatchRate to integer and bool ones:
    toolkit.compare.metrics.applies.metric_applies). When every graph output declares its dtype, only the part
    some output can be checked by is kept (an int8-only model: ExactMatchRate alone); when one does not, both.
    When no declared output is float or integer (strings only), :data:`DEFAULT_TARGET`, which
    check_target_outputs then refuses with its reason."""
    dtypes = output_dtypes(model)
    if len(dtypes) < len(model.graph.output):
        return f"{DEFAULT_TARGET},{INTEGER_OUTPUT_TARGET}"
    classes = {dclass for _, dclass in dtypes.values()}
    parts = [t for t, c in ((DEFAULT_TARGET, "float"), (INTEGER_OUTPUT_TARGET, "integer")) if c in classes]
    return ",".join(parts) or DEFAULT_TARGET


def lines_target(model: onnx.ModelProto, thresholds: str | None) -> str:
    """The target a diagnosis' advice is verified against: :func:`default_target` with the user's abnormal
    lines (``--thresholds`` text, or None) on the graph outputs replacing its condition on the same metric, so
    that a fix that passes it passes the verdict those lines judge. An item naming a tensor that is not a graph
    output judges no output and is left out. Raises UsageError (naming --thresholds) when the lines turn off
    every condition of the default target."""
    outputs = {o.name for o in model.graph.output}
    user = [c.text for c in parse_conditions(thresholds, "threshold") if c.output is None or c.output in outputs] \
        if thresholds is not None else []
    if not user:
        return default_target(model)
    merged = overridden(default_target(model), ",".join(user))
    conds = parse_conditions(merged, "threshold", fp16_ok=True)  # the default's |fp16 item; the user's lines refuse it

    def judged(output: str) -> bool:  # some condition left on for this output (its own items win over '*')
        own = {c.metric: c for c in conds if c.output == output}
        return any(not c.off for c in own.values()) or \
            any(not c.off for c in conds if c.output is None and c.metric not in own)
    if not any(judged(o) for o in outputs):
        raise UsageError(f"--thresholds '{thresholds}' turns off every condition of the default target "
                         f"({default_target(model)}), so the outputs would be judged on nothing and no fix could be "
                         "verified; keep a line on one of those metrics, e.g. 'CosineSimilarity<0.99'")
    return merged


def _noop(msg: str) -> None:
    pass


class TargetCondition(tuple):
    """One target condition ``(metric, op, value)`` (a plain 3-tuple to compare and unpack) with ``output``: the
    graph output it is for, None for every output. ``op`` is the passing side (``>=``, ``>``, ``<=``, ``<``).
    ``fp16`` (MaxAbsoluteError only, written ``|fp16``): judged per element, each allowed
    max(value, FP16_ROUNDING·sqrt(L)·max(|y_i|, rms(y))), L the output's rounding depth
    (toolkit.tuning.allowance.fp16_allowance)."""

    def __new__(cls, metric: str, op: str, value: float, output: str | None = None, fp16: bool = False):
        self = super().__new__(cls, (metric, op, value))
        self.output = output
        self.fp16 = bool(fp16)
        return self

    def __getnewargs__(self):
        return (*self, self.output, self.fp16)


def parse_target(text: str) -> list[tuple[str, str, float]]:
    """``"CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2"`` → [(metric, op, value)]: the conditions an output
    must SATISFY, in the one condition grammar of toolkit.compare.metrics.grammar (so every ``--thresholds``
    string is a target too: ``CosineSimilarity<0.9999``, the abnormal side, is the same condition as
    ``CosineSimilarity>=0.9999``); ``op`` is always the passing side. ``logits:CosineSimilarity>=0.99`` is for
    that output only (it replaces an unprefixed condition on the same metric there); ``METRIC=off`` is no
    condition on that metric (two items on one metric of one output are refused). Values follow the ranges of
    --thresholds (CosineSimilarity in [-1, 1], errors >= 0, no NaN). ``MaxAbsoluteError<=1e-2|fp16`` (the
    default target's) is judged per element against max(1e-2, the FP16 rounding of the value), see
    toolkit.tuning.allowance; without ``|fp16`` the bound is on max|x - y| as written. Raises UsageError naming the
    bad item."""
    found: dict[tuple, TargetCondition] = {}
    for c in parse_conditions(text, "target", fp16_ok=True):
        key = (c.output, c.metric)
        if not c.off:
            op, value = c.required()
            found[key] = TargetCondition(c.metric, op, value, c.output, c.fp16)
    if not found:
        raise UsageError(f"target '{text}' has no condition; e.g. '{DEFAULT_TARGET}'")
    return list(found.values())


def format_target(target) -> list[str]:
    """``[(metric, op, value)]`` → ``["CosineSimilarity>=0.9999999", ...]`` (``output:`` first for a condition of
    one output): each value as ``repr(float)``, the shortest text that reads back to the same number (never
    rounded, unlike ``%g``), ``|fp16`` after an element-wise noise-aware bound (:class:`TargetCondition`)."""
    return [f"{_output_of(t) + ':' if _output_of(t) else ''}{t[0]}{t[1]}{float(t[2])!r}"
            f"{FP16_NOISE if getattr(t, 'fp16', False) else ''}" for t in target]


def _output_of(condition) -> str | None:
    return getattr(condition, "output", None)


#: metric columns of a check_outputs row
_ROW_METRICS = ("CosineSimilarity", "MaxAbsoluteError", "RelativeEuclideanDistance", "MeanRelativeError")


def _conditions(target, dclass: str, output: str | None = None) -> list[tuple[str, tuple]]:
    """[(text, (metric, op, value))] of the target conditions that apply to output ``output`` of dtype class
    ``dclass`` (toolkit.signoff.policy.metric_applies: float metrics on float, ExactMatchRate on integer): the
    unprefixed ones and those of ``output``, which replace an unprefixed one on the same metric."""
    chosen: dict[str, tuple[str, tuple]] = {}
    for text, t in zip(format_target(target), target):
        own = _output_of(t)
        if own not in (None, output) or not metric_applies(t[0], dclass):
            continue
        if own is None and t[0] in chosen and _output_of(chosen[t[0]][1]) is not None:
            continue  # the output's own condition on this metric wins
        chosen[t[0]] = (text, t)
    return list(chosen.values())


def check_outputs(npu: dict, golden: dict, target, depths: dict | None = None) -> tuple[bool, list[dict], float]:
    """(met, rows, error): per float output, and per integer/bool output when the target holds an
    ExactMatchRate condition, a compare row (:data:`_ROW_METRICS` and the target's metrics; NaN where a metric
    does not apply) with ``Met`` and the failing ``Failed`` conditions (only the conditions that apply to the
    output's dtype) and ``Elements`` (the reference output's element count: 0 for an empty output, on which
    every metric holds trivially); a sequence output is compared as toolkit.compare.layerwise.sequence_as_tensor
    makes it one tensor (a sequence of mixed dtypes is skipped); ``error`` = worst RelativeEuclideanDistance over float
    outputs (inf when NaN/inf appear). A ``MaxAbsoluteError<=A|fp16`` condition (the default target's) is judged
    per element (toolkit.tuning.allowance.fp16_check) at the output's rounding depth (``depths``: {output: L},
    toolkit.tuning.allowance.rounding_depths of the plan; 1 for an output it lacks or without it), and its row
    has ``FP16AllowanceUsed``: max |x_i - y_i| / allowance_i (<= 1 when it holds) and ``RoundingDepth``."""
    rows, err, met = [], 0.0, True
    names = list(dict.fromkeys([*_ROW_METRICS, *(m for m, _, _ in target)]))
    for name, g in golden.items():
        g, _ = sequence_as_tensor(g)
        d, _ = sequence_as_tensor(npu.get(name))
        if g is None or d is None:
            continue  # not produced, or a sequence of mixed dtypes (layerwise says why)
        g = np.asarray(g)
        dclass = dtype_class(g.dtype)
        conds = _conditions(target, dclass, name)
        if dclass not in ("float", "integer") or not conds:
            continue
        r = compare_metrics(d, g, [m for m in names if METRICS[m].dtype_class == dclass])
        noise = {}  # text of an |fp16 condition -> (holds, share of the allowance)
        for c, t in conds:
            if getattr(t, "fp16", False):
                noise[c] = fp16_check(d, g, t[1], t[2], (depths or {}).get(name, 1)) \
                    if not math.isnan(r.get(t[0], math.nan)) else (False, math.nan)
        bad = [c for c, (m, op, v) in conds if not (noise[c][0] if c in noise else
                                                    not math.isnan(r.get(m, math.nan)) and _OPS[op](r[m], v))]
        nonfinite = bool(r["OverFlow"]) or (r["DeviceNaN"] + r["DeviceInf"]) > (r["GoldenNaN"] + r["GoldenInf"])
        if nonfinite:
            bad.append("finite outputs")
        red = r.get("RelativeEuclideanDistance", 0.0) if dclass == "float" else 0.0
        err = max(err, math.inf if nonfinite or math.isnan(red) else red)
        rows.append({"Output": name, **{m: r.get(m, math.nan) for m in names},
                     **({"FP16AllowanceUsed": max(s for _, s in noise.values()),
                         "RoundingDepth": max(1, (depths or {}).get(name, 1))} if noise else {}),
                     "NaN/Inf": int(r["DeviceNaN"] + r["DeviceInf"]), "Elements": int(g.size), "Met": not bad,
                     "Failed": ", ".join(bad)})
        met &= not bad
    return met, rows, err


def check_target_outputs(model: onnx.ModelProto, target, label: str = "--target") -> None:
    """Refuse, before any input runs, a target condition that no graph output can be checked by: the
    signoff rule for ``[outputs."*"]`` (toolkit.signoff.policy.output_dtypes / metric_applies): ExactMatchRate
    applies to integer/bool outputs only, the other metrics to float outputs only; a condition is refused when
    every output's dtype is declared and none fits (it could never be evaluated: ExactMatchRate on float
    outputs would keep every node in FP32 and still fail, a float metric on integer outputs would pass on
    nothing). ``label`` names the target in the message ("--target" or "the default target").

    Raises:
        UsageError: naming the condition, the outputs and their dtypes, and a metric that applies.
    """
    outputs = [o.name for o in model.graph.output]
    dtypes = output_dtypes(model)
    for text, t in zip(format_target(target), target):
        own = _output_of(t)
        if own is not None and own not in outputs:
            raise UsageError(f"{label} '{text}': the model has no output '{own}'{suggest(own, outputs)}; name one "
                             f"of its outputs before ':' or drop the '{own}:' prefix for every output")
        if own is not None and own in dtypes and not metric_applies(t[0], dtypes[own][1]):
            raise UsageError(f"{label} '{text}': output '{own}' is {dtypes[own][0]}, and {t[0]} does not apply to "
                             "it; bound ExactMatchRate on an integer/bool output, a float metric on a float one")
    if not dtypes or len(dtypes) < len(model.graph.output):
        return
    for text, (metric, _, _) in zip(format_target(target), target):
        if any(metric_applies(metric, c) for _, c in dtypes.values()):
            continue
        kind = "integer/bool" if METRICS[metric].dtype_class == "integer" else "float"
        shown = ", ".join(f"'{o}' {d}" for o, (d, _) in list(dtypes.items())[:6])
        classes = {c for _, c in dtypes.values()}
        fix = ("use a float metric, e.g. --target 'CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2'"
               if "float" in classes else "use --target 'ExactMatchRate>=1' (share of equal elements)"
               if "integer" in classes else "no metric compares these outputs: check them with --task-metric")
        raise UsageError(f"{label} '{text}': {metric} applies to {kind} outputs only, and the model has none "
                         f"(outputs: {shown}); it could never be checked: {fix}")


def keep_config(config: Config, keep) -> Config:
    """``config`` with the node names ``keep`` added to its keep_dtype (entries already there are not repeated;
    order: the config's entries, then ``keep``'s). This is the config tune writes for a chosen set."""
    extra = [k for k in keep if k not in config.keep_dtype]
    return dataclasses.replace(config, keep_dtype=list(config.keep_dtype) + extra)


@dataclass
class Trial:
    keep: tuple[str, ...]
    met: bool
    error: float  # worst output RED over the inputs tried
    rows: list[dict]
    inputs_tried: int


@dataclass
class TuneResult:
    """Everything tune found (plain data; see toolkit.report.tune_html and api.tune_command for the files)."""

    met: bool
    chosen: list[str]
    config: Config
    target: list
    before: pd.DataFrame
    after: pd.DataFrame
    ranking: pd.DataFrame
    ranges: pd.DataFrame
    findings: list
    evidence: list[dict]
    coverage_before: dict
    coverage_after: dict
    cost: dict
    tasks_before: list[dict]
    tasks_after: list[dict]
    log: list[str]
    trials: int  # precision configs built and run (search tries + share measurements)
    timings_ms: dict
    inputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the result rests on, when that is little (no kernel)
    kept_nodes: int = 0  # graph nodes the chosen entries name (:func:`kept_nodes`: a repeated file name names each)

    def kept_text(self) -> str:
        """"N node(s) kept in FP32", or "N keep_dtype entries naming M nodes kept in FP32" when a chosen entry
        names a node the model file repeats."""
        n = len(self.chosen)
        if self.kept_nodes > n:
            return f"{n} keep_dtype entr{'y' if n == 1 else 'ies'} naming {self.kept_nodes} nodes kept in FP32"
        return f"{n} node(s) kept in FP32"

    def summary(self) -> dict:
        """summary.json's content: ``keep_dtype`` every entry of the tuned config (keep_dtype.txt's lines: the
        given config's and the ones tune added), ``added_keep_dtype`` the ones tune added."""
        return {"met": self.met, "keep_dtype": list(self.config.keep_dtype), "added_keep_dtype": list(self.chosen),
                "target": format_target(self.target), "notes": self.notes,
                "trials": self.trials, "inputs": self.inputs, "timings_ms": self.timings_ms,
                "coverage_before": self.coverage_before, "coverage_after": self.coverage_after, "cost": self.cost,
                "tasks_before": self.tasks_before, "tasks_after": self.tasks_after, "evidence": self.evidence,
                "before": self.before.to_dict("records"), "after": self.after.to_dict("records"),
                "search_log": self.log, "config": self.config.to_dict(), "kept_nodes": self.kept_nodes}


class Tuner:
    """Evaluates keep-sets against the target on every input, reusing one compiled graph (see module doc).

    Args:
        model: the loaded model. feeds: [(label, feed)] of one shape. config: the starting config.
        target: :func:`parse_target` output. tasks: task checks fn(golden, npu, model) -> dict.
        compiled: the CompileResult of ``config`` on these shapes when one exists already (diagnose's), else
            None (compiled here).
    """

    def __init__(self, model: onnx.ModelProto, feeds, config: Config, target, tasks=(), progress=_noop,
                 compiled=None):
        shapes = {shapes_of(f).__repr__() for _, f in feeds}
        if len(shapes) > 1:
            raise InputError(f"tune compiles one plan, but the input sets have different shapes ({len(shapes)} "
                             "kinds); give sets of one shape (one --inputs folder per shape)")
        self.model, self.feeds, self.config, self.target, self.tasks = model, feeds, config, target, list(tasks)
        self.progress = progress
        self.base = compiled if compiled is not None else compile_model(model, config,
                                                                       input_shapes=shapes_of(feeds[0][1]))
        self.outputs = [o.name for o in model.graph.output]
        self.depths = rounding_depths(self.base.plan)  # the |fp16 allowance of the given config's plan
        self.golden_out: list[dict] = []
        self.order = list(range(len(feeds)))
        self.cache: dict[tuple, Trial] = {}
        self.runs = 0  # plan runs
        self.builds = 0  # configs compiled (precision passes) and built
        self.ref: ReferenceRunner | None = None
        self.best: Trial | None = None  # the best try so far (met with fewest nodes, else lowest error)
        self.memo = KernelMemo(session_source)  # kernels shared by the trials' runtimes
        self.resume = ResumeCache(feeds)  # trials run from the first kernel that differs from a stored run

    def config_for(self, keep) -> Config:
        return keep_config(self.config, keep)

    def runtime_for(self, keep) -> NpuRuntime:
        """The runtime of the base compile with ``keep`` added to keep_dtype (precision stage re-run; kernels
        an earlier trial built are reused, toolkit.tuning.resume.KernelMemo)."""
        self.builds += 1
        return self.memo.runtime(recompile_precision(self.base, self.config_for(keep)))

    def check_resumed(self, rt, i: int) -> tuple[bool, list[dict], float]:
        """:meth:`check_one` of a trial runtime, run from a stored run's prefix where one matches
        (toolkit.tuning.resume.ResumeCache: the same outputs as a whole run): (met, rows, error)."""
        res = self.resume.run(rt, i)
        self.runs += 1
        met, rows, err = check_outputs(res.outputs, self.golden_out[i], self.target, self.depths)
        tasks = self.run_tasks(i, res.outputs)
        for r in rows:
            r["Input"] = self.feeds[i][0]
        return met and all(t["passed"] for t in tasks), rows, err

    def check_one(self, rt, i: int, dump: bool = False) -> tuple[bool, list[dict], float, list[dict], object]:
        """(met, rows, error, task results, RunResult) of a whole run of ``rt`` on input ``i`` (``dump``: the
        RunResult keeps every kernel output)."""
        res = rt.run(self.feeds[i][1], dump=dump)
        self.runs += 1
        met, rows, err = check_outputs(res.outputs, self.golden_out[i], self.target, self.depths)
        tasks = self.run_tasks(i, res.outputs)
        for r in rows:
            r["Input"] = self.feeds[i][0]
        return met and all(t["passed"] for t in tasks), rows, err, tasks, res

    def run_tasks(self, i: int, npu: dict) -> list[dict]:
        """Every task check on input ``i``, validated as in diagnose (toolkit.compare.tasks.run_check: a check
        that raises or returns anything but a result dict with a real bool ``passed`` counts as failed)."""
        out = []
        for fn in self.tasks:
            res = run_check(fn, self.golden_out[i], npu, self.model)
            res["input"] = self.feeds[i][0]
            out.append(res)
        return out

    def trial(self, keep, all_inputs: bool = False) -> Trial:
        key = tuple(sorted(keep))
        if key in self.cache and (not all_inputs or self.cache[key].inputs_tried == len(self.feeds)):
            return self.cache[key]
        rt = self.runtime_for(list(keep))
        met, rows, err, n = True, [], 0.0, 0
        for i in self.order:
            ok, r, e = self.check_resumed(rt, i)
            rows += r
            err, n = max(err, e), n + 1
            if not ok:
                met = False
                if not all_inputs:
                    break
        t = Trial(key, met, err, rows, n)
        self.cache[key] = t
        self._report(t)
        return t

    def _report(self, t: Trial) -> None:
        """Progress after a try: ``trial k: N node(s) in FP32, target met/not met (...); best so far: ...``."""
        def rank(x: Trial) -> tuple:  # a met try with fewer nodes, else an unmet one with a lower error
            return (True, -len(x.keep)) if x.met else (False, -x.error)

        if self.best is None or rank(t) > rank(self.best):
            self.best = t
        b = self.best
        best = (f"{len(b.keep)} node(s) in FP32 meet the target" if b.met else
                f"target not met yet (worst output RED {b.error:.3g} with {len(b.keep)} node(s) in FP32)")
        self.progress(f"trial {self.builds}: {len(t.keep)} node(s) in FP32, target {'met' if t.met else 'not met'} "
                      f"({t.inputs_tried}/{len(self.feeds)} input(s) tried, worst output RED {t.error:.3g}); "
                      f"best so far: {best}")


class Tried:
    """``meets`` with a memory: each keep set is run once, and a set inside one that missed the target is known to
    miss it too (more FP32 never made a model worse: the search's assumption) without a run. Call it as
    ``meets``; :meth:`implied_miss` asks without running."""

    def __init__(self, meets):
        self.meets = meets
        self.seen: dict[frozenset, bool] = {}

    def __call__(self, keep) -> bool:
        k = frozenset(keep)
        if k not in self.seen:
            self.seen[k] = bool(self.meets(list(keep)))
        return self.seen[k]

    def implied_miss(self, keep) -> bool:
        """True when a set that missed the target holds every node of ``keep`` (so ``keep`` misses it too)."""
        k = frozenset(keep)
        return any(not ok and k <= s for s, ok in self.seen.items())


def search(ranked: list[str], meets, log: list[str]) -> tuple[list[str], bool]:
    """Shortest meeting prefix of ``ranked`` by doubling + bisection, then :func:`prune` (module doc). A try
    inside a set that already missed the target is not run (:class:`Tried`)."""
    meets = meets if isinstance(meets, Tried) else Tried(meets)
    if meets([]):
        return [], True
    lo, hi, n = 0, 1, len(ranked)
    while True:
        hi = min(hi, n)
        if meets.implied_miss(ranked[:hi]):
            log.append(f"first {hi} of {n} ranked kernels in FP32: target not met (implied: a try with them all "
                       "in FP32 failed)")
        elif meets(ranked[:hi]):
            break
        else:
            log.append(f"first {hi} of {n} ranked kernels in FP32: target not met")
        if hi == n:
            return list(ranked), False
        lo, hi = hi, hi * 2
    log.append(f"first {hi} ranked kernels in FP32: target met")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        implied = meets.implied_miss(ranked[:mid])
        ok = not implied and meets(ranked[:mid])
        log.append(f"bisection: first {mid}: {'met' if ok else 'not met'}" + (" (implied)" if implied else ""))
        lo, hi = (lo, mid) if ok else (mid, hi)
    return prune(list(ranked[:hi]), meets, log), True


def prune(chosen: list[str], meets: Tried, log: list[str]) -> list[str]:
    """Drop-one pruning of a keep set that meets the target: each node, last in ``chosen`` (least sensitive)
    first, is dropped when the target still holds without it. The result misses the target without any one of
    its nodes (1-minimal); a try inside a set that already missed it is not run. (Least sensitive first keeps
    fewer nodes and FLOPs in FP32 than costliest first: docs/benchmarks.md.)"""
    for name in reversed(list(chosen)):
        trial = [c for c in chosen if c != name]
        if meets.implied_miss(trial):
            log.append(f"kept '{name}': the target fails without it (implied: a try without it and with more "
                       "nodes in FP32 failed)")
        elif meets(trial):
            chosen = trial
            log.append(f"dropped '{name}': target still met without it")
        else:
            log.append(f"kept '{name}': the target fails without it")
    return chosen


def _total(keep, cost) -> tuple[float, int]:
    """FP32 cost of keep-set ``keep``: (cube FLOPs, number of nodes)."""
    return sum(cost.get(n, 0.0) for n in keep), len(keep)


def _replace_cube(chosen: list[str], cost: dict, neighbours: dict, meets: Tried, log: list[str]) -> list[str]:
    """Replace each chosen cube node (largest cost first) by its cheaper neighbours among the candidates when
    the target still holds and the set's :func:`_total` cost drops; replacements not needed are dropped, and the
    set is pruned again (:func:`prune`: a replacement can make other members unneeded). A replacement inside a
    set that already missed the target is not run (:meth:`Tried.implied_miss`)."""
    for c in sorted((c for c in chosen if cost.get(c)), key=lambda c: -cost[c]):
        if c not in chosen:  # dropped by the pruning after an earlier replacement
            continue
        alt = [n for n in neighbours.get(c, ()) if cost.get(n, 0.0) < cost[c] and n not in chosen]
        if not alt:
            continue
        trial = [x for x in chosen if x != c] + alt
        if _total(trial, cost) >= _total(chosen, cost):
            log.append(f"'{c}' kept: its cheaper neighbours {alt} cost as much in FP32 together")
            continue
        if meets.implied_miss(trial):
            log.append(f"'{c}' kept: its cheaper neighbours {alt} do not meet the target in its place (implied: "
                       "a try without it failed with them in FP32 too)")
            continue
        if not meets(trial):
            log.append(f"'{c}' kept: its cheaper neighbours {alt} do not meet the target in its place")
            continue
        for a in reversed(alt):
            fewer = [x for x in trial if x != a]
            if not meets.implied_miss(fewer) and meets(fewer):
                trial = fewer
        log.append(f"replaced '{c}' ({cost[c]:.0f} cube FLOPs in FP32) by "
                   f"{[x for x in trial if x not in chosen]}: target met at lower FP32 cost")
        chosen = prune(trial, meets, log)  # with the replacement in, other members may not be needed
    return chosen


def search_cheapest(ranked: list[str], meets, log: list[str], cost: dict | None = None,
                    neighbours: dict | None = None) -> tuple[list[str], bool]:
    """:func:`search` preferring, among keep-sets that meet the target, the one of least FP32 cost:
    cube-op FLOPs first, then number of nodes. ``cost``: {candidate: FP32 cube FLOPs its kernel adds, 0 for
    kernels without cube ops}; ``neighbours``: {candidate: candidates next to it in the graph}.

    1. the candidates without cube ops alone (ranking order): a set meeting the target there costs no cube
       FLOPs in FP32, so it is preferred whatever its length; all of them are tried first, and when they miss
       the target together their prefixes are not searched (one try instead of about log2 of their number);
    2. otherwise the whole ranking, then :func:`_replace_cube` on the chosen cube nodes (a cube node whose drop
       failed while its cheaper neighbours were still kept needs no try of them in its place).
    Returns (chosen, met)."""
    cost, neighbours = cost or {}, neighbours or {}
    meets = Tried(meets)
    if meets([]):
        return [], True
    cheap = [n for n in ranked if not cost.get(n)]
    if cheap and len(cheap) < len(ranked) and not meets(cheap):
        # every candidate without cube ops in FP32 misses the target: so does each prefix of them, whose
        # doubling search (one try per power of two) is skipped (more FP32 nodes never made a model worse)
        log.append(f"candidates without cube ops: all {len(cheap)} in FP32: target not met")
    elif cheap and len(cheap) < len(ranked):
        sub: list[str] = []
        chosen, ok = search(cheap, meets, sub)
        log += [f"candidates without cube ops: {line}" for line in sub]
        if ok:
            return chosen, True
    chosen, ok = search(ranked, meets, log)
    return (_replace_cube(chosen, cost, neighbours, meets, log) if ok else chosen), ok


def candidate_costs(ranking: pd.DataFrame, model: onnx.ModelProto, flops: dict) -> tuple[dict, dict]:
    """({KeepName: FP32 cube FLOPs}, {KeepName: neighbouring KeepNames}) of the ranked candidates: the cube
    FLOPs of a kernel are those of its cube nodes (toolkit.precision.coverage.node_flops; a cube node of
    unknown shape counts 1), its neighbours the candidates that produce one of its nodes' inputs or read one
    of their outputs (original graph)."""
    nodes = {n.name: n for n in model.graph.node}
    owner = {}
    members = {}
    for r in ranking.to_dict("records"):
        members[r["KeepName"]] = [m for m in str(r.get("Nodes") or r["KeepName"]).split(";") if m]
        for m in members[r["KeepName"]]:
            owner[m] = r["KeepName"]
    producer = {o: n.name for n in model.graph.node for o in n.output if o}
    readers: dict[str, list[str]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.name)
    cost, near = {}, {}
    for keep, ms in members.items():
        own = [nodes[m] for m in ms if m in nodes]
        cost[keep] = float(sum(flops.get(n.name, 1.0) for n in own if n.op_type in CUBE.ops))
        adj = [producer.get(i) for n in own for i in n.input] + [r for n in own for o in n.output for r in readers.get(o, ())]
        near[keep] = list(dict.fromkeys(owner[a] for a in adj if a in owner and owner[a] != keep))
    return cost, near


@dataclass
class _Start:
    """What the per-input reference + baseline pass leaves: the baseline's rows/tasks/errors, the full FP32
    reference of the worst input (graph inputs included) and the tensor shapes of input 0."""

    rows: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    tasks: list = field(default_factory=list)
    met: bool = True
    worst_golden: dict | None = None
    worst_dumps: dict | None = None
    shapes: dict = field(default_factory=dict)
    baseline_ms: float = 0.0


def _refuse_nonfinite_reference(golden_out: dict, label: str) -> None:
    """Raise InputError when a float graph output of the FP32 reference holds NaN/Inf on input ``label``: the
    model computes it in FP32 already (NaN inputs, a Sqrt of a negative, a Log of zero), so no keep set can
    meet a target on it (diagnose's golden_nonfinite finding says the same)."""
    for name, v in golden_out.items():
        a = np.asarray(v) if not isinstance(v, list) else None
        if a is not None and a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
            nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
            raise InputError(f"input '{label}': the FP32 reference output '{name}' already holds {nan} NaN and "
                             f"{inf} Inf, so no keep set can meet a target on it; fix the input (or the model), "
                             "or leave this input out")


def _reference_and_baseline(tuner: Tuner, ranges: RangeStats, base_rt, progress) -> _Start:
    """Per input: the FP32 reference of every tensor (folded into ``ranges``; the graph outputs kept as the
    golden), then the given config's plan checked against it. The full reference of the input with the worst
    baseline error (first one on ties, as the search order) is kept for the sensitivity step, so that step does
    not run the reference again, nor the plan (its run's dumps are kept too); at most two full references and two
    runs' dumps are alive at once."""
    st = _Start()
    ref = tuner.ref = ReferenceRunner(tuner.model)
    for i, (label, feed) in enumerate(tuner.feeds):
        progress(f"FP32 reference of input {i + 1}/{len(tuner.feeds)} ({label})")
        g = ref.run(feed)
        g.update(feed)
        ranges.add(g)
        tuner.golden_out.append({o: g[o] for o in tuner.outputs if o in g})
        _refuse_nonfinite_reference(tuner.golden_out[-1], label)
        if i == 0:
            st.shapes = {k: v.shape for k, v in g.items() if isinstance(v, np.ndarray)}
        t = time.perf_counter()
        ok, rows, err, tk, res = tuner.check_one(base_rt, i, dump=True)
        st.baseline_ms += (time.perf_counter() - t) * 1e3
        for task in tk:
            if task.get("fails_on_reference"):
                raise UsageError(f"input '{label}': {task['detail']}; no keep set can pass it: fix the check or "
                                 "leave it out of --task-metric")
        st.rows += rows
        st.tasks += tk
        st.met &= ok
        if not st.errors or err > max(st.errors):
            st.worst_golden, st.worst_dumps = g, res.dumps
        del res
        st.errors.append(err)
        del g
    _refuse_all_empty(tuner)
    return st


def _refuse_all_empty(tuner: Tuner) -> None:
    """Raise InputError when every graph output of the FP32 reference is empty (0 elements) on every input: every
    target condition would hold on nothing (an input with a dimension of size 0)."""
    sizes = [(label, name, np.asarray(v).shape) for (label, _), out in zip(tuner.feeds, tuner.golden_out)
             for name, v in out.items() if not isinstance(v, list)]
    if sizes and all(math.prod(shape) == 0 for _, _, shape in sizes):
        label, name, shape = sizes[0]
        dims = "x".join(map(str, shape)) or "scalar"
        raise InputError(f"every graph output is empty on every input (output '{name}' is {dims} on '{label}'), so "
                         "every target condition would hold on nothing; give inputs on which the model produces "
                         "data (no dimension of size 0)")


#: ``without_it`` of a node when the target is not met with the whole chosen set either: what fails without
#: the node says nothing about that node.
NOT_MET_WITH_IT = "not decisive: the target is not met with it either"


def _without_it(chosen, name, tuner) -> str:
    """What happens to the target without ``name`` (the rest of ``chosen`` kept): "met", "fails <conditions>"
    (from the try of exactly that set, else from a failed try without ``name`` that kept more nodes in FP32,
    which the search's assumption extends to this set: "(implied: ...)"), "not tried", or
    :data:`NOT_MET_WITH_IT` when the search's trial of the whole set did not meet the target."""
    with_it = tuner.cache.get(tuple(sorted(chosen)))
    if with_it is not None and not with_it.met:
        return NOT_MET_WITH_IT
    rest = sorted(c for c in chosen if c != name)
    without = tuner.cache.get(tuple(rest))
    implied = ""
    if without is None:
        wider = [(len(k), t) for k, t in tuner.cache.items() if not t.met and name not in k and set(rest) <= set(k)]
        if not wider:
            return "not tried"
        size, without = min(wider, key=lambda x: x[0])
        implied = f" (implied: it failed with {size - len(rest)} more node(s) in FP32)"
    fails = sorted({x["Failed"] for x in without.rows if x["Failed"]})
    return "fails " + "; ".join(fails) + implied if fails else "met"


def _evidence(chosen, ranking, tuner, findings) -> list[dict]:
    """Per chosen node: its sensitivity ranking row, range findings and :func:`_without_it`."""
    by = {r["KeepName"]: r for r in ranking.to_dict("records")} if len(ranking) else {}
    kernels = {k.name: k for k in tuner.base.plan.kernels}
    out = []
    for name in chosen:
        r = by.get(name, {})
        nodes = kernels[r["Kernel"]].nodes if r.get("Kernel") in kernels else [name]
        out.append({"node": name, "kernel": r.get("Kernel", ""), "op_type": r.get("OpType", ""),
                    "rank": r.get("Rank"), "local_cosine": r.get("LocalCosine"), "local_red": r.get("LocalRED"),
                    "local_overflow": bool(r.get("LocalOverflow", False)),
                    "range_overflow": bool(r.get("RangeOverflow", False)), "acc_red": r.get("AccRED"),
                    "output_share": r.get("OutputShare"),
                    "without_it": _without_it(chosen, name, tuner),
                    "range_findings": [f.kind for f in findings if f.subject in nodes]})
    return out


def tune(model: onnx.ModelProto, feeds, config: Config | None = None, target=None, tasks=(),
         top_k: int = 0, progress=_noop) -> TuneResult:
    """Run the whole loop (module docstring) and return a :class:`TuneResult` (FP16 overflow warnings of the
    simulated kernels are silenced: overflow is what is being searched for).

    Args:
        model: loaded model. feeds: [(label, {input: array})], all of one shape. config: start config
            (default allow_mix_precision). target: text (:func:`parse_target`) or parsed list; None:
            :func:`default_target` of the model.
        tasks: task checks fn(golden_outputs, npu_outputs, model) -> {"passed", ...}, or "module:function" specs.
        top_k: ranked candidates whose share of the output error is measured after the search, one trial run
            each (toolkit.tuning.sensitivity.output_shares; the search does not use it). Default 0: not
            measured (the OutputShare column stays empty).

    Raises:
        UsageError (bad target / task; a target condition no output's dtype admits: check_target_outputs),
        InputError (input sets of different shapes; every output empty on every input; a reference output that
        holds NaN/Inf), ModelError. UserError: a task check called sys.exit().
    """
    with np.errstate(all="ignore"):
        return _tune(model, feeds, config, target, tasks, top_k, progress)


def _tune(model, feeds, config, target, tasks, top_k, progress) -> TuneResult:
    t0 = time.perf_counter()
    config = config or Config()
    target = default_target(model) if target is None else target
    target = parse_target(target) if isinstance(target, str) else list(target)
    check_target_outputs(model, target)
    tasks = [load_task(t) if isinstance(t, str) else t for t in tasks]
    tm: dict[str, float] = {}
    progress("compiling")
    tuner = Tuner(model, feeds, config, target, tasks, progress)
    notes = [] if tuner.base.plan.kernels else [
        ("no kernel runs on the device: every output is a constant folded at compile time or a graph input passed "
         "through, so nothing was simulated and nothing needs FP32")]
    base_rt = tuner.memo.runtime(tuner.base)
    ranges = RangeStats(model)
    progress(f"FP32 reference and baseline ({config.precision_mode}) on {len(feeds)} input(s)")
    st = _reference_and_baseline(tuner, ranges, base_rt, progress)
    range_df = ranges.frame()
    findings = range_findings(range_df)
    # reference_ms: compile + FP32 references + range analysis; the baseline runs count to search_ms (as before)
    tm["reference_ms"] = (time.perf_counter() - t0) * 1e3 - st.baseline_ms
    before_rows, errs, tasks_before, met0 = st.rows, st.errors, st.tasks, st.met
    tuner.order = sorted(range(len(feeds)), key=lambda i: -errs[i])
    tuner.cache[()] = Trial((), met0, max(errs), before_rows, len(feeds))
    ranking = pd.DataFrame()
    log: list[str] = []
    if not met0:
        ranking = _rank(tuner, base_rt, tuner.order[0], st.worst_golden, progress, dumps=st.worst_dumps,
                        whole_run=True)
        st.worst_golden = st.worst_dumps = None  # the search needs only the graph outputs
        tm["sensitivity_ms"] = (time.perf_counter() - t0) * 1e3 - sum(tm.values())
        chosen = search_ranked(tuner, ranking, st.shapes, log, progress)
        if top_k:
            ranking = measure_shares(tuner, ranking, top_k, progress)
    else:
        chosen = []
        log.append("the target holds in the given config: nothing to keep in FP32")
    tm["search_ms"] = (time.perf_counter() - t0) * 1e3 - sum(tm.values())
    tuned_cfg = tuner.config_for(chosen)
    if chosen:
        progress("verifying the tuned config from scratch on every input")
        after_plan, after_rows, tasks_after, met, after_rt = _verify(tuner, tuned_cfg)
    else:  # the tuned config is the given one, whose from-scratch compile the baseline already ran
        after_plan, after_rows, tasks_after, met, after_rt = tuner.base.plan, before_rows, tasks_before, met0, base_rt
    tm["verify_ms"] = (time.perf_counter() - t0) * 1e3 - sum(tm.values())
    progress(f"host time: median of {HOST_TIME_RUNS} runs after a warm-up, before and after the fallback")
    # both runtimes ran already (the baseline and the verification): those runs were the warm-ups
    host_before = host_time_ms(base_rt, feeds[0][1], warm_up=False)
    host_after = host_time_ms(after_rt, feeds[0][1], warm_up=False) if after_rt is not base_rt else host_before
    tm["host_timing_ms"] = (time.perf_counter() - t0) * 1e3 - sum(tm.values())
    flops = cov.node_flops(model, st.shapes)
    c0, c1 = cov.coverage(tuner.base.plan, flops), cov.coverage(after_plan, flops)
    tm["total_ms"] = (time.perf_counter() - t0) * 1e3
    unnamed = unnamed_in_file(model, chosen)
    if unnamed:  # keep_dtype.txt works in npuscope; a converter reading the file has no such node
        notes.append(f"{unnamed_text(unnamed)}: give those nodes these names in the model before handing "
                     "keep_dtype.txt to a converter")
    return TuneResult(met=met, chosen=chosen, config=tuned_cfg, target=target, before=pd.DataFrame(before_rows),
                      after=pd.DataFrame(after_rows), ranking=ranking, ranges=range_df, findings=findings,
                      evidence=_evidence(chosen, ranking, tuner, findings), coverage_before=c0, coverage_after=c1,
                      cost=cov.fallback_cost(c0, c1, host_before, host_after, HOST_TIME_RUNS), tasks_before=tasks_before,
                      tasks_after=tasks_after, log=log, trials=tuner.builds, timings_ms=tm,
                      inputs=[lbl for lbl, _ in feeds], notes=notes, kept_nodes=kept_nodes(model, chosen))


#: timed runs per plan for the host time of the cost estimate (after one untimed warm-up run)
HOST_TIME_RUNS = 3


def host_time_ms(rt: NpuRuntime, feed: dict, runs: int = HOST_TIME_RUNS, warm_up: bool = True) -> float:
    """Host wall time of one simulated run of ``rt`` on ``feed`` in ms: the median of ``runs`` runs'
    ``total_ms`` after one untimed warm-up run, so first-run effects (kernel session creation, caches) are
    not counted. ``warm_up=False``: ``rt`` has run already (that run was the warm-up). Host time of the
    simulation, not device time."""
    if warm_up:
        rt.run(feed)
    return float(np.median([rt.run(feed).total_ms for _ in range(max(1, runs))]))


def _verify(tuner: Tuner, tuned_cfg: Config):
    """Compile ``tuned_cfg`` from scratch (no reuse of the search's compiled graph) and check every input:
    (plan, rows, task results, target met, the runtime that ran)."""
    sess = Session(tuner.model, tuned_cfg, input_shapes=shapes_of(tuner.feeds[0][1]))
    rows, tasks, met = [], [], True
    for i in range(len(tuner.feeds)):
        ok, r, _, tk, _ = tuner.check_one(sess.runtime, i)
        rows += r
        tasks += tk
        met &= ok
    return sess.plan, rows, tasks, met, sess.runtime


def search_ranked(tuner: Tuner, ranking: pd.DataFrame, shapes: dict, log: list[str], progress=_noop) -> list[str]:
    """The keep-set tune chooses over ``ranking`` (:func:`_rank`): :func:`search_cheapest` with each candidate's
    FP32 cube cost from the FLOPs at ``shapes`` ({tensor: shape} of a reference run). Appends to ``log``."""
    progress(f"searching over {len(ranking)} ranked kernels")
    meets = lambda keep: tuner.trial(keep).met
    cost, near = candidate_costs(ranking, tuner.model, cov.node_flops(tuner.model, shapes))
    chosen, _ = search_cheapest(list(ranking["KeepName"]), meets, log, cost, near)
    return chosen


def _rank(tuner: Tuner, base_rt, worst: int, golden: dict, progress, dumps: dict | None = None,
          whole_run: bool = False) -> pd.DataFrame:
    """Sensitivity ranking on input ``worst``, whose full FP32 reference (graph inputs included) is ``golden``;
    ``dumps``: the base plan's dumps on that input when a run already holds them (diagnose's, or tune's
    baseline run), else run here. ``whole_run``: ``dumps`` is the RunResult.dumps of a whole run of ``base_rt``
    (not a diagnosis' subset), so that the trials may resume from it (toolkit.tuning.resume)."""
    progress(f"sensitivity: isolating every FP16 kernel on input {tuner.feeds[worst][0]}")
    feed = tuner.feeds[worst][1]
    if dumps is None:
        dumps, whole_run = base_rt.run(feed, dump=True).dumps, True
    if whole_run:
        tuner.resume.add(worst, base_rt.plan, dumps)  # the trials below resume from it
    df = kernel_sensitivity(base_rt, golden, dumps)
    del golden, dumps
    return file_names(rank_kernels(df), tuner.model)


def file_names(ranking: pd.DataFrame, model: onnx.ModelProto) -> pd.DataFrame:
    """``ranking`` with each KeepName as the model file names it: a node the loader renamed because the file
    repeats its name (``dense__9``, toolkit.ir.load.twins_index) is the file's ``dense``, which keep_dtype keeps
    with all its twins (the converter knows only that name). Candidates that become one name are one candidate,
    at the best rank of its members, its Nodes those of all of them; Rank is renumbered."""
    back = file_names_of(model)
    if not back or ranking.empty:
        return ranking
    df = ranking.copy()
    df["KeepName"] = [back.get(k, k) for k in df["KeepName"]]
    nodes = {}
    for k, n in zip(df["KeepName"], df["Nodes"]):
        nodes.setdefault(k, []).extend(m for m in str(n or "").split(";") if m)
    df = df.drop_duplicates("KeepName", keep="first").reset_index(drop=True)
    df["Nodes"] = [";".join(dict.fromkeys(nodes[k])) for k in df["KeepName"]]
    df["Rank"] = range(len(df))
    return df


def unnamed_text(names: list[str], shown: int = 8) -> str:
    """"'MatMul_3' is npuscope's name for a node the model file leaves unnamed" (several: "are ... names for
    nodes"), the first ``shown`` quoted."""
    listed = ", ".join(f"'{n}'" for n in names[:shown]) + (f" and {len(names) - shown} more"
                                                          if len(names) > shown else "")
    return (f"{listed} is npuscope's name for a node the model file leaves unnamed" if len(names) == 1 else
            f"{listed} are npuscope's names for nodes the model file leaves unnamed")


def kept_nodes(model: onnx.ModelProto, keep) -> int:
    """Graph nodes the keep_dtype entries ``keep`` name (an entry naming a node the file repeats names each)."""
    index = twins_index(model, (n.name for n in model.graph.node))
    return sum(1 + len(index.get(k, ())) for k in keep)


def measure_shares(tuner: Tuner, ranking: pd.DataFrame, top_k: int, progress=_noop) -> pd.DataFrame:
    """``ranking`` with OutputShare measured for its first ``top_k`` kernels without overflow evidence
    (toolkit.tuning.sensitivity.output_shares): each kept alone in FP32 is a :meth:`Tuner.trial` (a try the
    search made already is not run again), its error the worst output RelativeEuclideanDistance over the inputs
    it ran, against the given config's."""
    progress(f"output shares: the first {top_k} ranked kernels each kept alone in FP32")
    return output_shares(ranking, lambda keep: tuner.trial(keep).error, tuner.cache[()].error, top_k)
