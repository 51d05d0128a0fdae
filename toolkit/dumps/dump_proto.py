"""The DumpData protobuf message of raw Ascend device dumps, built at run time without protoc.

Source of the message and enum numbers: the public ``dump_data.proto`` (package ``toolkit.dumpdata``) of
Ascend's accuracy tools (msprobe ``resource/dump_data.proto``; the same file ships with the CANN toolkit's
operator_cmp compare tool). Only the wire format matters (field numbers and types); the message is described
here as a :class:`google.protobuf.descriptor_pb2.FileDescriptorProto` written in Python, registered in a private
descriptor pool (never the default one, so no clash with another copy of the same proto) and turned into
message classes by the protobuf runtime. Nothing is generated or copied.

Messages (field number: name type)::

    DumpData   1 version string, 2 dump_time uint64, 3 output OpOutput*, 4 input OpInput*, 5 buffer OpBuffer*,
               6 op_name string, 7 attr OpAttr*, 8 space Workspace*
    OpOutput   1 data_type, 2 format, 3 shape Shape, 4 original_op OriginalOp, 5 data bytes, 6 size uint64,
               7 original_shape Shape, 8 sub_format int32, 9 address uint64, 10 dim_range DimRange*, 11 offset uint64
    OpInput    1 data_type, 2 format, 3 shape Shape, 4 data bytes, 5 size uint64, 6 original_shape Shape,
               7 sub_format int32, 8 address uint64, 9 offset uint64
    OriginalOp 1 name string, 2 output_index uint32, 3 data_type, 4 format
    Shape      1 dim uint64*          DimRange 1 dim_start uint64, 2 dim_end uint64
    OpBuffer   1 buffer_type enum, 2 data bytes, 3 size uint64
    OpAttr     1 name string, 2 value string
    Workspace  1 type enum, 2 data bytes, 3 size uint64

``data_type`` fields are :data:`DATA_TYPES` numbers, ``format`` fields :data:`FORMATS` numbers. Proto3 enums are
open: a number outside the tables decodes as that integer, and the raw reader reports it by number.
"""

from __future__ import annotations

from functools import lru_cache

#: OutputDataType number -> name (dump_data.proto).
DATA_TYPES: dict[int, str] = {
    0: "DT_UNDEFINED", 1: "DT_FLOAT", 2: "DT_FLOAT16", 3: "DT_INT8", 4: "DT_UINT8", 5: "DT_INT16", 6: "DT_UINT16",
    7: "DT_INT32", 8: "DT_INT64", 9: "DT_UINT32", 10: "DT_UINT64", 11: "DT_BOOL", 12: "DT_DOUBLE", 13: "DT_STRING",
    14: "DT_DUAL_SUB_INT8", 15: "DT_DUAL_SUB_UINT8", 16: "DT_COMPLEX64", 17: "DT_COMPLEX128", 18: "DT_QINT8",
    19: "DT_QINT16", 20: "DT_QINT32", 21: "DT_QUINT8", 22: "DT_QUINT16", 23: "DT_RESOURCE", 24: "DT_STRING_REF",
    25: "DT_DUAL", 27: "DT_BF16", 29: "DT_UINT1", 32: "DT_COMPLEX32", 33: "DT_HIFLOAT8", 34: "DT_FLOAT8_E5M2",
    35: "DT_FLOAT8_E4M3FN", 36: "DT_FLOAT8_E8M0", 37: "DT_FLOAT6_E3M2", 38: "DT_FLOAT6_E2M3", 39: "DT_FLOAT4_E2M1",
    40: "DT_FLOAT4_E1M2",
}

#: OutputFormat number -> name without the ``FORMAT_`` prefix (dump_data.proto).
FORMATS: dict[int, str] = {
    0: "NCHW", 1: "NHWC", 2: "ND", 3: "NC1HWC0", 4: "FRACTAL_Z", 5: "NC1C0HWPAD", 6: "NHWC1C0", 7: "FSR_NCHW",
    8: "FRACTAL_DECONV", 9: "C1HWNC0", 10: "FRACTAL_DECONV_TRANSPOSE", 11: "FRACTAL_DECONV_SP_STRIDE_TRANS",
    12: "NC1HWC0_C04", 13: "FRACTAL_Z_C04", 14: "CHWN", 15: "FRACTAL_DECONV_SP_STRIDE8_TRANS", 16: "HWCN",
    17: "NC1KHKWHWC0", 18: "BN_WEIGHT", 19: "FILTER_HWCK", 20: "HASHTABLE_LOOKUP_LOOKUPS",
    21: "HASHTABLE_LOOKUP_KEYS", 22: "HASHTABLE_LOOKUP_VALUE", 23: "HASHTABLE_LOOKUP_OUTPUT",
    24: "HASHTABLE_LOOKUP_HITS", 25: "C1HWNCoC0", 26: "MD", 27: "NDHWC", 28: "FRACTAL_ZZ", 29: "FRACTAL_NZ",
    30: "NCDHW", 31: "DHWCN", 32: "NDC1HWC0", 33: "FRACTAL_Z_3D", 34: "CN", 35: "NC", 36: "DHWNC",
    37: "FRACTAL_Z_3D_TRANSPOSE", 38: "FRACTAL_ZN_LSTM", 39: "FRACTAL_Z_G", 40: "RESERVED", 41: "ALL", 42: "NULL",
    43: "ND_RNN_BIAS", 44: "FRACTAL_ZN_RNN", 45: "YUV", 46: "YUV_A", 255: "MAX",
}

FORMAT_NUMBERS = {name: number for number, name in FORMATS.items()}
DATA_TYPE_NUMBERS = {name: number for number, name in DATA_TYPES.items()}

_PACKAGE = "npuscope.dumpdata"
# (name, number, type, label, message or enum type name); label "*" = repeated.
_U64, _U32, _I32, _STR, _BYTES, _MSG, _ENUM = "uint64", "uint32", "int32", "string", "bytes", "message", "enum"
_MESSAGES: dict[str, list[tuple]] = {
    "Shape": [("dim", 1, _U64, "*")],
    "DimRange": [("dim_start", 1, _U64), ("dim_end", 2, _U64)],
    "OriginalOp": [("name", 1, _STR), ("output_index", 2, _U32), ("data_type", 3, _ENUM, "", "OutputDataType"),
                   ("format", 4, _ENUM, "", "OutputFormat")],
    "OpOutput": [("data_type", 1, _ENUM, "", "OutputDataType"), ("format", 2, _ENUM, "", "OutputFormat"),
                 ("shape", 3, _MSG, "", "Shape"), ("original_op", 4, _MSG, "", "OriginalOp"), ("data", 5, _BYTES),
                 ("size", 6, _U64), ("original_shape", 7, _MSG, "", "Shape"), ("sub_format", 8, _I32),
                 ("address", 9, _U64), ("dim_range", 10, _MSG, "*", "DimRange"), ("offset", 11, _U64)],
    "OpInput": [("data_type", 1, _ENUM, "", "OutputDataType"), ("format", 2, _ENUM, "", "OutputFormat"),
                ("shape", 3, _MSG, "", "Shape"), ("data", 4, _BYTES), ("size", 5, _U64),
                ("original_shape", 6, _MSG, "", "Shape"), ("sub_format", 7, _I32), ("address", 8, _U64),
                ("offset", 9, _U64)],
    "OpBuffer": [("buffer_type", 1, _ENUM, "", "BufferType"), ("data", 2, _BYTES), ("size", 3, _U64)],
    "OpAttr": [("name", 1, _STR), ("value", 2, _STR)],
    "Workspace": [("type", 1, _ENUM, "", "SpaceType"), ("data", 2, _BYTES), ("size", 3, _U64)],
    "DumpData": [("version", 1, _STR), ("dump_time", 2, _U64), ("output", 3, _MSG, "*", "OpOutput"),
                 ("input", 4, _MSG, "*", "OpInput"), ("buffer", 5, _MSG, "*", "OpBuffer"), ("op_name", 6, _STR),
                 ("attr", 7, _MSG, "*", "OpAttr"), ("space", 8, _MSG, "*", "Workspace")],
}
_ENUMS = {"OutputDataType": DATA_TYPES, "OutputFormat": {n: f"FORMAT_{v}" for n, v in FORMATS.items()},
          "BufferType": {0: "L1"}, "SpaceType": {0: "LOG"}}


def file_descriptor():
    """The FileDescriptorProto of the messages above (proto3, package ``npuscope.dumpdata``)."""
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FileDescriptorProto(name="npuscope_dump_data.proto", package=_PACKAGE, syntax="proto3")
    for enum_name, values in _ENUMS.items():
        enum = fd.enum_type.add(name=enum_name)
        for number, name in values.items():
            # enum value names are scoped to the package in protobuf: keep them unique across enums
            enum.value.add(name=f"{enum_name.upper()}_{name}", number=number)
    types = descriptor_pb2.FieldDescriptorProto
    scalar = {_U64: types.TYPE_UINT64, _U32: types.TYPE_UINT32, _I32: types.TYPE_INT32, _STR: types.TYPE_STRING,
              _BYTES: types.TYPE_BYTES, _MSG: types.TYPE_MESSAGE, _ENUM: types.TYPE_ENUM}
    for msg_name, fields in _MESSAGES.items():
        msg = fd.message_type.add(name=msg_name)
        for name, number, kind, *rest in fields:
            label = types.LABEL_REPEATED if rest and rest[0] == "*" else types.LABEL_OPTIONAL
            field = msg.field.add(name=name, number=number, type=scalar[kind], label=label)
            if kind in (_MSG, _ENUM):
                field.type_name = f".{_PACKAGE}.{rest[1]}"
    return fd


@lru_cache(maxsize=1)
def dump_data_class():
    """The DumpData message class (built once, in a private descriptor pool)."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    descriptor = pool.FindMessageTypeByName(f"{_PACKAGE}.DumpData")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)  # protobuf < 4.22
