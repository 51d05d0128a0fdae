"""Origin refinement: re-run each candidate origin's kernel alone on the reference's inputs and move the
origin where the error really starts (toolkit.reexec.isolate)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from toolkit.compare.layerwise import (
    RESULT_COLUMNS,
    _mark_storage_origin,
    kernel_inputs,
)
from toolkit.compare.metrics import compare_tensors
from toolkit.precision.contract import expected_noise
from toolkit.reexec.isolate import fp16_stored_inputs, isolate


def refine_origins(df: pd.DataFrame, runtime, golden: dict, thresholds=None) -> pd.DataFrame:
    """Re-run each 'origin' row's kernel alone (toolkit.reexec.isolate) and move the origin where the error
    really starts. Returns a copy of ``df``.

    1. The kernel runs on the reference values of its inputs, exactly as the reference computed them (only
       converted to the dtype the kernel reads): LocalCosineSimilarity, LocalRelativeEuclideanDistance and
       LocalAbnormal of the row. Locally abnormal: the row stays an origin.
    2. Locally normal: the row only carries upstream error and becomes 'propagated'. If the kernel reads
       FP16-stored inputs in FP32 (:func:`toolkit.reexec.isolate.fp16_stored_inputs`) and, re-run on the
       reference inputs rounded to their storage dtype, is abnormal, that storage rounding is what destroys
       the result: each input whose rounding alone does it (all of them if none alone does) becomes the
       origin (Abnormal, not WithinExpectedNoise, ``AbnormalMetrics`` the lines it crosses without the noise
       allowance, else :data:`STORAGE_ROUNDING`). Its evidence goes into
       ``df.attrs["storage_origins"]``: {input tensor: {"consumer_kernel", "consumer_node", "consumer_op_type",
       "consumer_tensor", "consumer_nodes", "consumer_precision", "exact_cosine", "stored_cosine",
       "stored_red"}}.
    3. A row reading such an input afterwards is 'propagated' without a re-run.
    4. A 'propagated' row whose error is far above what its inputs' error explains (its
       RelativeEuclideanDistance more than :data:`AMPLIFICATION` times the largest of its kernel's inputs')
       is re-run alone on the exact reference inputs too (:func:`amplified_rows`): locally abnormal, it is an
       origin of its own, even though an input crossed a line (an FP16-unrepresentable constant behind an
       upstream tensor that is large but accurate); locally normal, it stays 'propagated'.
    """
    kernels = {k.name: k for k in runtime.plan.kernels}
    ins = kernel_inputs(runtime.plan)
    df = df.reindex(columns=RESULT_COLUMNS)  # a copy, in the fixed column order
    for col in ("LocalCosineSimilarity", "LocalRelativeEuclideanDistance"):
        df[col] = np.nan
    df["LocalAbnormal"] = pd.Series(None, index=df.index, dtype=object)
    row_of = {}
    for i, name in zip(df.index, df["TensorName"]):
        row_of.setdefault(name, i)
    storage: dict[str, dict] = {}
    cache: dict[str, dict | None] = {}
    for i in list(df.index[df["Role"] == "origin"]):
        kname, t = df.at[i, "Kernel"], df.at[i, "TensorName"]
        if not kname or t not in golden or kname not in kernels:
            continue
        if any(x in storage for x in ins.get(kname, [])):
            df.at[i, "Role"] = "propagated"
            continue
        if kname not in cache:
            cache[kname] = isolate(runtime, kname, golden, stored=False)
        local = cache[kname]
        if local is None or t not in local:
            continue
        k = kernels[kname]
        noise = expected_noise(k.op_class)
        row = compare_tensors(local[t], golden[t], thresholds=thresholds, expected_noise=noise, tensor=t)
        df.at[i, "LocalCosineSimilarity"] = row.get("CosineSimilarity")
        df.at[i, "LocalRelativeEuclideanDistance"] = row.get("RelativeEuclideanDistance")
        bad = bool(row["Abnormal"] or row["OverFlow"])
        df.at[i, "LocalAbnormal"] = bad
        if bad:
            continue
        df.at[i, "Role"] = "propagated"
        for src, ev in _storage_culprits(runtime, k, t, golden, thresholds, noise).items():
            ev.update(consumer_node=df.at[i, "NodeName"], consumer_op_type=df.at[i, "OpType"],
                      exact_cosine=row.get("CosineSimilarity"))
            storage[src] = ev
            if src in row_of:
                _mark_storage_origin(df, row_of[src], thresholds)
    for i in amplified_rows(df, ins):
        kname, t = df.at[i, "Kernel"], df.at[i, "TensorName"]
        if t not in golden or kname not in kernels or any(x in storage for x in ins.get(kname, [])):
            continue
        if kname not in cache:
            cache[kname] = isolate(runtime, kname, golden, stored=False)
        local = cache[kname]
        if local is None or t not in local:
            continue
        row = compare_tensors(local[t], golden[t], thresholds=thresholds,
                              expected_noise=expected_noise(kernels[kname].op_class))
        df.at[i, "LocalCosineSimilarity"] = row.get("CosineSimilarity")
        df.at[i, "LocalRelativeEuclideanDistance"] = row.get("RelativeEuclideanDistance")
        df.at[i, "LocalAbnormal"] = bad = bool(row["Abnormal"] or row["OverFlow"])
        if bad:
            df.at[i, "Role"] = "origin"
    df.attrs = {**df.attrs, "storage_origins": storage}
    return df


#: A 'propagated' row whose RelativeEuclideanDistance exceeds this many times its inputs' is re-run alone
#: (:func:`refine_origins` step 4): ordinary kernels carry their inputs' relative error on, a few times
#: amplified at most; a kernel that multiplies it by more is likely breaking the values itself.
AMPLIFICATION = 10.0
#: Rows :func:`amplified_rows` returns at most (one single-kernel re-run each).
MAX_AMPLIFIED = 16


def amplified_rows(df: pd.DataFrame, ins: dict) -> list:
    """Index labels of abnormal 'propagated' rows (in execution order, at most :data:`MAX_AMPLIFIED`) whose
    RelativeEuclideanDistance is more than :data:`AMPLIFICATION` times the largest RelativeEuclideanDistance
    of the ONNX tensors their kernel reads (``ins``: toolkit.compare.layerwise.kernel_inputs; an input
    without a RED, a constant or an integer tensor, counts 0). Rows without a RED (integer tensors) are left
    out: their inputs' error cannot be put on the same scale; so are rows reading an input with OverFlow
    (inf/NaN where the reference is finite, its RED taken over the finite positions only): such an input
    explains any error after it, and re-run alone on it rounded to FP16 the kernel would meet the same inf."""
    red = dict(zip(df["TensorName"], pd.to_numeric(df["RelativeEuclideanDistance"], errors="coerce")))
    overflow = {t: o is True or (isinstance(o, (bool, np.bool_)) and bool(o))
                for t, o in zip(df["TensorName"], df["OverFlow"])}
    out = []
    for i in df.index[(df["Role"] == "propagated") & (df["Abnormal"] | df["OverFlow"])]:
        own = red.get(df.at[i, "TensorName"])
        if own is None or not np.isfinite(own):
            continue
        if any(overflow.get(t, False) for t in ins.get(df.at[i, "Kernel"], [])):
            continue  # an input holds inf/NaN where the reference is finite: that explains any error downstream
        upstream = [red.get(t) for t in ins.get(df.at[i, "Kernel"], [])]
        worst = max((float(r) for r in upstream if r is not None and np.isfinite(r)), default=0.0)
        if own > AMPLIFICATION * worst:
            out.append(i)
            if len(out) == MAX_AMPLIFIED:
                break
    return out


def _storage_culprits(runtime, k, t: str, golden: dict, thresholds, noise) -> dict[str, dict]:
    """{FP16-stored input of kernel ``k``: evidence} for the inputs whose storage rounding makes ``k``'s output
    ``t`` abnormal (see :func:`refine_origins`); {} when the stored inputs do not break it."""
    stored = [s for s in fp16_stored_inputs(runtime, k.name) if s in golden]
    if not stored:
        return {}

    def probe(which):
        out = isolate(runtime, k.name, golden, stored=set(which))
        if out is None or t not in out:
            return None
        r = compare_tensors(out[t], golden[t], thresholds=thresholds, expected_noise=noise, tensor=t)
        return r if (r["Abnormal"] or r["OverFlow"]) else None

    together = probe(stored)
    if together is None:
        return {}
    alone = {s: probe([s]) for s in stored} if len(stored) > 1 else {stored[0]: together}
    blamed = {s: r for s, r in alone.items() if r is not None} or dict.fromkeys(stored, together)
    return {s: {"consumer_kernel": k.name, "consumer_tensor": t, "consumer_nodes": list(k.nodes),
                "consumer_precision": k.precision, "stored_cosine": r.get("CosineSimilarity"),
                "stored_red": r.get("RelativeEuclideanDistance")} for s, r in blamed.items()}
