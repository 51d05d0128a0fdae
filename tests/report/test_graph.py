"""toolkit.report.graph: the graph view is layered by topological generation, coloured by precision, rings
abnormal nodes, stars the origin, escapes names, and says so when there is nothing to draw."""

from __future__ import annotations

import networkx as nx
import pandas as pd
import pytest

from tests.report.helpers import EVIL, EVIL_ESCAPED
from toolkit.report import graph
from toolkit.report.figures import FP16_COLOUR, FP32_COLOUR

EDGES = pd.DataFrame({"Src": ["a", "a", "b", "c", EVIL], "Dst": ["b", "c", EVIL, EVIL, "output:y"],
                      "Tensor": ["ta", "ta", "tb", "tc", "y"]})
TABLE = pd.DataFrame({"NodeName": ["a", "b", "c", EVIL], "OpType": ["Conv", "Relu", "Sigmoid", "Add"],
                      "Kernel": ["a", "a", "c", EVIL], "Precision": ["fp16", "fp16", "fp32", "fp16"],
                      "CosineSimilarity": [1.0, 1.0, 0.999, 0.9], "Abnormal": [False, False, False, True]})


def nodes_of(spec) -> dict[str, dict]:
    out = {}
    for t in spec["data"]:
        for i, c in enumerate(t.get("customdata") or []):
            out[c[0]] = {"x": t["x"][i], "y": t["y"][i], "trace": t["name"],
                         "ring": t["marker"]["line"]["color"][i]}
    return out


def test_layers_follow_topological_generations():
    got = nodes_of(graph.graph_spec(EDGES, TABLE, [EVIL]))
    g = nx.DiGraph(list(zip(EDGES["Src"], EDGES["Dst"])))
    depth = {n: d for d, gen in enumerate(nx.topological_generations(g)) for n in gen}
    names = {"a": "a", "b": "b", "c": "c", EVIL_ESCAPED: EVIL, "output:y": "output:y"}
    for shown, node in names.items():
        for other_shown, other in names.items():
            if depth[node] < depth[other]:
                assert got[shown]["y"] > got[other_shown]["y"]  # earlier generations drawn higher
            if depth[node] == depth[other]:
                assert got[shown]["y"] == pytest.approx(got[other_shown]["y"])


def test_colour_ring_star_highlight_and_escaping():
    spec = graph.graph_spec(EDGES, TABLE, [EVIL])
    by_name = {t["name"]: t for t in spec["data"]}
    assert by_name["FP16"]["marker"]["color"] == FP16_COLOUR and by_name["FP32"]["marker"]["color"] == FP32_COLOUR
    got = nodes_of(spec)
    assert got["c"]["trace"] == "FP32" and got["a"]["trace"] == "FP16" and got["output:y"]["trace"] == "graph output"
    assert got[EVIL_ESCAPED]["ring"] == graph.ERROR_COLOUR and got["a"]["ring"] != graph.ERROR_COLOUR
    assert EVIL not in spec.to_json()  # names reach plotly escaped
    star = by_name["origin"]
    assert (star["x"], star["y"]) == ([got[EVIL_ESCAPED]["x"]], [got[EVIL_ESCAPED]["y"]])
    assert [t for t in spec["data"] if t.get("meta") == "highlight"][0]["x"] == []


def test_nothing_to_draw_says_so():
    spec = graph.graph_spec(pd.DataFrame(columns=["Src", "Dst", "Tensor"]), TABLE, [])
    assert spec["data"] == [] and "no origin" in spec["layout"]["annotations"][0]["text"]
