"""Write a simulated NPU run as the raw dump files a device writes (one file per kernel, in a chosen layout).

:func:`write_raw_run` writes, for each kernel of a plan (in plan order), the file
``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`` (the 5-field device form, :mod:`toolkit.dumps.names`;
``op_name`` the kernel name in the dump tools' file-name form, :func:`toolkit.dumps.match.norm`) in the raw
format of :mod:`toolkit.dumps.raw`: the kernel's inputs (those in ``tensors``, ND) then its outputs, each output
laid out in ``layout`` (:mod:`toolkit.dumps.to_device`; ND when the layout cannot hold its rank) with its
framework shape as ``original_shape`` and, when the model has a node producing it, that node and output index
as ``original_op`` — exactly what a fused device op records. Outputs the compiler added (Cast kernels) carry no
original_op, as on the device. Kernels none of whose outputs are in ``tensors`` (host copies, folded
outputs) write no file.

This is the device side of the raw-dump round trip (tests/dumps/test_export.py) and of device-dump diagnosis
tests; it also lets a user try ``compare-dumps`` / ``diagnose --device-dumps`` on files of the device's form.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from .match import norm
from .raw_writer import RawTensorSpec, write_raw_dump
from .to_device import TO_DEVICE, lay_out

#: the first timestamp written (µs, 16 digits as on the device); kernel i gets T0 + i
T0 = 1_700_000_000_000_000


@dataclass
class Written:
    """What :func:`write_raw_run` wrote: ``files`` (one per kernel, in plan order), ``formats`` {tensor: the
    format its output was written in}, ``original_ops`` {tensor: (node, output index)} for outputs recorded
    with an original op."""

    files: list[Path] = field(default_factory=list)
    formats: dict[str, str] = field(default_factory=dict)
    original_ops: dict[str, tuple[str, int]] = field(default_factory=dict)


def producers(model: onnx.ModelProto) -> dict[str, tuple[str, int]]:
    """{tensor: (producing node name, output index)} of ``model``'s top-level graph."""
    return {t: (n.name, i) for n in model.graph.node for i, t in enumerate(n.output) if t}


def write_raw_run(folder: str | os.PathLike, model: onnx.ModelProto, plan, tensors: dict, layout: str = "ND",
                  *, stream_id: int = 1, t0: int = T0) -> Written:
    """Write one raw dump per kernel of ``plan`` into ``folder`` (created; existing files of the same names are
    replaced).

    Args:
        folder: where to write. model: the ONNX model (its nodes give each output's original_op).
        plan: a toolkit.compiler.plan.Plan (kernels in execution order: name, op_type, inputs, outputs).
        tensors: {tensor name: array} — a run's dumps in storage dtype (RunResult.dumps) and the feeds.
        layout: a format of toolkit.dumps.to_device.TO_DEVICE ("ND", "NC1HWC0", "NDC1HWC0", "FRACTAL_Z",
            "FRACTAL_NZ", "NHWC"), applied to every float output whose rank it holds.
        stream_id: the stream id field of the names; t0: the first timestamp (µs).

    Raises:
        ValueError: ``layout`` has no forward layout.
    """
    if layout not in TO_DEVICE:
        raise ValueError(f"layout '{layout}' is not written by npuscope (written: {', '.join(sorted(TO_DEVICE))})")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    made = producers(model)
    out = Written()
    for task_id, k in enumerate(plan.kernels):
        outs = [t for t in k.outputs if t in tensors]
        if not outs:
            continue
        specs = [_output_spec(t, np.asarray(tensors[t]), layout, made.get(t), out) for t in outs]
        ins = [RawTensorSpec(np.asarray(tensors[t])) for t in k.inputs if t in tensors]
        name = f"{norm(k.op_type)}.{norm(k.name)}.{task_id}.{stream_id}.{t0 + task_id}"
        out.files.append(write_raw_dump(folder / name, specs, ins, op_name=k.name, dump_time=t0 + task_id))
    return out


def _output_spec(tensor: str, arr: np.ndarray, layout: str, original, out: Written) -> RawTensorSpec:
    fmt, stored = lay_out(layout, arr) if arr.dtype.kind == "f" else ("ND", arr)
    out.formats[tensor] = fmt
    if original is not None:
        out.original_ops[tensor] = original
    return RawTensorSpec(stored, fmt, original_shape=arr.shape, original_op=original)
