"""toolkit.logs.profdirs and parse-log on the profilers' folders: a run is read once (PROF_*/
mindstudio_profiler_output, *_ascend_pt/ASCEND_PROFILER_OUTPUT and its PROF_ copy), and a timeline JSON next
to the per-task CSV is skipped, so no device task is counted twice."""

from __future__ import annotations

import json

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
