"""The Chrome trace parser (toolkit/logs/parsers/chrome_trace.py), on a fixture written from the documented
format."""

from __future__ import annotations

import json
import logging

import pytest

from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import chrome_trace


@pytest.fixture(autouse=True)
def _restore_logger():
    logger = logging.getLogger("npuscope")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    for h in list(logger.handlers):
        if getattr(h, "_npuscope", False):
            logger.removeHandler(h)
            h.close()
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def write_events_per_line(path, events, close=True):
    body = ",\n".join(json.dumps(e) for e in events)
    path.write_text("[\n" + body + ("\n]\n" if close else ""))


def chrome_events():
    return [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "resnet"}},
            {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "stream 2"}},
            {"ph": "X", "pid": 1, "tid": 2, "name": "conv1", "cat": "AI_CORE", "ts": 10.0, "dur": 5.0,
             "args": {"OP Type": "Conv2D", "Time Kind": "simulated", "Block Dim": 8}},
            {"ph": "B", "pid": 1, "tid": "copy", "name": "h2d", "cat": "MEMCPY", "ts": 20.0},
            {"ph": "s", "pid": 1, "tid": "copy", "name": "flow", "id": 1, "ts": 20.0},
            {"ph": "E", "pid": 1, "tid": "copy", "ts": 27.5},
            {"ph": "f", "pid": 1, "tid": 2, "name": "flow", "id": 1, "ts": 30.0, "bp": "e"},
            {"ph": "X", "pid": 1, "tid": 2, "name": "relu", "cat": "Relu", "ts": 30.0, "dur": 2.0},
            {"ph": "X", "pid": 1, "tid": 2, "name": "bad", "ts": "soon", "dur": 1},
            {"ph": "E", "pid": 1, "tid": 9, "ts": 40.0},
            {"ph": "B", "pid": 1, "tid": 9, "name": "never closed", "ts": 41.0},
            {"ph": "i", "pid": 1, "tid": 2, "name": "mark", "ts": 1.0}, 7]


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
