"""``npuscope regress``: what changed between two report folders."""

from __future__ import annotations

from toolkit.commands.common import REPORTS_DIR, _noop
from toolkit.core.artifacts import check_out, output_dir
from toolkit.core.csvjson import _dumps, atomic_write_text
from toolkit.report.signoff_html import render_regress
from toolkit.signoff.regress import parse_tolerance, regress


def regress_command(baseline: str, new: str, *, tolerance: str | None = None, out: str | None = None,
                    html: bool = True, allow_different_models: bool = False, progress=_noop) -> dict:
    """Compare two report folders (toolkit.signoff.regress); write regress.json and regress.html into ``out``
    (default reports/regress-<time>/). ``allow_different_models``: compare results of two models (a warning
    line first) instead of refusing them."""
    check_out(out)  # before the report folders are read
    rep = regress(baseline, new, parse_tolerance(tolerance), allow_different_models=allow_different_models)
    with output_dir(out, REPORTS_DIR, "regress") as folder:
        atomic_write_text(folder / "regress.json", _dumps(rep))
        files = {"regress": "regress.json"}
        if html:
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
