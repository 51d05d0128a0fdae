"""The Chrome trace parser (toolkit/logs/parsers/chrome_trace.py), on a fixture written from the documented
format."""

from __future__ import annotations

import json

import pytest

from tests.logs.helpers import chrome_events, write_events_per_line
from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import chrome_trace


@pytest.mark.parametrize("form", ["array", "object", "truncated"])
def test_chrome_trace_parser(tmp_path, form):
    path = tmp_path / "trace.json"
    if form == "array":
        path.write_text(json.dumps(chrome_events()))
    elif form == "object":
        path.write_text(json.dumps({"traceEvents": chrome_events(), "displayTimeUnit": "ms"}))
    else:
        write_events_per_line(path, chrome_events(), close=False)   # the format allows a missing ']'
    assert detect_format(path).parser.name == "chrome_trace"
    res = chrome_trace.parse(path)
    s = res.op_summary
    assert s["Op Name"].tolist() == ["conv1", "h2d", "relu"]
    assert s["Task Duration(us)"].tolist() == [5.0, 7.5, 2.0] and s["Task Start Time(us)"].tolist() == [10, 20, 30]
    assert s["OP Type"].tolist() == ["Conv2D", "", "Relu"] and s["Task Type"].tolist() == ["AI_CORE", "MEMCPY", ""]
    assert s["Time Kind"].tolist() == ["simulated", "measured", "measured"] and s["Block Dim"].iloc[0] == 8
    assert set(s["Model Name"]) == {"resnet"} and s["Stream ID"].iloc[0] == 2
    assert res.malformed == 4                                    # bad ts, lone E, unclosed B, non-object
