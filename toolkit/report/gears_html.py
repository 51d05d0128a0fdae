"""gears.html: the report of `npuscope gears` (one self-contained file, plotly.js inlined, opens offline).

``render_gears_report(result, out_dir)`` builds two plotly figures (length histogram with gear lines; optimal
waste share per number of plans with the power-of-two point) and renders ``templates/gears.html.j2`` with the
shared jinja2 environment (autoescape on). ``result`` is the dict :func:`toolkit.commands.gears.recommend`
returns.
"""

from __future__ import annotations

import time
from pathlib import Path

import plotly.graph_objects as go

from toolkit.core.csvjson import atomic_write_text
from toolkit.report.context import facts, grid
from toolkit.report.figures import esc
from toolkit.report.html import environment, plotly_src, script_json

TEMPLATE = "gears.html.j2"


def histogram_figure(values, counts, optimal: list[int], pow2: list[int], dim: str) -> go.Figure:
    """Count per distinct length (bars), optimal gears (solid red lines) and power-of-two gears (dashed grey)."""
    fig = go.Figure(go.Bar(x=[int(v) for v in values], y=[int(c) for c in counts], name="inputs",
                           marker_color="#4a78b5"))
    for g in pow2:
        fig.add_vline(x=g, line_dash="dash", line_color="#888888", line_width=1)
    for g in optimal:
        fig.add_vline(x=g, line_color="#c62828", line_width=2)
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color="#c62828", width=2),
                             name="optimal gears"))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color="#888888", dash="dash"),
                             name="power-of-two gears"))
    fig.update_layout(title=f"Observed {esc(dim)} lengths and gears", xaxis_title=esc(dim), yaxis_title="inputs",
                      height=420, bargap=0.05)
    return fig


def curve_figure(curve, pow2_plans: int, pow2_share: float) -> go.Figure:
    """Optimal padding waste share per number of plans, with the power-of-two gear set as one point."""
    fig = go.Figure(go.Scatter(x=list(curve["Plans"]), y=[100 * v for v in curve["WasteShare"]],
                               mode="lines+markers", name="optimal (DP)"))
    fig.add_trace(go.Scatter(x=[pow2_plans], y=[100 * pow2_share], mode="markers", name="power of two",
                             marker=dict(symbol="x", size=12, color="#888888")))
    fig.update_layout(title="Padding waste vs plans compiled", xaxis_title="plans (gears)",
                      yaxis_title="waste (% of padded work)", height=360)
    return fig


def build_context(res: dict) -> dict:
    """Plain data for gears.html.j2 (no logic left for the template)."""
    s = res["summary"]
    hist = histogram_figure(res["histogram"]["values"], res["histogram"]["counts"], s["optimal"]["Gears"],
                            s["power_of_two"]["Gears"], s["dim"])
    curve = curve_figure(res["curve"], s["power_of_two"]["Plans"], s["power_of_two"]["WasteShare"])
    return {
        "title": f"npuscope gears: {s['dim']}",
        "facts": facts({"lengths file": s["lengths"], "inputs": s["samples"], "distinct lengths": s["distinct"],
                        "min / max length": f"{s['min']} / {s['max']}", "gears asked (K)": s["k"],
                        "cost per gear": s["cost"], "config": s["config_snippet"]}),
        "strategies": grid(res["table"]),
        "curve": grid(res["curve"]),
        "figures": [{"id": "fig-hist", "json": script_json(hist.to_json())},
                    {"id": "fig-curve", "json": script_json(curve.to_json())}],
        "artifacts": [{"name": k, "href": v} for k, v in res.get("artifacts", {}).items()],
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def render_gears_report(res: dict, out_dir: Path, filename: str = "gears.html") -> Path:
    """Write gears.html into ``out_dir`` (atomically) and return its path."""
    html = environment().get_template(TEMPLATE).render(**build_context(res), plotly_src=plotly_src(out_dir))
    path = Path(out_dir) / filename
    atomic_write_text(path, html)
    return path
