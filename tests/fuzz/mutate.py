"""A seeded mutation generator of ONNX model files, as a hostile user would make them (issue 20).

Independent of npuscope (only onnx, numpy and the standard library): the quick in-suite fuzzer
(tests/fuzz/test_fuzz.py) and bench/fuzz.py both draw from it. :func:`mutants` yields :class:`Mutant` s from a
list of seed models (``(name, ModelProto)``) with ``random.Random(seed)``: the same seed, seeds and count give
the same bytes, byte for byte.

Mutation kinds (:data:`KINDS`), each an edit of the proto or of its serialised bytes:

- proto fields: external-data ``offset`` not an integer, external-data ``location`` with a NUL byte, dtype enums
  that do not exist (initializer ``data_type`` 0 / 99, ``Cast to=0``, input ``elem_type`` -1), initializer
  raw_data longer or shorter than its dims imply, a value_info type contradicting the op (dtype or shape), a
  sparse initializer, strings that are not UTF-8 (node name, op_type, producer, graph name, tensor names,
  domain), declared output dims that are wrong (0 or 5), zero-size input dims, ir_version 0 / 3, value_info
  without a type, a duplicate opset_import, negative or huge attribute integers, a dangling node input, a
  negative initializer dim; an attribute of another type than the op takes, or left out; a cycle (a node reading a
  later node's output, or its own); two nodes writing one tensor; an opset version that does not exist (0, 27, 99);
  an unknown op type or domain; a node with an input too many, no input, no output or an extra output; nodes out
  of topological order; a graph output no node writes; a huge input dim (2^31, 2^40); a graph input/output of a
  dtype the device has no kernels for (string, complex, bfloat16, float8, uint4, bool); the first output routed
  through an If whose branches disagree (dtype, output count, or a branch reading a tensor that exists nowhere);
- bytes: bit flips (1 to 16 random bits) and truncation (at a random point).

Strings that are not UTF-8 cannot be set through protobuf's Python API: a marker of the same length is set
and replaced in the serialised bytes (the length prefix stays right).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


@dataclass(frozen=True)
class Mutant:
    """One mutated model: ``data`` the bytes of the .onnx file, ``seed`` the base model's name, ``kind`` the
    mutation (a key of :data:`KINDS`), ``index`` its position in the stream (with the stream's seed, enough to
    make it again)."""

    index: int
    seed: str
    kind: str
    data: bytes

    @property
    def label(self) -> str:
        return f"{self.index:05d}-{self.seed}-{self.kind}"


_MARK = b"ZQXMARKZQX"  # ASCII placeholder, replaced by as many bytes that are not UTF-8
_BAD = b"\xff\xfe\x80" + b"\xc3" + b"\xa0\xe2\x28\xa1\xf0\x28"  # same length as _MARK


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(m)
    return out


def _ser(m: onnx.ModelProto) -> bytes:
    return m.SerializeToString()


def _pick(rng: random.Random, seq):
    seq = list(seq)
    return seq[rng.randrange(len(seq))] if seq else None


def _tensor_inits(m):
    return [t for t in m.graph.initializer if len(t.dims) > 0]


# ----------------------------------------------------------------------------------------- proto edits
def _external(m, rng, field: str):
    t = _pick(rng, _tensor_inits(m))
    if t is None:
        return None
    t.ClearField("raw_data")
    for f in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        t.ClearField(f)
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    loc = "weights.bin"
    entries = {"location": loc, "offset": "0", "length": str(4 * int(np.prod(t.dims)))}
    if field == "offset":
        entries["offset"] = _pick(rng, ["abc", "-1", "1e3", "0x10", "", "99999999999999999999999"])
    elif field == "location":
        entries["location"] = "w\x00eights.bin"
    elif field == "data_type":
        t.data_type = 0
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return _ser(m)


def _ext_offset(m, rng):
    return _external(m, rng, "offset")


def _ext_location_nul(m, rng):
    return _external(m, rng, "location")


def _ext_dtype0(m, rng):
    return _external(m, rng, "data_type")


def _bad_init_dtype(m, rng):
    t = _pick(rng, m.graph.initializer)
    if t is None:
        return None
    t.data_type = _pick(rng, [0, 99, -3, 17 + 100])
    return _ser(m)


def _bad_cast_to(m, rng):
    casts = [n for n in m.graph.node if n.op_type == "Cast"]
    node = _pick(rng, casts)
    if node is None:  # make one: Cast to=0 of the first input
        node = m.graph.node.add()
        node.CopyFrom(helper.make_node("Cast", [m.graph.input[0].name], ["fuzz_cast_out"], name="fuzz_cast", to=1))
        m.graph.output.add().CopyFrom(helper.make_tensor_value_info("fuzz_cast_out", TensorProto.FLOAT, None))
    for a in node.attribute:
        if a.name == "to":
            a.i = _pick(rng, [0, -1, 99])
    return _ser(m)


def _bad_input_elem(m, rng):
    vi = _pick(rng, list(m.graph.input) + list(m.graph.output))
    if vi is None:
        return None
    vi.type.tensor_type.elem_type = _pick(rng, [-1, 0, 99])
    return _ser(m)


def _raw_data_length(m, rng):
    t = _pick(rng, [t for t in _tensor_inits(m) if t.data_type == TensorProto.FLOAT])
    if t is None:
        return None
    arr = numpy_helper.to_array(t)
    t.CopyFrom(numpy_helper.from_array(arr, t.name))
    extra = _pick(rng, [4, 1, 4096, -4])
    t.raw_data = t.raw_data + b"\0" * extra if extra > 0 else t.raw_data[:extra]
    return _ser(m)


def _value_info_contradicts(m, rng):
    node = _pick(rng, [n for n in m.graph.node if n.output])
    if node is None:
        return None
    name = node.output[0]
    for vi in list(m.graph.value_info):
        if vi.name == name:
            m.graph.value_info.remove(vi)
    if rng.random() < 0.5:
        m.graph.value_info.append(helper.make_tensor_value_info(name, _pick(rng, [TensorProto.INT64, TensorProto.BOOL,
                                                                                  TensorProto.STRING]), None))
    else:
        m.graph.value_info.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                                [_pick(rng, [0, 1, 3, 7])] * rng.randint(0, 5)))
    return _ser(m)


def _sparse_initializer(m, rng):
    t = _pick(rng, [t for t in _tensor_inits(m) if t.data_type == TensorProto.FLOAT])
    if t is None:
        return None
    arr = numpy_helper.to_array(t)
    flat = arr.reshape(-1)
    idx = np.nonzero(flat)[0].astype(np.int64)
    values = numpy_helper.from_array(flat[idx].astype(np.float32), t.name)
    indices = numpy_helper.from_array(idx, t.name + "_indices")
    sparse = helper.make_sparse_tensor(values, indices, list(arr.shape))
    m.graph.initializer.remove(t)
    m.graph.sparse_initializer.append(sparse)
    return _ser(m)


def _non_utf8(m, rng):
    where = _pick(rng, ["node_name", "op_type", "producer", "graph_name", "tensor", "domain", "doc_string",
                        "input_name"])
    mark = _MARK.decode()
    node = _pick(rng, m.graph.node)
    if where == "node_name" and node is not None:
        node.name = mark
    elif where == "op_type" and node is not None:
        node.op_type = mark
    elif where == "producer":
        m.producer_name = mark
    elif where == "graph_name":
        m.graph.name = mark
    elif where == "domain" and node is not None:
        node.domain = mark
    elif where == "doc_string":
        m.doc_string = mark
    elif where == "input_name" and m.graph.input:
        old = m.graph.input[0].name
        m.graph.input[0].name = mark
        for n in m.graph.node:
            for i, x in enumerate(n.input):
                if x == old:
                    n.input[i] = mark
    elif node is not None and node.output:
        old = node.output[0]
        node.output[0] = mark
        for n in m.graph.node:
            for i, x in enumerate(n.input):
                if x == old:
                    n.input[i] = mark
        for o in m.graph.output:
            if o.name == old:
                o.name = mark
    else:
        return None
    return _ser(m).replace(_MARK, _BAD)


def _output_dim(m, rng):
    o = _pick(rng, m.graph.output)
    if o is None or not o.type.tensor_type.HasField("shape") or not o.type.tensor_type.shape.dim:
        return None
    d = _pick(rng, o.type.tensor_type.shape.dim)
    d.Clear()
    d.dim_value = _pick(rng, [0, 5, 1, 1000])
    return _ser(m)


def _input_dim(m, rng, value):
    """A random dim of a random graph input set to ``value(rng)``; None when no input has a dim."""
    i = _pick(rng, m.graph.input)
    if i is None or not i.type.tensor_type.shape.dim:
        return None
    d = _pick(rng, i.type.tensor_type.shape.dim)
    d.Clear()
    d.dim_value = value(rng)
    return _ser(m)


def _zero_input_dim(m, rng):
    return _input_dim(m, rng, lambda _rng: 0)


def _ir_version(m, rng):
    m.ir_version = _pick(rng, [0, 3, 1, 99])
    return _ser(m)


def _untyped_value_info(m, rng):
    node = _pick(rng, [n for n in m.graph.node if n.output])
    if node is None:
        return None
    m.graph.value_info.append(onnx.ValueInfoProto(name=node.output[0]))
    return _ser(m)


def _duplicate_opset(m, rng):
    op = m.opset_import.add()
    op.domain = ""
    op.version = _pick(rng, [7, 11, 13, 17, 21, 99])
    return _ser(m)


def _attribute_int(m, rng):
    cands = [(n, a) for n in m.graph.node for a in n.attribute if a.type in (onnx.AttributeProto.INT,
                                                                            onnx.AttributeProto.INTS)]
    pick = _pick(rng, cands)
    if pick is None:
        return None
    _, a = pick
    bad = _pick(rng, [-1, 0, 2**31, -(2**40), 7])
    if a.type == onnx.AttributeProto.INT:
        a.i = bad
    elif a.ints:
        a.ints[rng.randrange(len(a.ints))] = bad
    return _ser(m)


def _dangling_input(m, rng):
    node = _pick(rng, [n for n in m.graph.node if n.input])
    if node is None:
        return None
    node.input[rng.randrange(len(node.input))] = _pick(rng, ["nowhere", "", node.output[0] if node.output else "x"])
    return _ser(m)


def _negative_dim(m, rng):
    t = _pick(rng, _tensor_inits(m))
    if t is None:
        return None
    t.dims[rng.randrange(len(t.dims))] = _pick(rng, [-1, -(2**33), 2**40])
    return _ser(m)


def _attribute_type(m, rng):
    cands = [(n, a) for n in m.graph.node for a in n.attribute
             if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS, onnx.AttributeProto.FLOAT,
                           onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRING)]
    pick = _pick(rng, cands)
    if pick is None:
        return None
    node, a = pick
    value = _pick(rng, [1.5, "fuzz", [1, 2], 3, [0.5, 0.25], [b"a", b"b"]])
    new = helper.make_attribute(a.name, value)
    if new.type == a.type:
        new = helper.make_attribute(a.name, "fuzz")
    a.CopyFrom(new)
    return _ser(m)


def _drop_attribute(m, rng):
    node = _pick(rng, [n for n in m.graph.node if n.attribute])
    if node is None:
        return None
    del node.attribute[rng.randrange(len(node.attribute))]
    return _ser(m)


def _cycle(m, rng):
    nodes = [n for n in m.graph.node if n.input and n.output]
    if len(nodes) < 2:
        return None
    i, j = sorted(rng.sample(range(len(nodes)), 2))
    a, b = nodes[i], nodes[j]
    if rng.random() < 0.5:  # an earlier node reads a later node's output: a cycle when b depends on a
        a.input[rng.randrange(len(a.input))] = b.output[0]
    else:  # a node reads its own output
        b.input[rng.randrange(len(b.input))] = b.output[0]
    return _ser(m)


def _duplicate_output(m, rng):
    nodes = [n for n in m.graph.node if n.output]
    if len(nodes) < 2:
        return None
    i, j = sorted(rng.sample(range(len(nodes)), 2))
    nodes[j].output[0] = nodes[i].output[0]
    return _ser(m)


def _opset_version(m, rng):
    ops = [o for o in m.opset_import if o.domain in ("", "ai.onnx")]
    if not ops:
        return None
    ops[0].version = _pick(rng, [0, 1, 6, 27, 99, -1])
    return _ser(m)


def _unknown_op(m, rng):
    node = _pick(rng, m.graph.node)
    if node is None:
        return None
    if rng.random() < 0.6:
        node.op_type = _pick(rng, ["NoSuchOp", "conv", "Conv2D", "", "Relu "])
    else:
        node.domain = _pick(rng, ["com.example", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training"])
    return _ser(m)


def _arity(m, rng):
    node = _pick(rng, [n for n in m.graph.node if n.input])
    if node is None:
        return None
    how = rng.randrange(4)
    if how == 0:  # one input too many (a tensor that exists)
        node.input.append(node.input[0])
    elif how == 1:
        del node.input[:]
    elif how == 2:
        del node.output[:]
    else:  # an extra output nobody declared
        node.output.append(node.output[0] + "_fuzz_extra" if node.output else "fuzz_extra")
    return _ser(m)


def _shuffle_nodes(m, rng):
    if len(m.graph.node) < 2:
        return None
    nodes = list(m.graph.node)
    rng.shuffle(nodes)
    if [n.SerializeToString() for n in nodes] == [n.SerializeToString() for n in m.graph.node]:
        nodes.reverse()
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return _ser(m)


def _undefined_output(m, rng):
    name = _pick(rng, ["fuzz_missing", m.graph.input[0].name if m.graph.input else "fuzz_missing", ""])
    m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return _ser(m)


def _huge_input_dim(m, rng):
    return _input_dim(m, rng, lambda r: _pick(r, [2**31, 2**40, 10**12, 65536]))


def _exotic_io_dtype(m, rng):
    vi = _pick(rng, list(m.graph.input) + list(m.graph.output))
    if vi is None:
        return None
    vi.type.tensor_type.elem_type = _pick(rng, [TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.BFLOAT16,
                                                TensorProto.FLOAT8E4M3FN, TensorProto.UINT4, TensorProto.BOOL])
    return _ser(m)


def _bad_subgraph(m, rng):
    """The graph's first output routed through an If whose branches disagree (dtype, rank or output count), or a
    Loop whose body has a wrong signature."""
    if not m.graph.output or not m.graph.node:
        return None
    out = m.graph.output[0].name
    inner = out + "_fuzz_pre"
    for n in m.graph.node:
        for k, o in enumerate(n.output):
            if o == out:
                n.output[k] = inner
    how = rng.randrange(3)
    then_g = helper.make_graph([helper.make_node("Identity", [inner], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)])
    if how == 0:  # else yields another dtype
        else_g = helper.make_graph([helper.make_node("Cast", [inner], ["e_out"], to=TensorProto.INT64)], "else", [],
                                   [helper.make_tensor_value_info("e_out", TensorProto.INT64, None)])
    elif how == 1:  # else yields two outputs
        else_g = helper.make_graph([helper.make_node("Identity", [inner], ["e_out"]),
                                    helper.make_node("Identity", [inner], ["e_out2"])], "else", [],
                                   [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None),
                                    helper.make_tensor_value_info("e_out2", TensorProto.FLOAT, None)])
    else:  # else reads a tensor that exists nowhere
        else_g = helper.make_graph([helper.make_node("Identity", ["fuzz_nowhere"], ["e_out"])], "else", [],
                                   [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)])
    cond = numpy_helper.from_array(np.array(rng.random() < 0.5), "fuzz_cond")
    m.graph.initializer.append(cond)
    m.graph.node.append(helper.make_node("If", ["fuzz_cond"], [out], then_branch=then_g, else_branch=else_g,
                                         name="fuzz_if"))
    return _ser(m)


# ----------------------------------------------------------------------------------------- byte edits
def _bit_flips(m, rng):
    data = bytearray(_ser(m))
    for _ in range(rng.randint(1, 16)):
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)
    return bytes(data)


def _truncate(m, rng):
    data = _ser(m)
    return data[:rng.randrange(max(1, len(data)))]


#: mutation kind -> fn(model copy, rng) -> bytes, or None when the model has nothing to mutate that way
KINDS: dict[str, Callable] = {
    "ext_offset": _ext_offset, "ext_location_nul": _ext_location_nul, "ext_dtype0": _ext_dtype0,
    "init_dtype": _bad_init_dtype, "cast_to": _bad_cast_to, "io_elem_type": _bad_input_elem,
    "raw_data_length": _raw_data_length, "value_info_contradicts": _value_info_contradicts,
    "sparse_initializer": _sparse_initializer, "non_utf8": _non_utf8, "output_dim": _output_dim,
    "zero_input_dim": _zero_input_dim, "ir_version": _ir_version, "untyped_value_info": _untyped_value_info,
    "duplicate_opset": _duplicate_opset, "attribute_int": _attribute_int, "dangling_input": _dangling_input,
    "negative_dim": _negative_dim, "attribute_type": _attribute_type, "drop_attribute": _drop_attribute,
    "cycle": _cycle, "duplicate_output": _duplicate_output, "opset_version": _opset_version,
    "unknown_op": _unknown_op, "arity": _arity, "shuffle_nodes": _shuffle_nodes, "undefined_output": _undefined_output,
    "huge_input_dim": _huge_input_dim, "exotic_io_dtype": _exotic_io_dtype, "bad_subgraph": _bad_subgraph,
    "bit_flips": _bit_flips, "truncate": _truncate,
}


def mutants(seeds: list[tuple[str, onnx.ModelProto]], count: int, seed: int = 0,
            kinds: list[str] | None = None) -> Iterator[Mutant]:
    """``count`` mutants of ``seeds`` drawn with ``random.Random(seed)``: kinds in turn (every kind as often as
    the others), a random seed model each; a kind that cannot apply to the drawn model draws again (at most 20
    times, then the next kind)."""
    rng = random.Random(seed)
    names = list(kinds or KINDS)
    made = 0
    turn = 0
    while made < count:
        kind = names[turn % len(names)]
        turn += 1
        for _ in range(20):
            name, model = seeds[rng.randrange(len(seeds))]
            data = KINDS[kind](_copy(model), rng)
            if data is not None:
                yield Mutant(made, name, kind, data)
                made += 1
                break
