"""toolkit.ir.wire: large initializers' raw_data lifted out of a model's bytes before parsing. Checked against
protobuf's own parse of the whole file: the lifted model is that model without those raw_data, and each recorded
place in the file holds exactly the tensor's bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.core.errors import ModelError
from toolkit.ir import weights
from toolkit.ir.load import load_model
from toolkit.ir.wire import lift_raw_data

MIN = 1024


def _model(rng, sizes=(300, 4, 1000, 20), constant=2000, doc=""):
    """Add chain over initializers of ``sizes`` float32 elements (broadcast by a final ReduceSum), one Constant
    node whose attribute tensor holds ``constant`` elements."""
    inits, nodes, x = [], [], "x"
    for i, n in enumerate(sizes):
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("ReduceSum", [f"w{i}"], [f"s{i}"], keepdims=0, name=f"sum{i}"))
        nodes.append(helper.make_node("Add", [x, f"s{i}"], [f"a{i}"], name=f"add{i}"))
        x = f"a{i}"
    c = numpy_helper.from_array(rng.standard_normal(constant).astype(np.float32), "cval")
    nodes.append(helper.make_node("Constant", [], ["c"], value=c, name="const"))
    nodes.append(helper.make_node("ReduceSum", ["c"], ["cs"], keepdims=0, name="csum"))
    nodes.append(helper.make_node("Add", [x, "cs"], ["y"], name="out"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], inits, doc_string=doc)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _expect(model, data, min_bytes):
    """What the lift must give, from protobuf's parse of ``data``: (the model without big raw_data, {index:
    raw bytes})."""
    whole = onnx.ModelProto.FromString(data)
    big = {i: t.raw_data for i, t in enumerate(whole.graph.initializer)
           if t.HasField("raw_data") and len(t.raw_data) >= min_bytes and not t.external_data
           and not t.HasField("data_location")}
    for i in big:
        whole.graph.initializer[i].ClearField("raw_data")
    return whole, big


@pytest.mark.parametrize("min_bytes", [1, MIN, 3000, 1 << 30])
@pytest.mark.parametrize("seed", [0, 1])
def test_lifted_model_is_protobufs_parse_without_the_large_raw_data(min_bytes, seed):
    model = _model(np.random.default_rng(seed), sizes=tuple(np.random.default_rng(seed).integers(1, 2000, 6)))
    data = model.SerializeToString()
    want, big = _expect(model, data, min_bytes)
    got = lift_raw_data(data, min_bytes)
    if not big:
        assert got is None
        return
    stripped, lifted = got
    assert onnx.ModelProto.FromString(stripped) == want
    assert {lift.index: data[lift.offset:lift.offset + lift.length] for lift in lifted} == big
    assert len(stripped) < len(data)
    # the Constant's attribute tensor is never lifted
    assert [a.t.raw_data for n in onnx.ModelProto.FromString(stripped).graph.node for a in n.attribute] == \
        [a.t.raw_data for n in model.graph.node for a in n.attribute]


def test_protobufs_merge_rules_are_followed():
    """A graph field written twice is merged (initializers counted on); a raw_data written twice keeps the last;
    a tensor naming a data location keeps its bytes."""
    rng = np.random.default_rng(2)
    a = _model(rng, sizes=(600, 700), constant=1)
    b = onnx.ModelProto()
    b.graph.initializer.extend([numpy_helper.from_array(rng.standard_normal(900).astype(np.float32), "extra")])
    twice = numpy_helper.from_array(np.zeros(400, np.float32), "twice")
    b.graph.initializer.append(twice)
    loc = numpy_helper.from_array(rng.standard_normal(800).astype(np.float32), "located")
    loc.data_location = TensorProto.DEFAULT
    b.graph.initializer.append(loc)
    data = a.SerializeToString() + b.SerializeToString()
    want, big = _expect(None, data, MIN)
    stripped, lifted = lift_raw_data(data, MIN)
    assert onnx.ModelProto.FromString(stripped) == want
    assert {x.index: data[x.offset:x.offset + x.length] for x in lifted} == big
    names = [t.name for t in want.graph.initializer]
    assert [names[x.index] for x in lifted] == ["w0", "w1", "extra", "twice"]  # "located" keeps its bytes
    # raw_data twice inside one tensor: build the tensor's bytes by hand (field 9 twice)
    tensor = numpy_helper.from_array(np.zeros(400, np.float32), "dup")
    raw2 = np.full(400, 7, np.float32).tobytes()
    tbytes = tensor.SerializeToString() + bytes([9 << 3 | 2]) + _varint(len(raw2)) + raw2
    gbytes = bytes([5 << 3 | 2]) + _varint(len(tbytes)) + tbytes
    mbytes = bytes([7 << 3 | 2]) + _varint(len(gbytes)) + gbytes
    assert onnx.ModelProto.FromString(mbytes).graph.initializer[0].raw_data == raw2
    stripped, lifted = lift_raw_data(mbytes, MIN)
    assert mbytes[lifted[0].offset:lifted[0].offset + lifted[0].length] == raw2
    assert not onnx.ModelProto.FromString(stripped).graph.initializer[0].HasField("raw_data")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


@pytest.mark.parametrize("cut", [1, 7, 100, -1, -5000])
def test_bytes_it_cannot_follow_give_none(cut):
    data = _model(np.random.default_rng(3), sizes=(2000, 3000)).SerializeToString()
    assert lift_raw_data(data[:cut], MIN) is None
    assert lift_raw_data(b"\xff" * 50, MIN) is None
    assert lift_raw_data(b"", MIN) is None
    assert lift_raw_data(bytes([3 << 3 | 3]) + data, MIN) is None  # a group wire type


def test_load_maps_lifted_weights_with_the_files_values(tmp_path):
    model = _model(np.random.default_rng(4), sizes=(400_000, 10, 300_000))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    loaded = load_model(path)
    for t, orig in zip(loaded.graph.initializer, model.graph.initializer):
        big = len(orig.raw_data) >= weights.MAP_MIN_BYTES
        assert weights.is_mapped(t) == big and not t.raw_data == big, t.name
        np.testing.assert_array_equal(weights.array_of(t), numpy_helper.to_array(orig))
    assert sum(weights.is_mapped(t) for t in loaded.graph.initializer) == 2


def test_a_lifted_weight_of_the_wrong_size_is_named(tmp_path):
    model = _model(np.random.default_rng(5), sizes=(400_000,))
    t = model.graph.initializer[0]
    t.raw_data = t.raw_data[:-4]  # one element short
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelError, match=r"initializer 'w0' holds 1599996 bytes of raw_data but its dims \[400000\] "
                                         r"need 1600000"):
        load_model(path)


def test_a_model_the_checker_refuses_is_still_refused_with_lifted_weights(tmp_path):
    model = _model(np.random.default_rng(6), sizes=(400_000,))
    model.graph.node[1].op_type = "Add"
    del model.graph.node[1].input[:]  # Add with no inputs
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelError, match="fails the ONNX checker"):
        load_model(path)


LOAD = r"""
import json, sys
from toolkit.ir.load import load_model

def status(key):  # VmHWM: this address space's own peak, new at exec (ru_maxrss keeps a forking parent's)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

base = status("VmRSS")
load_model(sys.argv[1])
print(json.dumps({"base": base, "peak": status("VmHWM")}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS from /proc")
def test_loading_weights_inside_the_file_holds_about_one_copy_of_the_file(tmp_path):
    """A 96 MB model with its weights inside: loading it grows the peak RSS by at most 1.5x the file (the
    bytes read, once), where parsing them into the proto and checking them would hold three copies."""
    rng = np.random.default_rng(7)
    model = _model(rng, sizes=(8_000_000, 8_000_000, 8_000_000))
    path = tmp_path / "big.onnx"
    onnx.save(model, str(path))
    size = path.stat().st_size
    out = subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["peak"] - got["base"] <= 1.5 * size, (got, size)
