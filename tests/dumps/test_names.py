"""Dump file names (toolkit/dumps/names.py): device and ONNX golden names, and the naming convention chosen."""

from __future__ import annotations

import pytest

from toolkit.dumps.names import choose_convention, parse_device, parse_onnx_golden

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ------------------------------------------------------------------------------------------- file names
def test_device_names_parse_from_both_ends():
    p = parse_device("Conv2D.backbone.conv.1.5.2.1700000000000123.output.2.1x3x4x4.npy")
    assert (p.op_type, p.name, p.index, p.timestamp, p.role) == ("Conv2D", "backbone.conv.1", 2, 1700000000000123,
                                                                 "output")
    p = parse_device("Add.add_1.4.1.1700000000000000.input.1.npy")
    assert (p.name, p.index, p.role) == ("add_1", 1, "input")
    p = parse_device("Relu.relu_2.4.1.1700000000000000.npy")  # converted without the .output suffix
    assert (p.op_type, p.name, p.index, p.converted) == ("Relu", "relu_2", 0, False)
    assert parse_device("relu_2.0.1700000000000000.npy") is None  # only 3 fields
    assert parse_device("Relu.relu_2.x.1.1700000000000000.npy") is None
    assert parse_device("Relu.relu_2.4.1.1700000000000000").raw  # not converted: a raw dump (toolkit.dumps.raw)


def test_onnx_golden_names_keep_dots_in_the_node():
    p = parse_onnx_golden("block.3.conv.2.1700000000000000.npy")
    assert (p.name, p.index, p.timestamp) == ("block.3.conv", 2, 1700000000000000)
    assert parse_onnx_golden("conv.npy") is None and parse_onnx_golden("a.b.1.npy") is None
    assert parse_onnx_golden("Conv.c.1.2.3.output.0.npy") is None


def test_convention_choice_breaks_ties_by_side():
    both = ["Relu.r.1.2.1700000000000000.npy", "Add.a.1.2.1700000000000001.npy"]  # fit both conventions
    assert choose_convention(both, "onnx")[0] == "onnx"
    assert choose_convention(both, "device")[0] == "device"
    assert choose_convention(["relu.0.1700000000000000.npy"] + both, "device")[0] == "onnx"  # onnx reads more
    assert choose_convention(["x.npy"], "onnx")[0] is None
