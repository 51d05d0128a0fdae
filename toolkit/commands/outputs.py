"""The files of one diagnosis or signoff run in its folder, and the lines the terminal shows for it."""

from __future__ import annotations

from pathlib import Path

from toolkit.config.keep_dtype import keep_file_text, unwritable_entry
from toolkit.config.schema import Config
from toolkit.core.artifacts import write_compile_artifacts, write_json, write_text
from toolkit.core.csvjson import _csv_text, _dumps, atomic_write_text, json_safe
from toolkit.reexec.repro import fp16_tensors_of, write_repro
from toolkit.report.assets import PLOTLY_FILE
from toolkit.report.html import render_report
from toolkit.report.signoff_html import render_signoff
from toolkit.report.tables import write_tables
from toolkit.signoff.junit import junit_xml
from toolkit.tuning.advice import fix_config


def write_fix(fix, diag, folder: Path) -> tuple[dict, str | None]:
    """Write a verified fix (toolkit.tuning.advice.VerifiedFix, or None) into ``folder``: keep_dtype.txt (when
    every entry fits one line) and fixed_config.json, listed in ``diag``'s summary["fix"]["files"] and
    artifacts. Returns ({label: file name} written, a terminal line when keep_dtype.txt could not be written,
    else None)."""
    fixed = fix_config(fix) if fix is not None else None
    if fixed is None:
        return {}, None
    written = {}
    keep_text = keep_file_text(fixed.keep_dtype)  # None: a node name no line of the file can hold
    if keep_text is not None:
        write_text(folder / "keep_dtype.txt", keep_text)
        written["keep_dtype"] = "keep_dtype.txt"
    write_json(folder / "fixed_config.json", fixed.to_dict())
    written["fixed_config"] = "fixed_config.json"
    diag.summary["fix"]["files"] = {("config" if k == "fixed_config" else k): v for k, v in written.items()}
    diag.artifacts.update(written)  # listed by the page
    note = None
    if "keep_dtype" not in written:
        note = (f"keep_dtype.txt not written: node name {unwritable_entry(fixed.keep_dtype)!r} cannot be one line "
                "of it (a line break, or spaces at an end); pass fixed_config.json, whose keep_dtype list holds it")
    return written, note


def write_diagnosis(model, diag, extra: dict, config: Config, folder: Path, html: bool, render=None) -> dict:
    """Write one diagnosis into ``folder``: compile artifacts, repro/ (when an origin was found), result.csv,
    summary.json, findings.json, kernel_times.csv and, with ``html``, index.html (``render(diag, folder)``,
    default toolkit.report.html.render_report). Returns {label: file name}."""
    files = {k: v.name for k, v in write_compile_artifacts(extra["compiled"], folder).items()}
    if extra["origin_nodes"]:
        try:
            write_repro(model, extra["origin_nodes"], extra["golden"], config.to_dict(), folder / "repro",
                        stored_fp16=fp16_tensors_of(extra["compiled"].plan, model),
                        thresholds=extra.get("lines"))
            files["repro"] = "repro/"
            diag.summary["repro"] = "repro/model.onnx"
        except KeyError as exc:
            diag.summary["repro"] = f"not written: no reference value for {exc}"
    diag.artifacts = {**diag.artifacts, **files}
    diag.artifacts.update({"result": "result.csv", "summary": "summary.json", "findings": "findings.json",
                           "kernel_times": "kernel_times.csv"})
    if html:
        diag.artifacts["report"] = "index.html"
        diag.artifacts["plotly.js"] = PLOTLY_FILE  # written beside the page by the render
    files.update(write_tables(diag, folder))
    if html:
        if render is None:
            render = render_report
        files["report"] = render(diag, folder).name
    return files


def diagnosis_lines(diag) -> list[str]:
    """The terminal lines of a diagnosis: verdict, reasons, stage, first divergence, top findings, tasks."""
    s = diag.summary
    summary = [f"verdict: {s['verdict']}"] + [f"  - {r}" for r in s["reasons"]]
    if s.get("ship"):
        summary.append(s["ship"])
    if s.get("fix"):
        summary.append(s["fix"]["sentence"])
    fd = s.get("first_divergence")
    if s["stage"] == "compile":
        summary.append("stage: compile (the plan diverges even in force_fp32)")
    if fd:
        where = " (first inside the subset: what it reads was not compared)" if fd.get("basis") == "subset" else ""
        summary.append(f"first divergence: node '{fd['node']}' ({fd['op_type']}, kernel {fd['kernel']}, "
                       f"{fd['precision']}) [{fd['kind']}]{where}")
    for f in diag.findings[:5]:
        summary.append(f"{f.severity.upper():7} {f.kind}: {f.subject}: {f.recommendation}")
    if len(diag.findings) > 5:
        summary.append(f"({len(diag.findings) - 5} more findings in findings.json)")
    for t in diag.tasks:
        summary.append(f"task {t['name']}: {'PASS' if t['passed'] else 'FAIL'} ({t['detail']})")
    sub = s.get("subset")
    if sub:
        summary.append(f"subset {sub['options']}: {sub['left_out_nodes']} node(s) and {sub['left_out_tensors']} "
                       "tensor(s) left out of the comparison (graph outputs always compared)")
    return summary


def write_signoff(run, folder: Path, html: bool, extra_files: dict | None = None) -> dict:
    """Write a SignoffRun into ``folder`` (files of :func:`signoff_command`; ``extra_files`` already written
    there are listed in summary.json too). Returns {label: file name}."""
    import pandas as pd

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
