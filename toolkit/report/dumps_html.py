"""index.html for compare-dumps: diagnose's report (templates/report.html.j2, same figures and sections) with
a first-divergence section of its own (dumps have no force_fp32 re-run to triage against) and its own title.

Compile-only sections (fusion, precision map, memory, kernel time) render as "no data": dumps carry none.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.compare.diagnosis import Diagnosis
from toolkit.core.csvjson import atomic_write_text
from toolkit.report import context
from toolkit.report.html import (
    TEMPLATE,
    build_figures,
    environment,
    plotly_src,
    script_json,
)

_EXPLAIN = {
    True: "The first tensor (in the order below) where the target leaves the abnormal lines or overflows; "
          "FP16 overflow / NaN / Inf is reported first when it appears earlier.",
    False: "Every compared tensor stays within the abnormal lines.",
}


def divergence_section(diag: Diagnosis) -> dict:
    """The data templates/_divergence.html.j2 loops over, for a dump comparison."""
    s = diag.summary
    first = s.get("first_divergence")
    run = {"title": "Target vs golden", "found": bool(first), "facts": [], "evidence": []}
    if first:
        run["facts"] = context.facts(first, ["node", "op_type", "tensor", "kernel", "precision", "kind", "basis"])
        run["evidence"] = context.facts(first.get("evidence") or {})
    notes = {"order": s.get("order"), "roles": ("from the model's graph" if s.get("model") else
                                                "no model: abnormal rows after the first count as propagated")}
    return {"stage": "dumps", "css": "fail" if first else "pass",
            "headline": "First divergence between the dumps" if first else "No divergence",
            "explanation": _EXPLAIN[bool(first)], "runs": [run], "facts": context.facts(notes)}


def render_dump_report(diag: Diagnosis, out_dir: Path, filename: str = "index.html") -> Path:
    """Write the report of a compare-dumps Diagnosis to ``out_dir/filename`` (atomically); returns the path."""
    out_dir = Path(out_dir)
    src = plotly_src(out_dir)  # first: the artifacts table shows the bundle's size
    figs = {key: {"id": f"fig-{key}", "json": script_json(fig.to_json())} for key, fig in build_figures(diag).items()}
    ctx = context.build_context(diag, out_dir, figs)
    g, t = diag.summary["golden"], diag.summary["target"]
    ctx["title"] = f"npuscope compare-dumps: {g['path']} vs {t['path']}"
    ctx["triage"] = divergence_section(diag)
    path = out_dir / filename
    atomic_write_text(path, environment().get_template(TEMPLATE).render(**ctx, plotly_src=src))
    return path
