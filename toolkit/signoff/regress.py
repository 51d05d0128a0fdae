"""``regress``: what changed between two report folders (diagnose, compare or signoff), and is it worse?

Reads from each folder: summary.json (required: verdict, environment, config, signoff criteria), result.csv
(per-tensor metrics), plan.json (per-node kernel, precision, placement, fusion rule) and fusion_result.json.

A regression is any of: a verdict that got worse (PASS < WARN < FAIL), a signoff criterion that passed and now
fails, a tensor abnormal (or overflowing) now that was not before, a tensor compared before whose dumps cannot be
compared now (unreadable, mismatched: :data:`BROKEN_REASONS`; ``lost_comparisons``), or a tolerance metric that
got worse by more than its tolerance (absolute change in the metric's bad direction; defaults
:data:`DEFAULT_TOLERANCE`). A tensor is "normal again" only when it is compared in the new run.
Both folders must be results of diagnose/compare or signoff (:func:`result_kind`), of the same kind of input
(a dataset run, ``--inputs`` folder, is not compared with a single-input run) and of the same model (same
``model_sha256``) unless ``allow_different_models`` is set, which only adds a warning to the report.
Environment and config changes, decision changes (precision, placement, fusion) and fusion statistics are
reported, not counted as regressions: they explain them. Two signoffs judged by different policies (the
``policy``, ``policy_path`` and ``policy_sha256`` their summaries record: :func:`policy_changes`) list the policy
changes first among ``environment_changes``, with a warning that verdict changes may come from the policy, not
from the build. Verdict and criterion changes for the better are listed as ``improvements``.

Inputs are compared by their data, not by how they were named: a diagnose/compare summary records
``inputs_sha256`` ({input name: :func:`input_digest`}), a dataset run's inputs.csv the ``Sha256`` of each input
file; two runs on the same data given by different paths match, the same path holding other data does not.
A run without these digests (older npuscope, signoff) is compared by its input description as before, and
the report's ``notes`` say so. A dump comparison (compare-dumps) records no digests: its inputs are its golden
dumps (:data:`DUMP_INPUT_KEYS`), never the target folder, which is what is under test. A run that names no model
(compare-dumps without ``--model``) beside one that does is refused as such (tensors are named differently), not as
a result of another model.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pandas as pd

from toolkit.compare.metrics import HIGHER_IS_BETTER, METRICS
from toolkit.compare.metrics.grammar import check_names, in_range, parse_conditions
from toolkit.core.boundedjson import json_loads, read_limited_bytes
from toolkit.core.csvjson import undo_formula_safe
from toolkit.core.errors import InputError, UsageError
from toolkit.core.text import show_line, show_pair
from toolkit.core.userpaths import check_path
from toolkit.inputs.digest import DIGESTS_KEY
from toolkit.signoff.policy import BOUNDABLE

#: Allowed absolute worsening per metric (CosineSimilarity may drop by 1e-3, RED may grow by 0.01).
DEFAULT_TOLERANCE = {"CosineSimilarity": 1e-3, "RelativeEuclideanDistance": 1e-2}
VERDICT_RANK = {"PASS": 0, "WARN": 1, "FAIL": 2}
DECISION_KEYS = ("kernel", "precision", "placement", "rule", "fusion", "implmode")


class Tolerance(dict):
    """Allowed worsening per metric ``{metric: absolute change}`` (a dict, as before) plus what the condition
    grammar adds: ``per_tensor`` ({tensor: {metric: change}}: the changes allowed for that tensor, the common ones
    included) and ``bounds`` (absolute bounds, :class:`toolkit.compare.metrics.grammar.Condition`, each for every
    tensor or the one it names: a tensor regresses when its new value breaks a bound its baseline value met);
    ``conditions``: the parsed items of the text, for :func:`check_tensor_names`."""

    def __init__(self, changes=(), per_tensor=None, bounds=(), conditions=()):
        super().__init__(changes)
        self.per_tensor = dict(per_tensor or {})
        self.bounds = list(bounds)
        self.conditions = list(conditions)

    def for_tensor(self, name: str) -> dict:
        """The allowed changes of tensor ``name``."""
        return self.per_tensor.get(name, self)

    def to_json(self) -> dict:
        """regress.json's ``tolerance``: the common allowed changes, plus ``per_tensor`` and ``bounds`` (the
        bounds in their requirement form) when the text set any."""
        out = {k: float(v) for k, v in self.items()}
        if self.per_tensor:
            out["per_tensor"] = {t: {k: float(v) for k, v in d.items()} for t, d in self.per_tensor.items()}
        if self.bounds:
            out["bounds"] = [b.canonical() for b in self.bounds]
        return out


def parse_tolerance(text: str | None) -> dict[str, float]:
    """``"CosineSimilarity=1e-4,RelativeEuclideanDistance=0.02"`` → a :class:`Tolerance` (merged over the
    defaults), in the one condition grammar (toolkit.compare.metrics.grammar): ``METRIC=CHANGE`` is the allowed
    worsening (an absolute change >= 0 in the metric's bad direction), ``METRIC=off`` checks no change of that
    metric, any comparison (``CosineSimilarity>=0.999``, ``MaxAbsoluteError<1e-2``, ...) is an absolute bound the
    new run must keep, which replaces the default allowed change of that metric; ``TENSOR:`` before an item
    limits it to that tensor (checked against the runs' tensors by :func:`check_tensor_names` once they are read).
    Raises UsageError naming the bad entry."""
    tol = Tolerance(DEFAULT_TOLERANCE)
    per: dict[str, dict] = {}
    bounds, set_here = [], set()
    conditions = parse_conditions(text, "--tolerance entry", allowed=BOUNDABLE, ranged=False)
    for c in conditions:
        target = tol if c.output is None else per.setdefault(c.output, {})
        if c.op == "=":
            if c.off:
                target[c.metric] = None
            elif c.value < 0 or not math.isfinite(c.value):
                raise UsageError(f"--tolerance entry '{c.text}' is not 'Metric=value >= 0' (an allowed worsening), "
                                 f"e.g. '{c.metric}={abs(c.value) if math.isfinite(c.value) else 1e-4:g}'")
            else:
                target[c.metric] = c.value
            set_here.add((c.output, c.metric))
            continue
        in_range(c.metric, c.value, f"--tolerance entry '{c.text}'", f"{c.metric}{c.op}")
        bounds.append(c)
    for b in bounds:  # a bound replaces the metric's default allowed change (not one set in the same text)
        if (b.output, b.metric) not in set_here and (b.output is not None or b.metric in DEFAULT_TOLERANCE):
            (tol if b.output is None else per.setdefault(b.output, {}))[b.metric] = None
    tensors = {t: {k: v for k, v in {**tol, **own}.items() if v is not None} for t, own in per.items()}
    return Tolerance({k: v for k, v in tol.items() if v is not None}, tensors, bounds, conditions)


def check_tensor_names(tol, tables: dict) -> None:
    """Refuse a ``TENSOR:`` item of ``tol`` naming no tensor of the runs' result.csv (``tables``: {run folder:
    DataFrame or None}), the same check as compare's and compare-dumps' (toolkit.compare.metrics.grammar.check_names:
    the closest name, the valid ones). Raises UsageError; nothing to check when neither run has per-tensor rows."""
    names = list(dict.fromkeys(str(n) for t in tables.values() if t is not None and "TensorName" in t.columns
                               for n in t["TensorName"]))
    if names:
        check_names(getattr(tol, "conditions", []), names, "--tolerance entry")


def _damaged(path: Path, what: str, optional: bool = True) -> InputError:
    """The one-line error for a report file regress cannot use: the file, what is wrong, how to fix it (re-run
    the command that wrote the folder; an optional file may also be deleted, regress then compares without it)."""
    fix = f"re-run the diagnose/compare/signoff command that wrote '{path.parent}'"
    if optional:
        fix += f", or delete {path.name} to compare without it"
    return InputError(f"'{path}' {what}; {fix}")


def _one_line(exc: Exception, n: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= n else text[: n - 3] + "..."


def _read_json(folder: Path, name: str, required: bool = False):
    """The parsed JSON object of ``folder/name``; None when the file does not exist and is not ``required``.
    Raises InputError (:func:`_damaged`) when the file cannot be read, is empty or truncated, is not UTF-8 or
    not JSON, or holds another top-level type than an object."""
    p = folder / name
    if not p.is_file():
        if required:
            raise InputError(f"'{folder}' has no {name}; pass a report folder written by diagnose, compare or signoff")
        return None
    fix = f"re-run the diagnose/compare/signoff command that wrote '{folder}'"
    raw = read_limited_bytes(p, "report file", InputError, fix, limit="artifact")  # regular files only
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _damaged(p, "is not UTF-8 text", not required) from None
    if not text.strip():
        raise _damaged(p, "is empty", not required)
    try:
        data = json_loads(text, f"report file '{p}'", InputError)
    except json.JSONDecodeError as exc:
        raise _damaged(p, f"is not valid JSON, truncated or damaged ({exc})", not required) from None
    if not isinstance(data, dict):
        raise _damaged(p, f"holds a JSON {_json_type(data)} at the top level, expected an object", not required)
    return data


def _json_type(v) -> str:
    """The JSON name of a parsed value's type (object, array, string, number, boolean, null)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string"}.get(type(v), "number")


def _expect(path: Path, where: str, value, want: tuple, desc: str, optional: bool = True) -> None:
    """Raise :func:`_damaged` when ``value`` (field ``where`` of ``path``) is not an instance of ``want``."""
    if not isinstance(value, want) or (isinstance(value, bool) and bool not in want):
        raise _damaged(path, f"has {where} = {_brief(value, 40)} (a JSON {_json_type(value)}), expected {desc}",
                       optional)


#: summary.json fields regress reads: {key: (types, description)}; null is allowed for the optional objects
_SUMMARY_FIELDS = {"verdict": ((str,), "one of PASS, WARN, FAIL"), "model_sha256": ((str, type(None)), "a string"),
                   "criteria": ((list,), "an array of criteria"), "policy": ((dict, type(None)), "an object"),
                   "environment": ((dict, type(None)), "an object"), "config": ((dict, type(None)), "an object"),
                   "dataset": ((dict, type(None)), "an object"), "counts": ((dict, type(None)), "an object"),
                   "triage": ((dict, type(None)), "an object"), "inputs_sha256": ((dict, type(None)), "an object")}


def check_summary(path: Path, s: dict) -> None:
    """Check the fields regress reads from a diagnose/compare/signoff summary.json ``s`` (:data:`_SUMMARY_FIELDS`):
    ``verdict`` and ``model_sha256`` present, ``verdict`` PASS/WARN/FAIL, each criterion an object with string
    ``name`` and ``status``, and either ``counts``/``triage`` (diagnose/compare) or ``criteria`` and ``policy``
    (signoff). Raises InputError naming the file and the field."""
    for key, (types, desc) in _SUMMARY_FIELDS.items():  # verdict first, then model_sha256
        if key in s:
            _expect(path, f"'{key}'", s[key], types, desc, optional=False)
        elif key in ("verdict", "model_sha256"):
            raise _damaged(path, f"has no '{key}' field", optional=False)
        if key == "verdict" and s[key] not in VERDICT_RANK:
            raise _damaged(path, f"has 'verdict' = {_brief(s[key], 40)}, expected one of PASS, WARN, FAIL", False)
    for i, c in enumerate(s.get("criteria") or []):
        _expect(path, f"'criteria'[{i}]", c, (dict,), "an object with 'name' and 'status'", optional=False)
        for key in ("name", "status"):
            _expect(path, f"'criteria'[{i}].{key}", c.get(key), (str,), "a string", optional=False)
    if not ("counts" in s or "triage" in s or ("criteria" in s and "policy" in s)):
        raise _damaged(path, "has neither 'counts'/'triage' (diagnose, compare) nor 'criteria' and 'policy' "
                       "(signoff)", optional=False)


#: files that name the command that wrote a folder without a diagnose/compare/signoff summary.json
_OTHER_RESULTS = {"memcheck.json": "a memcheck result", "regress.json": "a regress result",
                  "tuned_config.json": "a tune result", "outputs.npz": "a run result", "plan.json": "a compile result"}


def _what(folder: Path, summary: dict | None) -> str:
    """What a folder that is not a diagnose/compare/signoff result is, for the error message."""
    if isinstance(summary, dict) and "keep_dtype" in summary and "met" in summary:
        return "a tune result"
    for name, what in _OTHER_RESULTS.items():
        if (folder / name).is_file():
            return what
    return "not a report folder" if summary is None else "a summary.json of another command"


#: keys by which a summary.json is recognised as one of diagnose, compare or signoff (then checked field by field)
_RESULT_KEYS = ("verdict", "model_sha256", "criteria", "triage", "counts")


def result_kind(folder: Path, summary) -> str:
    """``"signoff"``, ``"dataset"`` (diagnose/compare on an ``--inputs`` folder: summary has ``dataset``) or
    ``"single"`` (diagnose/compare on one input set), from summary.json. Raises InputError naming the folder
    and what it is when it is none of them (e.g. a tune or memcheck folder), or naming summary.json and the
    field when it is one of them, damaged (:func:`check_summary`)."""
    tune = isinstance(summary, dict) and "keep_dtype" in summary and "met" in summary
    if isinstance(summary, dict) and not tune and any(k in summary for k in _RESULT_KEYS):
        check_summary(Path(folder) / "summary.json", summary)
        if "criteria" in summary and "policy" in summary:
            return "signoff"
        return "dataset" if summary.get("dataset") else "single"
    raise InputError(f"'{folder}' is {_what(folder, summary)}, not a diagnose, compare or signoff result; "
                     "regress compares two folders written by those commands")


#: result.csv columns regress reads in every row; boolean and metric columns are checked when present
TABLE_COLUMNS = ("TensorName", "NodeName", "OpType")
_BOOL_COLUMNS = ("Abnormal", "OverFlow")


def read_csv_file(path: Path, **kwargs) -> pd.DataFrame:
    """``pd.read_csv`` of ``path`` with formula-safe cells restored; raises InputError (:func:`_damaged`) when
    the file cannot be read, is not UTF-8, is empty, is not CSV (an unclosed quote) or has a row with another
    number of fields than its header (a truncated or edited file; pandas would pad it with empty cells)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise _damaged(path, f"cannot be read ({_one_line(exc)})") from None
    except UnicodeDecodeError:
        raise _damaged(path, "is not UTF-8 text") from None
    if not text.strip():
        raise _damaged(path, "is empty (no header line)")
    try:
        rows = [r for r in csv.reader(io.StringIO(text, newline=""), strict=True) if r]
        ragged = next((i for i, r in enumerate(rows) if len(r) != len(rows[0])), None)
        if ragged is not None:
            raise _damaged(path, f"row {ragged} has {len(rows[ragged])} fields but the header has {len(rows[0])} "
                           "(truncated or edited)")
        return undo_formula_safe(pd.read_csv(io.StringIO(text), **kwargs))
    except (csv.Error, pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise _damaged(path, f"cannot be read as CSV ({_one_line(exc)})") from None


def read_table(path: Path) -> pd.DataFrame:
    """result.csv as a DataFrame, checked: the :data:`TABLE_COLUMNS` present, no row without a TensorName,
    Abnormal/OverFlow True/False (or empty), every metric column (toolkit.compare.metrics.METRICS) numeric or
    empty. Boolean columns come back as Python bools. Raises InputError naming the file, column and row."""
    t = read_csv_file(path)
    missing = [c for c in TABLE_COLUMNS if c not in t.columns]
    if missing:
        raise _damaged(path, f"has no column {', '.join(missing)} (a result.csv of diagnose/compare/signoff has "
                       f"{', '.join(TABLE_COLUMNS)} and the metric columns)")
    if t["TensorName"].isna().any():
        raise _damaged(path, f"has no TensorName in row {int(t['TensorName'].isna().to_numpy().argmax()) + 1}")
    for col in _BOOL_COLUMNS:
        if col in t.columns:
            text = t[col].astype(str)
            bad = ~(t[col].isna() | text.isin(["True", "False"]))
            if bad.any():
                i = int(bad.to_numpy().argmax())
                raise _damaged(path, f"has {col} = {_brief(t[col].iloc[i], 30)} in row {i + 1}, expected True or False")
            t[col] = [None if pd.isna(v) else str(v) == "True" for v in t[col]]
    for col in [c for c in t.columns if c in METRICS]:
        num = pd.to_numeric(t[col], errors="coerce")
        bad = num.isna() & t[col].notna()
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise _damaged(path, f"has {col} = {_brief(t[col].iloc[i], 30)} in row {i + 1}, expected a number")
        t[col] = num
    return t


def check_plan(path: Path, plan: dict) -> None:
    """Check what regress reads from plan.json: ``kernels`` an array of objects, each with a string ``name``,
    ``nodes`` an array of strings, and string (or null) precision/placement/rule/fusion/implmode. Raises
    InputError naming the file, the kernel and the field."""
    if "kernels" not in plan:
        raise _damaged(path, "has no 'kernels' field")
    _expect(path, "'kernels'", plan["kernels"], (list,), "an array of kernel objects")
    for i, k in enumerate(plan["kernels"]):
        _expect(path, f"kernel #{i}", k, (dict,), "an object")
        _expect(path, f"kernel #{i} 'name'", k.get("name"), (str,), "a string")
        nodes = k.get("nodes", [])
        _expect(path, f"kernel #{i} 'nodes'", nodes, (list,), "an array of node names")
        for n in nodes:
            _expect(path, f"kernel #{i} 'nodes' entry", n, (str,), "a string")
        for key in DECISION_KEYS[1:]:
            _expect(path, f"kernel #{i} '{key}'", k.get(key), (str, type(None)), "a string or null")


def check_fusion(path: Path, fusion: dict) -> None:
    """Check fusion_result.json: {graph: {level: {pass: {"match_times", "effect_times"}}}}, objects at every
    level (null allowed for an empty graph or level), counts strings or numbers. Raises InputError."""
    for graph, levels in fusion.items():
        _expect(path, f"graph '{graph}'", levels, (dict, type(None)), "an object of fusion levels")
        for level, passes in (levels or {}).items():
            _expect(path, f"'{graph}'.'{level}'", passes, (dict, type(None)), "an object of passes")
            for name, c in (passes or {}).items():
                _expect(path, f"pass '{name}'", c, (dict,), "an object with match_times and effect_times")
                for key in ("match_times", "effect_times"):
                    if key in c:
                        _expect(path, f"pass '{name}' {key}", c[key], (str, int, float), "a count")


def load_run(folder: str | Path) -> dict:
    """{"summary", "kind" (:func:`result_kind`), "table" (DataFrame or None), "plan", "fusion"} of a report
    folder. Raises InputError (missing folder or summary.json, not a diagnose/compare/signoff result, a file
    regress reads that is damaged: :func:`_read_json`, :func:`check_summary`, :func:`read_table`, :func:`check_plan`,
    :func:`check_fusion`; a path the file system refuses: toolkit.core.userpaths.check_path, a name too long, a
    symbolic link loop, a file on the way, permission denied)."""
    f = Path(folder)
    check_path(f, "report folder", InputError, "pass a report folder written by diagnose, compare or signoff")
    if not f.is_dir():
        raise InputError(f"report folder '{f}' does not exist")
    if not (f / "summary.json").is_file():
        raise InputError(f"'{f}' has no summary.json ({_what(f, None)}); pass a report folder written by "
                         "diagnose, compare or signoff")
    summary = _read_json(f, "summary.json", required=True)
    kind = result_kind(f, summary)
    table = read_table(f / "result.csv") if (f / "result.csv").is_file() else None
    plan, fusion = _read_json(f, "plan.json"), _read_json(f, "fusion_result.json")
    if plan is not None:
        check_plan(f / "plan.json", plan)
    if fusion is not None:
        check_fusion(f / "fusion_result.json", fusion)
    return {"summary": summary, "kind": kind, "table": table, "digests": run_digests(f, summary, kind),
            "plan": plan, "fusion": fusion}


def check_comparable(ra: dict, rb: dict, baseline, new, allow_different_models: bool = False) -> list[str]:
    """Warnings for two loaded runs that may be compared; raises InputError when they may not: a dataset run
    with a single-input run, a single-input run without result.csv beside one with it, or different models
    (``model_sha256``) without ``allow_different_models``."""
    kinds = {ra["kind"], rb["kind"]}
    if kinds == {"dataset", "single"}:
        d, o = (baseline, new) if ra["kind"] == "dataset" else (new, baseline)
        raise InputError(f"'{d}' is a dataset run (--inputs folder) but '{o}' is a single-input run; compare two "
                         "dataset runs or two single-input runs")
    if kinds == {"single"} and (ra["table"] is None) != (rb["table"] is None):  # the layer comparison would be skipped
        have, lack = (baseline, new) if rb["table"] is None else (new, baseline)
        raise InputError(f"'{lack}' has no result.csv but '{have}' has: the per-tensor metrics cannot be compared; "
                         "pass report folders as diagnose, compare or signoff wrote them")
    ha, hb = ra["summary"].get("model_sha256") or None, rb["summary"].get("model_sha256") or None
    if ha == hb:
        return []
    if ha is None or hb is None:  # one run names no model: not two models, tensors named another way
        lack, has, r = (baseline, new, rb) if ha is None else (new, baseline, ra)
        model = r["summary"].get("model") or r["summary"].get("model_name")
        if not allow_different_models:
            raise InputError(f"'{lack}' records no model (compare-dumps run without --model, or an older npuscope) "
                             f"but '{has}' is a result of model '{model}': their tensors are named differently; "
                             f"re-run compare-dumps for '{lack}' with --model {model}")
        return [f"'{lack}' records no model, '{has}' model '{model}'; tensor and decision changes compare tensors "
                "named differently"]
    names = f"'{ra['summary'].get('model_name')}' ({ha}) vs '{rb['summary'].get('model_name')}' ({hb})"
    if not allow_different_models:
        raise InputError(f"'{baseline}' and '{new}' are results of different models: {names}; compare runs of "
                         "one model, or pass --allow-different-models")
    return [f"DIFFERENT MODELS: {names}; tensor and decision changes compare unrelated graphs"]


#: summary.json keys that describe a run's inputs: ``inputs`` (diagnose/compare: the origin text, e.g.
#: "random seed=0 range=x:[0,100]" or the .npz path; signoff: the input set labels), ``seed``, and a dataset run's
#: ``dataset.inputs_dir`` / ``dataset.inputs`` (folder and count). Compared only when a run has no input
#: digests (:func:`run_digests`).
INPUT_KEYS = ("inputs", "seed", "dataset.inputs_dir", "dataset.inputs")
#: The same for a dump comparison (compare-dumps: ``golden`` and ``target`` sections): its inputs are the golden
#: dumps the target is judged against; the target folder is the thing under test, so it is never an input.
DUMP_INPUT_KEYS = ("golden.path", "golden.format", "golden.dumps")


def dump_comparison(summary: dict) -> bool:
    """True for the summary of a dump comparison (compare-dumps: ``golden`` and ``target`` sections)."""
    return isinstance(summary.get("golden"), dict) and isinstance(summary.get("target"), dict)


def run_digests(folder: Path, summary: dict, kind: str) -> dict[str, str] | None:
    """The digests of a run's inputs: ``inputs_sha256`` of a single-input run's summary; {input file:
    Sha256 of the file} from a dataset run's inputs.csv; None when the run does not record them."""
    if kind == "single":
        d = summary.get(DIGESTS_KEY)
        return {str(k): str(v) for k, v in d.items()} if isinstance(d, dict) else None
    if kind == "dataset" and (folder / "inputs.csv").is_file():
        t = read_csv_file(folder / "inputs.csv", dtype=str, keep_default_na=False)
        if {"Input", "Sha256"} <= set(t.columns) and (t["Sha256"] != "").all():
            return dict(zip(t["Input"], t["Sha256"]))
    return None


def digest_changes(da: dict[str, str], db: dict[str, str]) -> list[dict]:
    """[{"key": "inputs_sha256.<input>", "baseline", "new"}] for each input whose digest differs or that only
    one run has (its digest None on the other side)."""
    return [{"key": f"{DIGESTS_KEY}.{k}", "baseline": da.get(k), "new": db.get(k)}
            for k in list(da) + [k for k in db if k not in da] if da.get(k) != db.get(k)]


def input_changes(sa: dict, sb: dict) -> list[dict]:
    """[{"key", "baseline", "new"}] for each :data:`INPUT_KEYS` entry (:data:`DUMP_INPUT_KEYS` for two dump
    comparisons) whose value differs between the two summaries (a key absent from both is skipped: older
    summaries may not record it)."""
    out = []
    for key in DUMP_INPUT_KEYS if dump_comparison(sa) and dump_comparison(sb) else INPUT_KEYS:
        head, _, tail = key.partition(".")
        va, vb = ((s.get(head) or {}).get(tail) if tail else s.get(head) for s in (sa, sb))
        if va != vb:
            out.append({"key": key, "baseline": va, "new": vb})
    return out


def compare_inputs(ra: dict, rb: dict, baseline, new) -> tuple[list[dict], list[str]]:
    """(input changes, notes) of two loaded runs: by their digests when both record them
    (:func:`digest_changes`), else by their descriptions (:func:`input_changes`) with a note naming the
    run(s) without digests."""
    if ra.get("digests") is not None and rb.get("digests") is not None:
        return digest_changes(ra["digests"], rb["digests"]), []
    runs = {"signoff": "a signoff run", "dataset": "a diagnose/compare run on an input folder",
            "single": "a diagnose/compare run written before digests were recorded"}
    dumps = dump_comparison(ra["summary"]) and dump_comparison(rb["summary"])

    def run(r):
        return "a compare-dumps run: dump folders" if dump_comparison(r["summary"]) else runs.get(r["kind"], r["kind"])

    lacking = [f"'{f}' ({run(r)})" for f, r in ((baseline, ra), (new, rb)) if r.get("digests") is None]
    what = "inputs.csv Sha256" if "dataset" in (ra["kind"], rb["kind"]) else DIGESTS_KEY
    how = ("the golden dumps were compared by folder, format and count" if dumps
           else "inputs were compared by their description (path, seed)")
    note = f"{' and '.join(lacking)} record(s) no input digests ({what}): {how}, not by their data"
    return input_changes(ra["summary"], rb["summary"]), [note]


def _brief(v, n: int = 80) -> str:
    """``v`` as short text for a one-line warning (JSON, cut to ``n`` characters)."""
    text = json.dumps(v, default=str)
    return text if len(text) <= n else text[: n - 3] + "..."


def _flatten(d, prefix="") -> dict:
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def dict_changes(a: dict, b: dict, prefix: str) -> list[dict]:
    fa, fb = _flatten(a, prefix), _flatten(b, prefix)
    return [{"key": k, "baseline": fa.get(k), "new": fb.get(k)} for k in sorted(set(fa) | set(fb))
            if fa.get(k) != fb.get(k)]


#: summary.json keys of a signoff's policy (toolkit.signoff.run.conclude): the policy as read, its file, sha256.
POLICY_KEYS = ("policy_path", "policy_sha256")


def policy_changes(sa: dict, sb: dict) -> list[dict]:
    """[{"key", "baseline", "new"}] of what differs between the policies two summaries record: each changed
    limit or key of the policy (``policy.<section>.<key>``, :func:`dict_changes`), then ``policy_path`` and
    ``policy_sha256``. Empty when neither summary records a policy (diagnose/compare) or nothing differs."""
    if not any(k in s for s in (sa, sb) for k in ("policy",) + POLICY_KEYS):
        return []
    out = dict_changes(sa.get("policy") or {}, sb.get("policy") or {}, "policy.")
    return out + [{"key": k, "baseline": sa.get(k), "new": sb.get(k)} for k in POLICY_KEYS if sa.get(k) != sb.get(k)]


def policy_warning(sa: dict, sb: dict, changes: list[dict]) -> str:
    """The one-line warning for two runs judged by different policies (``changes``: :func:`policy_changes`):
    both policy files with the first 12 hex digits of their sha256, and the first changed policy keys."""
    def side(s):
        return f"'{s.get('policy_path') or '(no file)'}' (sha256 {str(s.get('policy_sha256') or '-')[:12]})"

    keys = [c for c in changes if c["key"].startswith("policy.")]
    shown = "; ".join(f"{c['key']} {_brief(c['baseline'], 40)} -> {_brief(c['new'], 40)}" for c in keys[:3])
    more = f"; ... and {len(keys) - 3} more (environment_changes)" if len(keys) > 3 else ""
    return (f"the two runs were judged by different policies: {side(sa)} -> {side(sb)}"
            + (f" ({shown}{more})" if shown else "")
            + "; verdict and criterion changes may come from the policy, not from the build")


def verdict_changes(sa: dict, sb: dict) -> list[dict]:
    """[{"what", "baseline", "new", "regression", "improvement"}] for the verdict and each signoff criterion
    whose status differs ("(absent)" on the side that lacks it). A regression: a worse verdict (PASS < WARN <
    FAIL) or a criterion PASS -> FAIL; an improvement: a better verdict or a criterion FAIL -> PASS; a criterion
    present on one side only is neither."""
    out = []
    va, vb = sa.get("verdict"), sb.get("verdict")
    if va != vb:
        ra, rb = VERDICT_RANK.get(va, 0), VERDICT_RANK.get(vb, 0)
        out.append({"what": "verdict", "baseline": va, "new": vb, "regression": rb > ra, "improvement": rb < ra})
    ca = {c["name"]: c for c in sa.get("criteria") or []}
    cb = {c["name"]: c for c in sb.get("criteria") or []}
    for name in list(cb) + [n for n in ca if n not in cb]:
        a, b = (ca[name]["status"] if name in ca else "(absent)"), (cb[name]["status"] if name in cb else "(absent)")
        if a != b:
            out.append({"what": f"criterion {name}", "baseline": a, "new": b,
                        "regression": (a, b) == ("PASS", "FAIL"), "improvement": (a, b) == ("FAIL", "PASS")})
    return out


def _bad(t: pd.DataFrame) -> pd.Series:
    ab = t.get("Abnormal", pd.Series(False, index=t.index)).fillna(False).astype(bool)
    ov = t.get("OverFlow", pd.Series(False, index=t.index)).fillna(False).astype(bool)
    return ab | ov


#: CompareFailReason words of a row whose dumps exist but could not be compared (an unreadable or cut-short dump,
#: a shape or dtype-class mismatch, dump names that several nodes share): a tensor compared in the baseline and
#: failing so now is a regression. Other reasons (fused into a kernel, not stored by the plan, no dump taken,
#: folded at compile time...) are decisions of the build or the dump, listed in ``tensor_changes`` only.
BROKEN_REASONS = ("unreadable", "mismatch", "ambiguous")


def _broken(reason) -> bool:
    text = "" if reason is None or (isinstance(reason, float) and math.isnan(reason)) else str(reason)
    return any(w in text for w in BROKEN_REASONS)


def _compared(df: pd.DataFrame) -> pd.Series:
    """Bool per tensor: compared in that run (no CompareFailReason; a table without the column: every row)."""
    if "CompareFailReason" not in df.columns:
        return pd.Series(True, index=df.index)
    reason = df["CompareFailReason"]
    return reason.isna() | (reason.astype(object).where(reason.notna(), "").astype(str).str.strip() == "")


def check_columns(tol, tables: dict) -> None:
    """Raise InputError when a result.csv of ``tables`` ({run folder: DataFrame or None}) lacks the column of a
    metric ``tol`` checks (an allowed change or a bound, for every tensor or one): that check would be skipped
    silently (a hand-edited file, or one another tool wrote)."""
    per = getattr(tol, "per_tensor", {}) or {}
    wanted = list(dict.fromkeys([*tol, *(m for d in per.values() for m in d),
                                 *(b.metric for b in getattr(tol, "bounds", []) or [])]))
    for folder, table in tables.items():
        if table is None or not len(table):
            continue
        missing = [m for m in wanted if m not in table.columns]
        if missing:
            raise InputError(f"'{folder}/result.csv' has no {', '.join(missing)} column, which the tolerance checks; "
                             f"re-run the command that wrote it, or leave the metric out ({missing[0]}=off)")


def layer_changes(ta: pd.DataFrame | None, tb: pd.DataFrame | None, tol: dict) -> dict:
    """{"newly_abnormal": [...], "layer_deltas": [...] (worse beyond the tolerance), "newly_normal": [...],
    "layer_improvements": [...] (better beyond the tolerance), "tensor_changes": [...]} by TensorName."""
    if ta is None or tb is None:
        return {"newly_abnormal": [], "layer_deltas": [], "newly_normal": [], "layer_improvements": [],
                "tensor_changes": [], "lost_comparisons": []}
    a, b = ta.drop_duplicates("TensorName").set_index("TensorName"), tb.drop_duplicates("TensorName").set_index("TensorName")
    bad_a, bad_b = _bad(a), _bad(b)
    common = [t for t in b.index if t in a.index]
    newly = [{"TensorName": t, "NodeName": b.at[t, "NodeName"], "OpType": b.at[t, "OpType"],
              "metrics": str(b.at[t, "AbnormalMetrics"]) if "AbnormalMetrics" in b.columns else ""}
             for t in common if bad_b[t] and not bad_a[t]]
    compared_a, compared_b = _compared(a), _compared(b)
    # normal again only when compared now: a row that could not be compared holds no metric to be normal by
    healed = [{"TensorName": t, "NodeName": b.at[t, "NodeName"], "OpType": b.at[t, "OpType"],
               "metrics": str(a.at[t, "AbnormalMetrics"]) if "AbnormalMetrics" in a.columns else ""}
              for t in common if bad_a[t] and not bad_b[t] and compared_b[t]]
    lost = [{"TensorName": t, "NodeName": b.at[t, "NodeName"], "reason": str(b.at[t, "CompareFailReason"])}
            for t in common if compared_a[t] and not compared_b[t] and _broken(b.at[t, "CompareFailReason"])]
    deltas, better = [], []
    one_sided = [t for t in common if compared_a[t] != compared_b[t]]  # fused / not stored in one of the runs
    per = getattr(tol, "per_tensor", {}) or {}
    metrics = list(dict.fromkeys([*tol, *(m for d in per.values() for m in d)]))
    for metric in metrics:
        if metric not in a.columns or metric not in b.columns:
            continue
        sign = -1.0 if METRICS[metric].direction == HIGHER_IS_BETTER else 1.0
        for t in common:
            limit = per.get(t, tol).get(metric)
            if limit is None or compared_a[t] != compared_b[t]:  # compared in one run only: listed below
                continue
            va, vb = pd.to_numeric(a.at[t, metric], errors="coerce"), pd.to_numeric(b.at[t, metric], errors="coerce")
            if math.isnan(va) and math.isnan(vb):
                continue
            worse = sign * (vb - va) if not (math.isnan(va) or math.isnan(vb)) else math.inf
            if worse > limit:
                deltas.append({"TensorName": t, "NodeName": b.at[t, "NodeName"], "metric": metric, "baseline": va,
                               "new": vb, "delta": vb - va, "regression": True, "tolerance": limit})
            elif -worse > limit:
                better.append({"TensorName": t, "NodeName": b.at[t, "NodeName"], "metric": metric, "baseline": va,
                               "new": vb, "delta": vb - va, "regression": False, "tolerance": limit})
    for bound in getattr(tol, "bounds", []) or []:
        if bound.metric not in a.columns or bound.metric not in b.columns:
            continue
        for t in common if bound.output is None else [x for x in common if x == bound.output]:
            if compared_a[t] != compared_b[t]:
                continue
            va = pd.to_numeric(a.at[t, bound.metric], errors="coerce")
            vb = pd.to_numeric(b.at[t, bound.metric], errors="coerce")
            was, now = bound.holds(va), bound.holds(vb)
            if was == now:
                continue
            (deltas if was else better).append(
                {"TensorName": t, "NodeName": b.at[t, "NodeName"], "metric": bound.metric, "baseline": va, "new": vb,
                 "delta": vb - va, "regression": was, "bound": bound.canonical().rsplit(":", 1)[-1]
                 if bound.output else bound.canonical()})
    changes = [{"TensorName": t, "change": "only in baseline"} for t in a.index if t not in b.index]
    changes += [{"TensorName": t, "change": "only in new"} for t in b.index if t not in a.index]
    changes += [{"TensorName": t, "change": "compared only in " + ("new" if compared_b[t] else "baseline")
                 + f" ({(a if compared_b[t] else b).at[t, 'CompareFailReason'] or 'no metrics'})"}
                for t in one_sided]
    return {"newly_abnormal": newly, "layer_deltas": deltas, "newly_normal": healed, "layer_improvements": better,
            "tensor_changes": changes, "lost_comparisons": lost}


def node_decisions(plan: dict | None) -> dict[str, dict]:
    """{original node: {kernel, precision, placement, rule, fusion, implmode}} from plan.json."""
    out = {}
    for k in (plan or {}).get("kernels", []):
        if k.get("fusion") == "cast":
            continue
        for n in k.get("nodes", []):
            out[n] = {"kernel": k["name"], "precision": k.get("precision"), "placement": k.get("placement", "NPU"),
                      "rule": k.get("rule") or "", "fusion": k.get("fusion"), "implmode": k.get("implmode")}
    return out


def decision_changes(pa: dict | None, pb: dict | None) -> list[dict]:
    da, db = node_decisions(pa), node_decisions(pb)
    out = []
    for node in list(db) + [n for n in da if n not in db]:
        a, b = da.get(node, {}), db.get(node, {})
        for key in DECISION_KEYS:
            if a.get(key) != b.get(key):
                out.append({"node": node, "what": key, "baseline": a.get(key, "(absent)"), "new": b.get(key, "(absent)")})
    return out


def fusion_changes(fa: dict | None, fb: dict | None) -> list[dict]:
    def counts(f):
        out = {}
        for graph in (f or {}).values():
            for level, passes in (graph or {}).items():
                for name, c in (passes or {}).items():
                    out[(name, level)] = f"{c.get('match_times', '0')}/{c.get('effect_times', '0')}"
        return out

    ca, cb = counts(fa), counts(fb)
    return [{"pass": p, "level": lv, "baseline": ca.get((p, lv), "-"), "new": cb.get((p, lv), "-")}
            for p, lv in sorted(set(ca) | set(cb)) if ca.get((p, lv)) != cb.get((p, lv))]


def regress(baseline: str | Path, new: str | Path, tolerance: dict | None = None,
            allow_different_models: bool = False) -> dict:
    """The regress report (regress.json content; see module docstring; ``warnings``: e.g. different models
    or inputs; ``notes``: e.g. inputs compared by description only).
    Raises InputError (see :func:`load_run` and :func:`check_comparable`), UsageError (a ``TENSOR:`` tolerance
    item naming no tensor of either run: :func:`check_tensor_names`)."""
    tol = tolerance if isinstance(tolerance, Tolerance) else Tolerance(DEFAULT_TOLERANCE if tolerance is None
                                                                       else tolerance)
    ra, rb = load_run(baseline), load_run(new)
    warnings = check_comparable(ra, rb, baseline, new, allow_different_models)
    sa, sb = ra["summary"], rb["summary"]
    env = dict_changes(sa.get("environment"), sb.get("environment"), "environment.")
    env += dict_changes(sa.get("config"), sb.get("config"), "config.")
    if sa.get("model_sha256") != sb.get("model_sha256"):
        env.insert(0, {"key": "model_sha256", "baseline": sa.get("model_sha256"), "new": sb.get("model_sha256")})
    inputs, notes = compare_inputs(ra, rb, baseline, new)
    env[:0] = inputs
    if inputs:
        warnings.append("the two runs used different inputs: " + "; ".join(
            f"{c['key']} {_brief(c['baseline'])} -> {_brief(c['new'])}" for c in inputs[:5])
            + (f"; ... and {len(inputs) - 5} more (environment_changes)" if len(inputs) > 5 else "")
            + "; metric and verdict changes may come from the inputs, not from the build")
    policy = policy_changes(sa, sb)
    env[:0] = policy
    verdicts = verdict_changes(sa, sb)
    if any(c["key"] != "policy_path" for c in policy):  # the same policy text moved to another path judges alike
        warnings.insert(0, policy_warning(sa, sb, policy))
    check_columns(tol, {baseline: ra["table"], new: rb["table"]})
    check_tensor_names(tol, {baseline: ra["table"], new: rb["table"]})
    layers = layer_changes(ra["table"], rb["table"], tol)
    reasons = [f"{v['what']}: {v['baseline']} -> {v['new']}" for v in verdicts if v["regression"]]
    reasons += [f"tensor '{r['TensorName']}' (node '{r['NodeName']}') is newly abnormal ({r['metrics']})"
                for r in layers["newly_abnormal"]]
    reasons += [f"tensor '{r['TensorName']}' (node '{r['NodeName']}') was compared in the baseline and is not now: "
                f"{r['reason']}" for r in layers["lost_comparisons"]]
    reasons += [f"tensor '{d['TensorName']}': {d['metric']} {' -> '.join(show_pair(d['baseline'], d['new']))} "
                + (f"(breaks the bound {d['bound']})" if "bound" in d else f"(tolerance {show_line(d['tolerance'])})")
                for d in layers["layer_deltas"]]
    regressed = bool(reasons)
    improvements = [f"{v['what']}: {v['baseline']} -> {v['new']}" for v in verdicts if v["improvement"]]
    improvements += [f"tensor '{r['TensorName']}' (node '{r['NodeName']}') is normal again (was {r['metrics']})"
                     for r in layers["newly_normal"]]
    improvements += [f"tensor '{d['TensorName']}': {d['metric']} improved beyond the tolerance"
                     + (f" (meets the bound {d['bound']} now)" if "bound" in d else "")
                     for d in layers["layer_improvements"]]
    return {"verdict": "REGRESSION" if regressed else "NO REGRESSION", "regressed": regressed, "reasons": reasons,
            "improvements": improvements,
            "baseline": str(baseline), "new": str(new), "warnings": warnings, "notes": notes, "tolerance": tol.to_json(),
            "environment_changes": env,
            "verdict_changes": verdicts, **layers,
            "decision_changes": decision_changes(ra["plan"], rb["plan"]),
            "fusion_changes": fusion_changes(ra["fusion"], rb["fusion"])}
