"""Single-kernel isolation: re-run one kernel of a built plan on the reference's values of its inputs.

Two ways to feed it (``stored``):

- the reference values *as the reference computed them*, converted only to the dtype the kernel itself reads
  (``stored=False``): an FP16 kernel still reads FP16 (its own precision), an FP32 kernel reads the exact
  FP32 values even where the plan stores that input in FP16. The result carries only the kernel's *local*
  error; used to tell an origin (the kernel itself breaks the values) from an amplified upstream error.
- the reference values as the plan *stores* them (``stored=True``, or a collection of the ONNX input tensors
  to round): each input passes through its source tensor's storage dtype first (a Cast kernel's input is
  converted to its source tensor's storage dtype, then to the cast's dtype, exactly as the plan does). An
  FP32 kernel that is exact on the reference values but abnormal on their stored (FP16-rounded) values is
  destroyed by the storage precision of those inputs, not by its own computation
  (toolkit.compare.layerwise.refine_origins).
"""

from __future__ import annotations

import numpy as np


def _as_stored(value, dtype: str):
    """``value`` converted to the storage dtype, as the device stores it: a value beyond the FP16 range becomes
    ±inf (an intended overflow, so numpy's overflow warning is silenced here)."""
    arr = np.asarray(value)
    if dtype in ("object",) or arr.dtype.kind not in "fiub":
        return arr
    with np.errstate(over="ignore", invalid="ignore"):
        return arr.astype(np.dtype(dtype), copy=False)


def fp16_stored_inputs(runtime, kernel_name: str) -> list[str]:
    """ONNX tensors (source names of Cast / copy kernels) that ``kernel_name`` reads in a wider dtype than the
    plan stores them in: stored float16, read as float32 (the kernel runs in FP32 on FP16-stored data)."""
    plan = runtime.plan
    casts = {k.outputs[0]: k for k in plan.kernels if k.cast_of}
    ek = next((e for e in runtime.kernels if e.spec.name == kernel_name), None)
    out = []
    for _, t in (ek.feeds if ek is not None else []):
        src = casts[t].cast_of if t in casts else t
        s, r = plan.tensors.get(src), plan.tensors.get(t)
        if s is not None and r is not None and s.dtype == "float16" and r.dtype in ("float32", "float64") \
                and src not in out:
            out.append(src)
    return out


def isolate(runtime, kernel_name: str, golden: dict, stored=True) -> dict[str, np.ndarray] | None:
    """{output tensor: array} of ``kernel_name`` run on reference inputs; None if an input has no
    reference value or the kernel is unknown.

    Args:
        runtime: the NpuRuntime of the plan (its built kernels are re-used).
        kernel_name: a kernel of ``runtime.plan``.
        golden: reference values {ONNX tensor: array}.
        stored: True: every input passes through its source's storage dtype (the values the device holds
            when the inputs are exact up to storage); False: the reference values are converted only to the
            dtype the kernel reads (see module docstring); a collection of ONNX tensor names: only those
            pass through their storage dtype.
    """
    plan = runtime.plan
    casts = {k.outputs[0]: k for k in plan.kernels if k.cast_of}  # Casts and host-device copies
    ek = next((e for e in runtime.kernels if e.spec.name == kernel_name), None)
    if ek is None:
        return None
    values = []
    for _, t in ek.feeds:
        src = casts[t].cast_of if t in casts else t
        if src not in golden:
            return None
        v = golden[src]
        if src in plan.tensors and (stored is True or (stored is not False and src in stored)):
            v = _as_stored(v, plan.tensors[src].dtype)
        if t in plan.tensors:
            v = _as_stored(v, plan.tensors[t].dtype)
        values.append(np.ascontiguousarray(v))
    outs = ek(values)
    return {t: np.asarray(o) for (_, t), o in zip(ek.fetches, outs)}
