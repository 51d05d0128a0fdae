"""Command workflows as plain functions (the CLI only parses arguments and prints what these return).

Each returns a dict with ``summary`` (lines for the terminal), ``out`` (the output folder) and the files
written; each raises toolkit.errors.UserError subclasses for user mistakes.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.artifacts import output_dir, write_compile_artifacts, write_dumps, write_npz
from toolkit.config import Config
from toolkit.engine import shapes_of
from toolkit.ir.load import load_model
from toolkit.report.console import compile_summary, human_bytes
from toolkit.source import prepare_inputs, resolve_model

REPORTS_DIR = Path("reports")


def _noop(msg: str) -> None:
    pass


def compile_command(model: str | None, config: Config, out: str | None = None, progress=_noop) -> dict:
    """Compile and write plan.json, compile.log, fusion_result.json, compile_findings.json."""
    from toolkit.compiler.pipeline import compile_model

    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    progress("compiling")
    compiled = compile_model(m, config, model_path=str(src.path))
    with output_dir(out, REPORTS_DIR, f"{src.name}-compile") as folder:
        files = write_compile_artifacts(compiled, folder)
    return {"summary": compile_summary(compiled), "out": folder, "files": files, "compiled": compiled}


def run_command(model: str | None, config: Config, *, inputs: str | None = None, seed: int = 0,
                val_range: str | None = None, dump_dir: str | None = None, output: str | None = None,
                out: str | None = None, progress=_noop) -> dict:
    """Compile for the feed's shapes, run once in NPU mode, write outputs.npz (+ dumps)."""
    from toolkit.engine import Session

    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    feed = prepare_inputs(m, src, inputs, seed, val_range)
    progress(f"inputs: {feed.origin}")
    progress("compiling and building kernels")
    sess = Session(m, config, input_shapes=shapes_of(feed.arrays))
    sess.path = str(src.path)
    progress(f"running {len(sess.plan.kernels)} kernels")
    res = sess.run(feed.arrays, dump=bool(dump_dir))
    with output_dir(out, REPORTS_DIR, f"{src.name}-run") as folder:
        files = write_compile_artifacts(sess.compiled, folder)
        files["outputs"] = write_npz(Path(output) if output else folder / "outputs.npz", res.outputs)
        if dump_dir:
            dpath = Path(dump_dir)
            if dpath.exists() and any(dpath.iterdir()):
                from toolkit.errors import UsageError
                raise UsageError(f"dump folder '{dpath}' already exists and is not empty; choose a new --dump")
            files["dump"] = write_dumps(res.dumps, sess.plan, dpath)
    summary = compile_summary(sess.compiled)
    summary.append(f"ran {len(sess.plan.kernels)} kernels in {res.total_ms:.1f} ms host time "
                   f"(kernel build {sess.runtime.build_ms:.0f} ms)")
    for name, arr in res.outputs.items():
        summary.append(f"output {name}: {arr.dtype}{list(arr.shape)}")
    summary.append(f"wrote {files['outputs']}" + (f" and dumps in {files['dump']}" if dump_dir else ""))
    return {"summary": summary, "out": folder, "files": files, "result": res}


def diagnose_command(model: str | None, config: Config, *, inputs: str | None = None, seed: int = 0,
                     val_range: str | None = None, thresholds: str | None = None, task_metrics=(),
                     out: str | None = None, html: bool = True, progress=_noop) -> dict:
    """Run :func:`toolkit.diagnose.diagnose` and write the report folder.

    Files: index.html (``html``), result.csv, summary.json, findings.json, kernel_times.csv, compile.log,
    fusion_result.json, plan.json, compile_findings.json and repro/ (when an origin was found).
    """
    from toolkit.compare.metrics import resolve_thresholds
    from toolkit.compare.repro import write_repro
    from toolkit.diagnose import diagnose, prepare
    from toolkit.report.csvjson import write_tables

    lines = resolve_thresholds(thresholds) if thresholds else None
    prep = prepare(model, inputs, seed, val_range, progress=progress)
    diag, extra = diagnose(prep, config, thresholds=lines, task_metrics=task_metrics, progress=progress)
    with output_dir(out, REPORTS_DIR, prep.name) as folder:
        progress("writing the report")
        files = {k: v.name for k, v in write_compile_artifacts(extra["compiled"], folder).items()}
        if extra["origin_nodes"]:
            try:
                write_repro(prep.model, extra["origin_nodes"], extra["golden"], config.to_dict(), folder / "repro")
                files["repro"] = "repro/"
                diag.summary["repro"] = "repro/model.onnx"
            except KeyError as exc:
                diag.summary["repro"] = f"not written: no reference value for {exc}"
        diag.artifacts = dict(files)
        diag.artifacts.update({"result": "result.csv", "summary": "summary.json", "findings": "findings.json",
                               "kernel_times": "kernel_times.csv"})
        if html:
            diag.artifacts["report"] = "index.html"
        written = write_tables(diag, folder)
        files.update(written)
        if html:
            from toolkit.report.html import render_report
            files["report"] = render_report(diag, folder).name
    s = diag.summary
    summary = [f"verdict: {s['verdict']}"] + [f"  - {r}" for r in s["reasons"]]
    fd = s.get("first_divergence")
    if s["stage"] == "compile":
        summary.append(f"stage: compile (the plan diverges even in force_fp32)")
    if fd:
        summary.append(f"first divergence: node '{fd['node']}' ({fd['op_type']}, kernel {fd['kernel']}, "
                       f"{fd['precision']}) [{fd['kind']}]")
    for f in diag.findings[:5]:
        summary.append(f"{f.severity.upper():7} {f.kind}: {f.subject}: {f.recommendation}")
    for t in diag.tasks:
        summary.append(f"task {t['name']}: {'PASS' if t['passed'] else 'FAIL'} ({t['detail']})")
    target = folder / ("index.html" if html else "summary.json")
    summary.append(f"report: {target.resolve()}")
    return {"summary": summary, "out": folder, "files": files, "diagnosis": diag, "verdict": s["verdict"]}
