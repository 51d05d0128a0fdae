"""Compare every pair and build the per-tensor table (the columns of compare's result.csv, plus two).

Columns: those of :mod:`toolkit.compare.diagnosis` (``toolkit.compare.layerwise.INFO_COLUMNS``, the metric row
of :func:`toolkit.compare.metrics.compare_tensors`, Role, GoldenMin/GoldenMax/GoldenAbsMax) with these
meanings for dumps: ``Kernel`` / ``KernelOpType`` = the target's device op (or npuscope kernel) and its type;
``FusedNodes`` = the mapping's original nodes of that op; ``NPUDump`` = the target's op name (the device op, as
the compare tool writes it) and ``DataType`` its array's dtype; ``Precision`` = "fp16"/"fp32"/"bf16" from that
dtype; ``GroundTruth`` = the golden's node name, ``GroundTruthDataType`` / ``Shape`` = the golden array's; ``Rule``,
``ImplMode`` empty; ``KernelIndex`` -1. Two more: ``GoldenDump`` and ``TargetDump`` (file name, or
``runner[iteration]:tensor`` for Polygraphy). x = target ("device"), y = golden in every metric.

CompareFailReason of rows that are not compared: "no target dump", "no golden dump", "fused into <op>",
"golden|target dump not in the model", "<side> dump unreadable (<file>): <why>" (truncated, not .npy, object
dtype, listed but missing), or compare_tensors' own ("shape mismatch: device (..) vs golden (..)", "dtype class
mismatch", ...). No expected-noise allowance is applied: the plain abnormal lines decide, as in the Ascend tool.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from toolkit.compare.layerwise import INFO_COLUMNS, golden_range
from toolkit.compare.metrics import ROW_KEYS, compare_tensors
from toolkit.core.text import shape_text

from .entry import DumpEntry, DumpReadError
from .match import Pair

DUMP_COLUMNS = ["GoldenDump", "TargetDump"]
TAIL_COLUMNS = ["Role", "GoldenMin", "GoldenMax", "GoldenAbsMax"]
COLUMNS = INFO_COLUMNS + DUMP_COLUMNS + [k for k in ROW_KEYS] + TAIL_COLUMNS
_PRECISION = {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16", "float64": "fp64"}


def compare_pairs(pairs: list[Pair], thresholds: dict[str, float] | None, by_graph: bool) -> pd.DataFrame:
    """One row per pair, in order (``Index`` 0..n-1), with Role (see :func:`assign_roles`)."""
    df = pd.DataFrame([compare_pair(i, p, thresholds) for i, p in enumerate(pairs)], columns=COLUMNS)
    df["CompareFailReason"] = df["CompareFailReason"].fillna("").astype(str)
    for col in ("Abnormal", "OverFlow"):
        df[col] = df[col].astype("boolean").fillna(False).astype(bool)
    df["AbnormalMetrics"] = [v if isinstance(v, list) else [] for v in df["AbnormalMetrics"]]
    df["Role"] = assign_roles(df, pairs, by_graph)
    return df


def compare_pair(i: int, p: Pair, thresholds: dict[str, float] | None) -> dict:
    """The result row of one pair; never raises on data problems (they become CompareFailReason)."""
    row = {"Index": i, "OpType": p.op_type, "NodeName": p.node, "TensorName": p.tensor, "TensorIndex": p.index,
           "Kernel": p.kernel, "KernelIndex": -1, "KernelOpType": p.kernel_op_type,
           "FusedNodes": ";".join(p.fused) if len(p.fused) > 1 else "", "Rule": "", "Precision": "", "ImplMode": "",
           "GoldenDump": p.golden.source if p.golden else "", "TargetDump": p.target.source if p.target else "",
           "CompareFailReason": "", "Abnormal": False, "OverFlow": False, "AbnormalMetrics": []}
    y, y_err = _load(p.golden)
    x, x_err = _load(p.target)
    if y is not None:
        row.update(GroundTruth=p.golden.name, GroundTruthDataType=str(y.dtype), Shape=shape_text(y.shape), **golden_range(y))
    if x is not None:
        row.update(NPUDump=p.kernel or p.target.name, DataType=str(x.dtype), Precision=_PRECISION.get(str(x.dtype), str(x.dtype)))
    errors = [f"{side} dump unreadable ({e.source}): {err}" for side, e, err in
              (("golden", p.golden, y_err), ("target", p.target, x_err)) if err]
    if p.golden is None or p.target is None or errors:
        missing = p.reason or ("no golden dump" if p.golden is None else "no target dump" if p.target is None else "")
        row["CompareFailReason"] = "; ".join(filter(None, [missing] + errors))
        return row
    row.update(compare_tensors(x, y, thresholds=thresholds, tensor=p.tensor))
    return row


def _load(entry: DumpEntry | None) -> tuple[np.ndarray | None, str]:
    if entry is None:
        return None, ""
    try:
        return np.asarray(entry.load()), ""
    except DumpReadError as exc:
        return None, str(exc)


def assign_roles(df: pd.DataFrame, pairs: list[Pair], by_graph: bool) -> list[str]:
    """'origin' / 'propagated' / '' per row.

    With a model (``by_graph``): an abnormal (or overflowing) row is 'propagated' when a tensor its node (or
    fused group) reads is abnormal, else 'origin' (as toolkit.compare.layerwise.assign_roles). Without one the
    graph is unknown: the first abnormal row in order is the origin and later abnormal rows count as
    'propagated' (an assumption the report states).
    """
    bad = (df["Abnormal"] | df["OverFlow"]).tolist()
    if not by_graph:
        first = next((i for i, b in enumerate(bad) if b), None)
        return ["origin" if i == first else ("propagated" if b else "") for i, b in enumerate(bad)]
    bad_tensor = dict(zip(df["TensorName"], bad))
    return ["" if not b else ("propagated" if any(bad_tensor.get(t, False) for t in p.inputs) else "origin")
            for p, b in zip(pairs, bad)]


def reason_kind(reason: str) -> str:
    """The kind of a CompareFailReason: its text before the first ':' or '(' ("fused into" for fused rows)."""
    if reason.startswith("fused into"):
        return "fused into"
    return re.split(r"[:(;]", reason, maxsplit=1)[0].strip()
