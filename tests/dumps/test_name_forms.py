"""toolkit.dumps.names: every device dump name form, op names with dots, names that cannot be read (rows with
their reason), and the device's nested folder layout (toolkit.dumps.nested through read_side)."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.dumps.entry import DumpReadError
from toolkit.dumps.names import choose_convention, device_name, dump_like, name_problem, parse_device
from toolkit.dumps.raw_writer import RawTensorSpec, write_raw_dump
from toolkit.dumps.readers import SideSpec, read_side
from toolkit.core.errors import InputError

T0 = 1_700_000_000_000_000


def fields(p):
    return (p.op_type, p.name, p.index, p.timestamp, p.role, p.form, p.raw)


@pytest.mark.parametrize("filename,expected", [
    # 5-field, raw and converted
    (f"Conv2D.conv1.3.1.{T0}", ("Conv2D", "conv1", 0, T0, "output", "5-field", True)),
    (f"Conv2D.conv1.3.1.{T0}.output.2.npy", ("Conv2D", "conv1", 2, T0, "output", "5-field", False)),
    (f"Conv2D.conv1.3.1.{T0}.input.1.1x3x4x4.npy", ("Conv2D", "conv1", 1, T0, "input", "5-field", False)),
    (f"Conv2D.block.3.conv.7.2.{T0}", ("Conv2D", "block.3.conv", 0, T0, "output", "5-field", True)),
    # 4-field (older toolchains): raw, and converted with the .output suffix
    (f"Add.add_1.4.{T0}", ("Add", "add_1", 0, T0, "output", "4-field", True)),
    (f"Add.head.add.4.{T0}", ("Add", "head.add", 0, T0, "output", "4-field", True)),
    (f"Add.add_1.4.{T0}.output.1.npy", ("Add", "add_1", 1, T0, "output", "4-field", False)),
    # 9-field (and 8-field with one id before the timestamp)
    (f"Conv2D.conv1.3.1.{T0}.4.0.12.0", ("Conv2D", "conv1", 0, T0, "output", "9-field", True)),
    (f"Conv2D.layer.1.conv.3.1.{T0}.4.0.12.7", ("Conv2D", "layer.1.conv", 0, T0, "output", "9-field", True)),
    (f"Conv2D.conv1.3.1.{T0}.4.0.12.0.output.1.npy", ("Conv2D", "conv1", 1, T0, "output", "9-field", False)),
    (f"Conv2D.conv1.3.1.{T0}.4.0.12.0.npy", ("Conv2D", "conv1", 0, T0, "output", "9-field", False)),
    (f"Conv2D.conv.a.3.{T0}.4.0.12.0", ("Conv2D", "conv.a", 0, T0, "output", "8-field", True)),
    # MindSpore's .npy with format and dtype
    (f"Conv2D.Default.net.conv1.3.1.{T0}.output.0.DefaultFormat.float16.npy",
     ("Conv2D", "Default.net.conv1", 0, T0, "output", "5-field", False)),
])
def test_device_name_forms(filename, expected):
    p = parse_device(filename)
    assert p is not None and fields(p) == expected


def test_the_nine_field_form_is_no_longer_read_as_five_fields():
    """Before: op_name 'conv1.3.1.<ts>.4' with timestamp 0 (the last three integers taken as ids)."""
    p = parse_device(f"Conv2D.conv1.3.1.{T0}.4.0.12.0.output.0.npy")
    assert (p.name, p.timestamp) == ("conv1", T0)


def test_mindspore_format_and_dtype_are_kept():
    p = parse_device(f"MatMul.mm.3.1.{T0}.output.0.FRACTAL_NZ.float16.npy")
    assert (p.name, p.layout, p.dtype, p.converted) == ("mm", "FRACTAL_NZ", "float16", True)


@pytest.mark.parametrize("filename,said", [
    ("notes.bin", "2 dot-separated field(s)"),
    (f"Add.add.x.{T0}", "'x' before the timestamp is not an integer id"),
    ("Add.add.1.2.end", "the last field 'end' is not an integer timestamp"),
    (f".add.1.1.{T0}", "empty op_type"),
    (f"Add.add_1.4.{T0}.npy", "4-field device name as a plain .npy"),
    (f"Conv2D.conv1.x.{T0}.4.0.12.0", "'x' before the timestamp"),
])
def test_names_that_do_not_parse_say_why(filename, said):
    assert parse_device(filename) is None
    assert said in device_name(filename) and said in name_problem("device", filename)


def test_onnx_golden_problem_and_what_counts_as_dump_like():
    assert "expected {node}.{output_index}.{timestamp}.npy" in name_problem("onnx", "weights.npy")
    assert name_problem("onnx", "conv.0.12.npy") == ""
    assert dump_like("onnx", "weights.npy") and not dump_like("onnx", f"Add.add.1.1.{T0}")
    assert dump_like("device", f"Add.add.x.1.{T0}") and not dump_like("device", "notes.bin")


def test_an_ambiguous_name_is_read_as_five_fields():
    """'Add.add.1.4.<ts>' fits the 5-field form (op 'add', task 1, stream 4) and the 4-field one (op 'add.1'):
    the 5-field form, the usual one, wins."""
    assert fields(parse_device(f"Add.add.1.4.{T0}"))[:2] == ("Add", "add") and \
        parse_device(f"Add.add.1.4.{T0}").form == "5-field"


def test_a_raw_folder_chooses_the_device_convention():
    names = [f"Conv2D.conv1.3.1.{T0}", f"Relu.relu1.4.1.{T0 + 1}", "README.txt"]
    assert choose_convention(names, "onnx") == ("device", {"onnx": 0, "device": 2})


# --------------------------------------------------------------------------------------- folders
def _raw(folder, name, arr, original_op=None):
    folder.mkdir(parents=True, exist_ok=True)
    write_raw_dump(folder / name, [RawTensorSpec(arr, original_op=original_op)])  # no op_name: the file name's


def test_nine_field_raw_folder_entries(tmp_path):
    _raw(tmp_path, f"Conv2D.conv1.3.1.{T0}.4.0.12.0", np.ones(3, np.float16))
    _raw(tmp_path, f"Add.head.add.4.{T0 + 7}", np.zeros(2, np.float16))  # 4-field, op name with a dot
    ds = read_side(SideSpec(str(tmp_path), "target"))
    assert sorted((e.name, e.index, e.op_type, e.timestamp) for e in ds.entries) == \
        [("conv1", 0, "Conv2D", T0), ("head.add", 0, "Add", T0 + 7)]
    np.testing.assert_array_equal(next(e for e in ds.entries if e.name == "conv1").load(), np.ones(3, np.float16))


def test_unparseable_dump_names_become_rows_with_their_reason(tmp_path):
    _raw(tmp_path, f"Conv2D.conv1.3.1.{T0}", np.ones(3, np.float16))
    (tmp_path / f"Conv2D.conv2.x.y.{T0}").write_bytes(b"")  # dump-like, but 'y' is no task id
    np.save(tmp_path / "stray.npy", np.zeros(2))
    (tmp_path / "notes.txt").write_text("hi")  # not dump-like: listed as ignored
    ds = read_side(SideSpec(str(tmp_path), "target"))
    by_source = {e.source: e for e in ds.entries}
    assert set(by_source) == {f"Conv2D.conv1.3.1.{T0}", f"Conv2D.conv2.x.y.{T0}", "stray.npy"}
    assert ds.ignored == ["notes.txt"]
    with pytest.raises(DumpReadError, match="file name not understood: 'y' before the timestamp"):
        by_source[f"Conv2D.conv2.x.y.{T0}"].load()
    with pytest.raises(DumpReadError, match="file name not understood: 1 dot-separated"):
        by_source["stray.npy"].load()


def test_unparseable_rows_reach_result_csv(tmp_path):
    from toolkit.commands.compare_dumps import compare_dumps

    (tmp_path / "G").mkdir()
    np.save(tmp_path / "G" / "conv1.0.5.npy", np.ones(3, np.float32))
    _raw(tmp_path / "T", f"Conv2D.conv1.3.1.{T0}", np.ones(3, np.float16))
    (tmp_path / "T" / f"Conv2D.conv2.x.y.{T0}").write_bytes(b"")
    diag = compare_dumps(SideSpec(str(tmp_path / "G"), "golden"), SideSpec(str(tmp_path / "T"), "target"))
    reasons = dict(zip(diag.table["TargetDump"], diag.table["CompareFailReason"]))
    assert reasons[f"Conv2D.conv1.3.1.{T0}"] == ""
    assert reasons[f"Conv2D.conv2.x.y.{T0}"].startswith(
        f"no golden dump; target dump unreadable (Conv2D.conv2.x.y.{T0}): file name not understood:")


def test_nested_device_layout_is_read_from_its_one_dump_folder(tmp_path):
    leaf = tmp_path / "20240101120000" / "0" / "resnet50" / "1" / "0"
    _raw(leaf, f"Conv2D.conv1.3.1.{T0}", np.arange(4, dtype=np.float16))
    ds = read_side(SideSpec(str(tmp_path), "target"))
    assert ds.path == leaf and [e.name for e in ds.entries] == ["conv1"]
    assert ds.detail.startswith("nested folder '20240101120000/0/resnet50/1/0'")
    np.testing.assert_array_equal(ds.entries[0].load(), np.arange(4, dtype=np.float16))


def test_nested_layout_with_several_iterations_names_them(tmp_path):
    model = tmp_path / "20240101120000" / "0" / "resnet50" / "1"
    for it in ("0", "1"):
        _raw(model / it, f"Conv2D.conv1.3.1.{T0}", np.ones(2, np.float16))
    with pytest.raises(InputError) as info:
        read_side(SideSpec(str(tmp_path), "target"))
    msg = str(info.value)
    assert "dumps in 2 nested folders ('20240101120000/0/resnet50/1/0', '20240101120000/0/resnet50/1/1')" in msg
    assert "\n" not in msg
    ds = read_side(SideSpec(str(model / "1"), "target"))  # one iteration given: read as it is
    assert [e.name for e in ds.entries] == ["conv1"]


def test_a_tree_of_empty_folders_is_still_an_empty_folder(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    with pytest.raises(InputError, match="is an empty folder"):
        read_side(SideSpec(str(tmp_path), "target"))
