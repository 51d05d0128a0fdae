"""msprof's task_time CSV (toolkit/logs/parsers/task_time_csv.py), written from the documented columns in both
start units; malformed rows counted."""

from __future__ import annotations

import csv

import pytest

from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import task_time_csv


def _write(path, head, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        w.writerows(rows)
    return path


@pytest.mark.parametrize("unit,start,ns", [("ns", "1700000000000000123", "1700000000000000123"),
                                           ("us", "1700000000000000.123", "1700000000000000123")])
def test_task_time_rows_are_device_tasks(tmp_path, unit, start, ns):
    head = ["Device_id", "kernel_name", "kernel_type", "stream_id", "task_id", "task_time(us)", f"task_start({unit})",
            f"task_stop({unit})"]
    rows = [["0", "conv1", "AI Core", "3", "7", "12.5", start, start],
            ["0", "hcom_allReduce_1", "HCCL", "5", "8", "30", start, start],
            ["0", "", "AI Core", "3", "9", "1", start, start],
            ["0", "relu", "AI Core", "3", "10", "-1", start, start]]
    path = _write(tmp_path / "task_time_0_1.csv", head, rows)
    assert detect_format(path).parser.name == "task_time_csv"
    res = task_time_csv.parse(path)
    s = res.op_summary
    assert res.malformed == 2 and s["Op Name"].tolist() == ["conv1", "hcom_allReduce_1"]
    assert s["Task Type"].tolist() == ["AI_CORE", "COMMUNICATION"] and set(s["Time Kind"]) == {"device"}
    assert s["Task ID"].tolist() == [7, 8] and s["Stream ID"].tolist() == [3, 5]
    assert s["Task Duration(us)"].tolist() == [12.5, 30.0] and s["Task Start Time(ns)"].tolist() == [ns, ns]
    assert s["Device_id"].tolist() == ["0", "0"]


@pytest.mark.parametrize("kernel_type, want", [("KERNEL_AICORE", "AI_CORE"), ("KERNEL_AIVEC", "AI_VECTOR_CORE"),
                                               ("KERNEL_AICPU", "AI_CPU"), ("MEMCPY_ASYNC", "MEMCPY"),
                                               ("KERNEL_MIX_AIC", "MIX_AIC"), ("kernel_aicore", "AI_CORE"),
                                               ("AI Core", "AI_CORE")])
def test_runtime_task_types_are_named_as_op_summary_task_types(tmp_path, kernel_type, want):
    head = ["Device_id", "kernel_name", "kernel_type", "stream_id", "task_id", "task_time(us)", "task_start(us)",
            "task_stop(us)"]
    p = _write(tmp_path / "task_time_0.csv", head, [["0", "op", kernel_type, "2", "1", "10", "100", "110"]])
    assert task_time_csv.parse(p).op_summary["Task Type"].tolist() == [want]


def test_cpu_fallback_and_transfers_of_a_task_time_file_are_found(tmp_path):
    """AI_CPU and MEMCPY tasks named the runtime's way are counted by the findings (shares computed here)."""
    from toolkit.logs.findings import cpu_fallback, transfer_overhead

    head = ["Device_id", "kernel_name", "kernel_type", "stream_id", "task_id", "task_time(us)", "task_start(us)",
            "task_stop(us)"]
    rows = [["0", "conv1", "KERNEL_AICORE", "2", "1", "10", "100", "110"],
            ["0", "relu1", "KERNEL_AIVEC", "2", "2", "6", "111", "117"],
            ["0", "MemcpyAsync", "MEMCPY_ASYNC", "2", "3", "20", "118", "138"],
            ["0", "NonZero", "KERNEL_AICPU", "2", "4", "100", "139", "239"]]
    df = task_time_csv.parse(_write(tmp_path / "task_time_0.csv", head, rows)).op_summary
    (cpu,) = cpu_fallback(df, "f")
    (mem,) = transfer_overhead(df, "f")
    assert cpu.kind == "cpu_fallback" and mem.kind == "transfer_overhead"
    assert mem.evidence["share_pct"] == round(20 / 136 * 100, 2) and cpu.evidence["time_us"] == 100.0
