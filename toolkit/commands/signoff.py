"""``npuscope signoff``: every criterion of a written policy PASS/FAIL with evidence."""

from __future__ import annotations

from pathlib import Path

from toolkit.commands.common import (
    REPORTS_DIR,
    _noop,
    _single_input_only,
    check_out_for,
)
from toolkit.commands.dataset import signoff_dataset
from toolkit.commands.outputs import signoff_lines, write_signoff
from toolkit.compare.metrics import resolve_thresholds
from toolkit.config.schema import Config
from toolkit.core.artifacts import output_dir
from toolkit.signoff.policy import load_policy
from toolkit.signoff.run import run_signoff


def signoff_command(model: str | None, policy_path: str, config: Config, *, config_path: str | None = None,
                    inputs: str | None = None, thresholds: str | None = None, out: str | None = None,
                    html: bool = True, jobs: int = 1, ray: str | None = None, percentiles: str | None = None,
                    progress=_noop) -> dict:
    """Evaluate a signoff policy (toolkit.signoff) and write the folder: signoff.html (``html``), summary.json
    (policy, model/config sha256, environment, every criterion with evidence), junit.xml (one testcase per
    criterion), criteria.csv, result.csv (first input set), plan.json, compile.log, fusion_result.json.
    ``inputs`` a folder of .npz: a dataset run (toolkit.commands.dataset.signoff_dataset: streamed, ``jobs``
    processes or a Ray cluster, resumable; adds dataset.csv and inputs.csv)."""
    check_out_for(out, inputs)  # before the policy, the model or the inputs are read
    policy = load_policy(policy_path)
    if inputs and Path(inputs).is_dir():
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
