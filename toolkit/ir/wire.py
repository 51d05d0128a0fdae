"""Large weights lifted out of an ONNX file's bytes before they are parsed: a protobuf wire-format scan.

Parsing a model whose weights sit inside the ``.onnx`` file makes protobuf copy every weight into the parsed
message, and a parsed message keeps its memory until it is destroyed, even after ``ClearField``: BERT-base (a 0.43
GB file) held 0.41 GB more for the whole run. This scan walks the file's bytes as the protobuf wire format lays
them out (https://protobuf.dev/programming-guides/encoding/: each field a varint key ``field << 3 | wire type``,
length-delimited fields a varint length and that many bytes) through ModelProto.graph (field 7), GraphProto.
initializer (field 5) and TensorProto.raw_data (field 9; field numbers from onnx/onnx.proto), and writes the same
bytes with every ``raw_data`` of at least ``min_bytes`` left out, the enclosing lengths rewritten. It records
where each one lies in the file, so the caller memory-maps it there (toolkit.ir.weights.mark_mapped). A weight's
bytes are never touched, only skipped.

Only top-level graph initializers are lifted (subgraph and attribute tensors stay in). A tensor whose data
location is set, or that names external data, keeps its bytes. Repeated fields follow protobuf's rules: a
``graph`` field met twice is merged (its initializers are counted on), a ``raw_data`` met twice keeps the last.
Anything the scan cannot follow (a truncated varint, a length past the end, a group wire type) makes it give up
(None): the caller then parses the bytes as they are and reports the error protobuf gives.
"""

from __future__ import annotations

from dataclasses import dataclass

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 9, 13, 14


class _Unreadable(Exception):
    pass


@dataclass(frozen=True)
class Lifted:
    """One ``raw_data`` left out: the ``index`` -th initializer of the top-level graph (in the parsed model's
    order), its bytes at ``offset`` (bytes from the file's start) for ``length`` bytes."""

    index: int
    offset: int
    length: int


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise _Unreadable
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _fields(buf, start: int, end: int):
    """(field, wire type, field start, key end, value start, value end) of each field in ``buf[start:end]``
    (a length-delimited field's length varint lies between key end and value start)."""
    pos = start
    while pos < end:
        key, vpos = _varint(buf, pos, end)
        kend = vpos
        field, wire = key >> 3, key & 7
        if wire == _VARINT:
            _, vend = _varint(buf, vpos, end)
        elif wire == _I64:
            vend = vpos + 8
        elif wire == _I32:
            vend = vpos + 4
        elif wire == _LEN:
            n, vpos = _varint(buf, vpos, end)
            vend = vpos + n
        else:  # groups (3, 4) are not in ONNX's schema
            raise _Unreadable
        if field == 0 or vend > end:
            raise _Unreadable
        yield field, wire, pos, kend, vpos, vend
        pos = vend


def _tensor(buf, start: int, end: int, min_bytes: int) -> tuple[bytes, tuple[int, int]] | None:
    """The tensor's bytes without its raw_data and (offset, length) of that raw_data, or None to keep it whole."""
    raw, keep, external = None, [], False
    for field, wire, fstart, _kend, vstart, vend in _fields(buf, start, end):
        if field == _TENSOR_RAW_DATA and wire == _LEN:
            raw = (vstart, vend - vstart)
            continue
        if field in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            external = True
        keep.append((fstart, vend))
    if raw is None or raw[1] < min_bytes or external:
        return None
    return b"".join(bytes(buf[a:b]) for a, b in keep), raw


def _graph(buf, start: int, end: int, min_bytes: int, first_index: int, lifted: list) -> tuple[bytes, int]:
    """The graph's bytes with large raw_data left out (appended to ``lifted``) and its initializer count."""
    parts, index, changed = [], first_index, False
    for field, wire, fstart, kend, vstart, vend in _fields(buf, start, end):
        if field == _GRAPH_INITIALIZER and wire == _LEN:
            got = _tensor(buf, vstart, vend, min_bytes)
            if got is not None:
                body, (offset, length) = got
                lifted.append(Lifted(index, offset, length))
                parts.append(bytes(buf[fstart:kend]))
                parts.append(_encode_varint(len(body)) + body)
                changed = True
                index += 1
                continue
            index += 1
        parts.append((fstart, vend))
    out = b"".join(p if isinstance(p, bytes) else bytes(buf[p[0]:p[1]]) for p in parts) if changed else None
    return out, index - first_index


def lift_raw_data(buf, min_bytes: int) -> tuple[bytes, list[Lifted]] | None:
    """(the ModelProto bytes ``buf`` without the top-level initializers' ``raw_data`` of at least ``min_bytes``
    bytes, where each lies in ``buf``), or None when nothing is that large or the bytes cannot be followed
    (module docstring). ``buf``: bytes or any buffer (a memoryview or mmap); it is not changed."""
    try:
        parts, lifted, count = [], [], 0
        for field, wire, fstart, kend, vstart, vend in _fields(buf, 0, len(buf)):
            if field == _MODEL_GRAPH and wire == _LEN:
                body, n = _graph(buf, vstart, vend, min_bytes, count, lifted)
                count += n
                if body is not None:
                    parts.append(bytes(buf[fstart:kend]))
                    parts.append(_encode_varint(len(body)) + body)
                    continue
            parts.append(bytes(buf[fstart:vend]))
    except _Unreadable:
        return None
    if not lifted:
        return None
    return b"".join(parts), lifted
