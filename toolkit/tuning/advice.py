"""Verified advice for ``diagnose``: every fix it prints has been applied and re-run first.

Given a finished diagnosis (toolkit.diagnose.diagnose: its reference run, compiled graph, runtime and dumps are
re-used, nothing is run twice), :func:`verify_advice`:

1. checks the outputs of the run already made against the default tune target
   (toolkit.tuning.tune.default_target: ``CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2|fp16,
   KullbackLeiblerDivergence<=0.005`` on every float
   graph output, ``ExactMatchRate>=1`` on every integer/bool one, no NaN/Inf where the reference is finite)
   and the task checks;
2. applies every keep_dtype set a finding advises (evidence ``keep_dtype``) and re-runs it: the finding gets
   ``evidence["verified"]`` = {"keep_dtype", "met", "before", "after"} (output CosineSimilarity, worst over
   the float outputs, before and after) and its recommendation says what the set restores, or that it does
   not restore the target;
3. when the verdict is FAIL, the target is missed and the plan is right in force_fp32 (the divergence is a precision matter, not a
   compile-stage fault), searches the smallest keep set exactly as ``tune`` does (the same sensitivity
   ranking, toolkit.tuning.tune.search_ranked, on the same evidence), so that diagnose's fix *is* tune's
   answer for the default target on the same input, then compiles that config from scratch and runs it
   again (toolkit.tuning.tune._verify).

The result is a :class:`VerifiedFix`; toolkit.commands.diagnose writes it as keep_dtype.txt and
fixed_config.json, which compile / diagnose ``--config`` accept.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from toolkit.compare.tasks import TASKS, load_task
from toolkit.config.keep_dtype import unwritable_entry
from toolkit.config.schema import Config
from toolkit.core.records import Finding
from toolkit.core.text import show
from toolkit.diagnose import Prepared
from toolkit.engine import shapes_of
from toolkit.ir.load import file_names_of, unnamed_in_file
from toolkit.ort.reference import ReferenceRunner
from toolkit.tuning.tune import (
    Trial,
    Tuner,
    _rank,
    _verify,
    check_outputs,
    default_target,
    format_target,
    kept_nodes,
    measure_shares,
    parse_target,
    search_ranked,
    unnamed_text,
)

#: Node names a fix sentence shows; a longer set is counted, and listed whole in keep_dtype.txt.
SHOWN_NAMES = 12


def _noop(msg: str) -> None:
    pass


@dataclass
class VerifiedFix:
    """What :func:`verify_advice` measured (plain data; ``summary()`` is its summary.json entry).

    ``needed``: the given config misses the target (or a task check fails). ``searched``: the tune search ran
    (needed, and no compile-stage fault). ``met``: the ``keep_dtype`` set meets the target, verified by a
    compile from scratch. ``keep_dtype``: node names to add to the config's keep_dtype (empty when nothing is
    needed or nothing was found). ``before`` / ``after``: worst output CosineSimilarity over the float outputs
    (NaN when the model has none) in the given config and with the set; ``rows_after``: the per-output rows of
    the verification run (toolkit.tuning.tune.check_outputs), ``rows_before`` those of the given config.
    ``trials``: precision configs built and run.
    ``config``: the given config plus ``keep_dtype``. ``verdict``: the diagnosis' verdict; the search runs only
    under FAIL (a PASS / WARN model can ship as compiled)."""

    target: list
    needed: bool
    searched: bool = False
    met: bool = False
    keep_dtype: list[str] = field(default_factory=list)
    before: float = math.nan
    after: float = math.nan
    rows_before: list[dict] = field(default_factory=list)
    rows_after: list[dict] = field(default_factory=list)
    before_nonfinite: int = 0
    after_nonfinite: int = 0
    trials: int = 0
    log: list[str] = field(default_factory=list)
    config: Config | None = None
    verdict: str = "FAIL"
    not_searched: str = ""  # why no search ran under FAIL (a compile-stage fault, a reference that is NaN/Inf)
    default: bool = True  # ``target`` is the model's default target (no line of the user's changed it)
    inputs: int = 1  # input sets every check ran on (a dataset's worst input first)
    inputs_left_out: int = 0  # a dataset's inputs of another shape than the worst one (not checked)
    simulated: bool = True  # some kernel of the plan runs on the device (False: everything folded or passed through)
    kept_nodes: int = 0  # graph nodes keep_dtype names (an entry the file gives several nodes names each)
    unnamed: list = field(default_factory=list)  # keep_dtype entries that are npuscope's names for unnamed nodes

    def summary(self) -> dict:
        """The summary.json entry. ``met``: the target holds with ``keep_dtype`` added, so also True when no fix
        is needed (the given config meets it, with the empty set) and the plan ran a kernel."""
        met = self.met if self.needed else (self.simulated and not self.rows_empty())
        return {"target": format_target(self.target), "needed": self.needed, "searched": self.searched,
                "met": bool(met), "keep_dtype": list(self.keep_dtype), "output_cosine_before": self.before,
                "output_cosine_after": self.after,
                "output_nonfinite_before": self.before_nonfinite, "output_nonfinite_after": self.after_nonfinite,
                "trials": self.trials, "search_log": list(self.log), "not_searched": self.not_searched,
                "inputs": self.inputs, "inputs_left_out": self.inputs_left_out}

    def target_name(self) -> str:
        """"the default target", or "the target (the default with your lines)" when the user's lines changed it."""
        return "the default target" if self.default else "the target (the default with your lines)"

    def rows_empty(self) -> bool:
        """Every output checked before is empty (no element compared against the target)."""
        return bool(self.rows_before) and all(r.get("Elements") == 0 for r in self.rows_before)

    def sentence(self) -> str:
        """One line for the terminal and the report's first screen."""
        target = ", ".join(format_target(self.target))
        if not self.needed and self.rows_empty():
            return "no fix to verify: every output is empty, so no element was compared against the target"
        if not self.needed and not self.simulated:
            return ("no fix to verify: no kernel runs on the device (every output is a constant folded at compile "
                    "time or a graph input passed through), so there is nothing to keep in FP32")
        if not self.needed:
            return f"no fix needed: the outputs meet {self.target_name()} ({target}) as compiled"
        if self.verdict != "FAIL":
            return (f"no fix needed to ship: the outputs hold the abnormal lines; they miss tune's stricter default "
                    f"target ({target}); `npuscope tune` searches a keep set that meets it")
        if self.met:
            shown = [f"'{k}'" for k in self.keep_dtype[:SHOWN_NAMES]]
            more = len(self.keep_dtype) - len(shown)
            one_per_line = unwritable_entry(self.keep_dtype) is None  # else keep_dtype.txt is not written
            files = "keep_dtype.txt, fixed_config.json" if one_per_line else \
                "fixed_config.json; keep_dtype.txt cannot hold one of these names on a line"
            listed = "keep_dtype.txt" if one_per_line else "fixed_config.json"
            names = ", ".join(shown) + (f" and {more} more ({len(self.keep_dtype)} in all, listed in {listed})"
                                        if more > 0 else "")
            if self.kept_nodes > len(self.keep_dtype):  # the file repeats some of these names: each keeps all
                names += (f" (naming {self.kept_nodes} nodes: the model file gives some of these names to several "
                          "nodes, and keep_dtype keeps every one)")
            if self.unnamed:  # applied by npuscope; a converter reading the file has no such node
                names += (f" ({unnamed_text(self.unnamed)}: give those nodes these names in the model before "
                          "handing keep_dtype to a converter)")
            on = "" if self.inputs == 1 else f" on all {self.inputs} inputs"
            if self.inputs_left_out:  # one compiled plan per shape: the others were not run with the fix
                return (f"fix for the worst input's shape, verified on its {self.inputs} input(s) only: keeping "
                        f"{names} in FP32 ({files}): "
                        f"{change_text(self.rows_before, self.rows_after)}, target {target} met there (recompiled "
                        f"and re-run); {self.inputs_left_out} input(s) of other shapes were not checked: diagnose "
                        "them with --config fixed_config.json")
            return (f"verified fix: keeping {names} in FP32 ({files}): "
                    f"{change_text(self.rows_before, self.rows_after)}, target {target} met{on} (recompiled and "
                    "re-run)")
        if not self.searched:
            why = self.not_searched or "the plan diverges even in force_fp32 (a compile-stage fault)"
            return f"no keep_dtype fix: {why}, so no precision setting restores the target ({target})"
        return (f"no verified fix: keeping every ranked kernel in FP32 does not meet the target ({target}); "
                f"{change_text(self.rows_before, self.rows_after)} at best")


def _value(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else show(v, digits=6)


def _worst(rows: list[dict], metric: str) -> float:
    vals = [r.get(metric) for r in rows]
    vals = [float(v) for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return min(vals) if vals else math.nan


def _worst_cosine(rows: list[dict]) -> float:
    return _worst(rows, "CosineSimilarity")


def _state(rows: list[dict]) -> tuple[float, int]:
    """(output CosineSimilarity over the finite positions, device NaN/Inf count over the outputs) of the worst
    input set among ``rows`` (check_outputs rows, by their ``Input``), both of that one input: an input with
    NaN/Inf is worse than any without (more of them, worse), then the lowest cosine; an output with NaN/Inf and
    no cosine (no finite position pair) makes its input's cosine NaN ("n/a"). So a dataset's sentence never
    puts one input's cosine next to another's NaN/Inf count."""
    cos, bad, _ = _worst_input_state(rows)
    return cos, bad


def _worst_input_state(rows: list[dict]) -> tuple[float, int, int]:
    """(cosine, NaN/Inf count, float elements) of the worst input among ``rows`` (:func:`_state`'s order)."""
    by_input: dict = {}
    for r in rows:
        by_input.setdefault(r.get("Input"), []).append(r)
    states = []
    for group in by_input.values():
        bad = int(sum(int(r.get("NaN/Inf") or 0) for r in group))
        blind = any(int(r.get("NaN/Inf") or 0) and not _finite_number(r.get("CosineSimilarity")) for r in group)
        size = int(sum(int(r.get("Elements") or 0) for r in group if "CosineSimilarity" in r))
        states.append((math.nan if blind else _worst_cosine(group), bad, size))
    if not states:
        return math.nan, 0, 0
    return max(states, key=lambda s: (s[1] > 0, s[1], math.isnan(s[0]), -s[0] if not math.isnan(s[0]) else 0.0))


def _finite_number(v) -> bool:
    try:
        return v is not None and not isinstance(v, bool) and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _measures(rows: list[dict]) -> dict[str, str]:
    """{label: value text} of the outputs' state in ``rows`` (toolkit.tuning.tune.check_outputs): "cosine"
    (worst CosineSimilarity of the float outputs; when the device wrote NaN/Inf, "C on the finite values, with
    N of M NaN/Inf", or "n/a with N of M NaN/Inf" when no finite pair is left: a cosine over a quarter of the
    values is not read as the output's) and
    "ExactMatchRate" (worst of the integer/bool outputs), each only when such an output was checked."""
    out = {}
    if any(not math.isnan(float(r.get("CosineSimilarity", math.nan))) or r.get("NaN/Inf") for r in rows):
        cos, bad, size = _worst_input_state(rows)
        of = f" of {size}" if size >= bad > 0 else ""
        finite = " on the finite values," if bad and not math.isnan(cos) else ""
        out["cosine"] = _value(cos) + (f"{finite} with {bad}{of} NaN/Inf" if bad else "")
    if any(not math.isnan(float(r.get("ExactMatchRate", math.nan))) for r in rows):
        out["ExactMatchRate"] = _value(_worst(rows, "ExactMatchRate"))
    return out


def state_text(rows: list[dict]) -> str:
    """The outputs' state in words: "output cosine 0.99996", "output ExactMatchRate 0.92", or both."""
    m = _measures(rows)
    return "output " + ", ".join(f"{k} {v}" for k, v in m.items()) if m else "no output checked"


def change_text(before: list[dict], after: list[dict]) -> str:
    """Before → after in words, per measure: "output cosine 0.3 -> 0.99999, ExactMatchRate 0.92 -> 1"."""
    b, a = _measures(before), _measures(after)
    keys = list(dict.fromkeys([*b, *a]))
    return ("output " + ", ".join(f"{k} {b.get(k, 'n/a')} -> {a.get(k, 'n/a')}" for k in keys)) if keys \
        else "no output checked"


def task_functions(zoo_name: str | None, task_metrics=()) -> list:
    """The task checks diagnose and tune both apply: the zoo model's built-in one, then ``module:function``s."""
    return ([TASKS[zoo_name]] if zoo_name in TASKS else []) + [load_task(s) for s in task_metrics]


def verify_advice(prep: Prepared, config: Config, findings: list[Finding], extras: dict, stage: str,
                  verdict: str = "FAIL", target=None, task_metrics=(), top_k: int = 8, progress=_noop,
                  other_feeds=()) -> VerifiedFix:
    """Verify the advice of a diagnosis and find the fix (module docstring); updates ``findings`` in place.

    Args:
        prep: the diagnosed model and feed. config: the config it was diagnosed in. findings: its findings.
        extras: toolkit.diagnose.diagnose's extras ("golden", "device", "compiled", "runtime",
            "npu_outputs"). stage: the diagnosis' stage ("compile" skips the search). verdict: its verdict
            (the severity of an ``accumulated_error`` finding).
        target: tune target text or parsed list; None: the model's default target
            (toolkit.tuning.tune.default_target, as tune uses). task_metrics: extra task checks
            (``module:function``).
        top_k: ranked candidates whose output share an accumulated_error finding reports (measured after the
            search: toolkit.tuning.tune.measure_shares).
        other_feeds: [(label, {input: array})], more input sets (a dataset's other inputs) every advised set and
            the fix must also meet the target on, as tune's inputs; those of another shape than ``prep.feeds``
            are left out (one compiled plan) and counted in ``VerifiedFix.inputs_left_out``.

    Raises:
        UsageError: a bad target or task spec.
    """
    target = default_target(prep.model) if target is None else target
    target = parse_target(target) if isinstance(target, str) else list(target)
    golden = extras["golden"]
    shape = shapes_of(prep.feeds)
    others = [(label, f) for label, f in other_feeds if shapes_of(f) == shape]
    tuner = Tuner(prep.model, [("input", prep.feeds), *others], config, target,
                  task_functions(prep.zoo_name, task_metrics), progress, compiled=extras["compiled"])
    tuner.golden_out = [{o: golden[o] for o in tuner.outputs if o in golden}]
    met, rows, err = check_outputs(extras["npu_outputs"], tuner.golden_out[0], target, tuner.depths)
    tasks = tuner.run_tasks(0, extras["npu_outputs"])
    met = met and all(t["passed"] for t in tasks)
    if others:
        progress(f"FP32 reference and the given config on the {len(others)} other input(s) of this shape")
        ref = ReferenceRunner(prep.model, expose=False)  # the graph outputs only: the target is on them
        for i, (_, feed) in enumerate(others, start=1):
            g = ref.run(feed)
            tuner.golden_out.append({o: g[o] for o in tuner.outputs if o in g})
            ok, r, e, tk, _ = tuner.check_one(extras["runtime"], i)
            met, rows, err, tasks = met and ok, rows + r, max(err, e), tasks + tk
    tuner.cache[()] = Trial((), met, err, rows, len(tuner.feeds))
    fix = VerifiedFix(target=target, needed=not met, before=_state(rows)[0], before_nonfinite=_state(rows)[1],
                      rows_before=rows, inputs=len(tuner.feeds), inputs_left_out=len(other_feeds) - len(others),
                      simulated=bool(extras["compiled"].plan.kernels),
                      default=format_target(target) == format_target(parse_target(default_target(prep.model))))
    progress("verifying the advice: each advised keep_dtype set applied and re-run")
    _as_file_names(findings, prep.model)
    missed = [(f, text) for f in findings if (text := _verify_finding(f, tuner, fix))]
    try:
        _search_fix(prep, config, findings, extras, stage, verdict, tuner, fix, met, rows, tasks, top_k, progress)
    finally:  # an advised set that misses the target points to what the search found, or says why there is none
        for f, text in missed:
            f.recommendation += f"{text}; {_pointer(fix)}]"
    return fix


def mark_unverified(findings: list[Finding], why: str) -> int:
    """Say on every finding that advises a keep_dtype set (evidence ``keep_dtype``) that the set was not applied
    and re-run, and why (``why``: e.g. "--no-verify"): its recommendation ends ``[not verified: <why>]`` and its
    evidence gets ``verified`` = None. Returns how many findings were marked."""
    n = 0
    for f in findings:
        ev = f.evidence if isinstance(f.evidence, dict) else None
        if ev and ev.get("keep_dtype") and "verified" not in ev:
            ev["verified"] = None
            f.recommendation += f" [not verified: {why}]"
            n += 1
    return n


def _as_file_names(findings: list[Finding], model) -> None:
    """Each advised keep_dtype set as the model file names its nodes: a node the loader renamed because the file
    repeats its name (``dense__10``, toolkit.ir.load.twins_index) is the file's ``dense``, which keep_dtype keeps
    with all its twins (the converter knows no other name); the recommendation says so."""
    back = file_names_of(model)
    if not back:
        return
    shared = Counter(back.values())  # file name -> its twins (the loader's renames)
    for f in findings:
        keep = f.evidence.get("keep_dtype") if isinstance(f.evidence, dict) else None
        if not keep or not any(k in back for k in keep):
            continue
        f.evidence["keep_dtype"] = list(dict.fromkeys(back.get(k, k) for k in keep))
        named = sorted({back[k] for k in keep if k in back})
        f.recommendation += (" (the model file names " + ", ".join(
            f"'{b}' {1 + shared[b]} nodes" for b in named) + ": keep_dtype names them so and keeps them all)")


def _pointer(fix: VerifiedFix) -> str:
    """Where a finding whose advised set misses the target sends the user, once the search is over."""
    if fix.met and fix.keep_dtype:
        return "see the verified fix"
    if fix.verdict != "FAIL":
        return "no fix is needed to ship (the outputs hold the abnormal lines)"
    if not fix.searched:
        return f"no keep_dtype fix: {fix.not_searched or 'the plan diverges even in force_fp32'}"
    return "no keep set found meets the target (see the search log)"


def _search_fix(prep, config, findings, extras, stage, verdict, tuner, fix, met, rows, tasks, top_k, progress):
    """Steps 3 and 4 of :func:`verify_advice` (module docstring); fills ``fix`` and ``findings``."""
    golden = extras["golden"]
    if met:
        fix.config, fix.after, fix.rows_after, fix.trials = config, fix.before, rows, tuner.builds
        fix.after_nonfinite = fix.before_nonfinite
        return
    if verdict != "FAIL":  # the model can ship under the abnormal lines: no search (tune finds a stricter set)
        fix.config, fix.after, fix.rows_after, fix.trials = config, fix.before, rows, tuner.builds
        fix.after_nonfinite, fix.verdict = fix.before_nonfinite, verdict
        return
    on_ref = [t for t in tasks if t.get("fails_on_reference")]
    if any(f.kind == "golden_nonfinite" for f in findings):
        fix.not_searched = "the FP32 reference's own outputs hold NaN/Inf (see the golden_nonfinite finding)"
    elif on_ref:
        fix.not_searched = f"task check {on_ref[0]['name']} fails the FP32 reference too"
    elif stage == "compile":
        fix.not_searched = "the plan diverges even in force_fp32 (a compile-stage fault)"
    elif tight := [t for f in findings if f.kind == "line_tighter_than_fp32"
                   for t in f.evidence.get("tensors", []) if t in tuner.outputs]:
        fix.not_searched = (f"the line you set on output '{tight[0]}' is tighter than FP32 rounding of its values "
                            "(see the line_tighter_than_fp32 finding), which no keep set can beat")
    else:
        fix.searched = True
        progress("searching the smallest keep_dtype set that meets the target (as tune)")
        ranking = _rank(tuner, extras["runtime"], 0, golden, progress,
                        dumps=extras["device"])  # read by kernel output name: the feeds never match
        shapes = {k: v.shape for k, v in golden.items() if isinstance(v, np.ndarray)}
        chosen = search_ranked(tuner, ranking, shapes, fix.log, progress)
        cfg = tuner.config_for(chosen)
        progress("verifying the fix from scratch")
        _, after_rows, _, ok, _ = _verify(tuner, cfg)
        fix.met, fix.keep_dtype, fix.config = bool(ok and chosen), list(chosen), cfg
        fix.kept_nodes = kept_nodes(tuner.model, chosen)
        fix.unnamed = unnamed_in_file(tuner.model, chosen)
        fix.rows_after, (fix.after, fix.after_nonfinite) = after_rows, _state(after_rows)
        origins = [f for f in findings if f.kind in ORIGIN_KINDS]
        part = _origins_part(origins, tuner, fix) if origins else None
        if not origins or part is not None:  # no origin, or none explains the output error: it accumulated
            ranking = measure_shares(tuner, ranking, top_k, progress)
            acc = accumulated_finding(ranking, fix, "error" if verdict == "FAIL" else "warning", origins=part)
            for f in origins:  # a real local divergence, but not what the outputs lose
                f.severity = "warning"
                f.recommendation += (" [a local origin only: keeping the origins found in FP32 does not restore "
                                     "the outputs; the output error accumulated (accumulated_error)]")
            findings.insert(0, acc)
    fix.trials = tuner.builds


#: Finding kinds that name where the error starts; without one, a missed target is accumulated error.
ORIGIN_KINDS = frozenset({"first_divergence", "divergence_origin", "fp16_overflow", "compile_stage_fault",
                          "inconsistent_input", "golden_nonfinite"})


#: Share of the output error a verified fix removes that decides whether the origins found explain it.
EXPLAINS_SHARE = 0.5


def _removed(e0: float, e: float, ef: float) -> float | None:
    """Share of the output error the verified fix removes (``e0`` → ``ef``) that a set with error ``e`` removes;
    errors are worst output RelativeEuclideanDistance, inf with NaN/Inf (then: 1 when ``e`` is finite, else 0).
    None when the fix removes no measurable error (it met a task check or another condition)."""
    if math.isinf(e0):
        return 1.0 if math.isfinite(e) else 0.0
    if not math.isfinite(e):
        return 0.0
    return (e0 - e) / (e0 - ef) if e0 > ef else None


def _origins_part(origins: list[Finding], tuner: Tuner, fix: VerifiedFix) -> tuple[list[str], Trial] | None:
    """None when the origin findings explain the output error, else (their advised keep sets joined, U, and the
    trial of U). They explain it when U, applied and re-run, meets the target or removes at least
    :data:`EXPLAINS_SHARE` of the output error the verified fix S removes (:func:`_removed`), or when S without
    U's nodes removes less than that (the fix needs the origins: an advised set one neighbour short, as an eps
    flushed to zero that needs the Div after it too). Otherwise the fix works mostly elsewhere: the error
    accumulated. Not judged (None) without a verified fix or when the findings advise no set."""
    keep = list(dict.fromkeys(k for f in origins if isinstance(f.evidence, dict)
                              for k in (f.evidence.get("keep_dtype") or [])))
    if not keep or not (fix.met and fix.keep_dtype):
        return None
    trial = tuner.trial(keep)
    e0, ef = tuner.cache[()].error, tuner.trial(fix.keep_dtype).error
    by_origins = _removed(e0, trial.error, ef)
    if trial.met or by_origins is None or by_origins >= EXPLAINS_SHARE:
        return None
    rest = [k for k in fix.keep_dtype if k not in set(keep)]
    if len(rest) < len(fix.keep_dtype):
        without = _removed(e0, tuner.trial(rest).error, ef)
        if without is None or without < EXPLAINS_SHARE:
            return None
    return keep, trial


def accumulated_finding(ranking, fix: VerifiedFix, severity: str = "error", shown: int = 5,
                        origins: tuple[list[str], Trial] | None = None) -> Finding:
    """The ``accumulated_error`` finding (``severity``: the verdict's, toolkit.diagnose.agree_severity): the
    outputs miss the target but no single kernel explains it: no kernel is abnormal on its own (every FP16 kernel
    re-run alone on the exact reference inputs is within its noise, or none was found to start the error), or
    the origins found do not explain it (``origins``: their advised keep sets joined and that set's trial,
    :func:`_origins_part`). Evidence: ``kernels`` (FP16 kernels ranked, N), ``shares`` ({keep name: share of the
    output error removed by keeping that kernel alone in FP32, 1 − RED_with/RED_without; measured for the top
    candidates by toolkit.tuning.tune.measure_shares}), ``keep_dtype`` and ``verified`` (the smallest set tune's
    search finds, applied and re-run), ``origins_keep_dtype`` / ``origins_output_cosine`` with ``origins``."""
    shares = {}
    if len(ranking) and "OutputShare" in ranking:
        measured = ranking[ranking["OutputShare"].notna()].sort_values("OutputShare", ascending=False)
        shares = {r["KeepName"]: float(r["OutputShare"]) for r in measured.to_dict("records")}
    n = len(ranking)
    top = ", ".join(f"'{k}' {v:.0%}" for k, v in list(shares.items())[:shown]) or "none measured"
    if shares:
        top = f"{top} (measured for the {len(shares)} of {n} with the largest local error)"
    ev = {"kernels": n, "shares": shares, "keep_dtype": list(fix.keep_dtype),
          "verified": {"keep_dtype": list(fix.keep_dtype), "met": fix.met, "output_cosine_before": fix.before,
                       "output_cosine_after": fix.after}}
    if origins is None:
        why = "none abnormal when re-run alone on the exact reference inputs"
    else:
        keep, trial = origins
        ev["origins_keep_dtype"], ev["origins_output_cosine"] = list(keep), _state(trial.rows)[0]
        names = ", ".join(f"'{k}'" for k in keep)
        why = (f"the origins found explain little of it (keeping {names} in FP32 gives "
               f"{change_text(fix.rows_before, trial.rows)})")
    if n == 1 and origins is None:  # one FP16 kernel: nothing accumulated; its rounding is all there is
        only = str(ranking.iloc[0]["KeepName"])
        head = (f"the output error is the FP16 rounding of the one FP16 kernel, '{only}', which is within its "
                f"expected noise when re-run alone on the exact reference inputs: the target is tighter than that "
                f"rounding; ")
    else:
        head = (f"no single kernel explains the output error: it accumulated over {n} FP16 kernels, {why}; share "
                f"of the output error each removes when kept alone in FP32: {top}; ")
    return Finding(severity, "accumulated_error", "outputs", ev, head + fix.sentence())


def _verify_finding(f: Finding, tuner: Tuner, fix: VerifiedFix) -> str | None:
    """Apply the keep_dtype set finding ``f`` advises, re-run, and say in ``f`` what it restores; when the set
    misses the target, the text to append instead (without its end: :func:`verify_advice` adds where to look)."""
    keep = f.evidence.get("keep_dtype") if isinstance(f.evidence, dict) else None
    if not keep:
        return None
    trial = tuner.trial(list(keep))
    after = _state(trial.rows)
    before = (fix.before, fix.before_nonfinite)
    f.evidence["verified"] = {"keep_dtype": list(keep), "met": trial.met, "output_cosine_before": before[0],
                              "output_cosine_after": after[0], "output_nonfinite_after": after[1]}
    names = " and ".join(f"'{k}'" for k in keep)
    if not fix.needed:
        f.recommendation += (f" [not needed: the outputs already meet {fix.target_name()}; keeping {names} in "
                             f"FP32 gives {state_text(trial.rows)}]")
    elif trial.met:
        f.recommendation += (f" [verified: keeping {names} in FP32: {change_text(fix.rows_before, trial.rows)}, "
                             "target met]")
    else:  # completed by verify_advice once the search says where to look instead (_pointer)
        return (f" [applied and re-run: keeping {names} in FP32 gives {change_text(fix.rows_before, trial.rows)}, "
                "which does not meet the target")
    return None


def fix_config(fix: VerifiedFix) -> Config | None:
    """The config to write as fixed_config.json (None when there is no verified fix)."""
    if not fix.met or fix.config is None:
        return None
    return dataclasses.replace(fix.config, keep_dtype=list(fix.config.keep_dtype))
