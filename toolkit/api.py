"""Command workflows as plain functions (the CLI only parses arguments and prints what these return).

Each returns a dict with ``summary`` (lines for the terminal), ``out`` (the output folder) and the files
written; each raises toolkit.core.errors.UserError subclasses for user mistakes.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.core.artifacts import check_out, output_dir, write_compile_artifacts, write_dumps, write_npz
from toolkit.config.schema import Config
from toolkit.engine import shapes_of
from toolkit.ir.load import load_model
from toolkit.core.text import compile_summary, human_bytes, printable
from toolkit.source import prepare_inputs, resolve_model

REPORTS_DIR = Path("reports")


def _noop(msg: str) -> None:
    pass


def count_change(what: str, delta: int) -> str:
    """``"Casts added 2"``, ``"Casts removed 1"`` or ``"Casts unchanged"`` for a signed change ``delta``."""
    delta = int(delta)
    return f"{what} {'added' if delta > 0 else 'removed'} {abs(delta)}" if delta else f"{what} unchanged"


def compile_command(model: str | None, config: Config, out: str | None = None, progress=_noop) -> dict:
    """Compile and write plan.json, compile.log, fusion_result.json, compile_findings.json. With gears in the
    config (dynamic_batch_size / dynamic_dims): one plan per gear (toolkit.gears.workflow.compile_gears_command).
    Without input_shape, a zoo model's or sample's dynamic dims are bound to its registered input's shape, as
    run / diagnose feed it (toolkit.source.default_input_shapes)."""
    from toolkit.compiler.pipeline import compile_model
    from toolkit.gears.spec import has_gears
    from toolkit.source import default_input_shapes

    check_out(out)  # a taken --out is refused before the model is read
    if has_gears(config):
        from toolkit.gears.workflow import compile_gears_command
        return compile_gears_command(model, config, out, progress=progress)
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    shapes = {} if config.input_shapes() else default_input_shapes(src, m)
    progress("compiling" + (f" for the registered input shapes {shapes}" if shapes else ""))
    compiled = compile_model(m, config, model_path=str(src.path), input_shapes=shapes or None)
    with output_dir(out, REPORTS_DIR, f"{src.name}-compile") as folder:
        files = write_compile_artifacts(compiled, folder)
    bound = [f"input shapes: {', '.join(f'{k} {v}' for k, v in shapes.items())} (registered input; "
             "--input-shape changes them)"] if shapes else []
    return {"summary": bound + compile_summary(compiled), "out": folder, "files": files, "compiled": compiled}


def run_command(model: str | None, config: Config | None, *, inputs: str | None = None, seed: int = 0,
                val_range: str | None = None, dump_dir: str | None = None, output: str | None = None,
                out: str | None = None, plan: str | None = None, progress=_noop) -> dict:
    """Compile for the feed's shapes, run once in NPU mode, write outputs.npz (+ dumps). ``plan``: a
    plan.json whose memory decisions (offsets, lifetimes) replace the compiled ones (toolkit.memcheck.planio);
    ``config`` None: the plan's own recorded config (the defaults without ``plan``).
    With gears in the config: the smallest fitting gear runs (toolkit.gears.workflow.run_gears_command).
    ``exit_code`` in the result: 0, or 1 when the outputs are known to be wrong (a padding leak reaching an
    output). Raises ConfigError for an input_shape the model cannot take (unknown input, static dim, one
    symbolic dim given two sizes), InputError for inputs that do not fit the model or input_shape."""
    from toolkit.core.artifacts import check_dump_dir
    from toolkit.engine import Session
    from toolkit.gears.spec import has_gears

    check_out(out)  # --out, --dump and --output are refused before the model is read
    check_dump_dir(dump_dir, out)
    check_output_paths(output, dump_dir, out)
    loaded = None
    if plan:  # config None: the plan's own (as memcheck --plan)
        from toolkit.memcheck.planio import open_plan
        loaded, model, config = open_plan(plan, model, config)
    config = config if config is not None else Config()
    if has_gears(config):
        from toolkit.gears.workflow import run_gears_command
        return run_gears_command(model, config, inputs=inputs, seed=seed, val_range=val_range, dump_dir=dump_dir,
                                 output=output, out=out, plan=plan, progress=progress)
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    from toolkit.compiler.passes.bind_shapes import check_input_shapes, raise_if_reference_fails
    from toolkit.runtime.npu import KernelRuntimeError

    check_input_shapes(m, config.input_shapes(), where=config.where("input_shape"))  # a bad input_shape is a config error (exit 2) before any data
    feed = prepare_inputs(m, src, inputs, seed, val_range, config.input_shapes())
    progress(f"inputs: {feed.origin}")
    progress("compiling and building kernels")
    if plan:
        sess = _session_with_plan(m, loaded, plan, config, feed.arrays)
    else:
        sess = Session(m, config, input_shapes=shapes_of(feed.arrays))
    sess.path = str(src.path)
    progress(f"running {len(sess.plan.kernels)} kernels")
    try:
        res = sess.run(feed.arrays, dump=bool(dump_dir))
    except KernelRuntimeError as exc:  # the model's own fault (one line) when onnxruntime fails on it too
        raise_if_reference_fails(m, feed.arrays, exc)
        raise
    with output_dir(out, REPORTS_DIR, f"{src.name}-run") as folder:
        files = write_compile_artifacts(sess.compiled, folder)
        files["outputs"] = write_npz(Path(output) if output else folder / "outputs.npz", res.outputs)
        if dump_dir:
            check_dump_dir(dump_dir, out)  # again: the folder may have been filled during the run
            files["dump"] = write_dumps(res.dumps, sess.plan, Path(dump_dir))
    summary = compile_summary(sess.compiled)
    summary.append(f"ran {len(sess.plan.kernels)} kernels in {res.total_ms:.1f} ms host time "
                   f"(kernel build {sess.runtime.build_ms:.0f} ms)")
    for name, arr in res.outputs.items():
        desc = (f"a sequence of {len(arr)} tensor(s)" if isinstance(arr, (list, tuple)) else
                "an empty optional" if arr is None else f"{arr.dtype}{list(arr.shape)}")
        summary.append(f"output {printable(name)}: {desc}")
    summary.append(f"wrote {files['outputs']}" + (f" and dumps in {files['dump']}" if dump_dir else ""))
    return {"summary": summary, "out": folder, "files": files, "result": res, "exit_code": 0}


def diagnose_command(model: str | None, config: Config, *, inputs: str | None = None, seed: int = 0,
                     val_range: str | None = None, thresholds: str | None = None, task_metrics=(),
                     out: str | None = None, html: bool = True, jobs: int = 1, ray: str | None = None,
                     percentiles: str | None = None, progress=_noop) -> dict:
    """Run :func:`toolkit.diagnose.diagnose` and write the report folder.

    Files: index.html (``html``), result.csv, summary.json, findings.json, kernel_times.csv, compile.log,
    fusion_result.json, plan.json, compile_findings.json and repro/ (when an origin was found).
    ``inputs`` a folder of .npz: a dataset run (toolkit.dataset.workflow.diagnose_dataset; ``jobs``, ``ray``,
    ``percentiles`` apply only there).
    """
    from toolkit.compare.metrics import resolve_thresholds
    from toolkit.diagnose import diagnose, prepare

    check_out_for(out, inputs)  # before the model is read (a dataset --out may be resumed)
    if inputs and Path(inputs).is_dir():
        from toolkit.dataset.workflow import diagnose_dataset
        return diagnose_dataset(model, config, inputs=inputs, thresholds=thresholds, task_metrics=task_metrics,
                                out=out, html=html, jobs=jobs, ray=ray, percentiles=percentiles, progress=progress)
    _single_input_only(jobs, ray, percentiles)
    lines = resolve_thresholds(thresholds) if thresholds else None
    prep = prepare(model, inputs, seed, val_range, progress=progress, input_shapes=config.input_shapes())
    diag, extra = diagnose(prep, config, thresholds=lines, task_metrics=task_metrics, progress=progress)
    with output_dir(out, REPORTS_DIR, prep.name) as folder:
        progress("writing the report")
        files = write_diagnosis(prep.model, diag, extra, config, folder, html)
    summary = diagnosis_lines(diag)
    target = folder / ("index.html" if html else "summary.json")
    summary.append(f"report: {target.resolve()}")
    return {"summary": summary, "out": folder, "files": files, "diagnosis": diag, "verdict": diag.summary["verdict"]}


def check_output_paths(output: str | None, dump_dir: str | None, out: str | None) -> None:
    """Refuse, before any work (UsageError, exit 2), an ``--output`` file that exists, is the ``--dump`` folder
    or lies inside it, is the ``--out`` folder itself, or whose folder does not exist (and is not ``--out``,
    which the command creates)."""
    from toolkit.core.errors import UsageError

    if not output:
        return
    o = Path(output).resolve()
    if Path(output).exists():
        raise UsageError(f"output file '{output}' already exists; choose another --output")
    if dump_dir and (o == Path(dump_dir).resolve() or Path(dump_dir).resolve() in o.parents):
        raise UsageError(f"--output '{output}' and --dump '{dump_dir}' must be different paths (the dump folder "
                         "must be new or empty); give each its own path")
    if out and o == Path(out).resolve():
        raise UsageError(f"--output and --out both name '{output}'; --output is a .npz file, --out a folder")
    parent = Path(output).parent
    if not parent.is_dir() and not (out and o.parent == Path(out).resolve()):
        raise UsageError(f"--output '{output}': folder '{parent}' does not exist; create it or choose another path")


def check_out_for(out: str | None, inputs: str | None) -> None:
    """The early ``--out`` check of a command taking ``--inputs``: a folder of inputs is a dataset run, whose
    ``--out`` may hold a run to resume (toolkit.dataset.store.check_store_out), else
    toolkit.core.artifacts.check_out. Raises UsageError (exit 2)."""
    if inputs and Path(inputs).is_dir():
        from toolkit.dataset.store import check_store_out
        check_store_out(out)
    else:
        check_out(out)


def _single_input_only(jobs: int, ray: str | None, percentiles: str | None) -> None:
    from toolkit.core.errors import UsageError

    given = [o for o, on in (("--jobs", jobs != 1), ("--ray", bool(ray)), ("--percentiles", percentiles is not None)) if on]
    if given:
        raise UsageError(f"{', '.join(given)} apply to dataset runs only; pass --inputs FOLDER (a folder of .npz files)")


def write_diagnosis(model, diag, extra: dict, config: Config, folder: Path, html: bool, render=None) -> dict:
    """Write one diagnosis into ``folder``: compile artifacts, repro/ (when an origin was found), result.csv,
    summary.json, findings.json, kernel_times.csv and, with ``html``, index.html (``render(diag, folder)``,
    default toolkit.report.html.render_report). Returns {label: file name}."""
    from toolkit.reexec.repro import fp16_tensors_of, write_repro
    from toolkit.report.csvjson import write_tables

    files = {k: v.name for k, v in write_compile_artifacts(extra["compiled"], folder).items()}
    if extra["origin_nodes"]:
        try:
            write_repro(model, extra["origin_nodes"], extra["golden"], config.to_dict(), folder / "repro",
                        stored_fp16=fp16_tensors_of(extra["compiled"].plan, model))
            files["repro"] = "repro/"
            diag.summary["repro"] = "repro/model.onnx"
        except KeyError as exc:
            diag.summary["repro"] = f"not written: no reference value for {exc}"
    diag.artifacts = {**diag.artifacts, **files}
    diag.artifacts.update({"result": "result.csv", "summary": "summary.json", "findings": "findings.json",
                           "kernel_times": "kernel_times.csv"})
    if html:
        diag.artifacts["report"] = "index.html"
    files.update(write_tables(diag, folder))
    if html:
        if render is None:
            from toolkit.report.html import render_report as render
        files["report"] = render(diag, folder).name
    return files


def diagnosis_lines(diag) -> list[str]:
    """The terminal lines of a diagnosis: verdict, reasons, stage, first divergence, top findings, tasks."""
    s = diag.summary
    summary = [f"verdict: {s['verdict']}"] + [f"  - {r}" for r in s["reasons"]]
    fd = s.get("first_divergence")
    if s["stage"] == "compile":
        summary.append("stage: compile (the plan diverges even in force_fp32)")
    if fd:
        summary.append(f"first divergence: node '{fd['node']}' ({fd['op_type']}, kernel {fd['kernel']}, "
                       f"{fd['precision']}) [{fd['kind']}]")
    for f in diag.findings[:5]:
        summary.append(f"{f.severity.upper():7} {f.kind}: {f.subject}: {f.recommendation}")
    if len(diag.findings) > 5:
        summary.append(f"({len(diag.findings) - 5} more findings in findings.json)")
    for t in diag.tasks:
        summary.append(f"task {t['name']}: {'PASS' if t['passed'] else 'FAIL'} ({t['detail']})")
    return summary


def signoff_command(model: str | None, policy_path: str, config: Config, *, config_path: str | None = None,
                    inputs: str | None = None, thresholds: str | None = None, out: str | None = None,
                    html: bool = True, jobs: int = 1, ray: str | None = None, percentiles: str | None = None,
                    progress=_noop) -> dict:
    """Evaluate a signoff policy (toolkit.signoff) and write the folder: signoff.html (``html``), summary.json
    (policy, model/config sha256, environment, every criterion with evidence), junit.xml (one testcase per
    criterion), criteria.csv, result.csv (first input set), plan.json, compile.log, fusion_result.json.
    ``inputs`` a folder of .npz: a dataset run (toolkit.dataset.workflow.signoff_dataset: streamed, ``jobs``
    processes or a Ray cluster, resumable; adds dataset.csv and inputs.csv)."""
    from toolkit.compare.metrics import resolve_thresholds
    from toolkit.signoff.policy import load_policy
    from toolkit.signoff.run import run_signoff

    check_out_for(out, inputs)  # before the policy, the model or the inputs are read
    policy = load_policy(policy_path)
    if inputs and Path(inputs).is_dir():
        from toolkit.dataset.workflow import signoff_dataset
        return signoff_dataset(model, policy, config, config_path=config_path, inputs=inputs, thresholds=thresholds,
                               out=out, html=html, jobs=jobs, ray=ray, percentiles=percentiles, progress=progress)
    _single_input_only(jobs, ray, percentiles)
    lines = resolve_thresholds(thresholds) if thresholds else None
    run = run_signoff(model, policy, config, inputs=inputs, config_path=config_path, thresholds=lines,
                      progress=progress)
    with output_dir(out, REPORTS_DIR, f"{run.summary['model_name']}-signoff") as folder:
        progress("writing the signoff")
        files = write_signoff(run, folder, html)
    return {"summary": signoff_lines(run, folder, html), "out": folder, "files": files,
            "verdict": run.summary["verdict"], "run": run}


def write_signoff(run, folder: Path, html: bool, extra_files: dict | None = None) -> dict:
    """Write a SignoffRun into ``folder`` (files of :func:`signoff_command`; ``extra_files`` already written
    there are listed in summary.json too). Returns {label: file name}."""
    import pandas as pd

    from toolkit.report.csvjson import _csv_text, _dumps, atomic_write_text, json_safe
    from toolkit.signoff.junit import junit_xml

    s = run.summary
    files = {k: v.name for k, v in write_compile_artifacts(run.compiled, folder).items()}
    atomic_write_text(folder / "result.csv", _csv_text(run.first_table))
    crit = pd.DataFrame([{k: v for k, v in c.items() if k != "evidence"} for c in s["criteria"]])
    atomic_write_text(folder / "criteria.csv", _csv_text(crit))
    props = {"model": s["model"], "model_sha256": s["model_sha256"], "policy_sha256": s["policy_sha256"],
             "config_sha256": s["config_sha256"]["resolved"]}
    atomic_write_text(folder / "junit.xml", junit_xml(run.results, f"signoff.{s['model_name']}", props,
                                                      sum(s["latency_ms"]) / 1e3))
    files.update(result="result.csv", criteria="criteria.csv", junit="junit.xml", summary="summary.json")
    files.update(extra_files or {})
    if html:
        from toolkit.report.signoff_html import render_signoff
        files["report"] = render_signoff(json_safe(s), run.first_table, folder).name
    s["artifacts"] = dict(files)
    atomic_write_text(folder / "summary.json", _dumps(s))
    return files


def signoff_lines(run, folder: Path, html: bool) -> list[str]:
    s = run.summary
    summary = [f"signoff: {s['verdict']} ({s['counts']['passed']}/{s['counts']['criteria']} criteria pass, "
               f"{s['counts']['input_sets']} input set(s))"]
    summary += [f"  {r.status} {r.message}" for r in run.results]
    summary.append(f"report: {(folder / ('signoff.html' if html else 'summary.json')).resolve()}")
    return summary


def regress_command(baseline: str, new: str, *, tolerance: str | None = None, out: str | None = None,
                    html: bool = True, allow_different_models: bool = False, progress=_noop) -> dict:
    """Compare two report folders (toolkit.signoff.regress); write regress.json and regress.html into ``out``
    (default reports/regress-<time>/). ``allow_different_models``: compare results of two models (a warning
    line first) instead of refusing them."""
    from toolkit.report.csvjson import _dumps, atomic_write_text
    from toolkit.signoff.regress import parse_tolerance, regress

    check_out(out)  # before the report folders are read
    rep = regress(baseline, new, parse_tolerance(tolerance), allow_different_models=allow_different_models)
    with output_dir(out, REPORTS_DIR, "regress") as folder:
        atomic_write_text(folder / "regress.json", _dumps(rep))
        files = {"regress": "regress.json"}
        if html:
            from toolkit.report.signoff_html import render_regress
            files["report"] = render_regress(rep, folder).name
    summary = [f"WARNING: {w}" for w in rep["warnings"]] + [f"NOTE: {n}" for n in rep.get("notes", [])] + \
        [f"regress: {rep['verdict']}"]
    for c in rep["environment_changes"][:10]:
        summary.append(f"  changed {c['key']}: {c['baseline']} -> {c['new']}")
    summary += [f"  - {r}" for r in rep["reasons"][:20]]
    if len(rep["reasons"]) > 20:
        summary.append(f"  ... and {len(rep['reasons']) - 20} more (regress.json)")
    summary += [f"  + improved {r}" for r in rep.get("improvements", [])[:20]]
    n_dec = len(rep["decision_changes"])
    if n_dec:
        summary.append(f"  {n_dec} changed decision(s) (precision/placement/fusion), e.g. "
                       + "; ".join(f"{d['node']} {d['what']} {d['baseline']}->{d['new']}" for d in rep["decision_changes"][:3]))
    summary.append(f"report: {(folder / ('regress.html' if html else 'regress.json')).resolve()}")
    return {"summary": summary, "out": folder, "files": files, "regressed": rep["regressed"], "report": rep}


def doctor_command(model: str | None = None, as_json: bool = False) -> dict:
    """Check the environment against the compatibility table; with ``model``, also its opset and IR version
    (toolkit.signoff.doctor.doctor_command; ``exit_code`` in the result)."""
    from toolkit.signoff.doctor import doctor_command

    return doctor_command(model, as_json)


def tune_command(model: str | None, config: Config, *, inputs: str | None = None, seed: int = 0,
                 target: str | None = None, task_metrics=(), out: str | None = None, html: bool = True,
                 progress=_noop, max_inputs: int | None = None) -> dict:
    """Run :func:`toolkit.tuning.tune.tune` and write keep_dtype.txt (the converter's format: one node name per
    line), tuned_config.json (accepted by compile/diagnose --config), summary.json, ranking.csv, ranges.csv and
    tune.html. ``met`` in the result says whether the target holds on every input. ``max_inputs``: most input
    sets ``inputs`` may give (default toolkit.tuning.feeds.DEFAULT_MAX_SETS; more is an InputError). A target
    condition no output's dtype admits is a UsageError before the inputs are read."""
    import dataclasses

    from toolkit.core.artifacts import write_json, write_text
    from toolkit.compare.tasks import TASKS, load_task
    from toolkit.tuning.feeds import DEFAULT_MAX_SETS, load_feed_sets
    from toolkit.tuning.tune import (
        DEFAULT_TARGET,
        check_target_outputs,
        format_target,
        parse_target,
        tune,
    )
    from toolkit.report.csvjson import to_csv_safe
    from toolkit.signoff.criteria import show
    from toolkit.source import _zoo_name_of

    check_out(out)  # a taken --out and a bad target are usage errors before any work
    parsed_target = parse_target(target or DEFAULT_TARGET)
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    check_target_outputs(m, parsed_target, "--target" if target else "the default target")
    feeds = load_feed_sets(m, src, inputs, seed, config.input_shapes(), max_inputs or DEFAULT_MAX_SETS)
    progress(f"{len(feeds)} input set(s)")
    zname = src.name if src.kind == "zoo" else _zoo_name_of(src.path)
    tasks = ([TASKS[zname]] if zname in TASKS else []) + [load_task(s) for s in task_metrics]
    res = tune(m, feeds, config, parsed_target, tasks=tasks, progress=progress)
    with output_dir(out, REPORTS_DIR, f"{src.name}-tune") as folder:
        progress("writing keep_dtype.txt, tuned_config.json and the report")
        files = {"keep_dtype": "keep_dtype.txt", "config": "tuned_config.json", "summary": "summary.json",
                 "ranking": "ranking.csv", "ranges": "ranges.csv"}
        entries = list(res.config.keep_dtype)
        write_text(folder / files["keep_dtype"], "".join(f"{e}\n" for e in entries))
        write_json(folder / files["config"], dataclasses.replace(res.config, keep_dtype=entries).to_dict())
        summary = res.summary()
        summary.update({"model": str(src.path), "model_name": src.name, "files": files})
        write_json(folder / files["summary"], summary)
        write_text(folder / files["ranking"], to_csv_safe(res.ranking, index=False))
        write_text(folder / files["ranges"], to_csv_safe(res.ranges, index=False))
        if html:
            from toolkit.report.tune_html import render_tune_report

            files["report"] = render_tune_report(res, folder, src.name, artifacts=dict(files)).name
    c0, c1 = res.coverage_before, res.coverage_after
    lines = [f"target {'MET' if res.met else 'NOT MET'} on {len(feeds)} input(s): "
             + ", ".join(format_target(res.target)),
             f"{len(res.chosen)} node(s) kept in FP32 ({res.trials} trials, {res.timings_ms['total_ms'] / 1e3:.1f} s)"]
    lines += [f"  - {e['node']} ({e['op_type']}): local RED {e['local_red']:.3g}"
              + (", overflow" if e["local_overflow"] or e["range_overflow"] else "")
              + (f"; without it the target {e['without_it']}" if str(e["without_it"]).startswith("fails") else "")
              for e in res.evidence[:10]]
    floats = res.after[res.after["CosineSimilarity"].notna()] if len(res.after) else res.after
    worst = floats.sort_values("CosineSimilarity").head(1).to_dict("records") if len(floats) else []
    if worst:
        w = worst[0]
        lim = {m: [v for t, _, v in res.target if t == m] for m in ("CosineSimilarity", "MaxAbsoluteError")}
        lines.append(f"worst output after: {w['Output']} on {w['Input']}: CosineSimilarity "
                     f"{show(w['CosineSimilarity'], *lim['CosineSimilarity'], digits=10)}, "
                     f"MaxAbsoluteError {show(w['MaxAbsoluteError'], *lim['MaxAbsoluteError'], digits=3)}")
    exact = res.after[res.after["ExactMatchRate"].notna()] if "ExactMatchRate" in res.after else res.after.iloc[:0]
    if len(exact):  # integer/bool outputs, checked by an ExactMatchRate target
        e = exact.sort_values("ExactMatchRate").iloc[0]
        lines.append(f"worst integer output after: {e['Output']} on {e['Input']}: ExactMatchRate "
                     f"{float(e['ExactMatchRate']):.6g}")
    flops = (f"FLOPs {c0['flops_fp16_share']:.1%} -> {c1['flops_fp16_share']:.1%}" if c0["flops_total"]
             else "no Conv/MatMul/Gemm FLOPs")
    lines.append(f"FP16 coverage: ops {c0['ops_fp16_share']:.1%} -> {c1['ops_fp16_share']:.1%}, {flops}; "
                 f"{count_change('Casts', res.cost['casts_added'])}")
    lines.append(f"wrote {folder / 'keep_dtype.txt'} and {folder / 'tuned_config.json'}")
    lines.append(f"report: {(folder / ('tune.html' if html else 'summary.json')).resolve()}")
    return {"summary": lines, "out": folder, "files": files, "result": res, "met": res.met}


def plan_config(plan, where) -> Config:
    """The Config a plan.json was compiled with (toolkit.memcheck.planio.plan_config)."""
    from toolkit.memcheck.planio import plan_config as _plan_config

    return _plan_config(plan, where)


def _session_with_plan(m, plan, plan_path, config: Config | None, arrays):
    """An engine Session whose runtime executes ``plan`` (a loaded Plan, read from the file ``plan_path``;
    config: the plan's own when None)."""
    from toolkit.compiler.pipeline import compile_model
    from toolkit.engine import Session
    from toolkit.memcheck.planio import attach_plan, plan_where
    from toolkit.runtime.npu import NpuRuntime

    cfg = config if config is not None else plan_config(plan, plan_path)
    sess = Session.__new__(Session)
    sess.model, sess.path, sess.config = m, "", cfg
    fresh = compile_model(m, cfg, input_shapes=shapes_of(arrays))
    sess.compiled = attach_plan(fresh, plan, where=plan_where(plan_path))
    sess.runtime = NpuRuntime(sess.compiled)
    return sess


def memcheck_command(model: str | None, config: Config | None, *, plan: str | None = None,
                     inputs: str | None = None, seed: int = 0, val_range: str | None = None,
                     out: str | None = None, html: bool = True, progress=_noop) -> dict:
    """Check a memory plan statically, dynamically and differentially; propose and verify a fix.

    ``plan``: a plan.json to check (default: the plan the engine compiles with ``config``). ``config``: None
    means the plan's own config (or the defaults). Files: conflicts.csv (toolkit.memcheck.memcheck.CONFLICT_COLUMNS),
    memcheck.json (summary, conflicts, dynamic events, divergence, fix, per-policy totals), plan.json (the checked
    plan), plan_fixed.json (when a fix was made) and memory.html. ``conflicts`` in the result: their count
    (the CLI exits 1 when it is not 0).
    """
    from toolkit.core.artifacts import write_json
    from toolkit.engine import Session
    from toolkit.memcheck.memcheck import memcheck, policy_totals
    from toolkit.memcheck.planio import relocate
    from toolkit.report.csvjson import atomic_write_text, to_csv_safe

    check_out(out)  # before the plan or the model is read
    loaded = None
    if plan:
        from toolkit.memcheck.planio import open_plan
        loaded, model, config = open_plan(plan, model, config)
    config = config or Config()
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    from toolkit.source import CONFIG_BIND_FIX  # memcheck has no --input-shape: input_shape comes from --config

    feed = prepare_inputs(m, src, inputs, seed, val_range, config.input_shapes(), bind_fix=CONFIG_BIND_FIX)
    progress("compiling")
    if loaded is not None:
        sess = _session_with_plan(m, loaded, plan, config, feed.arrays)
    else:
        sess = Session(m, config or Config(), input_shapes=shapes_of(feed.arrays))
    progress("checking: static, dynamic (poisoned run), differential (reuse off vs plan)")
    res = memcheck(sess.compiled, sess.plan, feed.arrays)
    totals = policy_totals(sess.plan)
    chk = res.check
    with output_dir(out, REPORTS_DIR, f"{src.name}-memcheck") as folder:
        files = {"conflicts": "conflicts.csv", "json": "memcheck.json", "plan": "plan.json"}
        atomic_write_text(folder / "conflicts.csv", to_csv_safe(res.conflicts_table(), index=False))
        sess.plan.to_json(folder / "plan.json")
        if res.fix:
            relocate(sess.plan, res.fix["disable_reuse"]).to_json(folder / "plan_fixed.json")
            files["plan_fixed"] = "plan_fixed.json"
        if html:
            files["report"] = "memory.html"
        write_json(folder / "memcheck.json", {
            "model": str(src.path), "inputs": feed.origin, "policy": sess.plan.config.get("memory_reuse"),
            "arena_bytes": sess.plan.arena_bytes, "lower_bound_bytes": sess.plan.lower_bound_bytes,
            "clean": chk.clean, "conflicts": [c.to_dict() for c in chk.conflicts],
            "dynamic_events": [e.to_dict() for e in chk.events], "divergence": chk.divergence, "error": chk.error,
            "fix": res.fix, "policies": totals, "files": files})
        if html:
            from toolkit.report.memory_html import render_memory_report
            render_memory_report(src.name, res, totals, folder, files)
    summary = [f"memory plan: policy {sess.plan.config.get('memory_reuse')}, arena {human_bytes(sess.plan.arena_bytes)}"
               f" vs lower bound {human_bytes(sess.plan.lower_bound_bytes)}",
               f"static conflicts: {len(chk.conflicts)}; dynamic events: {len(chk.events)}"]
    for c in chk.conflicts[:10]:
        if c.kind == "misaligned":  # no second tensor involved: the detail names offset and alignment
            summary.append(f"  CONFLICT {c.kind}: {c.detail}")
            continue
        summary.append(f"  CONFLICT {c.kind}: kernel '{c.writer}' (step {c.writer_step}) writes '{c.written}' over "
                       f"'{c.victim}', still read by '{c.reader}' (step {c.reader_step})")
    if chk.divergence:
        d = chk.divergence
        blame = (f"; explained by '{d['conflict']['writer']}' overwriting '{d['conflict']['victim']}'"
                 if d.get("conflict") else "")
        summary.append(f"first divergent tensor vs reuse off: '{d['tensor']}' (kernel '{d['kernel']}'){blame}")
    if chk.error:
        summary.append(f"kernel failure under poisoned memory: {chk.error}")
    if res.fix:
        summary.append(f"fix: disable_reuse = {res.fix['disable_reuse']} (verified by re-running: "
                       f"{'yes, clean' if res.fix.get('verified') else 'NO'})")
    summary.append(f"report: {(folder / ('memory.html' if html else 'memcheck.json')).resolve()}")
    return {"summary": summary, "out": folder, "files": files, "result": res,
            "conflicts": len(chk.conflicts) + len(chk.events) + (chk.error is not None)}
