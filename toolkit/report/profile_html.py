"""profile.html: the profiling report shared by ``npuscope profile`` (simulated device time) and ``npuscope
parse-log`` (profiles and logs read from files). One self-contained file: plotly.js inlined, opens offline;
jinja2 with autoescape (toolkit.report.html.environment); model-derived names escaped in figures
(toolkit.report.figures.esc). All formatting happens here; ``templates/profile.html.j2`` only loops.

Sections: meta facts; the Time Kind of the numbers (simulated / measured / device, or mixed); findings; top ops;
per-op-type breakdown (op_statistic table + bar chart); timeline (one row per Source / Stream ID / Task Type,
at most :data:`MAX_TIMELINE_BARS` bars); and, when given, the end-to-end breakdown, latency per schedule,
placement advisor steps, the calibration to a real device's profile (toolkit.report.profile_calibration) and
extra tables.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from toolkit.core.csvjson import atomic_write_text
from toolkit.core.records import Finding
from toolkit.profile.optable import TIME_KINDS, op_statistic, op_summary_frame
from toolkit.report.context import SEVERITY_CSS, facts, fmt, grid
from toolkit.report.figures import esc
from toolkit.report.html import environment, plotly_src, script_json
from toolkit.report.profile_calibration import calibration_section

TEMPLATE = "profile.html.j2"
MAX_TIMELINE_BARS = 5000
TOP_OPS = 50
TOP_TYPES = 40
MAX_FINDINGS = 300
MAX_TABLE_ROWS = 200
BREAKDOWN_COLUMNS = ["Stage", "Ms", "TimeKind"]
LATENCY_COLUMNS = ["Schedule", "p50(ms)", "p90(ms)", "p99(ms)", "Throughput(req/s)"]
PLACEMENT_COLUMNS = ["Step", "Moved", "Kind", "LatencyBefore(ms)", "LatencyAfter(ms)", "Kept"]
TOP_OP_COLUMNS = ["Op Name", "OP Type", "Task Type", "Count", "Total Time(us)", "Avg Time(us)", "Max Time(us)",
                  "Ratio(%)", "Time Kind"]
TIME_KIND_TEXT = {
    "simulated": ("SIMULATED", "info", ("Device time estimated by npuscope's cost model and schedule; not a "
                                        "measurement of any real device.")),
    "measured": ("MEASURED ON THIS HOST", "info", ("Wall time measured on this machine's CPU (onnxruntime or the "
                                                   "simulated NPU's kernels); not device time.")),
    "device": ("DEVICE", "pass", "Times read from a real device's profiler output."),
    "mixed": ("MIXED", "warn", ("The rows come from different clocks (simulated, host-measured, device); compare "
                                "numbers of one Time Kind only.")),
    "none": ("NO TIMES", "info", "No per-op times were found in the inputs."),
}
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]


# ---------------------------------------------------------------------------------------------------- figures
def _empty(message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(height=200, xaxis_visible=False, yaxis_visible=False,
                      annotations=[dict(text=message, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)])
    return fig


def _type_bars(fig: go.Figure, s: pd.DataFrame, row: int, colours: dict, legend: set) -> None:
    for core, g in s.groupby("Core Type", sort=False):
        name = esc(core) or "?"
        colour = colours.setdefault(name, COLOURS[len(colours) % len(COLOURS)])
        custom = np.array([[int(c), f"{a:.4g}", f"{r:.3g}"] for c, a, r in
                           zip(g["Count"], g["Avg Time(us)"], g["Ratio(%)"])], dtype=object)
        fig.add_trace(go.Bar(x=[esc(v) or "?" for v in g["OP Type"]], y=g["Total Time(us)"].tolist(), name=name,
                             marker_color=colour, customdata=custom, legendgroup=name, showlegend=name not in legend,
                             hovertemplate="%{x}: %{y:.4g} us in %{customdata[0]} task(s), avg %{customdata[1]} us, "
                                           "%{customdata[2]}%<extra>%{fullData.name}</extra>"), row=row, col=1)
        legend.add(name)


#: Plot height of one Time Kind row of :func:`op_type_figure` (px).
ROW_PX = 320


def op_type_figure(stat: pd.DataFrame, top: int = TOP_TYPES) -> go.Figure:
    """Bars of Total Time(us) per OP Type (the ``top`` largest), stacked by Core Type; one subplot per Time
    Kind when ``stat`` has a Time Kind column (times of different clocks are never stacked together)."""
    if stat is None or stat.empty:
        return _empty("no op times")
    kinds = list(dict.fromkeys(stat["Time Kind"])) if "Time Kind" in stat.columns else [None]
    # room below each row for its 45-degree tick labels (about 160 px), so they never reach the next row's title
    fig = make_subplots(rows=len(kinds), cols=1, vertical_spacing=min(0.3, 170 / (ROW_PX * len(kinds))),
                        subplot_titles=[f"Time Kind: {k}" for k in kinds] if kinds[0] is not None else None)
    colours, legend = {}, set()
    for row, kind in enumerate(kinds, start=1):
        s = (stat if kind is None else stat[stat["Time Kind"] == kind]).head(top)
        _type_bars(fig, s, row, colours, legend)
        order = list(dict.fromkeys(esc(v) or "?" for v in s["OP Type"]))
        fig.update_xaxes(categoryorder="array", categoryarray=order, tickangle=-45, row=row, col=1)
        fig.update_yaxes(title_text="total time (us)", row=row, col=1)
    fig.update_layout(barmode="stack", height=ROW_PX * len(kinds) + 170 * (len(kinds) - 1) + 150,
                      margin=dict(l=60, r=20, t=40, b=120))
    return fig


def timeline_rows(summary: pd.DataFrame, max_bars: int = MAX_TIMELINE_BARS) -> tuple[pd.DataFrame, int]:
    """The tasks drawn on the timeline: rows with a start time, earliest first, at most ``max_bars``; returns
    (rows with an added ``Row`` label column — [Source ·] [Time Kind ·] stream · Task Type, the optional parts
    when the summary has several —, number of timed tasks)."""
    timed = summary.dropna(subset=["Task Start Time(us)", "Task Duration(us)"])
    total = len(timed)
    rows = timed.sort_values("Task Start Time(us)", kind="stable").head(max_bars)
    if rows.empty:
        return rows.assign(Row=pd.Series(dtype=object)), total
    stream = rows["Stream ID"].map(lambda v: "stream ?" if pd.isna(v) else f"stream {v:g}").astype(object)
    label = stream + " · " + _text(rows["Task Type"])
    if summary["Time Kind"].nunique() > 1:
        label = _text(rows["Time Kind"]) + " · " + label
    if summary["Source"].nunique() > 1:
        label = _text(rows["Source"]) + " · " + label
    return rows.assign(Row=[esc(v) for v in label]), total


def _text(col: pd.Series) -> pd.Series:
    """``col`` as plain strings (a categorical or missing cell included), '' and missing shown as '?'."""
    return col.astype(object).map(lambda v: "?" if v is None or (isinstance(v, float) and pd.isna(v)) or v == ""
                                  else str(v))


def timeline_figure(rows: pd.DataFrame) -> go.Figure:
    """Horizontal bars from Task Start Time(us) for Task Duration(us), one y row per Row label, one colour per
    Task Type; hover: op name, op type, start and duration (µs)."""
    if rows.empty:
        return _empty("no start times: nothing to draw")
    fig = go.Figure()
    for i, (ttype, g) in enumerate(rows.groupby("Task Type", sort=False)):
        custom = np.array([[esc(n), esc(t)] for n, t in zip(g["Op Name"], g["OP Type"])], dtype=object)
        fig.add_trace(go.Bar(orientation="h", base=g["Task Start Time(us)"].tolist(),
                             x=g["Task Duration(us)"].tolist(), y=g["Row"].tolist(), name=esc(ttype) or "?",
                             marker_color=COLOURS[i % len(COLOURS)], customdata=custom,
                             hovertemplate="<b>%{customdata[0]}</b> (%{customdata[1]})<br>start %{base:.6g} us, "
                                           "%{x:.4g} us<extra>%{fullData.name}</extra>"))
    n_rows = rows["Row"].nunique()
    fig.update_layout(barmode="overlay", height=max(240, 30 * n_rows + 120), xaxis_title="time (us)",
                      yaxis=dict(autorange="reversed"), margin=dict(l=220, r=20, t=30, b=50), hovermode="closest")
    return fig


def breakdown_figure(df: pd.DataFrame) -> go.Figure:
    """One stacked horizontal bar of the end-to-end stages (Ms), one segment per Stage."""
    fig = go.Figure()
    for i, r in enumerate(df.itertuples(index=False)):
        fig.add_trace(go.Bar(orientation="h", y=["end to end"], x=[float(r.Ms)], name=esc(r.Stage),
                             marker_color=COLOURS[i % len(COLOURS)],
                             hovertemplate=f"{esc(r.Stage)}: %{{x:.4g}} ms ({esc(r.TimeKind)})<extra></extra>"))
    fig.update_layout(barmode="stack", height=220, xaxis_title="ms", margin=dict(l=100, r=20, t=30, b=50))
    return fig


def latency_figure(df: pd.DataFrame) -> go.Figure:
    """Grouped bars of p50 / p90 / p99 latency (ms) per schedule."""
    fig = go.Figure()
    names = [esc(v) for v in df["Schedule"]]
    for col in ("p50(ms)", "p90(ms)", "p99(ms)"):
        fig.add_trace(go.Bar(x=names, y=pd.to_numeric(df[col], errors="coerce").tolist(), name=col))
    fig.update_layout(barmode="group", height=320, yaxis_title="latency (ms)", margin=dict(l=60, r=20, t=30, b=60))
    return fig


def placement_figure(df: pd.DataFrame) -> go.Figure:
    """LatencyAfter(ms) per advisor step; kept steps as filled markers, rejected ones hollow."""
    kept = df["Kept"].astype(bool).to_numpy()
    after = pd.to_numeric(df["LatencyAfter(ms)"], errors="coerce").to_numpy()
    custom = np.array([[esc(m), esc(k)] for m, k in zip(df["Moved"], df["Kind"])], dtype=object)
    fig = go.Figure(go.Scatter(x=df["Step"].tolist(), y=after.tolist(), mode="lines+markers", customdata=custom,
                               marker=dict(size=9, symbol=["circle" if k else "circle-open" for k in kept]),
                               hovertemplate="step %{x}: moved %{customdata[0]} (%{customdata[1]}) → %{y:.4g} ms"
                                             "<extra></extra>", name="latency after"))
    fig.update_layout(height=300, xaxis_title="step", yaxis_title="latency (ms)", margin=dict(l=60, r=20, t=30, b=50))
    return fig


# ---------------------------------------------------------------------------------------------------- sections
def _figure(key: str, fig: go.Figure) -> dict:
    return {"id": f"fig-{key}", "json": script_json(fig.to_json())}


def time_kind_section(summary: pd.DataFrame) -> dict:
    """Banner data: the single Time Kind of all rows, "mixed", or "none"; counts per kind."""
    counts = summary["Time Kind"].replace("", "unknown").value_counts()
    kinds = [k for k in counts.index if k in TIME_KINDS or k == "unknown"]
    key = "none" if summary.empty else (kinds[0] if len(kinds) == 1 and kinds[0] in TIME_KINDS else "mixed")
    label, css, text = TIME_KIND_TEXT[key]
    return {"key": key, "label": label, "css": css, "text": text,
            "counts": [{"key": str(k), "value": f"{int(v):,} task(s)"} for k, v in counts.items()]}


def findings_section(findings: list[Finding]) -> dict:
    """Rows in the shape of templates/_findings.html.j2 (as the main report), errors first, capped."""
    order = {"error": 0, "warning": 1, "info": 2}
    ranked = sorted(findings, key=lambda f: order.get(f.severity, 3))
    rows = [{"severity": f.severity, "css": SEVERITY_CSS.get(f.severity, "info"), "kind": fmt(f.kind),
             "subject": fmt(f.subject),
             "evidence": facts(f.evidence) if isinstance(f.evidence, dict) else [{"key": "", "value": fmt(f.evidence)}],
             "recommendation": fmt(f.recommendation)} for f in ranked[:MAX_FINDINGS]]
    return {"count": len(findings), "rows": rows}


def top_ops(summary: pd.DataFrame, top: int = TOP_OPS) -> pd.DataFrame:
    """Per (Source, Op Name, OP Type, Task Type, Time Kind): Count, Total/Avg/Max Time(us) and Ratio(%) of the
    task time of the same Time Kind; the ``top`` largest totals of each Time Kind (kinds in TIME_KINDS order)."""
    df = summary.dropna(subset=["Task Duration(us)"])
    if df.empty:
        return pd.DataFrame(columns=TOP_OP_COLUMNS)
    keys = ["Source", "Op Name", "OP Type", "Task Type", "Time Kind"]
    g = df.groupby(keys, sort=False)["Task Duration(us)"].agg(["count", "sum", "mean", "max"]).reset_index()
    g.columns = keys + ["Count", "Total Time(us)", "Avg Time(us)", "Max Time(us)"]
    kind_total = g.groupby("Time Kind")["Total Time(us)"].transform("sum")
    g["Ratio(%)"] = (g["Total Time(us)"] / kind_total.where(kind_total > 0) * 100.0).fillna(0.0)
    rank = {k: i for i, k in enumerate(TIME_KINDS)}
    g["_kind"] = g["Time Kind"].map(lambda k: rank.get(k, len(rank)))
    g = g.sort_values(["_kind", "Total Time(us)"], ascending=[True, False], kind="stable")
    g = g.groupby("_kind", sort=False).head(top)
    cols = (["Source"] if summary["Source"].nunique() > 1 else []) + TOP_OP_COLUMNS
    return g[cols].reset_index(drop=True)


def _optional(df: pd.DataFrame | None, columns: list[str], key: str, figure) -> dict | None:
    if df is None or df.empty:
        return None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{key} table needs the columns {columns}; missing {missing}")
    return {"grid": grid(df, columns), "figure": _figure(key, figure(df[columns]))}


def _tables(tables: dict[str, pd.DataFrame] | None) -> list[dict]:
    out = []
    for name, df in (tables or {}).items():
        if df is None or df.empty:
            continue
        note = f"first {MAX_TABLE_ROWS} of {len(df):,} rows" if len(df) > MAX_TABLE_ROWS else f"{len(df):,} rows"
        out.append({"name": str(name), "note": note, "grid": grid(df.head(MAX_TABLE_ROWS))})
    return out


def build_context(*, title: str, op_summary: pd.DataFrame, findings: list[Finding], meta: dict,
                  breakdown=None, latency=None, placement=None, tables=None, calibration=None) -> dict:
    """Plain data for profile.html.j2 (arguments as :func:`render_profile`)."""
    summary = op_summary_frame(op_summary)
    stat = op_statistic(summary)  # per Time Kind, Ratio(%) within the kind (toolkit.profile.optable)
    stat = stat[["Time Kind"] + [c for c in stat.columns if c != "Time Kind"]]
    rows, timed = timeline_rows(summary, MAX_TIMELINE_BARS)
    shown = len(rows)
    span = (f"{rows['Task Start Time(us)'].min():.6g} .. {(rows['Task Start Time(us)'] + rows['Task Duration(us)']).max():.6g} us"
            if shown else "")
    return {
        "title": title, "generated": time.strftime("%Y-%m-%d %H:%M:%S"), "meta": facts(meta),
        "time_kind": time_kind_section(summary), "findings": findings_section(findings),
        "n_tasks": f"{len(summary):,}", "total_us": fmt(float(summary["Task Duration(us)"].sum())),
        "top_ops": grid(top_ops(summary)), "op_types": grid(stat), "n_types": len(stat),
        "timeline": {"timed": timed, "shown": shown, "capped": shown < timed, "span": span,
                     "untimed": len(summary) - timed},
        "figures": {"types": _figure("types", op_type_figure(stat)), "timeline": _figure("timeline", timeline_figure(rows))},
        "breakdown": _optional(breakdown, BREAKDOWN_COLUMNS, "breakdown", breakdown_figure),
        "latency": _optional(latency, LATENCY_COLUMNS, "latency", latency_figure),
        "placement": _optional(placement, PLACEMENT_COLUMNS, "placement", placement_figure),
        "tables": _tables(tables),
        "calibration": calibration_section(calibration),
    }


def render_profile(folder: Path, *, title: str, op_summary: pd.DataFrame, findings: list[Finding], meta: dict,
                   breakdown: pd.DataFrame | None = None, latency: pd.DataFrame | None = None,
                   placement: pd.DataFrame | None = None, filename: str = "profile.html",
                   tables: dict[str, pd.DataFrame] | None = None, calibration: dict | None = None) -> Path:
    """Write ``folder/filename`` (atomically; folder created if missing) and return its path.

    Args:
        title: the page title (e.g. "npuscope profile: resnet_small").
        op_summary: per-task rows with the columns of toolkit.profile.optable.OP_SUMMARY_COLUMNS (missing ones
            are added empty by op_summary_frame); times in µs. Drives the Time Kind banner (Time Kind column:
            simulated / measured / device), top ops (by summed Task Duration(us) per Op Name), the per-op-type
            breakdown (toolkit.profile.optable.op_statistic) and the timeline (rows with a Task Start Time(us):
            one row per Source / Stream ID / Task Type; the earliest MAX_TIMELINE_BARS tasks are drawn and
            the page says when more exist).
        findings: toolkit.compiler.pipeline.Finding list (errors first, at most MAX_FINDINGS shown).
        meta: {label: value} shown at the top (model, device profile, source files, malformed counts, ...).
        breakdown: optional; columns Stage (pre, host-to-device, device, device-to-host, CPU ops, post, ...),
            Ms (milliseconds), TimeKind; drawn as one stacked bar plus a table.
        latency: optional; columns Schedule, p50(ms), p90(ms), p99(ms), Throughput(req/s).
        placement: optional; the placement advisor's steps: Step, Moved, Kind, LatencyBefore(ms),
            LatencyAfter(ms), Kept (bool).
        filename: the file name inside ``folder``.
        tables: optional extra tables {title: DataFrame}, shown at the end (first MAX_TABLE_ROWS rows each).
        calibration: optional; the calibration section's tables (toolkit.report.profile_calibration:
            units, errors, params, whatif, unmatched DataFrames, device and source names).

    Sections whose optional table is None or empty are omitted.

    Raises:
        ValueError: a given breakdown / latency / placement table lacks one of its columns, or the op summary
            lacks Op Name / Task Duration(us).
    """
    ctx = build_context(title=title, op_summary=op_summary, findings=findings, meta=meta, breakdown=breakdown,
                        latency=latency, placement=placement, tables=tables, calibration=calibration)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    atomic_write_text(path, environment().get_template(TEMPLATE).render(**ctx, plotly_src=plotly_src(folder)))
    return path
