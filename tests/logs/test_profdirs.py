"""toolkit.logs.profdirs and parse-log on the profilers' folders: a run is read once (PROF_*/
mindstudio_profiler_output, *_ascend_pt/ASCEND_PROFILER_OUTPUT and its PROF_ copy), and a timeline JSON next
to the per-task CSV is skipped, so no device task is counted twice."""

from __future__ import annotations

import json

import pytest

from toolkit.commands.parse_log import parse_log_command
from toolkit.logs.profdirs import MSPROF_OUTPUT, TORCH_OUTPUT, output_folder

OP_SUMMARY = ("Device_id,Model Name,Task ID,Stream ID,Op Name,OP Type,Task Type,Task Start Time(us),"
              "Task Duration(us),Task Wait Time(us),Block Dim\n"
              "0,m,1,3,conv1,Conv2D,AI_CORE,100.000,10,0,8\n0,m,2,3,relu1,Relu,AI_VECTOR_CORE,120.000,5,0,4\n")
KERNEL_DETAILS = ("Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim\n"
                  "1,conv1,Conv2D,AI_CORE,100.000,10,0,8\n1,relu1,Relu,AI_VECTOR_CORE,120.000,5,0,4\n")
TIMELINE = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "Ascend Hardware"}},
            {"name": "conv1", "ph": "X", "pid": 1, "tid": 3, "ts": 100.0, "dur": 10.0, "args": {"Task Id": 1}},
            {"name": "relu1", "ph": "X", "pid": 1, "tid": 3, "ts": 120.0, "dur": 5.0, "args": {"Task Id": 2}}]


def _msprof(root):
    out = root / "PROF_000001_20240301_abc" / MSPROF_OUTPUT
    out.mkdir(parents=True)
    (out / "op_summary_0_1.csv").write_text(OP_SUMMARY)
    (out / "msprof_0_1.json").write_text(json.dumps(TIMELINE))
    (out.parent / "device_0").mkdir()
    (out.parent / "device_0" / "raw.data").write_bytes(b"\0" * 8)
    return out.parent


def _torch(root):
    pt = root / "worker_0_ascend_pt"
    out = pt / TORCH_OUTPUT
    out.mkdir(parents=True)
    (out / "kernel_details.csv").write_text(KERNEL_DETAILS)
    (out / "trace_view.json").write_text(json.dumps(TIMELINE))
    _msprof(pt)  # the PROF_ copy of the same run
    return pt


def test_output_folder(tmp_path):
    prof = _msprof(tmp_path / "a")
    assert output_folder(prof) == prof / MSPROF_OUTPUT
    assert output_folder(prof.parent) == prof / MSPROF_OUTPUT  # a folder holding only that PROF_
    pt = _torch(tmp_path / "b")
    assert output_folder(pt) == pt / TORCH_OUTPUT
    assert output_folder(tmp_path) == tmp_path


def test_each_layout_counts_each_task_once(tmp_path):
    for maker in (_msprof, _torch):
        folder = maker(tmp_path / maker.__name__)
        res = parse_log_command([str(folder)], out=str(tmp_path / f"rep{maker.__name__}"), html=False)
        summary = json.loads((res["out"] / "parse_summary.json").read_text())
        assert summary["rows"] == 2, summary
        skipped = {s["path"].rsplit("/", 1)[-1]: s["reason"] for s in summary["skipped"]}
        assert any("same device tasks" in r for r in skipped.values()), skipped


TASK_TIME = ("kernel_name,kernel_type,stream_id,task_id,task_time(us),task_start(ns),task_stop(ns)\n"
             "conv1,KERNEL_AICORE,3,1,10,100000,110000\nrelu1,KERNEL_AIVEC,3,2,5,120000,125000\n")


def test_task_time_next_to_op_summary_or_kernel_details_is_skipped_so_each_task_counts_once(tmp_path):
    """msprof writes task_time_*.csv beside op_summary_*.csv (torch_npu: kernel_details.csv): the same tasks. The
    statistic must be the op_summary's alone, computed here with pandas from the CSV written above."""
    import io

    import pandas as pd

    want = pd.read_csv(io.StringIO(OP_SUMMARY)).groupby("OP Type")["Task Duration(us)"].agg(["count", "sum"])
    for name, text in (("op_summary_0_1.csv", OP_SUMMARY), ("kernel_details.csv", KERNEL_DETAILS)):
        out = tmp_path / name / "PROF_000001_20240301_abc" / MSPROF_OUTPUT
        out.mkdir(parents=True)
        (out / name).write_text(text)
        (out / "task_time_0_1.csv").write_text(TASK_TIME)
        (out / "msprof_0_1.json").write_text(json.dumps(TIMELINE))
        res = parse_log_command([str(out.parent)], out=str(tmp_path / f"rep_{name}"), html=False)
        summary = json.loads((res["out"] / "parse_summary.json").read_text())
        assert summary["rows"] == len(pd.read_csv(io.StringIO(text))) == 2
        skipped = {s["path"].rsplit("/", 1)[-1]: s["reason"] for s in summary["skipped"]}
        assert set(skipped) == {"task_time_0_1.csv", "msprof_0_1.json"}
        assert skipped["task_time_0_1.csv"].startswith(f"same device tasks as {name} ")
        formats = {s["path"].rsplit("/", 1)[-1]: s["format"] for s in summary["files"] if s["status"] == "skipped"}
        assert formats == {"task_time_0_1.csv": "task_time_csv", "msprof_0_1.json": "chrome_trace"}  # their own
        stat = pd.read_csv(res["out"] / "op_statistic.csv", keep_default_na=False).set_index("OP Type")
        assert sorted(stat.index) == sorted(want.index)  # no row with a blank OP Type (task_time has none)
        assert stat.loc[want.index, "Count"].tolist() == want["count"].tolist()
        assert stat.loc[want.index, "Total Time(us)"].tolist() == pytest.approx(want["sum"].tolist())


def test_task_time_alone_or_in_another_folder_is_read(tmp_path):
    from toolkit.logs.profdirs import timeline_twins

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "op_summary_0_1.csv").write_text(OP_SUMMARY)
    (b / "task_time_0_1.csv").write_text(TASK_TIME)
    (b / "task_time_1_1.csv").write_text(TASK_TIME)
    assert timeline_twins([a / "op_summary_0_1.csv", b / "task_time_0_1.csv", b / "task_time_1_1.csv"]) == {}
