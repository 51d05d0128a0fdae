"""tune.html: the report of `npuscope tune` (one self-contained file, plotly.js inlined, opens offline).

``render_tune_report(result, out_dir, model_name)`` turns a :class:`toolkit.tuning.tune.TuneResult` into plain
data (grids and key/value lists, formatted by toolkit.report.context) and renders ``templates/tune.html.j2``
with the same jinja2 environment (autoescape on) and helpers as the diagnosis report.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from toolkit.core.csvjson import atomic_write_text
from toolkit.report.context import SEVERITY_CSS, facts, fmt, grid
from toolkit.report.figures import LOG_FLOOR, esc
from toolkit.report.html import environment, plotly_src, script_json
from toolkit.tuning.tune import format_target

TEMPLATE = "tune.html.j2"
METRIC_COLUMNS = ["Input", "Output", "CosineSimilarity", "MaxAbsoluteError", "RelativeEuclideanDistance",
                  "MeanRelativeError", "NaN/Inf", "Met", "Failed"]
RANK_COLUMNS = ["Rank", "KeepName", "OpType", "LocalCosine", "LocalRED", "LocalMaxAbs", "LocalOverflow",
                "RangeOverflow", "AccCosine", "AccRED", "OutputShare", "Nodes"]
RANK_TOP = 60


def ranking_figure(ranking: pd.DataFrame, chosen: list[str]) -> go.Figure:
    """Local vs accumulated RelativeEuclideanDistance per ranked kernel (log scale); chosen kernels in red."""
    fig = go.Figure()
    if ranking is None or ranking.empty:
        fig.update_layout(title="No ranking: the target held without any FP32 fallback", height=200)
        return fig
    top = ranking.head(RANK_TOP)
    names = [esc(n) for n in top["KeepName"]]
    for col, label in (("LocalRED", "local (isolated)"), ("AccRED", "accumulated (full run)")):
        v = pd.to_numeric(top[col], errors="coerce").to_numpy(dtype=np.float64)
        v = np.where(np.isfinite(v), np.maximum(v, LOG_FLOOR), 1e3)
        fig.add_trace(go.Bar(x=names, y=v, name=label))
    marks = [esc(n) for n in top["KeepName"] if n in set(chosen)]
    fig.add_trace(go.Scatter(x=marks, y=[1e3] * len(marks), mode="markers", name="kept in FP32",
                             marker=dict(symbol="star", size=12, color="#c62828")))
    fig.update_layout(title="Sensitivity ranking (RelativeEuclideanDistance; non-finite drawn at 1e3)",
                      yaxis_type="log", barmode="group", height=420, xaxis_tickangle=-60)
    return fig


def _coverage_rows(before: dict, after: dict) -> list[dict]:
    keys = [("ops_fp16_share", "ops in FP16 (share)"), ("flops_fp16_share", "FLOPs in FP16 (share)"),
            ("ops_fp16", "ops in FP16"), ("ops_total", "ops"), ("flops_fp16", "FLOPs in FP16"),
            ("flops_total", "FLOPs (Conv/MatMul/Gemm)"), ("kernels_fp16", "FP16 kernels"),
            ("kernels_fp32", "FP32 kernels"), ("casts", "Cast kernels"), ("activation_bytes", "activation bytes / run")]
    return [{"key": label, "before": fmt(before.get(k)), "after": fmt(after.get(k))} for k, label in keys]


#: Node names the result line names; a longer set is counted (listed whole in keep_dtype.txt and below).
SHOWN_KEPT = 12


def _chosen_text(res) -> str:
    """The first screen's answer: "'a', 'b' (keep_dtype.txt)", the first :data:`SHOWN_KEPT` names and a count of
    the rest, or "nothing (the given config holds)"."""
    names = list(res.chosen)
    if not names:
        return "none: the given config holds as compiled" if res.met else "none"
    shown = ", ".join(f"'{n}'" for n in names[:SHOWN_KEPT])
    more = f" and {len(names) - SHOWN_KEPT} more" if len(names) > SHOWN_KEPT else ""
    return f"{shown}{more} (keep_dtype.txt, tuned_config.json)"


def build_context(res, model_name: str, artifacts: dict | None = None) -> dict:
    """Plain data for tune.html.j2 (no logic left for the template)."""
    fig = ranking_figure(res.ranking, res.chosen)
    ev = pd.DataFrame(res.evidence)
    ranks = res.ranking.head(RANK_TOP) if len(res.ranking) else res.ranking
    css = ["origin" if n in set(res.chosen) else "" for n in ranks.get("KeepName", [])]
    return {
        "title": f"npuscope tune: {model_name}",
        "met": res.met, "verdict": "PASS" if res.met else "FAIL", "css": "pass" if res.met else "fail",
        "facts": facts({"target": ", ".join(format_target(res.target)),
                        "nodes kept in FP32": len(res.chosen), "inputs": len(res.inputs), "trials": res.trials,
                        "config": res.config.precision_mode}),
        "timings": facts({k: round(v, 1) for k, v in res.timings_ms.items()}),
        "chosen": list(res.chosen),
        "chosen_text": _chosen_text(res),
        "before": grid(res.before, METRIC_COLUMNS), "after": grid(res.after, METRIC_COLUMNS),
        "tasks": [{"when": w, "name": t.get("name", ""), "input": t.get("input", ""),
                   "passed": "PASS" if t["passed"] else "FAIL", "detail": t.get("detail", "")}
                  for w, ts in (("before", res.tasks_before), ("after", res.tasks_after)) for t in ts],
        "evidence": grid(ev), "coverage": _coverage_rows(res.coverage_before, res.coverage_after),
        "cost": facts(res.cost), "ranking": grid(ranks, RANK_COLUMNS, row_css=css),
        "n_ranked": len(res.ranking), "log": list(res.log),
        "findings": [{"severity": f.severity, "css": SEVERITY_CSS.get(f.severity, "info"), "kind": f.kind,
                      "subject": f.subject, "recommendation": f.recommendation,
                      "evidence": (facts(f.evidence) if isinstance(f.evidence, dict)
                                   else [{"key": "", "value": fmt(f.evidence)}])} for f in res.findings[:200]],
        "n_findings": len(res.findings),
        "artifacts": [{"name": k, "href": v} for k, v in (artifacts or {}).items()],
        "figure": {"id": "fig-ranking", "json": script_json(fig.to_json())},
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def render_tune_report(res, out_dir: Path, model_name: str, artifacts: dict | None = None,
                       filename: str = "tune.html") -> Path:
    """Write tune.html into ``out_dir`` (atomically) and return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    html = environment().get_template(TEMPLATE).render(**build_context(res, model_name, artifacts),
                                                       plotly_src=plotly_src(out_dir))
    path = out_dir / filename
    atomic_write_text(path, html)
    return path
