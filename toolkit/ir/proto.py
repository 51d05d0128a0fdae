"""Protobuf message helpers for ONNX models."""

from __future__ import annotations

import json


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


def metadata_json(model, key: str) -> dict:
    """The JSON object stored under ``key`` in an ONNX model's ``metadata_props`` ({} when the key is absent or
    its value is not a JSON object)."""
    for p in model.metadata_props:
        if p.key == key:
            try:
                data = json.loads(p.value)
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}
    return {}
