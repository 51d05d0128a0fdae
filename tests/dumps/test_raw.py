"""Raw Ascend device dump files: toolkit.dumps.raw (reader), toolkit.dumps.raw_writer, and compare-dumps over a
folder of them.

Expected arrays are built with numpy in this file (tests/dumps/layout_refs.py); one header is
encoded byte by byte here from the public dump_data.proto field numbers, so the reader is checked against the
wire format itself and not only against our own writer.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from tests.dumps.layout_refs import ref_fractal_nz, ref_fractal_z, ref_nc1hwc0, ref_ndc1hwc0, ref_nhwc, values

from toolkit.dumps.entry import DumpReadError
from toolkit.dumps.raw import RawDumpError, read_header, read_raw_dump, read_tensor
from toolkit.dumps.raw_writer import RawTensorSpec, encode_raw_dump, write_raw_dump
from toolkit.dumps.readers import SideSpec, read_side
from toolkit.core.errors import InputError

T0 = 1_700_000_000_000_000


# ------------------------------------------------------------------------------------- round trips
def _device(fmt: str, x: np.ndarray, c0: int) -> np.ndarray:
    return {"NC1HWC0": lambda: ref_nc1hwc0(x, c0), "NDC1HWC0": lambda: ref_ndc1hwc0(x, c0),
            "FRACTAL_Z": lambda: ref_fractal_z(x, c0), "FRACTAL_NZ": lambda: ref_fractal_nz(x, c0),
            "NHWC": lambda: ref_nhwc(x)}[fmt]()


CASES = [("NC1HWC0", (2, 19, 3, 5)), ("NC1HWC0", (1, 3, 2, 2)), ("NDC1HWC0", (2, 5, 3, 2, 3)),
         ("NDC1HWC0", (1, 17, 1, 2, 2)), ("FRACTAL_Z", (20, 3, 3, 3)), ("FRACTAL_Z", (16, 17, 1, 1)),
         ("FRACTAL_NZ", (2, 21, 35)), ("FRACTAL_NZ", (5, 16)), ("NHWC", (2, 3, 4, 5))]


@pytest.mark.parametrize("dtype,c0", [(np.float16, 16), (np.float32, 8), (np.float32, 16)])
@pytest.mark.parametrize("fmt,shape", CASES)
def test_round_trip_each_layout(tmp_path, fmt, shape, dtype, c0):
    x = values(shape, dtype)
    path = write_raw_dump(tmp_path / f"Op.op.1.1.{T0}",
                          [RawTensorSpec(_device(fmt, x, c0), fmt, original_shape=shape, original_op=("node", 0))])
    dump, (out,) = read_raw_dump(path)
    assert dump.outputs[0].format == fmt and dump.outputs[0].data_type == ("DT_FLOAT16" if dtype == np.float16
                                                                             else "DT_FLOAT")
    assert out.dtype == dtype and out.shape == shape
    np.testing.assert_array_equal(out, x)
    stored = read_tensor(dump, dump.outputs[0], convert=False)
    np.testing.assert_array_equal(stored, _device(fmt, x, c0))


def test_an_nhwc_original_op_gets_its_data_back_in_nhwc(tmp_path):
    """The original op was NHWC: its original shape is (N,H,W,C) and the converted array is NHWC too."""
    x = values((2, 4, 5, 19), np.float16)  # NHWC
    dev = ref_nc1hwc0(x.transpose(0, 3, 1, 2), 16)
    path = write_raw_dump(tmp_path / "f", [RawTensorSpec(dev, "NC1HWC0", x.shape, ("n", 0), original_format="NHWC")])
    dump, (out,) = read_raw_dump(path)
    assert dump.outputs[0].original_format == "NHWC"
    np.testing.assert_array_equal(out, x)


def test_inputs_and_outputs_are_read_from_their_own_offsets(tmp_path):
    ins = [RawTensorSpec(np.full(3, 7, np.int32)), RawTensorSpec(np.full((2, 2), -1.5, np.float32))]
    outs = [RawTensorSpec(np.arange(5, dtype=np.float16), original_op=("a", 1)),
            RawTensorSpec(np.arange(6, dtype=np.int64).reshape(2, 3) * 10, original_op=("b", 0)),
            RawTensorSpec(np.array([True, False]))]
    path = write_raw_dump(tmp_path / "f", outs, ins, op_name="fused/op", dump_time=123)
    dump = read_header(path)
    assert (dump.op_name, dump.dump_time, dump.version) == ("fused/op", 123, "2.0")
    assert [(t.original_name, t.original_index) for t in dump.outputs] == [("a", 1), ("b", 0), ("", 0)]
    np.testing.assert_array_equal(read_tensor(dump, dump.inputs[1]), np.full((2, 2), -1.5, np.float32))
    np.testing.assert_array_equal(read_tensor(dump, dump.outputs[0]), np.arange(5, dtype=np.float16))
    np.testing.assert_array_equal(read_tensor(dump, dump.outputs[1]), np.arange(6).reshape(2, 3) * 10)
    assert read_tensor(dump, dump.outputs[2]).tolist() == [True, False]


# ---------------------------------------------------------------------- the wire format, encoded by hand
def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _field(number: int, value) -> bytes:
    """A proto field: varint (wire type 0) for ints, length-delimited (wire type 2) for bytes."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _shape(dims) -> bytes:
    return _field(1, b"".join(_varint(d) for d in dims))  # Shape.dim, packed repeated uint64


def test_reader_follows_the_public_field_numbers(tmp_path):
    """DumpData: version 1, dump_time 2, output 3, input 4, op_name 6. OpOutput: data_type 1, format 2, shape 3,
    original_op 4 (name 1, output_index 2), size 6, original_shape 7. OpInput: data_type 1, format 2, shape 3,
    size 5. DT_FLOAT16 = 2, DT_INT32 = 7, FORMAT_ND = 2, FORMAT_NC1HWC0 = 3 (dump_data.proto)."""
    x = values((1, 20, 2, 3), np.float16)
    dev = ref_nc1hwc0(x, 16)
    inp = np.array([4, 5, 6], np.int32)
    out_msg = (_field(1, 2) + _field(2, 3) + _field(3, _shape(dev.shape)) +
               _field(4, _field(1, b"relu_7") + _field(2, 1)) + _field(6, dev.nbytes) + _field(7, _shape(x.shape)))
    in_msg = _field(1, 7) + _field(2, 2) + _field(3, _shape(inp.shape)) + _field(5, inp.nbytes)
    header = (_field(1, b"2.0") + _field(2, T0) + _field(4, in_msg) + _field(3, out_msg) +
              _field(6, b"conv7relu7"))
    path = tmp_path / f"Conv2D.conv7relu7.2.1.{T0}"
    path.write_bytes(struct.pack("<Q", len(header)) + header + inp.tobytes() + dev.tobytes())
    dump, (out,) = read_raw_dump(path)
    assert (dump.op_name, dump.dump_time) == ("conv7relu7", T0)
    t = dump.outputs[0]
    assert (t.original_name, t.original_index, t.format, t.shape, t.original_shape) == \
        ("relu_7", 1, "NC1HWC0", (1, 2, 2, 3, 16), (1, 20, 2, 3))
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(read_tensor(dump, dump.inputs[0]), inp)
    # and our writer produces a file this reader sees the same way
    again = write_raw_dump(tmp_path / "again", [RawTensorSpec(dev, "NC1HWC0", x.shape, ("relu_7", 1))],
                           [RawTensorSpec(inp)], op_name="conv7relu7", dump_time=T0)
    np.testing.assert_array_equal(read_raw_dump(again)[1][0], x)


# ------------------------------------------------------------------------------------------- malformed
def _good(**kw) -> bytes:
    spec = dict(data=np.arange(6, dtype=np.float16).reshape(2, 3), original_op=("n", 0))
    spec.update(kw)
    return encode_raw_dump([RawTensorSpec(**spec)], op_name="op", dump_time=1)


def _set_header_length(data: bytes, n: int) -> bytes:
    return struct.pack("<Q", n) + data[8:]


def _bad_protobuf() -> bytes:
    header = b"\x0f\xff\xff\xff"  # wire type 7 does not exist
    return struct.pack("<Q", len(header)) + header


MALFORMED = {
    "short header": (lambda: b"\x01\x00\x00", "truncated: 3 byte(s), less than the 8-byte header length"),
    "header length beyond the file": (lambda: _set_header_length(_good(), 10 ** 9), "header length 1000000000 exceeds"),
    "not protobuf": (_bad_protobuf, "header is not a DumpData protobuf message"),
    "truncated data": (lambda: _good()[:-1], "sizes do not add up"),
    "trailing bytes": (lambda: _good() + b"\x00\x00", "sizes do not add up"),
    "size vs shape": (lambda: _good(shape=(2, 4), size=12),
                      "size 12 bytes does not match its shape (2,4) of DT_FLOAT16"),
    "unknown dtype enum": (lambda: _good(data_type=99), "output 0: unknown data_type enum 99"),
    "unknown format enum": (lambda: _good(format=77), "output 0: unknown format enum 77"),
    "no tensor": (lambda: b"\x00" * 8, "declares no input and no output tensor"),
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_malformed_files_are_one_line_input_errors(tmp_path, kind):
    make, said = MALFORMED[kind]
    path = tmp_path / f"Add.add_{kind.replace(' ', '_')}.1.1.{T0}"
    path.write_bytes(make())
    with pytest.raises(RawDumpError) as info:
        read_header(path)
    msg = str(info.value)
    assert isinstance(info.value, InputError)
    assert said in msg and str(path) in msg and "\n" not in msg, msg


@pytest.mark.parametrize("kw,said", [(dict(format="FRACTAL_Z_3D"), "format FRACTAL_Z_3D is not converted"),
                                     (dict(data_type="DT_STRING"), "data_type DT_STRING is not read"),
                                     (dict(format="NC1HWC0"), "NC1HWC0 data needs a 5-D stored shape")])
def test_tensors_that_cannot_be_converted_fail_when_read(tmp_path, kw, said):
    path = tmp_path / "f"
    path.write_bytes(_good(**kw))
    dump = read_header(path)  # the header itself is fine
    with pytest.raises(RawDumpError) as info:
        read_tensor(dump, dump.outputs[0])
    assert said in str(info.value) and str(path) in str(info.value)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / f"Add.add.1.1.{T0}"
    os.mkfifo(path)
    with pytest.raises(RawDumpError, match="not a regular file"):
        read_header(path)


# ------------------------------------------------------------------------------- compare-dumps folders
def _golden(folder, arrays: dict) -> str:
    folder.mkdir()
    for i, (node, arr) in enumerate(arrays.items()):
        np.save(folder / f"{node}.0.{T0 + i}.npy", arr)
    return str(folder)


def _target(folder) -> tuple[str, dict]:
    """A fused Conv+Relu op (NC1HWC0, output recorded as relu1:0), a MatMul without original_op (FRACTAL_NZ, one
    value off by 0.5), and a malformed file."""
    folder.mkdir()
    relu = np.maximum(values((1, 3, 4, 4), np.float16) - 900, 0).astype(np.float16)
    mm = values((5, 7), np.float16)
    mm_dev = ref_fractal_nz(mm, 16).copy()
    mm_dev[0, 0, 2, 3] += np.float16(0.5)  # element (2, 3)
    write_raw_dump(folder / f"Conv2D.conv1relu1.3.1.{T0}",
                   [RawTensorSpec(ref_nc1hwc0(relu, 16), "NC1HWC0", relu.shape, ("relu1", 0))],
                   [RawTensorSpec(np.zeros((1, 3, 4, 4), np.float16))], op_name="conv1relu1")
    write_raw_dump(folder / f"MatMul.mm.4.1.{T0 + 5}", [RawTensorSpec(mm_dev, "FRACTAL_NZ", mm.shape)],
                   [RawTensorSpec(np.zeros(2, np.float16)), RawTensorSpec(np.zeros(2, np.float16))], op_name="mm")
    (folder / f"Add.add9.5.1.{T0 + 9}").write_bytes(_set_header_length(_good(), 10 ** 6))
    return str(folder), {"relu1": relu.astype(np.float32), "mm": mm.astype(np.float32),
                         "conv1": values((1, 3, 4, 4), np.float32), "add9": np.zeros((2, 3), np.float32)}


def test_compare_dumps_reads_a_folder_of_raw_dumps(tmp_path):
    from toolkit.commands.compare_dumps import compare_dumps

    target, gold = _target(tmp_path / "T")
    golden = _golden(tmp_path / "G", gold)
    diag = compare_dumps(SideSpec(golden, "golden"), SideSpec(target, "target"),
                         mapping=None)
    rows = diag.table.set_index("NodeName")
    assert rows.loc["relu1", "Kernel"] == "conv1relu1" and rows.loc["relu1", "CompareFailReason"] == ""
    assert rows.loc["relu1", "MaxAbsoluteError"] == 0 and rows.loc["relu1", "NPUDump"] == "float16"
    assert rows.loc["mm", "MaxAbsoluteError"] == pytest.approx(0.5, abs=0.01)  # the planted error, found in place
    assert rows.loc["conv1", "CompareFailReason"] == "no target dump"
    assert rows.loc["add9", "CompareFailReason"].startswith(
        f"target dump unreadable (Add.add9.5.1.{T0 + 9}): raw dump: header length 1000000 exceeds")
    assert diag.summary["target"]["input_dumps_skipped"] == 3
    assert "raw device dump file(s)" in diag.summary["target"]["detail"]


def test_original_op_and_a_mapping_together(tmp_path):
    """The mapping still names the fused originals; the recorded original_op still decides the tensor."""
    import json

    from toolkit.commands.compare_dumps import compare_dumps

    target, gold = _target(tmp_path / "T")
    golden = _golden(tmp_path / "G", gold)
    (tmp_path / "map.json").write_text(json.dumps({"conv1relu1": ["conv1", "relu1"]}))
    diag = compare_dumps(SideSpec(golden, "golden"), SideSpec(target, "target"), mapping=str(tmp_path / "map.json"))
    rows = diag.table.set_index("NodeName")
    assert rows.loc["conv1", "CompareFailReason"] == "fused into conv1relu1"
    assert rows.loc["relu1", "FusedNodes"] == "conv1;relu1" and rows.loc["relu1", "MaxAbsoluteError"] == 0
    assert not any("no target dump" in n for n in diag.summary.get("notes", []))


def test_folder_rows_of_a_malformed_raw_dump_and_of_the_old_empty_header(tmp_path):
    """The 8-zero-byte file that compare-dumps used to refuse as 'unconverted' is now read, and says why it
    holds nothing."""
    (tmp_path / "T").mkdir()
    (tmp_path / "T" / f"Relu.relu_2.4.1.{T0}").write_bytes(b"\x00" * 8)
    ds = read_side(SideSpec(str(tmp_path / "T"), "target"))
    (entry,) = ds.entries
    assert (entry.name, entry.index, entry.op_type) == ("relu_2", 0, "Relu")
    with pytest.raises(DumpReadError, match="raw dump: the header declares no input and no output tensor"):
        entry.load()


def test_with_a_model_the_original_op_names_the_onnx_tensor(tmp_path):
    """With --model, the fused op's output (recorded as relu1:0) is compared as tensor 't_relu', in graph order."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from toolkit.commands.compare_dumps import compare_dumps

    nodes = [helper.make_node("Relu", ["x"], ["t_conv"], name="conv1"),
             helper.make_node("Relu", ["t_conv"], ["t_relu"], name="relu1"),
             helper.make_node("MatMul", ["m", "w"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4]),
                                           helper.make_tensor_value_info("m", TensorProto.FLOAT, [5, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 7]),
                               helper.make_tensor_value_info("t_relu", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [numpy_helper.from_array(np.zeros((2, 7), np.float32), "w")])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    target, gold = _target(tmp_path / "T")
    golden = _golden(tmp_path / "G", gold)
    diag = compare_dumps(SideSpec(golden, "golden"), SideSpec(target, "target"), model=str(model))
    rows = diag.table.set_index("TensorName")
    assert list(rows.index[:3]) == ["t_conv", "t_relu", "y"]
    assert rows.loc["t_relu", "Kernel"] == "conv1relu1" and rows.loc["t_relu", "MaxAbsoluteError"] == 0
    assert rows.loc["y", "MaxAbsoluteError"] == pytest.approx(0.5, abs=0.01)
    assert rows.loc["t_conv", "CompareFailReason"] == "no target dump"
