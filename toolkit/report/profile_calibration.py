"""The calibration section of profile.html (``npuscope profile --device-profile``): simulated vs device time per
op class before and after calibration (plotly scatter, log axes, the y = x line), the worst-predicted kernels,
the held-out errors, the fitted figures, the what-ifs and the unmatched device rows. Builds plain data for
``templates/_profile_calibration.html.j2`` (which only loops); names are escaped (toolkit.report.figures.esc).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from toolkit.report.context import grid
from toolkit.report.figures import esc
from toolkit.report.html import script_json

WORST = 15
MAX_UNMATCHED = 100
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
WORST_COLUMNS = ["Unit", "Kernels", "OpClass", "Side", "Set", "DeviceUs", "BeforeUs", "AfterUs", "APE before(%)",
                 "APE after(%)"]


def scatter_figure(units: pd.DataFrame) -> go.Figure:
    """Two log-log panels (before / after calibration): predicted µs against device µs per unit, one colour per
    op class, held-out units as hollow markers; the dashed line is y = x."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["before calibration", "after calibration"],
                        horizontal_spacing=0.08)
    lo = float(np.nanmin(units[["DeviceUs", "BeforeUs", "AfterUs"]].to_numpy())) if len(units) else 1.0
    hi = float(np.nanmax(units[["DeviceUs", "BeforeUs", "AfterUs"]].to_numpy())) if len(units) else 10.0
    for col, pred in ((1, "BeforeUs"), (2, "AfterUs")):
        for i, (cls, g) in enumerate(units.groupby("OpClass", sort=True)):
            held = (g["Set"] == "held-out").to_numpy()
            custom = np.array([[esc(k), s] for k, s in zip(g["Kernels"], g["Set"])], dtype=object)
            fig.add_trace(go.Scatter(
                x=g["DeviceUs"].tolist(), y=g[pred].tolist(), mode="markers", name=esc(cls), legendgroup=esc(cls),
                showlegend=col == 1, customdata=custom,
                marker=dict(color=COLOURS[i % len(COLOURS)], size=8,
                            symbol=["circle-open" if h else "circle" for h in held]),
                hovertemplate="<b>%{customdata[0]}</b> (%{customdata[1]})<br>device %{x:.4g} us, "
                              "predicted %{y:.4g} us<extra>%{fullData.name}</extra>"), row=1, col=col)
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(dash="dash", color="#999"),
                                 showlegend=False, hoverinfo="skip"), row=1, col=col)
        span = [float(np.log10(max(lo, 1e-6) / 1.25)), float(np.log10(max(hi, 1e-6) * 1.25))]  # one scale for both
        fig.update_xaxes(type="log", range=span, title_text="device time (us)", row=1, col=col)
        fig.update_yaxes(type="log", range=span, title_text="predicted time (us)", row=1, col=col)
    fig.update_layout(height=420, margin=dict(l=60, r=20, t=40, b=50))
    return fig


def worst_units(units: pd.DataFrame, top: int = WORST) -> pd.DataFrame:
    """The ``top`` units with the largest error after calibration (APE after(%), descending)."""
    return units.sort_values("APE after(%)", ascending=False, kind="stable").head(top)[WORST_COLUMNS]


def calibration_section(tables: dict | None) -> dict | None:
    """Template data from the tables of toolkit.commands.profile (units, errors, params, whatif, unmatched,
    device, source); None when there is no calibration."""
    if not tables:
        return None
    units = tables["units"]
    unmatched = tables["unmatched"]
    return {"device": tables["device"], "source": tables["source"], "warning": tables.get("warning", ""),
            "figure": {"id": "fig-calibration", "json": script_json(scatter_figure(units).to_json())},
            "errors": grid(tables["errors"]), "params": grid(tables["params"]), "worst": grid(worst_units(units)),
            "whatif": grid(tables["whatif"]) if len(tables["whatif"]) else None,
            "unmatched": grid(unmatched.head(MAX_UNMATCHED)) if len(unmatched) else None,
            "unmatched_note": f"{len(unmatched):,} row(s)" + (f", first {MAX_UNMATCHED} shown"
                                                             if len(unmatched) > MAX_UNMATCHED else "")}
