"""``npuscope diagnose`` / ``compare``: FP32 reference vs simulated NPU, every tensor compared, report."""

from __future__ import annotations

from toolkit.commands.common import (
    REPORTS_DIR,
    _noop,
    _single_input_only,
    check_out_for,
)
from toolkit.commands.dataset import diagnose_dataset
from toolkit.commands.outputs import diagnosis_lines, write_diagnosis, write_fix
from toolkit.compare.metrics import resolve_thresholds, with_shorthands
from toolkit.compare.metrics.thresholds import check_tensors, unjudged_lines
from toolkit.compare.subset import Subset, check_options
from toolkit.config.schema import Config
from toolkit.core.artifacts import check_out, output_dir
from toolkit.core.csvjson import _csv_text, _dumps, atomic_write_text
from toolkit.core.errors import ConfigError, InputError, UsageError
from toolkit.dataset.worker import tensor_order
from toolkit.diagnose import diagnose, prepare
from toolkit.dumps.audit import audit_findings
from toolkit.dumps.device_diagnosis import audit_profile, diagnose_device
from toolkit.engine import Session, shapes_of
from toolkit.ort.segments import DEFAULT_SEGMENT_BYTES
from toolkit.profile.attribution import read_device_profile
from toolkit.source import check_generation_options, several_sets
from toolkit.tuning.advice import mark_unverified, verify_advice
from toolkit.tuning.tune import lines_target


def diagnose_command(model: str | None, config: Config, *, inputs: str | None = None, seed: int = 0,
                     val_range: str | None = None, thresholds: str | None = None, task_metrics=(),
                     out: str | None = None, html: bool = True, jobs: int = 1, ray: str | None = None,
                     percentiles: str | None = None, device_dumps: str | None = None,
                     device_profile: str | None = None, mapping: str | None = None, verify: bool = True,
                     atol=(), rtol=(), progress=_noop, subset: Subset | None = None, stream: bool | None = None,
                     segment_mb: float | None = None, ray_parts: int | None = None) -> dict:
    """Run :func:`toolkit.diagnose.diagnose` and write the report folder.

    Files: index.html (``html``), result.csv, summary.json, findings.json, kernel_times.csv, compile.log,
    fusion_result.json, plan.json, compile_findings.json and repro/ (when an origin was found).
    ``inputs`` a folder of .npz or a loader script ``file.py[:function]``: a dataset run
    (toolkit.commands.dataset.diagnose_dataset; ``jobs`` and ``percentiles`` apply only there; ``ray`` there
    spreads the inputs over a Ray cluster's workers, and on one input splits the streamed pass into ``ray_parts``
    Ray tasks: :func:`toolkit.diagnose.diagnose`'s ``ray``).
    ``thresholds``: abnormal lines (toolkit.compare.metrics.grammar); ``atol`` / ``rtol``: the ``--atol`` /
    ``--rtol`` shorthands, appended to them. ``verify`` (default True): apply and re-run every advised
    keep_dtype set and search the verified fix as tune does (toolkit.tuning.advice.verify_advice); with a fix,
    the folder also holds keep_dtype.txt and fixed_config.json (accepted by compile / diagnose ``--config``).
    ``device_dumps``: a real device's dump folder compared instead of the simulated run
    (:func:`device_diagnose_command`); ``device_profile`` alone: the precision audit of its data types
    (:func:`profile_audit_command`). ``subset``: compare and keep only those tensors (toolkit.compare.subset;
    a single input only, else ConfigError; the advice is not verified then). ``stream`` (None: automatic) and
    ``segment_mb`` (MiB of tensors per segment; None: 64): the streamed comparison of
    :func:`toolkit.diagnose.diagnose` (single input).

    Raises UsageError (exit 2) for ``segment_mb`` with ``stream=False``, besides the errors of the steps it runs.
    """
    thresholds = with_shorthands(thresholds, atol, rtol)
    lines = resolve_thresholds(thresholds) if thresholds is not None else None  # a bad line: a usage error now
    check_generation_options(inputs, seed, val_range)
    if segment_mb is not None and stream is False:
        raise UsageError(f"--segment-mb {segment_mb:g} sizes the segments of the streamed pass, and --no-stream "
                         "runs everything in memory: drop one of them")
    if subset is not None:
        check_options(subset)  # an empty or ignored subset option: a usage error before any work
    if device_dumps or device_profile or mapping:
        if several_sets(inputs):
            raise UsageError("--device-dumps / --device-profile compare one device run: give the one .npz it ran "
                             "on as --inputs, not a folder")
        _single_input_only(jobs, ray, percentiles)
        _no_ray_parts(ray_parts, "--device-dumps / --device-profile compare a device run")
        if mapping and not device_dumps:
            raise UsageError("--mapping names the fused ops of --device-dumps; give --device-dumps DIR too")
        if device_dumps and not inputs:
            raise UsageError("--device-dumps compares what the device computed from its inputs: give the .npz it "
                             "ran on with --inputs (without it the reference would run on generated data, and every "
                             "difference would be the inputs', not the device's)")
        if device_dumps:
            return device_diagnose_command(model, config, device_dumps, profile=device_profile, mapping=mapping,
                                           inputs=inputs, seed=seed, val_range=val_range, thresholds=thresholds,
                                           task_metrics=task_metrics, out=out, html=html, progress=progress)
        return profile_audit_command(model, config, device_profile, out=out, progress=progress)
    check_out_for(out, inputs)  # before the model is read (a dataset --out may be resumed)
    if several_sets(inputs):
        if subset is not None and subset.active:
            raise ConfigError(f"{subset.describe()} applies to one input; pass one .npz with --inputs, not a folder")
        _no_ray_parts(ray_parts, "a dataset run gives whole inputs to the Ray workers")
        return diagnose_dataset(model, config, inputs=inputs, thresholds=thresholds, task_metrics=task_metrics,
                                out=out, html=html, jobs=jobs, ray=ray, percentiles=percentiles, verify=verify,
                                progress=progress)
    _single_input_only(jobs, None, percentiles)  # --ray on one input: the streamed pass split across the cluster
    prep = prepare(model, inputs, seed, val_range, progress=progress, input_shapes=config.input_shapes())
    check_tensors(lines, tensor_order(prep.model))
    diag, extra = diagnose(prep, config, thresholds=lines, task_metrics=task_metrics, progress=progress,
                           subset=subset, stream=stream,
                           segment_bytes=int(segment_mb * 2**20) if segment_mb else DEFAULT_SEGMENT_BYTES,
                           ray=ray, ray_parts=ray_parts)
    unjudged = unjudged_lines(lines, diag.table)
    if unjudged:  # a line the user set that judged nothing: a PASS would rest on it
        raise UsageError(f"--thresholds/--atol/--rtol: {unjudged[0]}, so the line set for it judged nothing"
                         f"{f' ({len(unjudged) - 1} more such line(s))' if len(unjudged) > 1 else ''}; set lines on "
                         "compared tensors of their dtype (ExactMatchRate for integer/bool outputs), or widen the "
                         "subset or lower the fusion level to compare an inner tensor")
    fix = None
    if verify and not (subset is not None and subset.active):  # a subset keeps too few tensors to rank kernels
        fix = verify_advice(prep, config, diag.findings, extra, diag.summary["stage"], diag.summary["verdict"],
                            target=lines_target(prep.model, thresholds), task_metrics=task_metrics,
                            progress=progress)
        diag.summary["fix"] = {**fix.summary(), "sentence": fix.sentence()}
    else:  # advice printed as the advisor gave it: say it was not applied and re-run
        mark_unverified(diag.findings, "--no-verify" if not verify else
                        f"{subset.describe()} compares a subset of the tensors, too few to verify a fix; run without "
                        "it to get a verified fix")
    with output_dir(out, REPORTS_DIR, prep.name) as folder:
        progress("writing the report")
        written, note = write_fix(fix, diag, folder)
        files = write_diagnosis(prep.model, diag, extra, config, folder, html)
        files.update(written)
    summary = diagnosis_lines(diag) + ([note] if note else [])
    target = folder / ("index.html" if html else "summary.json")
    summary.append(f"report: {target.resolve()}")
    return {"summary": summary, "out": folder, "files": files, "diagnosis": diag, "verdict": diag.summary["verdict"]}


def _no_ray_parts(ray_parts: int | None, why: str) -> None:
    if ray_parts is not None:
        raise UsageError(f"--ray-parts {ray_parts} splits one input's streamed pass; {why}: drop --ray-parts")


def device_diagnose_command(model: str | None, config: Config, device_dumps: str, *, profile: str | None = None,
                            mapping: str | None = None, inputs: str | None = None, seed: int = 0,
                            val_range: str | None = None, thresholds: str | None = None, task_metrics=(),
                            out: str | None = None, html: bool = True, progress=_noop) -> dict:
    """``diagnose MODEL --device-dumps DIR``: toolkit.dumps.device_diagnosis.diagnose_device, then the report
    folder of :func:`diagnose_command` plus precision_audit.csv (toolkit.dumps.audit.AUDIT_COLUMNS)."""
    check_out(out)
    lines = resolve_thresholds(thresholds) if thresholds else None
    prep = prepare(model, inputs, seed, val_range, progress=progress, input_shapes=config.input_shapes())
    diag, extra, audit = diagnose_device(prep, config, device_dumps, profile=profile, mapping=mapping,
                                         thresholds=lines, task_metrics=task_metrics, progress=progress)
    mark_unverified(diag.findings, "read from device dumps, which a changed config does not re-run; convert the "
                    "model with that keep_dtype and dump it again")
    with output_dir(out, REPORTS_DIR, f"{prep.name}-device") as folder:
        progress("writing the report")
        atomic_write_text(folder / "precision_audit.csv", _csv_text(audit))
        diag.artifacts["precision_audit"] = "precision_audit.csv"
        files = write_diagnosis(prep.model, diag, extra, config, folder, html)
        files["precision_audit"] = "precision_audit.csv"
    summary = diagnosis_lines(diag)
    summary.append(f"precision audit: {len(audit)} tensor(s) in another dtype than the options imply")
    summary.append(f"report: {(folder / ('index.html' if html else 'summary.json')).resolve()}")
    return {"summary": summary, "out": folder, "files": files, "diagnosis": diag, "verdict": diag.summary["verdict"],
            "audit": audit}


def profile_audit_command(model: str | None, config: Config, device_profile: str, *, out: str | None = None,
                          progress=_noop) -> dict:
    """``diagnose MODEL --device-profile FILE`` without dumps: the precision audit from op_summary's Input/Output
    Data Types (toolkit.dumps.audit.audit_op_summary). Writes precision_audit.csv and summary.json; verdict WARN
    when an op ran in another dtype than the options imply, else PASS, and both the printed verdict and
    summary.json's ``scope`` say it covers the data types only (no values, no accuracy). InputError (exit 2) when no row of the
    profile could be audited (no data-type columns, or no row naming an op of the model)."""
    check_out(out)
    prep = prepare(model, None, 0, None, progress=progress, input_shapes=config.input_shapes())
    progress("compiling (our plan stands for the options given)")
    sess = Session(prep.model, config, input_shapes=shapes_of(prep.feeds), model_path=str(prep.path))
    audit, matched = audit_profile(sess.plan, prep.model, config, device_profile)
    if not matched:  # a PASS would rest on nothing
        rows = read_device_profile(device_profile)[0]
        typed = any(rows[c].notna().any() and rows[c].astype(str).str.strip().ne("").any()
                    for c in ("Input Data Types", "Output Data Types") if c in rows.columns)
        why = ("no row has an Input Data Types / Output Data Types value: export op_summary with the data types"
               if not typed else
               "none of its rows names an op of this model with a float data type: is it this model's profile?")
        raise InputError(f"--device-profile '{device_profile}' audits nothing: {why}")
    findings = audit_findings(audit)
    verdict = "WARN" if len(audit) else "PASS"
    scope = ("the verdict covers the data types only: a profile holds no tensor values, so accuracy was not "
             "compared; give the device's dumps (--device-dumps) or run diagnose without --device-profile")
    summary = {"verdict": verdict, "scope": scope, "model": str(prep.path), "device_profile": str(device_profile),
               "rows_matched": matched, "precision_mismatches": len(audit), "config": config.to_dict(),
               "findings": [f.to_dict() for f in findings]}
    with output_dir(out, REPORTS_DIR, f"{prep.name}-audit") as folder:
        atomic_write_text(folder / "precision_audit.csv", _csv_text(audit))
        atomic_write_text(folder / "summary.json", _dumps(summary))
    lines = [f"verdict: {verdict} (data types only)", f"  {scope}",
             f"precision audit: {len(audit)} op(s) in another dtype than the options imply "
             f"({matched} profile row(s) matched to the plan)"]
    lines += [f"WARNING precision_mismatch: {f.subject}: {f.recommendation}" for f in findings[:5]]
    lines.append(f"report: {(folder / 'precision_audit.csv').resolve()}")
    return {"summary": lines, "out": folder, "files": {"precision_audit": "precision_audit.csv",
                                                       "summary": "summary.json"},
            "verdict": verdict, "audit": audit}
