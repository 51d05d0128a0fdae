"""The dataset section of the diagnose report: the worst input's full diagnosis (toolkit.report.html) plus the
per-layer aggregate over all inputs, a per-layer CosineSimilarity figure and the worst inputs.

Rendered with the same environment and report template as a single diagnosis; the template includes
``_dataset.html.j2`` when the context has ``dataset``. Model-derived names stay plain strings (autoescaped) and
are escaped with toolkit.report.figures.esc for plotly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from toolkit.core.csvjson import atomic_write_text
from toolkit.dataset.aggregate import percentile_label
from toolkit.report import context, figures
from toolkit.report.html import (
    TEMPLATE,
    build_figures,
    environment,
    plotly_src,
    script_json,
)

#: Rows shown in the HTML tables (the CSV files hold all).
LAYERS_SHOWN = 100
INPUTS_SHOWN = 50


def cosine_figure(layers: pd.DataFrame, percentiles) -> go.Figure:
    """1 − CosineSimilarity per tensor (execution order, log axis): worst, mean and each percentile over the
    inputs (dataset.csv columns CosineSimilarity_worst / _mean / _p<q>)."""
    if layers is None or layers.empty or "CosineSimilarity_worst" not in layers.columns:
        return figures._empty("CosineSimilarity over inputs", "no compared tensors")
    x = pd.to_numeric(layers.get("Index", pd.Series(range(len(layers)))), errors="coerce").to_numpy()
    names = np.array([figures.esc(t) for t in layers["TensorName"]], dtype=object)
    worst_in = np.array([figures.esc(t) for t in layers["CosineSimilarity_worst_input"]], dtype=object)
    fig = go.Figure()
    series = [("worst", "CosineSimilarity_worst"), ("mean", "CosineSimilarity_mean")]
    series += [(percentile_label(q), f"CosineSimilarity_{percentile_label(q)}") for q in percentiles]
    for label, col in series:
        if col not in layers.columns:
            continue
        v = 1.0 - pd.to_numeric(layers[col], errors="coerce").to_numpy(dtype=np.float64)
        drawn = np.where(np.isfinite(v), np.maximum(v, figures.LOG_FLOOR), np.nan)
        fig.add_trace(go.Scatter(x=x, y=drawn, mode="lines", name=label, customdata=np.stack([names, worst_in], 1),
                                 hovertemplate="%{customdata[0]}: 1 − cosine " + label
                                               + " %{y:.3g} (worst input %{customdata[1]})<extra></extra>"))
    fig.update_yaxes(type="log", exponentformat="power", title_text="1 − CosineSimilarity")
    fig.update_xaxes(title_text="tensor index (execution order)")
    fig.update_layout(height=420, hovermode="closest", margin=dict(l=60, r=20, t=30, b=50))
    return fig


def dataset_section(layers: pd.DataFrame, inputs: pd.DataFrame, facts: dict, fig_json) -> dict:
    """Template data of ``_dataset.html.j2`` (context.facts / context.grid shapes)."""
    shown = [c for c in ("TensorName", "OpType", "Kernel", "Precision", "Inputs", "AbnormalInputs", "OverFlowInputs")
             if c in layers.columns]
    shown += [c for c in layers.columns if c.startswith("CosineSimilarity_")]
    shown += [c for c in ("RelativeEuclideanDistance_worst", "RelativeEuclideanDistance_mean",
                          "MaxAbsoluteError_worst") if c in layers.columns]
    order = layers.sort_values("CosineSimilarity_worst", na_position="last", kind="stable") if len(layers) else layers
    bad = inputs.assign(_rank=inputs["Verdict"].map({"ERROR": 0, "FAIL": 1, "WARN": 2, "PASS": 3}))
    bad = bad.sort_values(["_rank", "Input"], kind="stable").drop(columns="_rank")
    in_cols = [c for c in bad.columns if c not in ("Sha256", "Reasons")] + ["Reasons"]
    run = {k: facts.get(k) for k in ("inputs_dir", "inputs", "aggregated", "evaluated_this_run", "resumed",
                                     "worst_input", "worst_input_verdict", "percentiles", "jobs", "ray")}
    return {"title": f"{facts['verdict']} over {facts['inputs']} input(s)",
            "lead": ("The sections below are the full diagnosis of the worst input; this section aggregates every "
                     "input. Statistics skip inputs where a tensor was not compared."),
            "facts": context.facts({k: v for k, v in run.items() if v is not None}),
            "verdicts": context.facts(facts.get("verdicts") or {}),
            "figure": fig_json, "layers": context.grid(order.head(LAYERS_SHOWN), shown),
            "layers_shown": min(LAYERS_SHOWN, len(order)), "layers_total": len(order),
            "inputs": context.grid(bad.head(INPUTS_SHOWN), in_cols),
            "inputs_shown": min(INPUTS_SHOWN, len(bad)), "inputs_total": len(bad)}


def render_dataset_report(diag, out_dir: Path, layers: pd.DataFrame, inputs: pd.DataFrame, facts: dict,
                          filename: str = "index.html") -> Path:
    """index.html: the worst input's diagnosis report with the dataset section. Returns its path."""
    src = plotly_src(out_dir)  # first: the artifacts table shows the bundle's size
    figs = {key: {"id": f"fig-{key}", "json": script_json(fig.to_json())} for key, fig in build_figures(diag).items()}
    dfig = {"id": "fig-dataset", "json": script_json(cosine_figure(layers, facts.get("percentiles") or []).to_json())}
    ctx = context.build_context(diag, Path(out_dir), figs)
    ctx["dataset"] = dataset_section(layers, inputs, facts, dfig)
    path = Path(out_dir) / filename
    atomic_write_text(path, environment().get_template(TEMPLATE).render(**ctx, plotly_src=src))
    return path
