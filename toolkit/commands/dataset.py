"""Dataset runs of ``diagnose`` / ``compare`` / ``signoff`` (``--inputs FOLDER``): the command workflows.

Steps: list the folder's ``.npz`` files (nothing loaded); open the run folder (new, or resumed when its
manifest matches: toolkit.dataset.store); evaluate the pending inputs with the chosen backend
(toolkit.dataset.runner), each result written atomically as it arrives; aggregate per layer from the store in
sorted input order (toolkit.dataset.aggregate); then write the report.

diagnose / compare also run the full single-input diagnosis (isolation, force_fp32 triage, advisor, repro)
on the **worst input** — ranked by its verdict (FAIL, WARN, PASS), then the lowest CosineSimilarity of any
graph output, then the highest RelativeEuclideanDistance, then the name — and write its report files
(result.csv, findings.json, index.html, ...) next to dataset.csv (the aggregate), inputs.csv (one row per
input) and summary.json (the dataset verdict and, under ``dataset``, the counts and the worst input). The
report replaces the one an earlier run wrote into a resumed folder whole (toolkit.dataset.store.staged_report):
no keep_dtype.txt, fixed_config.json, repro/ or index.html of an earlier run is left when this run writes none.
The dataset verdict is FAIL when any input fails or could not be evaluated, WARN when any warns, else PASS.
"""

from __future__ import annotations

import copy
import math
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from toolkit.commands.common import REPORTS_DIR
from toolkit.commands.outputs import (
    diagnosis_lines,
    signoff_lines,
    write_diagnosis,
    write_fix,
    write_signoff,
)
from toolkit.compare.metrics import resolve_thresholds
from toolkit.compare.metrics.thresholds import check_tensors
from toolkit.compare.tasks import load_task
from toolkit.config.schema import Config
from toolkit.core.csvjson import _csv_text, atomic_write_text
from toolkit.core.errors import ConfigError, InputError, ModelError, UsageError
from toolkit.core.ray_cluster import check_address
from toolkit.dataset.aggregate import aggregate, parse_percentiles
from toolkit.dataset.runner import run_inputs
from toolkit.dataset.source import (
    InputRef,
    header_feed,
    list_inputs,
    load_feed,
    read_bytes,
    sha256_file,
    write_loader_sets,
)
from toolkit.dataset.store import Store, check_store_out, make_manifest, open_store, staged_report
from toolkit.dataset.worker import JobSpec, Worker, tensor_order
from toolkit.diagnose import Prepared, device_tensors, diagnose, layer_analysis, ship_sentence
from toolkit.engine import Session, shapes_of
from toolkit.inputs import input_specs
from toolkit.inputs.loader import is_loader
from toolkit.ir.load import load_model
from toolkit.ort.ort_env import intra_op_threads
from toolkit.ort.reference import ReferenceRunner
from toolkit.report.dataset_html import render_dataset_report
from toolkit.signoff.criteria import Result
from toolkit.signoff.policy import check_policy_model
from toolkit.signoff.run import conclude, dataset_evidence, worst_case_table
from toolkit.source import _zoo_name_of, resolve_model
from toolkit.tuning.advice import verify_advice
from toolkit.tuning.tune import lines_target

INFO_COLUMNS = ["Index", "OpType", "NodeName", "TensorName", "Kernel", "Precision", "NPUDump", "DataType"]
VERDICT_RANK = {"ERROR": 3, "FAIL": 2, "WARN": 1, "PASS": 0}
OUTPUT_METRICS = ("CosineSimilarity", "RelativeEuclideanDistance", "MaxAbsoluteError")


def _noop(msg: str) -> None:
    pass


@dataclass
class Job:
    """A dataset job before it runs: the model, the inputs, the worker spec and the manifest."""

    src: object
    model: object
    refs: list[InputRef]
    spec: JobSpec
    manifest: dict
    thresholds: dict | None
    percentiles: tuple[float, ...]
    inputs_dir: str
    worker: Worker | None = None
    #: the temporary folder a loader's sets were written to (removed with the Job, or at exit), else None
    loader_dir: str | None = None


#: How many inputs (in name order) the pre-run check looks at for one whose headers fit the model.
PREFLIGHT_INPUTS = 8


def prepare_job(command: str, model_arg: str | None, config: Config, inputs: str, thresholds: str | None,
                task_metrics=(), percentiles: str | None = None, progress=_noop) -> Job:
    """Resolve the model, list the inputs, build the worker spec and manifest, and check everything that
    can be checked before the output folder is touched (no input is evaluated): --percentiles,
    NPUSCOPE_THREADS, the config's input_shape (a gear config with -1 dims is refused as for one input),
    thresholds, task checks (imported), the model (loaded, reference built) and the plan compiled for the
    shapes of the first input whose ``.npy`` headers fit the model (:func:`preflight`; that in-process Worker
    is reused by the serial backend).

    Raises:
        UsageError / ConfigError / ModelError / InputError (exit 2): one line, before any file is written.
    """
    qs = parse_percentiles(percentiles)
    intra_op_threads()
    config.input_shapes()
    for task in task_metrics:
        load_task(task)
    src = resolve_model(model_arg)
    progress(f"loading {src.path}")
    model = load_model(src.path)
    lines = resolve_thresholds(thresholds) if thresholds else None
    tensors = tensor_order(model)
    check_tensors(lines, tensors)
    loader_dir = None
    if is_loader(inputs):  # a loader's sets become files of a temporary folder, a dataset like any other
        progress(f"calling the loader {inputs}")
        loader_dir = tempfile.mkdtemp(prefix="npuscope-loader-")
        try:
            write_loader_sets(str(inputs), input_specs(model), loader_dir)
        except BaseException:
            shutil.rmtree(loader_dir, ignore_errors=True)
            raise
    refs = list_inputs(loader_dir or inputs)
    zname = src.name if src.kind == "zoo" else _zoo_name_of(src.path)
    sha = sha256_file(src.path)
    spec = JobSpec(model_path=str(Path(src.path).resolve()), model_sha256=sha, config=config, thresholds=lines,
                   tensors=tensors, task_metrics=tuple(task_metrics), zoo_name=zname)
    manifest = make_manifest(command, model_path=str(src.path), model_sha256=sha, config=config.to_dict(),
                             thresholds=lines.to_json() if lines is not None else None, task_metrics=task_metrics,
                             tensors=tensors, inputs=inputs)
    job = Job(src, model, refs, spec, manifest, lines, qs, str(inputs), loader_dir=loader_dir)
    if loader_dir:  # removed when the job is dropped, or at exit (the CLI runs the atexit functions)
        weakref.finalize(job, shutil.rmtree, loader_dir, True)
    job.worker = preflight(job, progress)
    return job


def preflight(job: Job, progress=_noop) -> Worker:
    """An in-process Worker of ``job`` (model loaded, FP32 reference built) with the plan compiled for the
    shapes of the first of the first :data:`PREFLIGHT_INPUTS` inputs whose headers fit the model (read from
    the ``.npy`` headers, no data loaded; none fitting: nothing compiled, those inputs become error rows).

    Raises:
        ModelError, ConfigError: the plan cannot be compiled for inputs that fit the model (the message names
            the input whose shapes were used).
    """
    worker = Worker(job.spec, in_process=True)
    for ref in job.refs[:PREFLIGHT_INPUTS]:
        feed = header_feed(ref)
        if feed is None:
            continue
        progress(f"checking: compiling for the shapes of {ref.name}")
        try:
            if worker.compile_for(ref.name, feed):
                break
        except (ModelError, ConfigError) as exc:
            raise type(exc)(f"{exc} (compiling for the shapes of input '{ref.name}', before the run)") from None
    return worker


def execute(job: Job, store: Store, jobs: int = 1, ray: str | None = None, progress=_noop) -> int:
    """Evaluate the inputs ``store`` does not hold yet; returns how many were evaluated in this run."""
    if store.restarted:
        progress(f"{store.folder} held a run with other settings and no successful result: starting afresh")
    todo = store.pending(job.refs)
    if store.redone:
        progress(redone_line(store.redone))
    store.log({"event": "start", "inputs": len(job.refs), "pending": len(todo), "jobs": jobs, "ray": ray or ""})
    progress(f"{len(job.refs)} input(s) in {job.inputs_dir}: {len(job.refs) - len(todo)} already done, "
             f"{len(todo)} to evaluate" + (f" on Ray ({ray})" if ray else f" with {jobs} process(es)"))
    try:
        return run_inputs(job.spec, todo, store, jobs=jobs, ray_address=ray, total=len(job.refs), progress=progress,
                          worker=job.worker)
    except KeyboardInterrupt:
        if store.has_ok_result():
            progress(f"interrupted: finished inputs are kept in {store.folder}; re-run the same command with "
                     f"--out {store.folder} to continue")
        else:
            progress("interrupted before any input finished: nothing kept")
        raise


def redone_line(redone: list[tuple[str, str]]) -> str:
    """One line naming the stored results that were invalid and evaluated again (first 5, with the reason)."""
    shown = "; ".join(f"{name} ({why})" for name, why in redone[:5])
    return (f"{len(redone)} stored result(s) could not be read and were evaluated again: {shown}"
            + (" ..." if len(redone) > 5 else ""))


# ------------------------------------------------------------------------------------------- per-input table
def _num(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def input_row(meta: dict, outputs: list[str]) -> dict:
    """One inputs.csv row: Input, Status, Verdict, Reasons, FirstDivergence, FirstDivergenceKind, Compared,
    Abnormal, OverFlow, TasksPassed, RunMs (host ms), ``<output>:<metric>`` for OUTPUT_METRICS, Sha256."""
    fd = meta.get("first_divergence") or {}
    counts = meta.get("counts") or {}
    tasks = meta.get("tasks") or []
    row = {"Input": meta["input"], "Status": meta["status"], "Verdict": meta["verdict"],
           "Reasons": "; ".join(map(str, meta.get("reasons") or [])), "FirstDivergence": fd.get("tensor", ""),
           "FirstDivergenceKind": fd.get("kind", ""), "Compared": counts.get("compared"),
           "Abnormal": counts.get("abnormal"), "OverFlow": counts.get("overflow"),
           "TasksPassed": (all(t["passed"] for t in tasks) if tasks else None), "RunMs": meta.get("run_ms")}
    for o in outputs:
        out = (meta.get("outputs") or {}).get(o, {})
        for m in OUTPUT_METRICS:
            row[f"{o}:{m}"] = out.get(m)
    row["Sha256"] = meta.get("sha256", "")
    return row


def inputs_table(metas, outputs: list[str]) -> pd.DataFrame:
    """inputs.csv: one :func:`input_row` per stored input, in sorted input order (a few scalars per input)."""
    df = pd.DataFrame([input_row(m, outputs) for m in metas])
    for col in ("Compared", "Abnormal", "OverFlow"):
        if col in df.columns:
            df[col] = df[col].astype("Int64")
    return df


def _badness(row: pd.Series, outputs: list[str]) -> tuple:
    cos = [_num(row.get(f"{o}:CosineSimilarity")) for o in outputs]
    red = [_num(row.get(f"{o}:RelativeEuclideanDistance")) for o in outputs]
    worst_cos = min((-math.inf if math.isnan(c) else c) for c in cos) if cos else 0.0
    worst_red = max((math.inf if math.isnan(r) else r) for r in red) if red else 0.0
    return (-VERDICT_RANK.get(row["Verdict"], 0), worst_cos, -worst_red, str(row["Input"]))


def worst_input(table: pd.DataFrame, outputs: list[str]) -> str | None:
    """The worst evaluated input (module docstring), or None when no input could be evaluated."""
    ok = table[table["Status"] == "ok"] if len(table) else table
    if not len(ok):
        return None
    return min((_badness(r, outputs) for _, r in ok.iterrows()))[3]


def dataset_verdict(table: pd.DataFrame) -> tuple[str, list[str]]:
    """(verdict, reasons) over the inputs (module docstring)."""
    reasons = []
    for label, what in (("ERROR", "could not be evaluated"), ("FAIL", "FAIL"), ("WARN", "WARN")):
        names = table.loc[table["Verdict"] == label, "Input"].astype(str).tolist()
        if names:
            reasons.append(f"{len(names)} of {len(table)} input(s) {what}: {', '.join(names[:5])}"
                           + (" ..." if len(names) > 5 else ""))
    verdicts = set(table["Verdict"])
    verdict = "FAIL" if verdicts & {"ERROR", "FAIL"} else ("WARN" if "WARN" in verdicts else "PASS")
    return verdict, reasons or [f"all {len(table)} input(s) PASS"]


def dataset_layers(info: pd.DataFrame, agg: pd.DataFrame) -> pd.DataFrame:
    """dataset.csv: INFO_COLUMNS of a representative input's layer table joined with the aggregate, in
    execution order; only tensors compared (or flagged) on some input."""
    cols = [c for c in INFO_COLUMNS if c in info.columns]
    df = info[cols].merge(agg, on="TensorName", how="inner")
    return df.sort_values("Index", kind="stable").reset_index(drop=True) if "Index" in df.columns else df


def run_and_aggregate(job: Job, store: Store, jobs: int, ray: str | None, progress=_noop):
    """Execute, then (aggregate DataFrame, inputs DataFrame, names aggregated, evaluated this run)."""
    n_new = execute(job, store, jobs, ray, progress)
    progress("aggregating per layer over the inputs")
    agg, names = aggregate(store.records(job.refs), job.spec.tensors, job.percentiles, spill_dir=store.folder)
    outputs = [o.name for o in job.model.graph.output]
    table = inputs_table(store.metas(job.refs), outputs)
    return agg, table, names, n_new


def _feeds_of(job: Job, name: str) -> dict:
    ref = next(r for r in job.refs if r.name == name)
    return load_feed(name, read_bytes(ref), input_specs(job.model))


def dataset_facts(job: Job, store: Store, table: pd.DataFrame, names: list[str], n_new: int, worst: str | None,
                  verdict: str, reasons: list[str], jobs: int, ray: str | None) -> dict:
    counts = {k: int((table["Verdict"] == k).sum()) for k in ("PASS", "WARN", "FAIL", "ERROR")}
    return {"inputs_dir": job.inputs_dir, "inputs": len(job.refs), "aggregated": len(names),
            "evaluated_this_run": n_new, "resumed": store.resumed, "verdict": verdict, "reasons": reasons,
            "redone": [{"input": name, "reason": why} for name, why in store.redone],
            "verdicts": counts, "worst_input": worst, "percentiles": list(job.percentiles), "jobs": jobs,
            "ray": ray or "", "files": {"dataset": "dataset.csv", "inputs": "inputs.csv",
                                         "manifest": "manifest.json", "results": "results/"}}


# ---------------------------------------------------------------------------------------------- diagnose
def check_workers(jobs: int, ray: str | None) -> None:
    """--jobs (local processes) and --ray (a Ray cluster's workers) choose where inputs run: one or the other.
    Raises UsageError for both, and for an unreachable Ray address (toolkit.core.ray_cluster.check_address)."""
    if ray and jobs != 1:
        raise UsageError(f"--jobs {jobs} and --ray {ray} both say where the inputs run; give --ray alone (the "
                         "cluster's workers run them) or --jobs alone (local processes)")
    if ray:
        check_address(ray)  # before anything compiles: an unreachable host:port is refused at once


def diagnose_dataset(model: str | None, config: Config, *, inputs: str, thresholds: str | None = None,
                     task_metrics=(), out: str | None = None, html: bool = True, jobs: int = 1,
                     ray: str | None = None, percentiles: str | None = None, verify: bool = True,
                     progress=_noop) -> dict:
    """``diagnose`` / ``compare`` over a folder of inputs (module docstring). Returns the api dict: summary,
    out, files, diagnosis (of the worst input, its summary carrying the dataset verdict), verdict, dataset.
    ``verify``: the worst input's advice applied and re-run, and its verified fix searched as a single input's
    is (toolkit.tuning.advice.verify_advice; keep_dtype.txt and fixed_config.json in the folder), every set
    checked on all the inputs evaluated (those of the worst input's shape), as tune checks its inputs."""
    check_workers(jobs, ray)
    check_store_out(out)  # a non-empty --out that is no dataset run: refused before the model is loaded
    job = prepare_job("diagnose", model, config, inputs, thresholds, task_metrics, percentiles, progress)
    with open_store(out, REPORTS_DIR, f"{job.src.name}-dataset", job.manifest) as store:
        agg, table, names, n_new = run_and_aggregate(job, store, jobs, ray, progress)
        outputs = [o.name for o in job.model.graph.output]
        worst = worst_input(table, outputs)
        if worst is None:
            raise InputError(f"none of the {len(table)} input(s) in '{inputs}' could be evaluated; first error: "
                             f"{table['Reasons'].iloc[0]}")
        verdict, reasons = dataset_verdict(table)
        progress(f"full diagnosis of the worst input: {worst}")
        ref = next(r for r in job.refs if r.name == worst)
        prep = Prepared(job.model, job.src.name, job.src.path, job.spec.zoo_name, _feeds_of(job, worst),
                        f"loader {job.inputs_dir} ({ref.name})" if job.loader_dir else f"file {ref.path}", None)
        diag, extra = diagnose(prep, config, thresholds=job.thresholds, task_metrics=task_metrics, progress=progress)
        fix = None
        if verify:  # the worst input's advice verified and its fix searched, the target held on every input
            evaluated = set(names)
            others = [(r.name, _feeds_of(job, r.name)) for r in job.refs if r.name != worst and r.name in evaluated]
            fix = verify_advice(prep, config, diag.findings, extra, diag.summary["stage"], diag.summary["verdict"],
                                target=lines_target(prep.model, thresholds), task_metrics=task_metrics,
                                progress=progress, other_feeds=others)
            diag.summary["fix"] = {**fix.summary(), "sentence": fix.sentence(), "input": worst}
        layers = dataset_layers(diag.table, agg)
        facts = dataset_facts(job, store, table, names, n_new, worst, verdict, reasons, jobs, ray)
        facts["worst_input_verdict"] = diag.summary["verdict"]
        facts["worst_input_reasons"] = diag.summary["reasons"]
        facts["worst_input_ship"] = diag.summary.get("ship", "")
        diag.summary.update(verdict=verdict, reasons=reasons, ship=ship_sentence(verdict, reasons), dataset=facts,
                            inputs=f"worst input '{worst}' of {len(job.refs)} in {inputs}")
        folder = store.folder
        progress("writing the report")
        with staged_report(folder) as stage:  # replaces the report of an earlier run of this folder, whole
            atomic_write_text(stage / "dataset.csv", _csv_text(layers))
            atomic_write_text(stage / "inputs.csv", _csv_text(table))
            diag.artifacts = {"dataset": "dataset.csv", "inputs": "inputs.csv", "manifest": "manifest.json"}
            diag.artifact_dirs = [folder]  # the store's manifest.json stays in the run folder
            written, note = write_fix(fix, diag, stage)
            render = None
            if html:
                def render(d, f):
                    return render_dataset_report(d, f, layers, table, facts)
            files = write_diagnosis(job.model, diag, extra, config, stage, html, render=render)
        files.update(dataset="dataset.csv", inputs="inputs.csv", manifest="manifest.json", **written)
    summary = [f"dataset: {verdict} over {len(job.refs)} input(s) ({n_new} evaluated now, "
               f"{len(job.refs) - n_new} reused); worst input: {worst}"] + [f"  - {r}" for r in reasons]
    summary.append(f"  {diag.summary['ship']}")
    if store.redone:
        summary.insert(1, redone_line(store.redone))
    summary += [f"worst input {worst}:"] + ["  " + line for line in diagnosis_lines(_worst_view(diag, facts))]
    summary += [f"  {note}"] if note else []
    summary.append(f"report: {(folder / ('index.html' if html else 'summary.json')).resolve()}")
    return {"summary": summary, "out": folder, "files": files, "diagnosis": diag, "verdict": verdict,
            "dataset": {"layers": layers, "inputs": table, "facts": facts}}


def _worst_view(diag, facts: dict):
    """The worst input's own diagnosis (its verdict and ship sentence, not the dataset's) for the terminal
    lines."""
    view = copy.copy(diag)
    view.summary = {**diag.summary, "verdict": facts["worst_input_verdict"], "reasons": facts["worst_input_reasons"],
                    "ship": facts["worst_input_ship"]}
    return view


# ----------------------------------------------------------------------------------------------- signoff
def signoff_dataset(model: str | None, policy, config: Config, *, config_path: str | None = None, inputs: str,
                    thresholds: str | None = None, out: str | None = None, html: bool = True, jobs: int = 1,
                    ray: str | None = None, percentiles: str | None = None, progress=_noop) -> dict:
    """``signoff`` over a folder of inputs: criteria evaluated on Evidence built from the store (per input a
    few scalars; layers = worst case per tensor over all inputs). Inputs that could not be evaluated add a
    failing ``inputs.evaluated`` criterion. result.csv is the first evaluated input's layer table."""
    check_workers(jobs, ray)
    check_store_out(out)  # a non-empty --out that is no dataset run: refused before the model is loaded
    task_specs = list((policy.section("tasks") or {}).get("metrics", []))
    job = prepare_job("signoff", model, config, inputs, thresholds, task_specs, percentiles, progress)

    check_policy_model(policy, job.model)  # output / node / tensor names, before any input runs
    with open_store(out, REPORTS_DIR, f"{job.src.name}-signoff-dataset", job.manifest) as store:
        agg, table, names, n_new = run_and_aggregate(job, store, jobs, ray, progress)
        if not names:
            raise InputError(f"none of the {len(table)} input(s) in '{inputs}' could be evaluated; first error: "
                             f"{table['Reasons'].iloc[0]}")
        progress(f"layer table of the first input: {names[0]}")
        feeds = _feeds_of(job, names[0])
        sess = Session(job.model, config, input_shapes=shapes_of(feeds))
        golden = {**ReferenceRunner(job.model).run(feeds), **feeds}
        first = layer_analysis(job.model, sess.runtime, golden, device_tensors(sess.run(feeds, dump=True), feeds),
                               job.thresholds)
        outputs = [o.name for o in job.model.graph.output]
        ok_metas = (m for m in store.metas(job.refs) if m["status"] == "ok")
        ev = dataset_evidence(outputs, ok_metas, worst_case_table(first, agg), sess.plan)
        errors = table.loc[table["Status"] != "ok", "Input"].astype(str).tolist()
        extra = [Result("inputs.evaluated", "inputs", False,
                        f"inputs.evaluated: {len(errors)} of {len(table)} input(s) could not be evaluated: "
                        f"{', '.join(errors[:5])}{' ...' if len(errors) > 5 else ''}", {"errors": errors})] if errors else []
        run = conclude(job.src, policy, config, config_path, ev, sess.compiled, first, extra)
        verdict, reasons = dataset_verdict(table)
        run.summary["dataset"] = dataset_facts(job, store, table, names, n_new, worst_input(table, outputs),
                                               verdict, reasons, jobs, ray)
        folder = store.folder
        progress("writing the signoff")
        with staged_report(folder) as stage:  # replaces the report of an earlier run of this folder, whole
            atomic_write_text(stage / "dataset.csv", _csv_text(dataset_layers(first, agg)))
            atomic_write_text(stage / "inputs.csv", _csv_text(table))
            files = write_signoff(run, stage, html, {"dataset": "dataset.csv", "inputs": "inputs.csv",
                                                     "manifest": "manifest.json"})
    redone = [redone_line(store.redone)] if store.redone else []
    return {"summary": redone + signoff_lines(run, folder, html), "out": folder, "files": files,
            "verdict": run.summary["verdict"], "run": run}
