"""``npuscope signoff``: every criterion of a written policy PASS/FAIL with evidence."""

from __future__ import annotations

from toolkit.commands.common import (
    REPORTS_DIR,
    _noop,
    _single_input_only,
    check_out_for,
)
from toolkit.commands.dataset import check_workers, signoff_dataset
from toolkit.commands.outputs import signoff_lines, write_signoff
from toolkit.compare.metrics import overridden, resolve_thresholds, with_shorthands
from toolkit.config.schema import Config
from toolkit.core.artifacts import output_dir
from toolkit.signoff.policy import load_policy
from toolkit.signoff.run import run_signoff
from toolkit.source import check_generation_options, several_sets


def signoff_command(model: str | None, policy_path: str, config: Config, *, config_path: str | None = None,
                    inputs: str | None = None, thresholds: str | None = None, out: str | None = None,
                    html: bool = True, jobs: int = 1, ray: str | None = None, percentiles: str | None = None,
                    seed: int = 0, val_range: str | None = None, atol=(), rtol=(), progress=_noop) -> dict:
    """Evaluate a signoff policy (toolkit.signoff) and write the folder: signoff.html (``html``), summary.json
    (policy, model/config sha256, environment, every criterion with evidence), junit.xml (one testcase per
    criterion), criteria.csv, result.csv (first input set), plan.json, compile.log, fusion_result.json.
    ``inputs`` a folder of .npz: a dataset run (toolkit.commands.dataset.signoff_dataset: streamed, ``jobs``
    processes or a Ray cluster, resumable; adds dataset.csv and inputs.csv); so is a loader script
    ``file.py[:function]``. Abnormal lines: the policy's ``[layers] thresholds``, then ``thresholds``, then the
    ``atol`` / ``rtol`` shorthands (each replaces the policy's line on its metric and output; two of the user's on
    one metric and output are a UsageError). ``seed`` / ``val_range``: generated inputs (no ``inputs``)."""
    lines_text = with_shorthands(thresholds, atol, rtol)
    if lines_text is not None:
        resolve_thresholds(lines_text)  # a bad line is a usage error before any work
    check_workers(jobs, ray)
    check_generation_options(inputs, seed, val_range)
    check_out_for(out, inputs)  # before the policy, the model or the inputs are read
    policy = load_policy(policy_path)
    thresholds = overridden(policy.thresholds(), lines_text)  # the user's lines replace the policy's, metric by metric
    if several_sets(inputs):
        return signoff_dataset(model, policy, config, config_path=config_path, inputs=inputs, thresholds=thresholds,
                               out=out, html=html, jobs=jobs, ray=ray, percentiles=percentiles, progress=progress)
    _single_input_only(jobs, ray, percentiles)
    lines = resolve_thresholds(thresholds) if thresholds else None
    run = run_signoff(model, policy, config, inputs=inputs, config_path=config_path, thresholds=lines, seed=seed,
                      val_range=val_range, progress=progress)
    with output_dir(out, REPORTS_DIR, f"{run.summary['model_name']}-signoff") as folder:
        progress("writing the signoff")
        files = write_signoff(run, folder, html)
    return {"summary": signoff_lines(run, folder, html), "out": folder, "files": files,
            "verdict": run.summary["verdict"], "run": run}
