"""The report's fast paths give what the slow, obvious way gives: figure JSON built without plotly.py equals
plotly's own Figure.to_json(); column-at-a-time cell formatting equals fmt/sort_key value by value; the
joined escape equals markupsafe.escape per string."""

from __future__ import annotations

import base64
import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from markupsafe import escape
from plotly.subplots import make_subplots

from toolkit.report import context, figures

EVIL = "<img src=x onerror=alert(1)>"


def _table() -> pd.DataFrame:
    cos = [1.0, 0.99999994, np.nan, 0.5, 0.999]
    return pd.DataFrame({
        "Index": [0, 1, 2, 3, 300],
        "OpType": ["Input", "Conv", "Mul", "Pow", "Add"],
        "NodeName": ["x", "c", "m", EVIL, "a"],
        "TensorName": ["x", "t1", "t2", "t3", "t4"],
        "Kernel": ["", "c", "c", EVIL, "a"],
        "Precision": ["fp32", "fp16", "fp16", "fp16", "fp32"],
        "CosineSimilarity": cos,
        "RelativeEuclideanDistance": [0.0, 1e-4, np.nan, 0.6, 0.01],
        "Abnormal": [False, False, False, True, False],
    })


def _parsed(text: str) -> dict:
    return json.loads(text)


def test_layer_figure_json_equals_plotly_figure_json():
    table = _table()
    origin = pd.Series([False, False, False, True, False])
    spec = figures.layer_error_spec(table, origin=origin, lines={"CosineSimilarity": 0.98})
    assert _parsed(spec.to_json()) == _parsed(go.Figure(spec).to_json())


@pytest.mark.parametrize("build", [
    lambda: figures.precision_spec(pd.DataFrame({"OpType": ["Conv", EVIL], "FP16": [3, 0], "FP32": [1, 2]})),
    lambda: figures.kernel_time_spec(pd.DataFrame({"Kernel": ["k1", EVIL, "k3"], "OpType": ["Conv", "Pow", "Add"],
                                                   "Precision": ["fp16", "fp32", "int8"], "Nodes": [2, 1, 1],
                                                   "HostMs": [0.5, 2.0, np.nan]})),
    lambda: figures.empty_spec("Kernel time", "no kernel times"),
    lambda: figures.layer_error_spec(pd.DataFrame({"CosineSimilarity": [np.nan]})),
])
def test_other_figure_json_equals_plotly_figure_json(build):
    spec = build()
    assert _parsed(spec.to_json()) == _parsed(go.Figure(spec).to_json())


def test_two_row_layout_is_make_subplots_layout():
    ref = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("1 − CosineSimilarity", "RelativeEuclideanDistance"))
    ref_layout = ref.to_plotly_json()["layout"]
    ours = go.Figure(layout=figures._two_row_layout(("1 − CosineSimilarity", "RelativeEuclideanDistance")))
    ours_layout = ours.to_plotly_json()["layout"]
    for key in ("xaxis", "yaxis", "xaxis2", "yaxis2", "annotations"):
        assert ours_layout[key] == ref_layout[key], key


def test_typed_arrays_decode_to_the_same_numbers():
    floats = np.array([0.25, np.nan, -3.5, np.inf])
    spec = figures._typed_array(floats)
    assert spec["dtype"] == "f8"
    back = np.frombuffer(base64.b64decode(spec["bdata"]), dtype="<f8")
    np.testing.assert_array_equal(back, floats)
    small = figures._typed_array(np.array([0, 300, -2], dtype=np.int64))  # needs int16
    assert small["dtype"] == "i2"
    assert np.frombuffer(base64.b64decode(small["bdata"]), dtype="<i2").tolist() == [0, 300, -2]
    assert figures._typed_array(np.array([2**40], dtype=np.int64)) == [2**40]  # no 64-bit ints in plotly.js
    assert figures._typed_array(np.array(["a", "b"], dtype=object)) == ["a", "b"]


@pytest.mark.parametrize("series", [
    pd.Series([1.0, 0.99999994, -0.99999999999, np.nan, np.inf, -0.0, 1e-300, 123456789.0]),
    pd.Series(np.array([0.1, 1 / 3, np.nan], dtype=np.float32)),
    pd.Series([0, -5, 2**60]),
    pd.Series(np.arange(3, dtype=np.uint8)),
    pd.Series([True, False]),
    pd.Series(["a", None, EVIL], dtype="str"),
    pd.Series([1, 2.5, None, True, "<b>", ["a", 1.0], {"k": np.nan}, (1, 2), np.nan], dtype=object),
    pd.array([1, None, 3], dtype="Int64"),
    pd.array([True, None], dtype="boolean"),
    pd.Categorical(["a", "<c>", "a"]),
    pd.Series(pd.to_datetime(["2024-01-02", None])),
])
def test_column_cells_equal_fmt_and_sort_key_per_value(series):
    series = pd.Series(series)
    texts, sorts = context.column_cells(series)
    assert texts == [context.fmt(v) for v in series]
    assert sorts == [context.sort_key(v) for v in series]


def test_column_cells_by_hand():
    texts, sorts = context.column_cells(pd.Series([0.99999994, 1.0, np.nan, 1234567.0]))
    assert texts == ["0.9999999", "1", "", "1.23457e+06"]  # console.show: reads below 1
    assert sorts == ["0.99999994", "1.0", "", "1234567.0"]
    assert context.column_cells(pd.Series([7])) == (["7"], ["7.0"])
    assert context.column_cells(pd.Series([True, False])) == (["yes", "no"], ["", ""])


@pytest.mark.parametrize("texts", [[EVIL, "a'b\"c", "&amp;", ""], ["a\x00<b>", "x&y"], []])
def test_escape_all_equals_markupsafe_escape(texts):
    assert context.escape_all(texts) == [str(escape(t)) for t in texts]


def test_rows_html_marks_escapes_and_keeps_sort_keys():
    df = pd.DataFrame({"NodeName": [EVIL, "ok"], "CosineSimilarity": [0.5, np.nan]})
    rows = context.rows_html(df, ["abnormal origin", ""], ["origin", ""])
    assert str(rows[0]) == ('<tr class="abnormal origin"><td>origin</td>'
                            '<td>&lt;img src=x onerror=alert(1)&gt;</td><td data-v="0.5">0.5</td></tr>')
    assert str(rows[1]) == "<tr><td></td><td>ok</td><td></td></tr>"


def test_compiled_templates_follow_source_changes(tmp_path):
    """The bytecode cache of toolkit.report.html reuses compiled code only while the template source is
    unchanged, and a cache folder that cannot be written does not break rendering."""
    import jinja2

    from toolkit.report import html

    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    cache.mkdir()
    (src / "t.j2").write_text("a {{ x }}", encoding="utf-8")

    def render() -> str:
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(src)),
                                 bytecode_cache=html._BytecodeCache(str(cache)), **html._ENV_OPTIONS)
        return env.get_template("t.j2").render(x="<1>")

    assert render() == "a &lt;1&gt;"
    assert len(list(cache.iterdir())) == 1  # compiled once, stored
    assert render() == "a &lt;1&gt;"  # loaded from the cache
    (src / "t.j2").write_text("b {{ x }}", encoding="utf-8")
    assert render() == "b &lt;1&gt;"
    env = jinja2.Environment(loader=jinja2.DictLoader({"t": "{{ 1 + 1 }}"}),
                             bytecode_cache=html._BytecodeCache(str(tmp_path / "missing")))
    assert env.get_template("t").render() == "2"
