"""The graph view of a diagnose report: the origin's neighbourhood (toolkit.ir.neighbourhood) drawn as a
layered plotly figure, nodes coloured by precision and outlined by error.

The layout is networkx's: the nodes are layered by ``networkx.topological_generations`` (a node sits one layer
below its deepest producer) and placed with ``networkx.multipartite_layout`` (layers as rows, top to bottom).
Node text is the op type (short, so labels do not overlap); the node name, kernel, precision and worst metric
are in the hover. Model-derived strings are HTML-escaped (toolkit.report.figures.esc).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd

from toolkit.report.figures import FP16_COLOUR, FP32_COLOUR, FigureSpec, empty_spec, esc

OTHER_COLOUR, OUTPUT_COLOUR, ERROR_COLOUR, ORIGIN_COLOUR = "#9e9e9e", "#2e7d32", "#d62728", "#ffbf00"
#: Pixels per layer (row) and the figure's height bounds.
ROW_PX, MIN_HEIGHT, MAX_HEIGHT = 70, 260, 1400


def _node_facts(table: pd.DataFrame) -> dict[str, dict]:
    """{NodeName: {"op", "kernel", "precision", "abnormal", "metric"}} from the per-tensor table (first row
    of each node; abnormal when any of its tensors is)."""
    if table is None or table.empty or "NodeName" not in table.columns:
        return {}
    t = table[table["NodeName"].astype(str) != ""]
    out: dict[str, dict] = {}
    cos = pd.to_numeric(t.get("CosineSimilarity"), errors="coerce") if "CosineSimilarity" in t else None
    emr = pd.to_numeric(t.get("ExactMatchRate"), errors="coerce") if "ExactMatchRate" in t else None
    for i, (name, row) in enumerate(zip(t["NodeName"].astype(str), t.itertuples(index=False))):
        rec = out.setdefault(name, {"op": str(getattr(row, "OpType", "")), "kernel": str(getattr(row, "Kernel", "") or ""),
                                    "precision": str(getattr(row, "Precision", "") or ""), "abnormal": False,
                                    "metric": ""})
        if bool(getattr(row, "Abnormal", False) is True):
            rec["abnormal"] = True
        for label, series in (("CosineSimilarity", cos), ("ExactMatchRate", emr)):
            v = series.iloc[i] if series is not None else np.nan
            if np.isfinite(v) and not rec["metric"]:
                rec["metric"] = f"{label} {v:.6g}"
    return out


def _layers(g: nx.DiGraph) -> None:
    for depth, generation in enumerate(nx.topological_generations(g)):
        for node in generation:
            g.nodes[node]["layer"] = depth


def graph_spec(edges: pd.DataFrame, table: pd.DataFrame, origin_nodes: list[str]) -> FigureSpec:
    """The graph view figure. ``edges``: Diagnosis.neighbourhood (Src, Dst, Tensor); ``table``: the per-tensor
    table (node facts); ``origin_nodes``: drawn as stars. Traces: edges (one line trace), nodes by precision
    (FP16, FP32, other, graph outputs), origin stars, and an empty ``highlight`` trace the page's script fills
    when a table row is clicked (customdata of the node traces: [name, op, kernel, precision, metric])."""
    if edges is None or edges.empty:
        return empty_spec("Where the origin sits", "no origin found: nothing to draw")
    g = nx.DiGraph()
    g.add_edges_from(zip(edges["Src"].astype(str), edges["Dst"].astype(str)))
    if not nx.is_directed_acyclic_graph(g):
        return empty_spec("Where the origin sits", "the neighbourhood has a cycle; see the table")
    _layers(g)
    pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal", scale=1.0)
    rows = 1 + max(nx.get_node_attributes(g, "layer").values())
    facts = _node_facts(table)
    origin = set(origin_nodes or [])
    ex, ey = [], []
    for a, b in g.edges():
        ex += [pos[a][0], pos[b][0], None]
        ey += [-pos[a][1], -pos[b][1], None]
    data = [{"type": "scatter", "x": ex, "y": ey, "mode": "lines", "line": {"width": 1, "color": "#b0b0b0"},
             "hoverinfo": "skip", "showlegend": False, "name": "edges"}]
    groups = {"FP16": ([], FP16_COLOUR), "FP32": ([], FP32_COLOUR), "other": ([], OTHER_COLOUR),
              "graph output": ([], OUTPUT_COLOUR)}
    for node in g.nodes():
        f = facts.get(node, {})
        prec = f.get("precision", "").lower()
        key = ("graph output" if node.startswith("output:") else "FP16" if prec == "fp16"
               else "FP32" if prec == "fp32" else "other")
        groups[key][0].append(node)
    for label, (nodes, colour) in groups.items():
        if not nodes:
            continue
        info = [facts.get(n, {}) for n in nodes]
        data.append({
            "type": "scatter", "mode": "markers+text", "name": label,
            "x": [pos[n][0] for n in nodes], "y": [-pos[n][1] for n in nodes],
            "text": [esc(i.get("op") or ("output" if n.startswith("output:") else "")) for n, i in zip(nodes, info)],
            "textposition": "middle right", "textfont": {"size": 10},
            "customdata": [[esc(n), esc(i.get("op", "")), esc(i.get("kernel", "")), esc(i.get("precision", "")),
                            esc(i.get("metric", ""))] for n, i in zip(nodes, info)],
            "hovertemplate": "<b>%{customdata[0]}</b> (%{customdata[1]})<br>kernel %{customdata[2]} · "
                             "%{customdata[3]}<br>%{customdata[4]}<extra></extra>",
            "marker": {"size": 13, "color": colour,
                       "line": {"width": [3 if i.get("abnormal") else 1 for i in info],
                                "color": [ERROR_COLOUR if i.get("abnormal") else "#333" for i in info]}}})
    stars = [n for n in g.nodes() if n in origin]
    if stars:
        data.append({"type": "scatter", "mode": "markers", "name": "origin", "x": [pos[n][0] for n in stars],
                     "y": [-pos[n][1] for n in stars], "hoverinfo": "skip",
                     "marker": {"symbol": "star-open", "size": 24, "color": ORIGIN_COLOUR, "line": {"width": 2}}})
    data.append({"type": "scatter", "mode": "markers", "name": "selected row", "x": [], "y": [], "hoverinfo": "skip",
                 "marker": {"symbol": "circle-open", "size": 28, "color": "#000", "line": {"width": 3}},
                 "meta": "highlight"})
    height = int(min(MAX_HEIGHT, max(MIN_HEIGHT, ROW_PX * rows + 80)))
    layout = {"height": height, "hovermode": "closest", "margin": {"l": 20, "r": 120, "t": 30, "b": 20},
              "xaxis": {"visible": False}, "yaxis": {"visible": False},
              "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"}}
    return FigureSpec(data=data, layout=layout)
