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
                            (:func:`output_shares`: one trial run per top candidate, where an answer reports it;
                            NaN when not measured)
Rank                        0 = most sensitive
==========================  =================================================================================

Ranking: kernels with overflow evidence (local NaN/inf or reference values beyond FP16) first, in graph
order; then by LocalRED (NaN counts as worst). The measured OutputShare does not reorder it: on the 13 models
of bench/bench_tune.py ordering the top 8 by it never changed the set the search keeps and cost 8 trials
(docs/benchmarks.md), and diagnose and tune must search one order to agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable

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
    """True when a float array holds a finite or infinite value beyond ±65504 (NaN ignored)."""
    a = np.asarray(a)
    if a.dtype.kind != "f" or a.size == 0:
        return False
    return bool(np.fmax.reduce(a, axis=None) > FP16_MAX or np.fmin.reduce(a, axis=None) < -FP16_MAX)


def kernel_sensitivity(runtime, golden: dict, dumps: dict) -> pd.DataFrame:
    """Local and accumulated error of every FP16 kernel (see module docstring; OutputShare NaN, Rank unset).

    Args:
        runtime: the NpuRuntime of the plan under test (its kernels are re-used, nothing is rebuilt).
        golden: FP32 reference {tensor: array} of ONE input, graph inputs included.
        dumps: the NPU run's dumps of the same input (RunResult.dumps).
    """
    ins = kernel_inputs(runtime.plan)
    beyond: dict[str, bool] = {}  # tensor -> _beyond_fp16 of its reference (a tensor feeds several kernels)
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
        read = outs + [i for i in ins.get(k.name, []) if i in golden]
        for t in read:
            if t not in beyond:
                beyond[t] = _beyond_fp16(golden[t])
        rng = any(beyond[t] for t in read)
        rows.append({"Kernel": k.name, "KeepName": keep_name(k), "OpType": k.op_type, "Nodes": ";".join(k.nodes),
                     "LocalCosine": lc, "LocalRED": lr, "LocalMaxAbs": lm, "LocalOverflow": lo,
                     "RangeOverflow": rng, "AccCosine": ac, "AccRED": ar, "OutputShare": math.nan})
    return pd.DataFrame(rows, columns=COLUMNS)


def _red_key(v) -> float:
    return math.inf if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _non_overflow(df: pd.DataFrame) -> pd.Series:
    return ~(df["LocalOverflow"].astype(bool) | df["RangeOverflow"].astype(bool))


def rank_kernels(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (:func:`kernel_sensitivity` output) in the search order (module docstring), ``Rank`` filled."""
    df = df.copy()
    if df.empty:
        return df
    df["_order"] = range(len(df))
    df["_red"] = [_red_key(v) for v in df["LocalRED"]]
    keep = _non_overflow(df)
    over = df[~keep].sort_values("_order")
    rest = df[keep].sort_values("_red", ascending=False, kind="stable")
    out = pd.concat([over, rest]).drop(columns=["_order", "_red"]).reset_index(drop=True)
    out["Rank"] = range(len(out))
    return out


def output_shares(ranking: pd.DataFrame, output_error: Callable[[list[str]], float], base_error: float,
                  top_k: int = 8) -> pd.DataFrame:
    """``ranking`` (:func:`rank_kernels` output, order unchanged) with ``OutputShare`` measured for its first
    ``top_k`` kernels without overflow evidence: 1 − output_error([kernel]) / ``base_error``, floored at 0
    (``base_error`` inf: 1 when keeping the kernel makes the outputs finite, else 0). Nothing is measured when
    ``base_error`` is 0 or NaN.

    Args:
        output_error: ``fn([keep names]) -> error`` of the final outputs (worst RelativeEuclideanDistance over
            the inputs run; inf for NaN/inf outputs).
        base_error: ``output_error([])``.
    """
    df = ranking.copy()
    if df.empty or not base_error or math.isnan(base_error) or top_k <= 0:
        return df
    for i in df.index[_non_overflow(df)][:top_k]:
        err = output_error([df.at[i, "KeepName"]])
        if math.isinf(base_error):
            share = 0.0 if math.isinf(err) else 1.0
        else:
            share = max(0.0, 1.0 - err / base_error)
        df.at[i, "OutputShare"] = share
    return df
