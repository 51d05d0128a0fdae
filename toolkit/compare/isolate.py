"""Single-kernel isolation: re-run one kernel of a built plan on the reference's values of its inputs.

The inputs are converted to the dtype the kernel reads them in on the device (a Cast kernel's input is
converted to its source tensor's storage dtype first, then to the cast's dtype, exactly as the plan does),
so the result carries only the kernel's *local* error. Used to tell an origin (the kernel itself breaks
the values) from an amplified upstream error (the kernel is fine on clean inputs).
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


def isolate(runtime, kernel_name: str, golden: dict) -> dict[str, np.ndarray] | None:
    """{output tensor: array} of ``kernel_name`` run on reference inputs; None if an input has no
    reference value."""
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
        if src in plan.tensors:
            v = _as_stored(v, plan.tensors[src].dtype)
        if t in plan.tensors:
            v = _as_stored(v, plan.tensors[t].dtype)
        values.append(np.ascontiguousarray(v))
    outs = ek(values)
    return {t: np.asarray(o) for (_, t), o in zip(ek.fetches, outs)}
