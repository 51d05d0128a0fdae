"""The report context's fast paths (toolkit/report/context.py) give what the slow, obvious way gives:
column-at-a-time cell formatting equals fmt/sort_key value by value; the joined escape equals
markupsafe.escape per string."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from markupsafe import escape

from tests.report.helpers import EVIL
from toolkit.report import context


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
    # cell end tags are left out (HTML closes a cell at the next one); a finite number sorts by its text
    assert str(rows[0]) == ('<tr class="abnormal origin"><td>origin'
                            '<td>&lt;img src=x onerror=alert(1)&gt;<td>0.5</tr>')
    assert str(rows[1]) == "<tr><td><td>ok<td></tr>"
    inf = context.rows_html(pd.DataFrame({"MaxAbsoluteError": [np.inf, 2.0]}), ["", ""], ["", ""])
    assert [str(r) for r in inf] == ['<tr><td><td data-v="inf">inf</tr>', "<tr><td><td>2</tr>"]
