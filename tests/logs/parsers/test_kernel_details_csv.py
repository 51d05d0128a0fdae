"""torch_npu's kernel_details.csv (toolkit/logs/parsers/kernel_details_csv.py): the block-dimension columns under
each name the versions give them."""

from __future__ import annotations

import csv

import pytest

from toolkit.logs.parsers import kernel_details_csv

HEAD = ["Step Id", "Device_id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
        "Wait Time(us)"]


@pytest.mark.parametrize("columns, values, want", [
    (["Block Num", "Mix Block Num"], ["8", "4"], (8, 4)),
    (["Block Dim", "Mix Block Dim"], ["16", "2"], (16, 2)),
    (["Block Num", "Block Dim", "Mix Block Num", "Mix Block Dim"], ["8", "99", "4", "99"], (8, 4)),
    (["Block Dim"], ["24"], (24, None)),
])
def test_block_dimensions_are_read_under_every_name(tmp_path, columns, values, want):
    p = tmp_path / "kernel_details.csv"
    with open(p, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HEAD + columns)
        w.writerow(["1", "0", "conv1", "Conv2D", "MIX_AIC", "10.5", "12.25", "0"] + values)
    row = kernel_details_csv.parse(p).op_summary.iloc[0]
    assert row["Block Dim"] == want[0] and row["Task Duration(us)"] == 12.25
    mix = row["Mix Block Dim"]
    assert (mix != mix) if want[1] is None else mix == want[1]  # NaN when the file has no such column


def test_step_id_is_no_model_name_and_hccl_rows_are_communication(tmp_path):
    """Kind: kernel_details.csv names no model (Step Id is a training step): Model Name stays empty; collective
    communication rows get Task Type COMMUNICATION, as op_summary and the timelines give them."""
    p = tmp_path / "kernel_details.csv"
    with open(p, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HEAD)
        w.writerow(["1", "0", "conv1", "Conv2D", "AI Core", "10.5", "12.25", "0"])
        w.writerow(["1", "0", "hcom_allReduce__1", "hcom_allReduce_", "HCCL", "30", "100", "0"])
    s = kernel_details_csv.parse(p).op_summary
    assert s["Model Name"].tolist() == ["", ""]
    assert s["Task Type"].tolist() == ["AI_CORE", "COMMUNICATION"]
