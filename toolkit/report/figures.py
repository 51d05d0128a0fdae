"""The report's plotly figures, built from a Diagnosis' DataFrames (one function per figure).

Every function returns a ``plotly.graph_objects.Figure``; the HTML report embeds ``fig.to_json()`` and draws it
with the inlined plotly.js. Strings that come from the model (node, tensor, kernel and op-type names) are
HTML-escaped before they reach a figure: plotly.js interprets a small subset of HTML in hover and tick text
and decodes entities, so escaped names display as the literal text.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

#: Smallest value drawn on the log axes: a metric of exactly 0 (bit-exact tensors) is drawn here.
LOG_FLOOR = 1e-12
#: Default abnormal lines (the Ascend compare tool's): cosine < 0.99, RelativeEuclideanDistance > 0.05.
DEFAULT_LINES = {"CosineSimilarity": 0.99, "RelativeEuclideanDistance": 0.05}
HOVER_COLUMNS = ("NodeName", "OpType", "Kernel", "Precision", "TensorName")
FP16_COLOUR, FP32_COLOUR = "#1f77b4", "#ff7f0e"


def esc(value) -> str:
    """A model-derived value as text that plotly.js shows literally (HTML-escaped; None/NaN → '')."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    return html.escape(str(value), quote=True)


def _column(df: pd.DataFrame, name: str, default=np.nan) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index)


def _numeric(df: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(_column(df, name), errors="coerce").to_numpy(dtype=np.float64)


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, height=220, xaxis_visible=False, yaxis_visible=False,
                      annotations=[dict(text=message, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)])
    return fig


def _hover_data(df: pd.DataFrame, shown: np.ndarray) -> np.ndarray:
    """customdata rows: escaped NodeName, OpType, Kernel, Precision, TensorName, then the unclipped value."""
    cols = [[esc(v) for v in _column(df, c, "")] for c in HOVER_COLUMNS]
    cols.append([("not finite" if not np.isfinite(v) else f"{v:.6g}") for v in shown])
    return np.array(cols, dtype=object).T if len(df) else np.empty((0, len(cols)), dtype=object)


_HOVER = ("<b>%{customdata[0]}</b> (%{customdata[1]})<br>kernel %{customdata[2]} · %{customdata[3]}"
          "<br>tensor %{customdata[4]}<br>#%{x} · {metric} = %{customdata[5]}<extra></extra>")


def layer_error_figure(table: pd.DataFrame, origin: pd.Series | None = None,
                       lines: dict[str, float] | None = None, floor: float = LOG_FLOOR) -> go.Figure:
    """Per-layer error along execution order: (1 − CosineSimilarity) and RelativeEuclideanDistance.

    Args:
        table: Diagnosis.table (Index, NodeName, OpType, Kernel, Precision, TensorName, CosineSimilarity,
            RelativeEuclideanDistance, Abnormal). Rows without either metric (fused away, folded) are skipped.
        origin: boolean mask over ``table`` of the origin row(s), drawn as stars.
        lines: abnormal lines {"CosineSimilarity": 0.99, "RelativeEuclideanDistance": 0.05} drawn dashed.
        floor: values below it (exact 0, or 1 − cos < 0 from rounding) are drawn at ``floor`` (log axes).

    Returns a two-row figure with shared x (row index in execution order), both y axes logarithmic.
    """
    lines = {**DEFAULT_LINES, **(lines or {})}
    cos, red = _numeric(table, "CosineSimilarity"), _numeric(table, "RelativeEuclideanDistance")
    keep = np.isfinite(cos) | np.isfinite(red)
    if not keep.any():
        return _empty("Per-layer error", "no compared tensors")
    df = table[keep]
    x = pd.to_numeric(_column(df, "Index"), errors="coerce").to_numpy()
    abnormal = _column(df, "Abnormal", False).fillna(False).astype(bool).to_numpy()
    org = (origin[keep].fillna(False).astype(bool).to_numpy() if origin is not None
           else np.zeros(len(df), dtype=bool))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("1 − CosineSimilarity", "RelativeEuclideanDistance"))
    series = (("1 − cosine", 1.0 - cos[keep], 1.0 - lines["CosineSimilarity"]),
              ("RelativeEuclideanDistance", red[keep], lines["RelativeEuclideanDistance"]))
    for row, (name, values, line) in enumerate(series, start=1):
        drawn = np.where(np.isfinite(values), np.maximum(values, floor), np.nan)
        custom = _hover_data(df, values)
        hover = _HOVER.replace("{metric}", name)
        fig.add_trace(go.Scatter(x=x, y=drawn, mode="lines+markers", name=name, customdata=custom,
                                 hovertemplate=hover, marker=dict(size=4), line=dict(width=1)), row=row, col=1)
        for mask, label, marker in ((abnormal, "Abnormal", dict(symbol="x", size=10, color="#d62728")),
                                    (org, "origin", dict(symbol="star", size=16, color="#ffbf00",
                                                         line=dict(width=1, color="#000")))):
            if mask.any():
                fig.add_trace(go.Scatter(x=x[mask], y=drawn[mask], mode="markers", name=label, marker=marker,
                                         customdata=custom[mask], hovertemplate=hover, legendgroup=label,
                                         showlegend=row == 1), row=row, col=1)
        fig.add_trace(go.Scatter(x=[np.nanmin(x), np.nanmax(x)], y=[line, line], mode="lines", name="abnormal line",
                                 line=dict(dash="dash", color="#888", width=1), hoverinfo="skip",
                                 legendgroup="line", showlegend=row == 1), row=row, col=1)
        fig.update_yaxes(type="log", exponentformat="power", row=row, col=1)
    fig.update_xaxes(title_text="tensor index (execution order)", row=2, col=1)
    fig.update_layout(height=600, hovermode="closest", margin=dict(l=60, r=20, t=90, b=50),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.06, yanchor="bottom"))
    return fig


def precision_figure(precision: pd.DataFrame) -> go.Figure:
    """Stacked bars of kernel precisions per original op type (Diagnosis.precision: OpType, FP16, FP32)."""
    if precision is None or precision.empty:
        return _empty("Precision map", "no kernels")
    names = [esc(v) for v in precision["OpType"]]
    fig = go.Figure()
    for col, colour in (("FP16", FP16_COLOUR), ("FP32", FP32_COLOUR)):
        fig.add_trace(go.Bar(x=names, y=pd.to_numeric(_column(precision, col, 0), errors="coerce").fillna(0).tolist(),
                             name=col, marker_color=colour,
                             hovertemplate="%{x}: %{y} node(s) in " + col + "<extra></extra>"))
    fig.update_layout(barmode="stack", height=360, yaxis_title="nodes", margin=dict(l=60, r=20, t=30, b=80))
    return fig


def kernel_time_figure(kernel_times: pd.DataFrame, top: int = 20) -> go.Figure:
    """Horizontal bars of the ``top`` slowest kernels (Diagnosis.kernel_times: Kernel, OpType, Precision,
    Nodes, HostMs), slowest first, coloured by precision; host time in ms."""
    if kernel_times is None or kernel_times.empty:
        return _empty("Kernel time", "no kernel times")
    kt = kernel_times.assign(HostMs=pd.to_numeric(kernel_times["HostMs"], errors="coerce"))
    kt = kt.sort_values("HostMs", ascending=False, na_position="last").head(top)
    names = [esc(v) for v in kt["Kernel"]]
    prec = _column(kt, "Precision", "").astype(str).str.lower().to_numpy()
    custom = np.array([[esc(o), esc(n)] for o, n in zip(_column(kt, "OpType", ""), _column(kt, "Nodes", ""))],
                      dtype=object)
    fig = go.Figure()
    for label, colour in (("fp16", FP16_COLOUR), ("fp32", FP32_COLOUR), ("other", "#7f7f7f")):
        mask = (prec == label) if label != "other" else ~np.isin(prec, ["fp16", "fp32"])
        if not mask.any():
            continue
        fig.add_trace(go.Bar(y=[n for n, m in zip(names, mask) if m], x=kt["HostMs"].to_numpy()[mask], orientation="h",
                             name=label.upper(), marker_color=colour, customdata=custom[mask],
                             hovertemplate="%{y} (%{customdata[0]}, %{customdata[1]} node(s)): %{x:.4g} ms"
                                           "<extra></extra>"))
    fig.update_layout(height=max(260, 22 * len(kt) + 90), xaxis_title="host time (ms)", barmode="overlay",
                      yaxis=dict(categoryorder="array", categoryarray=names, autorange="reversed"),
                      margin=dict(l=200, r=20, t=30, b=50))
    return fig
