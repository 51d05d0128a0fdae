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


# ------------------------------------------------------------------ device profiler timelines (issue 19)
def _msprof_timeline() -> list:
    """An msprof_*.json / trace_view.json shaped timeline written from the documented event kinds."""
    meta = [{"name": "process_name", "ph": "M", "pid": p, "tid": 0, "args": {"name": n}}
            for p, n in ((1, "Ascend Hardware"), (2, "CANN"), (3, "Overlap Analysis"), (4, "Python"),
                         (5, "Communication"))]
    dev = [{"name": f"Conv2D_{i}", "ph": "X", "pid": 1, "tid": 9, "ts": 100.0 + 10 * i, "dur": 4.0,
            "args": {"Task Type": "AI_CORE", "Task Id": 40 + i, "Physic Stream Id": 7, "Stream Id": 2}}
           for i in range(3)]
    host = [{"name": "aclnnConvolution", "ph": "X", "pid": 2, "tid": 77, "ts": 90.0, "dur": 50.0, "args": {}},
            {"name": "aten::conv2d", "ph": "X", "pid": 4, "tid": 78, "ts": 80.0, "dur": 70.0, "args": {}}]
    comm = [{"name": "hcom_allReduce__1", "ph": "X", "pid": 5, "tid": 1, "ts": 200.0, "dur": 30.0, "args": {}}]
    overlap = [{"name": "Computing", "ph": "X", "pid": 3, "tid": 0, "ts": 100.0, "dur": 24.0, "args": {}},
               {"name": "Free", "ph": "X", "pid": 3, "tid": 0, "ts": 124.0, "dur": 6.0, "args": {}},
               {"name": "Computing", "ph": "X", "pid": 3, "tid": 0, "ts": 130.0, "dur": 4.0, "args": {}}]
    return meta + dev + host + comm + overlap


@pytest.mark.parametrize("streamed", [False, True])
def test_device_tasks_host_spans_and_overlap_are_kept_apart(tmp_path, monkeypatch, streamed):
    import json

    from toolkit.logs.parsers import chrome_trace
    from toolkit.profile.optable import op_statistic

    if streamed:
        monkeypatch.setattr(chrome_trace, "STREAM_MIN_BYTES", 0)
    path = tmp_path / "msprof_0.json"
    path.write_text(json.dumps(_msprof_timeline()))
    res = chrome_trace.parse(path)
    s = res.op_summary.astype({c: str for c in ("Op Name", "Time Kind", "Task Type", "Model Name")})
    by = s.set_index("Op Name")
    assert set(s.loc[s["Time Kind"] == "device", "Op Name"]) == {"Conv2D_0", "Conv2D_1", "Conv2D_2",
                                                                 "hcom_allReduce__1"}
    assert set(s.loc[s["Time Kind"] == "host", "Op Name"]) == {"aclnnConvolution", "aten::conv2d"}
    assert "Computing" not in set(s["Op Name"])
    assert by.loc["Conv2D_1", "Task ID"] == 41 and by.loc["Conv2D_1", "Stream ID"] == 7
    assert by.loc["Conv2D_1", "Task Type"] == "AI_CORE" and by.loc["Conv2D_1", "Model Name"] == ""
    assert by.loc["hcom_allReduce__1", "Task Type"] == "COMMUNICATION"
    spans = res.tables["overlap_spans"].set_index("Name")
    assert spans.loc["Computing", "Count"] == 2 and spans.loc["Computing", "Total Time(us)"] == 28.0
    stat = op_statistic(s)
    device = stat[stat["Time Kind"] == "device"]
    assert device.groupby("Model Name")["Ratio(%)"].sum().tolist() == pytest.approx([100.0])  # one device run
    # the host aten:: span (70 us) is not a device hotspot: device time is 3 x 4 us + 30 us of communication
    assert device["Total Time(us)"].sum() == pytest.approx(42.0)
    assert stat.loc[stat["Time Kind"] == "host", "Total Time(us)"].sum() == pytest.approx(120.0)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("metadata_last", [False, True])
def test_a_profiler_timeline_keeps_ids_only_where_its_events_give_them(tmp_path, monkeypatch, streamed,
                                                                          metadata_last):
    """Host spans (CANN, Python) and the HCCL task carry no Task Id / stream in their args: their ids stay empty
    (never the event order or the thread id); device tasks keep theirs. Process names first (msprof) or last."""
    import math

    if streamed:
        monkeypatch.setattr(chrome_trace, "STREAM_MIN_BYTES", 0)
    events = _msprof_timeline()
    if metadata_last:
        events = events[5:] + events[:5]
    path = tmp_path / "msprof_0.json"
    path.write_text(json.dumps(events))
    s = chrome_trace.parse(path).op_summary.astype({"Op Name": str})
    by = s.set_index("Op Name")
    given = {e["name"]: e["args"] for e in events if e["ph"] == "X" and e["pid"] != 3}
    for name, args in given.items():
        task, stream = args.get("Task Id"), args.get("Physic Stream Id", args.get("Stream Id"))
        got_task, got_stream = by.loc[name, "Task ID"], by.loc[name, "Stream ID"]
        assert (math.isnan(got_task) if task is None else got_task == task), (name, got_task)
        assert (math.isnan(got_stream) if stream is None else got_stream == stream), (name, got_stream)


def test_a_plain_trace_still_numbers_its_tasks_and_streams_by_event_and_tid(tmp_path):
    events = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "resnet"}},
              {"name": "a", "ph": "X", "pid": 1, "tid": 5, "ts": 0, "dur": 1, "args": {}},
              {"name": "b", "ph": "X", "pid": 1, "tid": "worker", "ts": 2, "dur": 1, "args": {}},
              {"name": "c", "ph": "X", "pid": 1, "tid": 5, "ts": 4, "dur": 1, "args": {"Task ID": 9}}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(events))
    s = chrome_trace.parse(path).op_summary
    assert s["Task ID"].tolist() == [0, 1, 9] and s["Stream ID"].tolist() == [5, 0, 5]


def test_streamed_and_loaded_reads_agree(tmp_path, monkeypatch):
    import json

    import numpy as np

    from toolkit.logs.parsers import chrome_trace

    events = _msprof_timeline() + [{"name": f"n{i}", "ph": "X", "pid": 9, "tid": i % 3, "ts": float(i), "dur": 1.5,
                                    "args": {"Input Shapes": "1,3", "Block Dim": 8}} for i in range(500)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "otherData": {"Time Kind": "simulated"}}))
    loaded = chrome_trace.parse(path)
    monkeypatch.setattr(chrome_trace, "STREAM_MIN_BYTES", 0)
    streamed = chrome_trace.parse(path)
    a, b = (r.op_summary.astype({c: str for c in r.op_summary.columns if r.op_summary[c].dtype != np.float64})
            for r in (loaded, streamed))
    import pandas as pd

    pd.testing.assert_frame_equal(a, b)
    assert set(a.loc[a["Op Name"].str.startswith("n"), "Time Kind"]) == {"simulated"}  # otherData's, in the head
    assert streamed.notes[0].startswith("streamed")


def test_a_streamed_file_cut_short_keeps_what_was_read(tmp_path, monkeypatch):
    import json

    from toolkit.logs.parsers import chrome_trace

    monkeypatch.setattr(chrome_trace, "STREAM_MIN_BYTES", 0)
    text = json.dumps(_msprof_timeline())
    cut = text[: text.index('"aclnnConvolution"') - 5]  # inside the first host event
    path = tmp_path / "cut.json"
    path.write_text(cut)
    res = chrome_trace.parse(path)
    assert res.records == 3 and res.malformed == 1
    assert any("not complete JSON" in n for n in res.notes)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_trace_in_gbk_or_with_foreign_bytes_reads_every_event(tmp_path, monkeypatch, streamed):
    """Kind: a trace that is not UTF-8. Loaded or streamed (ijson stops at the first byte that is not UTF-8), a
    GBK trace keeps its names (note: decoded as GB18030) and a Latin-1 one keeps every event, the bytes replaced
    and counted in a note."""
    import json

    from toolkit.logs.parsers import chrome_trace

    if streamed:
        monkeypatch.setattr(chrome_trace, "STREAM_MIN_BYTES", 0)
    names = ["卷积", "池化", "全连接"]
    events = [{"name": n, "ph": "X", "pid": 1, "tid": 1, "ts": float(i), "dur": 1.0} for i, n in enumerate(names)]
    path = tmp_path / "gbk.json"
    path.write_bytes(json.dumps(events, ensure_ascii=False).encode("gbk"))
    res = chrome_trace.parse(path)
    assert res.op_summary["Op Name"].astype(str).tolist() == names and res.malformed == 0
    assert "decoded as GB18030 (not UTF-8)" in res.notes
    latin = [dict(e, name=f"op é{i},x") for i, e in enumerate(events)]
    data = json.dumps(latin, ensure_ascii=False).encode("latin-1")
    path.write_bytes(data)
    res = chrome_trace.parse(path)
    assert res.records == len(latin) and res.malformed == 0
    n_bad = sum(b >= 0x80 for b in data)
    assert any(n.startswith(f"{n_bad} byte(s) that are not UTF-8 text") for n in res.notes), res.notes


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("meta_first", [True, False])
def test_profiler_process_names_are_no_model_and_hccl_tasks_are_communication(tmp_path, monkeypatch, streamed,
                                                                              meta_first):
    """Kind: a device profiler's processes (Ascend Hardware, HCCL, Python) name a kind of event, not a model:
    Model Name stays empty (a generic process name still gives it); an HCCL task keeps no Task Type "HCCL" but
    gets COMMUNICATION, as op_summary.csv and kernel_details.csv rows do; no Time Kind without a row is left in
    the frame's categories — whether the process names come before or after the events."""
    import json

    from toolkit.logs.parsers import chrome_trace

    if streamed:
        monkeypatch.setattr(chrome_trace, "STREAM_MIN_BYTES", 0)
    meta = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": n}}
            for p, n in ((7, "Ascend Hardware"), (8, "Python"), (9, "resnet50"))]
    ev = [{"ph": "X", "name": "aclnnAdd_AddAiCore_Add", "pid": 7, "tid": 2, "ts": "100.001", "dur": 10.2,
           "args": {"Task Type": "AI_VECTOR_CORE", "Physic Stream Id": 2, "Task Id": 13}},
          {"ph": "X", "name": "allreduce_1", "pid": 7, "tid": 3, "ts": "120.5", "dur": 1500.25,
           "args": {"Task Type": "HCCL", "Physic Stream Id": 3, "Task Id": 14}},
          {"ph": "X", "name": "Memcpy", "pid": 7, "tid": 3, "ts": "130.5", "dur": 2.0,
           "args": {"Task Type": "HCCL", "Physic Stream Id": 3, "Task Id": 15}},
          {"ph": "X", "name": "aten::add", "pid": 8, "tid": 1, "ts": "90", "dur": 30.0, "args": {}},
          {"ph": "X", "name": "conv", "pid": 9, "tid": 1, "ts": "90", "dur": 3.0, "args": {"Task Id": 1}}]
    path = tmp_path / "msprof_0.json"
    path.write_text(json.dumps(meta + ev if meta_first else ev + meta))
    s = chrome_trace.parse(path).op_summary
    by = s.astype(str).set_index("Op Name")
    assert by["Model Name"].to_dict() == {"aclnnAdd_AddAiCore_Add": "", "allreduce_1": "", "Memcpy": "",
                                          "aten::add": "", "conv": "resnet50"}
    assert by.loc[["allreduce_1", "Memcpy"], "Task Type"].tolist() == ["COMMUNICATION", "COMMUNICATION"]
    assert by.loc["aclnnAdd_AddAiCore_Add", "Task Type"] == "AI_VECTOR_CORE"
    counts = s["Time Kind"].value_counts()
    assert sorted(counts.index.astype(str)) == ["device", "host"] and (counts > 0).all()
