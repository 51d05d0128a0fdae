"""toolkit.logs.timeline: what each event of a device profiler's timeline is, and the Categorical resolution."""

from __future__ import annotations

import pandas as pd
import pytest

from toolkit.logs import timeline


@pytest.mark.parametrize("name,kind", [("Ascend Hardware", "device"), ("NPU 0", "device"), ("CANN", "host"),
                                       ("AscendCL", "host"), ("Python", "host"), ("Overlap Analysis", "overlap"),
                                       ("Communication", "communication"), ("HCCL", "communication"),
                                       ("something else", "")])
def test_process_kind(name, kind):
    assert timeline.process_kind(name) == kind


@pytest.mark.parametrize("name,args,kind", [("hcom_allReduce__123", {}, "communication"),
                                            ("Conv2D_1", {"Task Id": 3}, "device"),
                                            ("x", {"Physic Stream Id": 1}, "device"),
                                            ("aten::add", {}, "host"), ("Conv2D_1", {}, "")])
def test_event_kind(name, args, kind):
    assert timeline.event_kind(name, args) == kind


def test_combine_computes_once_per_distinct_combination():
    a = pd.Series(pd.Categorical(["x", "y", "x", "", "y"]))
    b = pd.Series(pd.Categorical(["1", "1", "2", "2", ""]))
    calls = []

    def fn(u, v):
        calls.append((u, v))
        return u + v

    out = timeline.combine([a, b], fn)
    assert list(out) == ["x1", "y1", "x2", "2", "y"] and len(calls) == 5
    assert list(timeline.combine([a], str.upper)) == ["X", "Y", "X", "", "Y"]
