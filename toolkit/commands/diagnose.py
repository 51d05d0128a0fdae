"""``npuscope diagnose`` / ``compare``: FP32 reference vs simulated NPU, every tensor compared, report."""

from __future__ import annotations

from toolkit.commands.common import (
    REPORTS_DIR,
    _noop,
    _single_input_only,
    check_out_for,
)
from toolkit.commands.dataset import diagnose_dataset
from toolkit.commands.outputs import diagnosis_lines, write_diagnosis
from toolkit.compare.metrics import resolve_thresholds, with_shorthands
from toolkit.compare.metrics.thresholds import check_tensors
from toolkit.config.schema import Config
from toolkit.core.artifacts import output_dir
from toolkit.dataset.worker import tensor_order
from toolkit.diagnose import diagnose, prepare
from toolkit.source import several_sets


def diagnose_command(model: str | None, config: Config, *, inputs: str | None = None, seed: int = 0,
                     val_range: str | None = None, thresholds: str | None = None, task_metrics=(),
                     out: str | None = None, html: bool = True, jobs: int = 1, ray: str | None = None,
                     percentiles: str | None = None, atol=(), rtol=(), progress=_noop) -> dict:
    """Run :func:`toolkit.diagnose.diagnose` and write the report folder.

    Files: index.html (``html``), result.csv, summary.json, findings.json, kernel_times.csv, compile.log,
    fusion_result.json, plan.json, compile_findings.json and repro/ (when an origin was found).
    ``inputs`` a folder of .npz or a loader script ``file.py[:function]``: a dataset run
    (toolkit.commands.dataset.diagnose_dataset; ``jobs``, ``ray``, ``percentiles`` apply only there).
    ``thresholds``: abnormal lines (toolkit.compare.metrics.grammar); ``atol`` / ``rtol``: the ``--atol`` /
    ``--rtol`` shorthands, appended to them.
    """
    thresholds = with_shorthands(thresholds, atol, rtol)
    lines = resolve_thresholds(thresholds) if thresholds else None  # a bad line is a usage error before any work
    check_out_for(out, inputs)  # before the model is read (a dataset --out may be resumed)
    if several_sets(inputs):
        return diagnose_dataset(model, config, inputs=inputs, thresholds=thresholds, task_metrics=task_metrics,
                                out=out, html=html, jobs=jobs, ray=ray, percentiles=percentiles, progress=progress)
    _single_input_only(jobs, ray, percentiles)
    prep = prepare(model, inputs, seed, val_range, progress=progress, input_shapes=config.input_shapes())
    check_tensors(lines, tensor_order(prep.model))
    diag, extra = diagnose(prep, config, thresholds=lines, task_metrics=task_metrics, progress=progress)
    with output_dir(out, REPORTS_DIR, prep.name) as folder:
        progress("writing the report")
        files = write_diagnosis(prep.model, diag, extra, config, folder, html)
    summary = diagnosis_lines(diag)
    target = folder / ("index.html" if html else "summary.json")
    summary.append(f"report: {target.resolve()}")
    return {"summary": summary, "out": folder, "files": files, "diagnosis": diag, "verdict": diag.summary["verdict"]}
