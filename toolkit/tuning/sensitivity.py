"""Per-kernel FP16 sensitivity: local error (single-kernel isolation) next to accumulated error, and a ranking.

For every FP16 kernel of a built plan, :func:`kernel_sensitivity` re-runs the kernel alone on the FP32
reference's values of its inputs, converted to the storage dtype the kernel reads them in
(toolkit.reexec.isolate), and compares the result with the reference: that is the kernel's LOCAL error.
The ACCUMULATED error is the same tensor from the full NPU run (every upstream kernel's error included), as
diagnose measures it. :func:`rank_kernels` orders the kernels for the FP32-fallback search.

Columns of the sensitivity DataFrame (one row per FP16 kernel, Cast kernels excluded):

==========================  =================================================================================
Kernel, KeepName, OpType    kernel name, the node name a keep-dtype entry uses for it, anchor op type
Nodes                       original nodes it executes (';'-joined)
LocalCosine, LocalRED,      worst over the kernel's float outputs of CosineSimilarity,
LocalMaxAbs                 RelativeEuclideanDistance, MaxAbsoluteError of the isolated run (NaN: no finite pair)
LocalOverflow               the isolated run gives NaN/inf where the reference is finite
RangeOverflow               a reference input or output of the kernel passes 65504 (FP16 cannot store it)
AccCosine, AccRED           the same metrics of the full NPU run (accumulated error)
OutputShare                 share of the final-output error removed by keeping only this kernel in FP32
                            (measured by one trial run for the top candidates; NaN when not measured)
Rank                        0 = most sensitive
==========================  =================================================================================

Ranking: kernels with overflow evidence (local NaN/inf or reference values beyond FP16) first, in graph
order; then by measured OutputShare (top candidates only), then by LocalRED (NaN counts as worst).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from toolkit.compare.layerwise import kernel_inputs
from toolkit.compare.metrics import METRICS, compare_tensors
from toolkit.compare.metrics.reductions import reduce_pair
from toolkit.precision.ranges import FP16_MAX
from toolkit.reexec.isolate import isolate

COLUMNS = ["Rank", "Kernel", "KeepName", "OpType", "Nodes", "LocalCosine", "LocalRED", "LocalMaxAbs",
           "LocalOverflow", "RangeOverflow", "AccCosine", "AccRED", "OutputShare"]


#: the metrics the sensitivity table reads from a comparison
LOCAL_METRICS = ("CosineSimilarity", "RelativeEuclideanDistance", "MaxAbsoluteError")


def compare_metrics(x, y, names) -> dict:
    """``compare_tensors(x, y, thresholds={})`` computing only the metrics ``names`` (+ the NaN/Inf counts and
    OverFlow): for a pair of finite float arrays of one non-empty shape, only the ``reduce_pair`` families those
    metrics need are computed (same code, so the same values: the std and KL passes are skipped); any other
    pair (NaN/inf, integers, shape mismatch, empty) goes through ``compare_tensors`` whole.

    Returns a dict with ``names``, CompareFailReason, OverFlow, DeviceNaN, DeviceInf, GoldenNaN, GoldenInf
    (a full compare_tensors row on the fallback path)."""
    xa, ya = np.asarray(x), np.asarray(y)
    if xa.shape != ya.shape or xa.size == 0 or xa.dtype.kind != "f" or ya.dtype.kind != "f":
        return compare_tensors(xa, ya, thresholds={})
    with np.errstate(all="ignore"):
        if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
            return compare_tensors(xa, ya, thresholds={})
        specs = [METRICS[n] for n in names]
        if any(sp.from_sums is None or sp.dtype_class != "float" for sp in specs):
            return compare_tensors(xa, ya, thresholds={})
        sums = reduce_pair(xa, ya, families={sp.family for sp in specs})
        row = {sp.name: sp.from_sums(sums) for sp in specs}
    row.update(CompareFailReason="", OverFlow=False, DeviceNaN=0, DeviceInf=0, GoldenNaN=0, GoldenInf=0)
    return row


def keep_name(kernel) -> str:
    """The node name to write in keep_dtype for ``kernel`` (its anchor node when it has one)."""
    return kernel.name if kernel.name in kernel.nodes else kernel.nodes[0]


def _worst(rows: list[dict]) -> tuple[float, float, float, bool]:
    """(min cosine, max RED, max MaxAbs, any overflow) over compare rows; NaN RED counts as inf."""
    if not rows:
        return math.nan, math.nan, math.nan, False

    def val(r, k, bad):
        v = r.get(k)
        return bad if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
    cos = min(val(r, "CosineSimilarity", -math.inf) for r in rows)
    red = max(val(r, "RelativeEuclideanDistance", math.inf) for r in rows)
    mae = max(val(r, "MaxAbsoluteError", math.inf) for r in rows)
    return cos, red, mae, any(bool(r["OverFlow"]) for r in rows)


def _beyond_fp16(a) -> bool:
    a = np.asarray(a)
    return a.dtype.kind == "f" and bool((np.abs(a.astype(np.float32)) > FP16_MAX).any())  # NaN compares False


def kernel_sensitivity(runtime, golden: dict, dumps: dict) -> pd.DataFrame:
    """Local and accumulated error of every FP16 kernel (see module docstring; OutputShare NaN, Rank unset).

    Args:
        runtime: the NpuRuntime of the plan under test (its kernels are re-used, nothing is rebuilt).
        golden: FP32 reference {tensor: array} of ONE input, graph inputs included.
        dumps: the NPU run's dumps of the same input (RunResult.dumps).
    """
    ins = kernel_inputs(runtime.plan)
    rows = []
    for k in runtime.plan.kernels:
        if k.fusion == "cast" or k.precision != "fp16":
            continue
        outs = [t for t in k.outputs if t in golden and np.asarray(golden[t]).dtype.kind == "f"]
        local = isolate(runtime, k.name, golden) or {}
        lrows = [compare_metrics(local[t], golden[t], LOCAL_METRICS) for t in outs if t in local]
        arows = [compare_metrics(dumps[t], golden[t], LOCAL_METRICS) for t in outs if t in dumps]
        lc, lr, lm, lo = _worst(lrows)
        ac, ar, _, _ = _worst(arows)
        rng = any(_beyond_fp16(golden[t]) for t in outs + [i for i in ins.get(k.name, []) if i in golden])
        rows.append({"Kernel": k.name, "KeepName": keep_name(k), "OpType": k.op_type, "Nodes": ";".join(k.nodes),
                     "LocalCosine": lc, "LocalRED": lr, "LocalMaxAbs": lm, "LocalOverflow": lo,
                     "RangeOverflow": rng, "AccCosine": ac, "AccRED": ar, "OutputShare": math.nan})
    return pd.DataFrame(rows, columns=COLUMNS)


def _red_key(v) -> float:
    return math.inf if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def rank_kernels(df: pd.DataFrame, output_error: Callable[[list[str]], float] | None = None,
                 base_error: float | None = None, top_k: int = 8) -> pd.DataFrame:
    """Sort ``df`` into the search order and fill ``Rank`` (and ``OutputShare`` for the top candidates).

    Args:
        df: :func:`kernel_sensitivity` output.
        output_error: optional ``fn([keep names]) -> error`` of the final outputs (worst over inputs; inf for
            NaN/inf outputs); used to measure OutputShare of the ``top_k`` non-overflow kernels by local error.
        base_error: ``output_error([])``.
    """
    df = df.copy()
    if df.empty:
        return df
    df["_order"] = range(len(df))
    df["_over"] = df["LocalOverflow"].astype(bool) | df["RangeOverflow"].astype(bool)
    df["_red"] = [_red_key(v) for v in df["LocalRED"]]
    rest = df[~df["_over"]].sort_values("_red", ascending=False, kind="stable")
    if output_error is not None and base_error is not None and base_error > 0:
        for i in rest.index[:top_k]:
            err = output_error([df.at[i, "KeepName"]])
            if math.isinf(base_error):
                share = 0.0 if math.isinf(err) else 1.0
            else:
                share = max(0.0, 1.0 - err / base_error)
            df.at[i, "OutputShare"] = share
    df["_share"] = df["OutputShare"].fillna(-1.0)
    over = df[df["_over"]].sort_values("_order")
    rest = df[~df["_over"]].sort_values(["_share", "_red"], ascending=False, kind="stable")
    out = pd.concat([over, rest]).drop(columns=["_order", "_over", "_red", "_share"]).reset_index(drop=True)
    out["Rank"] = range(len(out))
    return out
