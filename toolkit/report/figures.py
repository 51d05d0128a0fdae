"""The report's plotly figures, built from a Diagnosis' DataFrames (one function per figure).

Each figure is first built as plain plotly figure data, a :class:`FigureSpec` (``{"data": [trace dicts],
"layout": dict}``, the schema of https://plotly.com/javascript/reference/, numpy arrays allowed). The HTML report
embeds ``spec.to_json()`` and draws it with the inlined plotly.js; this skips plotly.py's figure validation and
its import, which cost more than the rest of the report. The public ``*_figure`` functions return the same
figure as a validated ``plotly.graph_objects.Figure`` (``spec.to_figure()``) for callers that want one.

Strings that come from the model (node, tensor, kernel and op-type names) are HTML-escaped before they reach a
figure: plotly.js interprets a small subset of HTML in hover and tick text and decodes entities, so escaped
names display as the literal text.
"""

from __future__ import annotations

import base64
import functools
import html
import importlib.resources
import json
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: Smallest value drawn on the log axes: a metric of exactly 0 (bit-exact tensors) is drawn here.
LOG_FLOOR = 1e-12
#: Default abnormal lines (the Ascend compare tool's): cosine < 0.99, RelativeEuclideanDistance > 0.05.
DEFAULT_LINES = {"CosineSimilarity": 0.99, "RelativeEuclideanDistance": 0.05}
HOVER_COLUMNS = ("NodeName", "OpType", "Kernel", "Precision", "TensorName")
FP16_COLOUR, FP32_COLOUR = "#1f77b4", "#ff7f0e"
#: plotly's default template (plotly.io.templates.default), embedded in every figure like Figure.to_json() does.
TEMPLATE = "plotly"
#: numpy dtype → plotly.js typed-array name (plotly.js "dtype"/"bdata" arrays, as plotly.py >= 6 writes them).
_TYPED = {"int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2", "int32": "i4", "uint32": "u4",
          "float32": "f4", "float64": "f8"}


def esc(value) -> str:
    """A model-derived value as text that plotly.js shows literally (HTML-escaped; None/NaN → '')."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    return html.escape(str(value), quote=True)


# ------------------------------------------------------------------------------------------- figure data
@functools.lru_cache(maxsize=1)
def template_json() -> dict:
    """plotly's default template ({"data": ..., "layout": ...}), read from plotly's package data
    (plotly/package_data/templates/plotly.json, the file plotly.io.templates loads); falls back to
    ``plotly.io.templates`` when the file is not there."""
    try:
        text = (importlib.resources.files("plotly") / "package_data" / "templates" / f"{TEMPLATE}.json").read_text(
            encoding="utf-8")
        return json.loads(text)
    except (FileNotFoundError, ModuleNotFoundError, OSError):
        import plotly.io as pio

        return pio.templates[TEMPLATE].to_plotly_json()


def _typed_array(a: np.ndarray):
    """A numpy array in the JSON form plotly.py writes it: a plotly.js typed array ``{"dtype", "bdata"}``
    (base64 of the little-endian bytes) for numbers, int64 narrowed to the smallest of int8/16/32 that holds it
    (plotly.js has no 64-bit ints; larger ints stay a list), a plain list for anything else or empty arrays."""
    if a.size == 0 or a.dtype.kind not in "iuf":
        return a.tolist()
    if a.dtype.kind in "iu" and a.dtype.itemsize == 8:
        lo, hi = int(a.min()), int(a.max())
        small = next((t for t in ((np.uint8, np.uint16, np.uint32) if a.dtype.kind == "u"
                                  else (np.int8, np.int16, np.int32))
                      if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max), None)
        if small is None:
            return a.tolist()
        a = a.astype(small)
    name = _TYPED.get(a.dtype.name)
    if name is None:
        return a.tolist()
    data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    spec = {"dtype": name, "bdata": base64.b64encode(data.tobytes()).decode("ascii")}
    if a.ndim > 1:
        spec["shape"] = ", ".join(str(n) for n in a.shape)
    return spec


def _json_default(obj):
    """json.dumps hook for numpy values (arrays per :func:`_typed_array`, scalars as Python numbers)."""
    if isinstance(obj, np.ndarray):
        return _typed_array(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable in a figure")


class FigureSpec(dict):
    """A plotly figure as plain data: ``{"data": [trace dicts], "layout": dict}`` (numpy arrays allowed).

    ``to_json()`` gives the JSON plotly.js draws, equal (as parsed JSON) to what
    ``plotly.graph_objects.Figure(spec).to_json()`` gives: the default template is added, numpy arrays become
    typed arrays. ``to_figure()`` builds that validated Figure (imports plotly.graph_objects)."""

    def to_json(self) -> str:
        layout = self["layout"] if "template" in self["layout"] else {**self["layout"], "template": template_json()}
        return json.dumps({"data": self["data"], "layout": layout}, default=_json_default, separators=(",", ":"),
                          allow_nan=False)

    def to_figure(self) -> go.Figure:
        import plotly.graph_objects as go

        return go.Figure(data=self["data"], layout=self["layout"])


def _column(df: pd.DataFrame, name: str, default=np.nan) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index)


def _numeric(df: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(_column(df, name), errors="coerce").to_numpy(dtype=np.float64)


def _finite(v):
    """A numeric scalar as a Python number, None when not finite (JSON has no NaN; plotly writes null)."""
    v = v.item() if isinstance(v, np.generic) else v
    return v if np.isfinite(v) else None


def empty_spec(title: str, message: str) -> FigureSpec:
    """A figure with no data: ``title`` and a centred ``message``, axes hidden, 220 px high."""
    return FigureSpec(data=[], layout={
        "title": {"text": title}, "height": 220, "xaxis": {"visible": False}, "yaxis": {"visible": False},
        "annotations": [{"text": message, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]})


def _empty(title: str, message: str) -> go.Figure:
    return empty_spec(title, message).to_figure()


def _hover_data(df: pd.DataFrame, shown: np.ndarray) -> np.ndarray:
    """customdata rows: escaped NodeName, OpType, Kernel, Precision, TensorName, then the unclipped value."""
    cols = [[esc(v) for v in _column(df, c, "")] for c in HOVER_COLUMNS]
    cols.append([("not finite" if not np.isfinite(v) else f"{v:.6g}") for v in shown])
    return np.array(cols, dtype=object).T if len(df) else np.empty((0, len(cols)), dtype=object)


_HOVER = ("<b>%{customdata[0]}</b> (%{customdata[1]})<br>kernel %{customdata[2]} · %{customdata[3]}"
          "<br>tensor %{customdata[4]}<br>#%{x} · {metric} = %{customdata[5]}<extra></extra>")


def _two_row_layout(titles: tuple[str, str], spacing: float = 0.08) -> dict:
    """Axes and subplot titles of two stacked rows sharing x, as plotly.subplots.make_subplots(rows=2, cols=1,
    shared_xaxes=True, vertical_spacing=spacing, subplot_titles=titles) lays them out: each row
    (1 − spacing) / 2 high, row 1 on top, the x axes matched and tick labels on the bottom one only."""
    h = (1.0 - spacing) / 2
    top, bottom = [h + spacing, 1.0], [0.0, h]
    title = {"font": {"size": 16}, "showarrow": False, "x": 0.5, "xanchor": "center", "xref": "paper",
             "yanchor": "bottom", "yref": "paper"}
    return {"xaxis": {"anchor": "y", "domain": [0.0, 1.0], "matches": "x2", "showticklabels": False},
            "yaxis": {"anchor": "x", "domain": top}, "xaxis2": {"anchor": "y2", "domain": [0.0, 1.0]},
            "yaxis2": {"anchor": "x2", "domain": bottom},
            "annotations": [{**title, "text": titles[0], "y": top[1]}, {**title, "text": titles[1], "y": bottom[1]}]}


def _with_breaks(x: np.ndarray, y: np.ndarray, custom: np.ndarray):
    """``x``, ``y``, ``custom`` with a gap point (y = NaN) wherever ``x`` skips an index: plotly.js breaks the
    line there (connectgaps off), so tensors left out (folded, fused away) show as gaps, not as a straight line."""
    if len(x) < 2:
        return x, y, custom
    cut = np.flatnonzero(np.diff(x) > 1) + 1
    if not len(cut):
        return x, y, custom
    bx = np.insert(x.astype(np.float64), cut, x[cut - 1] + 0.5)
    by = np.insert(y.astype(np.float64), cut, np.nan)
    blank = np.array([[""] * custom.shape[1]], dtype=object) if custom.ndim == 2 and custom.shape[1] else None
    bc = np.insert(custom, cut, blank, axis=0) if blank is not None else custom
    return bx, by, bc


def _metric_traces(row: int, name: str, x, drawn, custom, masks, line: float, marks=None, extra=()) -> list[dict]:
    """The traces of one metric row: the line of the compared tensors (broken where tensors are skipped),
    ``extra`` marker traces (integer tensors), Abnormal crosses and origin stars at ``marks`` (default
    ``drawn``; when any), and the dashed abnormal line."""
    axes = {"xaxis": "x", "yaxis": "y"} if row == 1 else {"xaxis": f"x{row}", "yaxis": f"y{row}"}
    hover = _HOVER.replace("{metric}", name)
    has = np.isfinite(drawn)
    lx, ly, lc = _with_breaks(x[has], drawn[has], custom[has])
    traces = [{"type": "scatter", "x": lx, "y": ly, "mode": "lines+markers", "name": name, "customdata": lc,
               "hovertemplate": hover, "marker": {"size": 4}, "line": {"width": 1}, "connectgaps": False, **axes}]
    for label, values, marker, extra_hover in extra:
        ok = np.isfinite(values)
        if ok.any():
            traces.append({"type": "scatter", "x": x[ok], "y": values[ok], "mode": "markers", "name": label,
                           "marker": marker, "customdata": custom[ok],
                           "hovertemplate": _HOVER.replace("{metric}", extra_hover), **axes})
    marks = drawn if marks is None else marks
    for mask, label, marker in masks:
        mask = mask & np.isfinite(marks)
        if mask.any():
            traces.append({"type": "scatter", "x": x[mask], "y": marks[mask], "mode": "markers", "name": label,
                           "marker": marker, "customdata": custom[mask], "hovertemplate": hover,
                           "legendgroup": label, "showlegend": row == 1, **axes})
    ends = [_finite(np.nanmin(x)), _finite(np.nanmax(x))]
    traces.append({"type": "scatter", "x": ends, "y": [_finite(line), _finite(line)], "mode": "lines", "name": "abnormal line", "line": {"dash": "dash", "color": "#888", "width": 1},
                   "hoverinfo": "skip", "legendgroup": "line", "showlegend": row == 1, **axes})
    return traces


def layer_error_spec(table: pd.DataFrame, origin: pd.Series | None = None,
                     lines: dict[str, float] | None = None, floor: float = LOG_FLOOR) -> FigureSpec:
    """Per-layer error along execution order: (1 − CosineSimilarity) with (1 − ExactMatchRate) of the integer
    tensors, and RelativeEuclideanDistance.

    Args:
        table: Diagnosis.table (Index, NodeName, OpType, Kernel, Precision, TensorName, CosineSimilarity,
            RelativeEuclideanDistance, ExactMatchRate, Abnormal). Rows without any of the three metrics (fused
            away, folded) are skipped and leave a gap in the lines.
        origin: boolean mask over ``table`` of the origin row(s), drawn as stars.
        lines: abnormal lines {"CosineSimilarity": 0.99, "RelativeEuclideanDistance": 0.05} drawn dashed.
        floor: values below it (exact 0, or 1 − cos < 0 from rounding) are drawn at ``floor`` (log axes).

    Returns a two-row figure with shared x (the table's Index: execution order; node names in the hover),
    both y axes logarithmic.
    """
    lines = {**DEFAULT_LINES, **(lines or {})}
    cos, red = _numeric(table, "CosineSimilarity"), _numeric(table, "RelativeEuclideanDistance")
    emr = _numeric(table, "ExactMatchRate")
    emr = np.where(np.isfinite(cos), np.nan, emr)  # integer tensors: those with an ExactMatchRate and no cosine
    keep = np.isfinite(cos) | np.isfinite(red) | np.isfinite(emr)
    if not keep.any():
        return empty_spec("Per-layer error", "no compared tensors")
    df = table[keep]
    x = pd.to_numeric(_column(df, "Index"), errors="coerce").to_numpy()
    abnormal = _column(df, "Abnormal", False).fillna(False).astype(bool).to_numpy()
    org = (origin[keep].fillna(False).astype(bool).to_numpy() if origin is not None
           else np.zeros(len(df), dtype=bool))
    masks = ((abnormal, "Abnormal", {"symbol": "x", "size": 10, "color": "#d62728"}),
             (org, "origin", {"symbol": "star", "size": 16, "color": "#ffbf00", "line": {"width": 1, "color": "#000"}}))

    def floored(values):
        return np.where(np.isfinite(values), np.maximum(values, floor), np.nan)

    ints = floored(1.0 - emr[keep])
    series = (("1 − cosine", 1.0 - cos[keep], 1.0 - lines["CosineSimilarity"]),
              ("RelativeEuclideanDistance", red[keep], lines["RelativeEuclideanDistance"]))
    layout = _two_row_layout(("1 − CosineSimilarity · 1 − ExactMatchRate (integer tensors)",
                              "RelativeEuclideanDistance"))
    data = []
    for row, (name, values, line) in enumerate(series, start=1):
        drawn = floored(values)
        hover_values = np.where(np.isfinite(values), values, 1.0 - emr[keep]) if row == 1 else values
        custom = _hover_data(df, hover_values)
        extra = ((("1 − ExactMatchRate", ints, {"symbol": "diamond", "size": 8, "color": "#9467bd"},
                   "1 − ExactMatchRate"),) if row == 1 else ())
        marks = np.where(np.isfinite(drawn), drawn, ints) if row == 1 else None
        data += _metric_traces(row, name, x, drawn, custom, masks, line, marks=marks, extra=extra)
        layout["yaxis" if row == 1 else f"yaxis{row}"].update(type="log", exponentformat="power")
    layout["xaxis2"]["title"] = {"text": "tensor # in execution order (hover for the node)"}
    layout.update(height=600, hovermode="closest", margin={"l": 60, "r": 20, "t": 90, "b": 50},
                  legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 1.06, "yanchor": "bottom"})
    return FigureSpec(data=data, layout=layout)


def precision_spec(precision: pd.DataFrame) -> FigureSpec:
    """Stacked bars of kernel precisions per original op type (Diagnosis.precision: OpType, FP16, FP32)."""
    if precision is None or precision.empty:
        return empty_spec("Precision map", "no kernels")
    names = [esc(v) for v in precision["OpType"]]
    data = [{"type": "bar", "x": names,
             "y": pd.to_numeric(_column(precision, col, 0), errors="coerce").fillna(0).tolist(),
             "name": col, "marker": {"color": colour},
             "hovertemplate": "%{x}: %{y} node(s) in " + col + "<extra></extra>"}
            for col, colour in (("FP16", FP16_COLOUR), ("FP32", FP32_COLOUR))]
    return FigureSpec(data=data, layout={"barmode": "stack", "height": 360, "yaxis": {"title": {"text": "nodes"}},
                                         "margin": {"l": 60, "r": 20, "t": 30, "b": 80}})


def kernel_time_spec(kernel_times: pd.DataFrame, top: int = 20) -> FigureSpec:
    """Horizontal bars of the ``top`` slowest kernels (Diagnosis.kernel_times: Kernel, OpType, Precision,
    Nodes, HostMs), slowest first, coloured by precision; host time in ms."""
    if kernel_times is None or kernel_times.empty:
        return empty_spec("Kernel time", "no kernel times")
    kt = kernel_times.assign(HostMs=pd.to_numeric(kernel_times["HostMs"], errors="coerce"))
    kt = kt.sort_values("HostMs", ascending=False, na_position="last").head(top)
    names = [esc(v) for v in kt["Kernel"]]
    prec = _column(kt, "Precision", "").astype(str).str.lower().to_numpy()
    custom = np.array([[esc(o), esc(n)] for o, n in zip(_column(kt, "OpType", ""), _column(kt, "Nodes", ""))],
                      dtype=object)
    data = []
    for label, colour in (("fp16", FP16_COLOUR), ("fp32", FP32_COLOUR), ("other", "#7f7f7f")):
        mask = (prec == label) if label != "other" else ~np.isin(prec, ["fp16", "fp32"])
        if not mask.any():
            continue
        data.append({"type": "bar", "y": [n for n, m in zip(names, mask) if m], "x": kt["HostMs"].to_numpy()[mask],
                     "orientation": "h", "name": label.upper(), "marker": {"color": colour},
                     "customdata": custom[mask],
                     "hovertemplate": "%{y} (%{customdata[0]}, %{customdata[1]} node(s)): %{x:.4g} ms"
                                      "<extra></extra>"})
    return FigureSpec(data=data, layout={
        "height": max(260, 22 * len(kt) + 90), "xaxis": {"title": {"text": "host time (ms)"}}, "barmode": "overlay",
        "yaxis": {"categoryorder": "array", "categoryarray": names, "autorange": "reversed"},
        "margin": {"l": 200, "r": 20, "t": 30, "b": 50}})


# ------------------------------------------------------------------------------------ validated figures
def layer_error_figure(table: pd.DataFrame, origin: pd.Series | None = None,
                       lines: dict[str, float] | None = None, floor: float = LOG_FLOOR) -> go.Figure:
    """:func:`layer_error_spec` as a ``plotly.graph_objects.Figure`` (same arguments)."""
    return layer_error_spec(table, origin, lines, floor).to_figure()


def precision_figure(precision: pd.DataFrame) -> go.Figure:
    """:func:`precision_spec` as a ``plotly.graph_objects.Figure``."""
    return precision_spec(precision).to_figure()


def kernel_time_figure(kernel_times: pd.DataFrame, top: int = 20) -> go.Figure:
    """:func:`kernel_time_spec` as a ``plotly.graph_objects.Figure``."""
    return kernel_time_spec(kernel_times, top).to_figure()
