"""``npuscope diagnose`` / ``compare``: FP32 reference vs simulated NPU, every tensor compared, report."""

from __future__ import annotations

from pathlib import Path

from toolkit.commands.common import (
    REPORTS_DIR,
    _noop,
    _single_input_only,
    check_out_for,
)
from toolkit.commands.dataset import diagnose_dataset
from toolkit.commands.outputs import diagnosis_lines, write_diagnosis
from toolkit.compare.metrics import resolve_thresholds
from toolkit.compare.subset import Subset
from toolkit.config.schema import Config
from toolkit.core.artifacts import output_dir
from toolkit.core.errors import ConfigError
from toolkit.diagnose import diagnose, prepare


def diagnose_command(model: str | None, config: Config, *, inputs: str | None = None, seed: int = 0,
                     val_range: str | None = None, thresholds: str | None = None, task_metrics=(),
                     out: str | None = None, html: bool = True, jobs: int = 1, ray: str | None = None,
                     percentiles: str | None = None, progress=_noop, subset: Subset | None = None) -> dict:
    """Run :func:`toolkit.diagnose.diagnose` and write the report folder.

    Files: index.html (``html``), result.csv, summary.json, findings.json, kernel_times.csv, compile.log,
    fusion_result.json, plan.json, compile_findings.json and repro/ (when an origin was found).
    ``inputs`` a folder of .npz: a dataset run (toolkit.commands.dataset.diagnose_dataset; ``jobs``, ``ray``,
    ``percentiles`` apply only there). ``subset``: compare and keep only those tensors
    (toolkit.compare.subset; a single input only, else ConfigError).
    """
    check_out_for(out, inputs)  # before the model is read (a dataset --out may be resumed)
    if inputs and Path(inputs).is_dir():
        if subset is not None and subset.active:
            raise ConfigError(f"{subset.describe()} applies to one input; pass one .npz with --inputs, not a folder")
        return diagnose_dataset(model, config, inputs=inputs, thresholds=thresholds, task_metrics=task_metrics,
                                out=out, html=html, jobs=jobs, ray=ray, percentiles=percentiles, progress=progress)
    _single_input_only(jobs, ray, percentiles)
    lines = resolve_thresholds(thresholds) if thresholds else None
    prep = prepare(model, inputs, seed, val_range, progress=progress, input_shapes=config.input_shapes())
    diag, extra = diagnose(prep, config, thresholds=lines, task_metrics=task_metrics, progress=progress,
                           subset=subset)
    with output_dir(out, REPORTS_DIR, prep.name) as folder:
        progress("writing the report")
        files = write_diagnosis(prep.model, diag, extra, config, folder, html)
    summary = diagnosis_lines(diag)
    target = folder / ("index.html" if html else "summary.json")
    summary.append(f"report: {target.resolve()}")
    return {"summary": summary, "out": folder, "files": files, "diagnosis": diag, "verdict": diag.summary["verdict"]}
