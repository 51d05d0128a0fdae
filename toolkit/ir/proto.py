"""Protobuf message helpers for ONNX models."""

from __future__ import annotations


def copy_fields(src, dst, skip=()):
    """``dst`` with every set field of protobuf message ``src`` copied except those named in ``skip``
    (a shallow copy of the message minus some fields, e.g. a GraphProto without its initializers, without
    copying the skipped fields first). Returns ``dst``."""
    for fd, val in src.ListFields():
        if fd.name in skip:
            continue
        if isinstance(val, (int, float, str, bytes)):
            setattr(dst, fd.name, val)
        elif hasattr(val, "extend"):
            getattr(dst, fd.name).extend(val)
        else:
            getattr(dst, fd.name).CopyFrom(val)
    return dst
