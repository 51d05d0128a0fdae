"""msprof's api_statistic / acl_statistic CSVs (toolkit/logs/parsers/api_statistic_csv.py): host API time, kept
out of the op summary."""

from __future__ import annotations

import csv

import pytest

from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import api_statistic_csv

API = ["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Variance"]
ACL = ["Name", "Type", "Time(%)", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Process ID", "Thread ID"]


def _write(path, head, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        w.writerows(rows)
    return path


@pytest.mark.parametrize("head,rows,levels", [
    (API, [["host", "AscendCL", "aclmdlExecute", "900", "3", "300", "250", "400", "10"],
           ["host", "Runtime", "rtKernelLaunch", "60", "30", "2", "1", "5", "0.5"],
           ["host", "Node", "", "1", "1", "1", "1", "1", "0"], ["host", "Node", "x", "1", "many", "1", "1", "1", "0"]],
     ["AscendCL", "Runtime"]),
    (ACL, [["aclmdlExecute", "ACL_MODEL", "90", "900", "3", "300", "250", "400", "11", "12"],
           ["aclrtMemcpy", "ACL_RTS", "10", "60", "30", "2", "1", "5", "11", "12"],
           ["", "ACL_RTS", "0", "1", "1", "1", "1", "1", "11", "12"], ["y", "ACL_RTS", "0", "-1", "1", "1", "1", "1", "1", "1"]],
     ["ACL_MODEL", "ACL_RTS"]),
])
def test_api_times_are_a_table_not_tasks(tmp_path, head, rows, levels):
    path = _write(tmp_path / "api_statistic_0.csv", head, rows)
    assert detect_format(path).parser.name == "api_statistic_csv"
    res = api_statistic_csv.parse(path)
    t = res.tables["api_statistic"]
    assert res.malformed == 2 and res.op_summary.empty
    assert t["Level"].tolist() == levels and t["Total Time(us)"].tolist() == [900.0, 60.0]
    assert t["Count"].tolist() == [3, 30]
