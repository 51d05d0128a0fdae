"""The kernel_times.csv parser (toolkit/logs/parsers/kernel_times_csv.py)."""

from __future__ import annotations

import pandas as pd

from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import kernel_times_csv


def test_kernel_times_csv_parser(tmp_path):
    df = pd.DataFrame({"Kernel": ["k_conv", "k_cast", "k_bad"], "OpType": ["Conv", "Cast", "Relu"],
                       "Precision": ["fp16", "fp32", "fp16"], "Nodes": [2, 1, 1], "HostMs": [1.25, 0.5, "nan?"]})
    path = tmp_path / "kernel_times.csv"
    df.to_csv(path, index=False)
    assert detect_format(path).parser.name == "kernel_times_csv"
    res = kernel_times_csv.parse(path)
    s = res.op_summary
    assert s["Task Duration(us)"].tolist() == [1250.0, 500.0] and res.malformed == 1
    assert s["Output Data Types"].tolist() == ["DT_FLOAT16", "DT_FLOAT"] and set(s["Time Kind"]) == {"measured"}
