"""Which side is the reference: a GOLDEN dumped in a lower float precision than the TARGET looks swapped.

compare-dumps reads GOLDEN as the reference (y) and TARGET as the run under test (x), and its advice (keep a
kernel in FP32) assumes the target is the low-precision run. Device dumps given as GOLDEN (float16) against an
ONNX FP32 run as TARGET, or an FP32 golden against a float64 target, turn that advice upside down: the finding
here says so, once, before any other advice is read.
"""

from __future__ import annotations

import pandas as pd

from toolkit.core.dtypes import dtype_named, value_kind
from toolkit.core.records import Finding

KIND = "golden_lower_precision"


def float_bits(name) -> int:
    """Bits of the float dtype called ``name`` ("float16" 16, "bfloat16" 16, "float64" 64); 0 for anything else
    (integers, text, unknown or missing names)."""
    dtype = dtype_named(str(name)) if isinstance(name, str) and name else None
    if dtype is None or value_kind(dtype) != "float":
        return 0
    return dtype.itemsize * 8


def lower_precision_golden(df: pd.DataFrame) -> Finding | None:
    """A warning ``golden_lower_precision`` when at least half of the rows where both sides hold floats have a
    golden of fewer bits than the target (``GroundTruthDataType`` vs ``DataType`` of the result table), else
    None. Evidence: ``rows`` (such rows), ``float_rows``, ``golden_dtypes`` / ``target_dtypes`` (the dtypes of
    those rows, sorted), ``tensors`` (the first five)."""
    if not {"GroundTruthDataType", "DataType"} <= set(df.columns):
        return None
    pairs = [(t, str(g), str(x)) for t, g, x in zip(df["TensorName"], df["GroundTruthDataType"], df["DataType"])
             if float_bits(str(g)) and float_bits(str(x))]
    lower = [(t, g, x) for t, g, x in pairs if float_bits(g) < float_bits(x)]
    if not lower or 2 * len(lower) < len(pairs):
        return None
    golden = sorted({g for _, g, _ in lower})
    target = sorted({x for _, _, x in lower})
    evidence = {"rows": len(lower), "float_rows": len(pairs), "golden_dtypes": golden, "target_dtypes": target,
                "tensors": [t for t, _, _ in lower[:5]]}
    return Finding("warning", KIND, str(lower[0][0]), evidence,
                   f"GOLDEN holds {'/'.join(golden)} dumps and TARGET {'/'.join(target)} ({len(lower)} of "
                   f"{len(pairs)} float tensors): the arguments look swapped. compare-dumps takes the reference "
                   "run first (GOLDEN, e.g. the FP32 ONNX run) and the run under test second (TARGET, e.g. the "
                   "device); its keep-in-FP32 advice assumes TARGET is the lower-precision run")
