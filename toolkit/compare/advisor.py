"""The first-divergence advisor: findings in the compare tool's order.

1. static: FP16-unrepresentable constants reported by the compiler (before any run), then (when ``advise``
   is given the model) one warning ``nondeterministic_op`` per op drawing random numbers
   (toolkit.compare.nondeterminism: its dependent tensors are not compared);
2. where FP16 overflow / NaN / Inf first appears, and each later overflow that starts an error of its own (an
   origin) (device non-finite where the reference is finite, or a
   finite reference value passing 65504 in a tensor stored in FP16 — which saturation mode would hide),
   named where it happens with the reference value past 65504 there (:func:`overflow_site`: the cast of an
   FP32 input into the FP16 kernel, an on-chip intermediate of a fused kernel, the kernel's output), and
   advice that keeps every FP16 kernel meeting those values in FP32 (:func:`overflow_keep`);
   when the reference fits FP16 but a high_performance reduction's FP16 accumulation overflowed, the finding
   says so (partial-sum evidence) and advises high_precision implmode first (:func:`overflow_finding`);
   NaN/Inf the FP32 reference already holds is not FP16 overflow: a graph output whose reference holds
   NaN/Inf is its own error finding, ``golden_nonfinite`` (:func:`golden_nonfinite`, when ``advise`` is given
   the graph outputs), listed right after the static findings;
3. inputs that already differ;
4. the origin: the first abnormal tensor whose producing kernel's inputs are all normal, as distinct from
   tensors that only inherit an upstream error (propagated; counted in the evidence); or a tensor whose FP16
   storage breaks what a consumer computes from it (toolkit.compare.layerwise.refine_origins for an FP32
   consumer, toolkit.reexec.isolate.fp16_input_origins for an FP16 one or several hops up; evidence
   ``storage_rounding``, quoting the metric of the consumer output's dtype: ExactMatchRate for integers).

Each finding carries evidence (metric values, value ranges) and a recommendation; a recommendation that keeps
nodes in FP32 lists its keep_dtype entries in the evidence (``keep_dtype``: add them to the config's).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd

from toolkit.compare import nondeterminism
from toolkit.compare.counts import abnormal_mask, has_metrics
from toolkit.compare.layerwise import golden_range, kernel_inputs
from toolkit.compare.metrics.registry import METRICS
from toolkit.compiler.passes.check_constants import describe, folded_phrase
from toolkit.core.records import Finding
from toolkit.core.text import join_present, show, show_crossed
from toolkit.ir.weights import array_of
from toolkit.precision.contract import FP16_MAX, FP16_UNDERFLOW
from toolkit.runtime import fp16_accum

EVIDENCE_COLS = ["CosineSimilarity", "RelativeEuclideanDistance", "MaxAbsoluteError", "MeanRelativeError",
                 "KullbackLeiblerDivergence", "GoldenMin", "GoldenMax", "GoldenAbsMax", "GoldenFP16OverflowRatio",
                 "DeviceNaN", "DeviceInf", "GoldenNaN", "GoldenInf"]


def _evidence(row) -> dict:
    ev = {}
    for c in EVIDENCE_COLS:
        v = row.get(c)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        ev[c] = float(v) if not isinstance(v, (bool, str)) else v
    ev["tensor"] = row["TensorName"]
    ev["kernel"] = row.get("Kernel", "")
    ev["precision"] = row.get("Precision", "")
    if row.get("AbnormalMetrics"):
        ev["abnormal_metrics"] = list(row["AbnormalMetrics"]) if not isinstance(row["AbnormalMetrics"], str) else row["AbnormalMetrics"]
    return ev


def _beyond_fp16(absmax) -> str:
    """|x| for a message next to 'FP16 max 65504': past the max it is rounded up (never reads 65504)."""
    if absmax is not None and FP16_MAX < float(absmax) < 1e9:  # whole numbers, rounded up: 120000, 65505
        return str(math.ceil(float(absmax)))
    if absmax is not None and float(absmax) > FP16_MAX:
        return show_crossed(absmax, False, FP16_MAX, digits=4)
    return show(absmax, FP16_MAX, digits=4)


#: The advice without a graph (compare-dumps without --model): keep_dtype names ONNX nodes, device dumps do not.
NO_GRAPH_ADVICE = ("pass --model (the ONNX model the dumps come from) to check the inputs of each abnormal tensor, "
                   "find where the error starts and get a precision recommendation")


def _what(row, plan_kernels) -> str:
    """"'node'", or "kernel 'k' (node, node)" when the row's kernel groups several original nodes."""
    k = plan_kernels.get(row.get("Kernel", ""))
    nodes = k.nodes if k is not None else [row["NodeName"]]
    return f"'{row['NodeName']}'" if len(nodes) <= 1 else f"kernel '{k.name}' ({', '.join(nodes)})"


def _keep_advice(row, plan_kernels) -> str:
    return f"keep {_what(row, plan_kernels)} in FP32 (keep_dtype)"


def _storage_origin(df: pd.DataFrame, row) -> dict | None:
    """Evidence of a tensor whose FP16 storage destroys what a consumer computes from it
    (toolkit.compare.layerwise.refine_origins, ``df.attrs["storage_origins"]``), or None."""
    return (getattr(df, "attrs", None) or {}).get("storage_origins", {}).get(row["TensorName"])


def _kernel_what(k) -> str:
    """"'node'", or "kernel 'k' (node, node)" for a kernel grouping several original nodes."""
    return f"'{k.nodes[0]}'" if len(k.nodes) <= 1 else f"kernel '{k.name}' ({', '.join(k.nodes)})"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def keep_names(kernels) -> list[str]:
    """The keep_dtype entries that keep ``kernels`` in FP32: one node name per kernel (its anchor node when it
    has one: a keep_dtype node keeps its whole kernel in FP32, toolkit.compiler.passes.assign_precision)."""
    return list(dict.fromkeys(k.name if k.name in k.nodes else k.nodes[0] for k in kernels if k.nodes))


def _keep_kernels_advice(kernels) -> str:
    return f"keep {_and([_kernel_what(k) for k in kernels])} in FP32 (keep_dtype)"


def _origin_advice(row, plan_kernels, plan, df: pd.DataFrame) -> tuple[str, list]:
    """(advice, kernels it keeps in FP32): what changes an origin's result. A tensor whose FP16 storage breaks
    an FP16 consumer (toolkit.reexec.isolate.fp16_input_origins): keep its producer and the consumer in FP32
    (evidence ``keep_kernels``). An FP16 kernel: keep it in FP32. An FP32 kernel (keep_dtype cannot change
    it): wrong on exact inputs (LocalAbnormal): switch its fusion off / report it, unless its error is within the
    expected rounding noise (WithinExpectedNoise: only a line the user set makes it abnormal; loosen the line);
    else keep the producers of its FP16-stored inputs in FP32."""
    storage = _storage_origin(df, row) or {}
    keep = [plan_kernels[n] for n in storage.get("keep_kernels", []) if n in plan_kernels]
    if len(keep) > 1:
        order = {k.name: i for i, k in enumerate(plan.kernels)}
        keep = sorted(keep, key=lambda k: order.get(k.name, 0))
        consumer = _consumer(storage, df)[0]  # 'node', or kernel 'k' when it fuses several
        why = (f"{consumer} runs in FP16 too and would round the values again"
               if storage.get("consumer_kernel") in {k.name for k in keep} else
               f"each of them stores the values in FP16 on their way to {consumer}")
        return f"{_keep_kernels_advice(keep)}: {why}", keep
    k = plan_kernels.get(row.get("Kernel", ""))
    if k is None or getattr(k, "precision", "") != "fp32":  # compare-dumps' kernels carry no precision
        return _keep_advice(row, plan_kernels), [k] if k is not None and getattr(k, "nodes", None) else []

    tensors = getattr(plan, "tensors", {})
    stored16 = [t for t in kernel_inputs(plan).get(k.name, []) if getattr(tensors.get(t), "dtype", "") == "float16"]
    head = f"'{row['NodeName']}' already runs in FP32, so keep_dtype cannot change it"
    found = [r for _, r in df[df["TensorName"].isin(stored16)].iterrows() if r.get("Kernel")]
    producers = [_what(r, plan_kernels) for r in found]
    if producers and row.get("LocalAbnormal") not in (True,):  # True or numpy's True_; None / NaN: not known
        keep = list({r["Kernel"]: plan_kernels[r["Kernel"]] for r in found if r["Kernel"] in plan_kernels}.values())
        return (f"{head}; it reads {', '.join(repr(t) for t in stored16)} stored in FP16: keep "
                f"{', '.join(dict.fromkeys(producers))} in FP32 (keep_dtype)"), keep
    if row.get("WithinExpectedNoise") is True:  # a line the user set, crossed by ordinary (FP32) rounding
        return (head + "; its error is within the expected rounding noise (WithinExpectedNoise: FP32 rounding of "
                "these values, or the FP16 noise it carries): the line you set is tighter than that rounding; "
                "loosen it rather than report it"), []
    return (head + "; it differs from the reference on exact inputs"
            + (f": switch its fusion {k.rule} off (fusion_switch_file) or report it" if k.rule else ": report it")
            + " with repro/"), []


def _consumer(ev: dict, df: pd.DataFrame | None) -> tuple[str, str]:
    """(name, details) of a storage origin's consumer: ("'node'", "OpType, precision"), or ("kernel 'k'",
    "a, b, c: KernelOpType, precision") when the consumer's row is written by a kernel fusing several nodes
    (the Mul a Gemm+Sub+Mul kernel ends with is not what cancels; the kernel is)."""
    node, op, prec = ev.get("consumer_node", ""), ev.get("consumer_op_type", ""), ev.get("consumer_precision", "")
    rows = df[df["NodeName"] == node] if df is not None and "NodeName" in df.columns else None
    if rows is not None and len(rows):
        r = rows.iloc[0]
        nodes = [n for n in str(r.get("FusedNodes") or "").split(";") if n and n != "nan"]
        kernel = str(r.get("Kernel") or "")
        if len(nodes) > 1 and kernel:
            kop = str(r.get("KernelOpType") or "")
            return f"kernel '{kernel}'", f"{', '.join(nodes)}{': ' + kop if kop and kop != 'nan' else ''}, {prec}"
    return f"'{node}'", f"{op}, {prec}"


def _storage_where(ev: dict, row, df: pd.DataFrame | None = None) -> str:
    """The origin text of a tensor whose FP16 storage destroys a consumer's result (``ev``: its evidence;
    ``df``: the layer table, to name a fused consumer by its kernel)."""
    metric = ev.get("metric") or "CosineSimilarity"
    exact = ev.get("exact_value", ev.get("exact_cosine"))
    stored = ev.get("stored_value", ev.get("stored_cosine"))
    how = "re-run alone" if ev.get("consumer_precision") == "fp32" else "re-run alone in FP32"
    absmax = pd.to_numeric(pd.Series([row.get("GoldenAbsMax")]), errors="coerce").iloc[0]
    fate = (f"past FP16 max {FP16_MAX:.0f}, its largest values become inf" if absmax > FP16_MAX
            else "it is rounded within FP16 noise")
    consumer, details = _consumer(ev, df)
    return (f"is where the error starts: stored in FP16 (|x| up to {show(row.get('GoldenAbsMax'))}), {fate}, "
            f"but {consumer} ({details}) cannot work from the rounded values: {how} on the exact reference inputs "
            f"it matches ({metric} {show(exact)}), on them rounded to FP16 as the plan stores them it does not "
            f"({metric} {show(stored)}). ")


def nonfinite_inputs(df: pd.DataFrame) -> bool:
    """Whether a graph input already holds NaN/Inf (in the reference's feed)."""
    inp = df[df["OpType"] == "Input"]
    counts = [pd.to_numeric(inp.get(c, pd.Series(0, index=inp.index)), errors="coerce").fillna(0)
              for c in ("GoldenNaN", "GoldenInf")]
    return bool(len(inp) and ((counts[0] > 0) | (counts[1] > 0)).any())


def overflow_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows where FP16 overflow/NaN/Inf shows: device non-finite where the golden is finite (``OverFlow``),
    or a *finite* golden value beyond the FP16 range (``GoldenAbsMax`` > 65504, over the finite values only)
    in a tensor stored as FP16. NaN/Inf the reference itself holds is never FP16 overflow, on either side:
    the same NaN/Inf on the device at those positions is the FP32 model's own (see
    :func:`golden_nonfinite_rows`). When a graph input already holds NaN/Inf, non-finite values downstream
    follow from it (kernels spread them differently, e.g. inf·0 in a blocked convolution), so only the
    golden-range evidence counts as FP16 overflow then."""
    stored16 = df.get("DataType", pd.Series("", index=df.index)).astype(str) == "float16"
    absmax = pd.to_numeric(df.get("GoldenAbsMax", pd.Series(float("nan"), index=df.index)), errors="coerce")
    beyond = stored16 & (absmax > FP16_MAX)
    if not nonfinite_inputs(df):
        return df[df["OverFlow"] | beyond]
    return df[beyond]


def golden_nonfinite_rows(df: pd.DataFrame, outputs) -> pd.DataFrame:
    """Rows of graph outputs (``outputs``: tensor names) whose FP32 reference holds NaN or Inf
    (GoldenNaN + GoldenInf > 0)."""
    counts = [pd.to_numeric(df.get(c, pd.Series(0, index=df.index)), errors="coerce").fillna(0)
              for c in ("GoldenNaN", "GoldenInf")]
    return df[df["TensorName"].isin(list(outputs)) & ((counts[0] + counts[1]) > 0) & (df["OpType"] != "Input")]


def golden_nonfinite(df: pd.DataFrame, outputs) -> list[Finding]:
    """One error finding ``golden_nonfinite`` per graph output whose FP32 reference holds NaN/Inf: the model
    itself computes NaN/Inf in FP32 (or is fed it), so no precision setting of the NPU plan can fix those
    positions and the comparison covers only the finite ones. Evidence: counts of NaN/Inf on both sides."""
    out = []
    for _, r in golden_nonfinite_rows(df, outputs).iterrows():
        ev = _evidence(r)
        nan, inf = int(r.get("GoldenNaN", 0) or 0), int(r.get("GoldenInf", 0) or 0)
        cause = ("a graph input holds NaN/Inf: fix the inputs" if nonfinite_inputs(df)
                 else "fix the model (weights, a division by zero, log of 0, ...) or its inputs")
        out.append(Finding("error", "golden_nonfinite", r["TensorName"], ev,
                           f"the FP32 reference output '{r['TensorName']}' already holds {nan} NaN and {inf} Inf: "
                           f"the model computes NaN/Inf in FP32, so no NPU precision setting can help; {cause}"))
    return out


def _node_inputs(node, model, values) -> list:
    """The reference arrays of ``node``'s inputs: from ``values``, else the model's initializers (None if absent)."""
    inits = {t.name: t for t in model.graph.initializer if t.name in node.input}
    return [values[i] if i in values else array_of(inits[i]) if i in inits else None
            for i in node.input]


def accumulation_overflow(r, plan_kernels, model=None, values=None) -> dict | None:
    """Evidence when the FP16 overflow of row ``r`` is its kernel's FP16 *accumulation* overflowing while the
    reference values of the tensor fit FP16 (GoldenAbsMax <= 65504): GUIDE §3, a single-node FP16
    reduction/normalisation in ``high_performance`` implmode sums in FP16 (toolkit.runtime.fp16_accum).
    Returns {"op_type", "implmode", "partial_sum_absmax"}: the largest |running sum|, recomputed in float64
    from the reference inputs (toolkit.runtime.fp16_accum.accumulation_peak; ``model`` the ONNX model,
    ``values`` the reference tensors; None when they are not given). None when the kernel does not
    accumulate in FP16, the reference itself passes 65504, or the recomputed sums stay within 65504."""
    from onnx import helper

    k = plan_kernels.get(r.get("Kernel", ""))
    absmax = pd.to_numeric(pd.Series([r.get("GoldenAbsMax")]), errors="coerce").iloc[0]
    if (k is None or k.precision != "fp16" or k.implmode != "high_performance" or k.fusion == "cast"
            or len(k.exec_nodes or k.nodes) != 1 or r.get("OpType") not in fp16_accum.KERNELS
            or not absmax <= FP16_MAX):
        return None
    ev = {"op_type": r["OpType"], "implmode": k.implmode, "partial_sum_absmax": None}
    node = next((n for n in model.graph.node if n.name == r["NodeName"]), None) if model is not None else None
    if node is not None and values is not None:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        peak = fp16_accum.accumulation_peak(node.op_type, _node_inputs(node, model, values), attrs)
        if peak is not None and peak <= FP16_MAX:
            return None
        ev["partial_sum_absmax"] = peak
    return ev


def _golden_absmax(t: str, df: pd.DataFrame, values) -> float:
    """Reference |x| max of tensor ``t`` over its finite values: from ``values`` when given, else the table's
    GoldenAbsMax; NaN when unknown or not numeric."""
    if values is not None and t in values:
        return float(golden_range(values[t]).get("GoldenAbsMax", float("nan")))
    hit = df.loc[df["TensorName"] == t, "GoldenAbsMax"] if "GoldenAbsMax" in df else pd.Series(dtype=float)
    v = pd.to_numeric(hit, errors="coerce").dropna()
    return float(v.iloc[0]) if len(v) else float("nan")


def overflow_site(r, plan, df: pd.DataFrame, values=None, model=None) -> dict:
    """Where the FP16 overflow of overflow row ``r`` happens, in the order the kernel meets the values:
    {"where", "tensor", "golden_absmax", "producer"}; ``where``:

    - ``"input_cast"``: an input of the FP16 kernel, stored in FP32 (an FP32 producer's output or a graph
      input) with reference |x| past 65504, is cast to FP16 at the kernel's input (inf);
      ``producer``: the node that wrote it ("" for a graph input);
    - ``"intermediate"``: a tensor the fused kernel keeps on chip (KernelSpec.internal) passes 65504;
      ``producer``: its node;
    - ``"output"``: the row's own tensor, stored in FP16, passes 65504 (``producer``: its node);
    - ``"underflow"``: no reference value passes 65504, but the kernel holds an op that is infinite at 0
      (:data:`SINGULAR_AT_ZERO`: Log, a divisor, Reciprocal, a negative power) and an FP16 input of it holds
      non-zero reference values below FP16's underflow threshold 2^-25 (``flushed`` of them, the smallest
      ``golden_absmin``), which FP16 storage flushes to 0 (values ``values`` must hold the reference tensors);
      ``producer``: the node that wrote it ("" for a graph input);
    - ``"computation"``: no reference value the kernel reads, keeps or writes passes 65504 (a step inside the
      computation); :func:`overflow_finding` makes it ``"propagated"`` when the row's inputs are abnormal
      (Role "propagated": the error comes from upstream; no keep set is advised);
    - ``"unknown"``: the row's value fits FP16 and there is no plan to tell what it reads (compare-dumps).

    ``golden_absmax``: the reference |x| max of ``tensor`` (over its finite values; :func:`_golden_absmax`)."""
    own = {"where": "output", "tensor": r["TensorName"], "producer": r["NodeName"],
           "golden_absmax": _golden_absmax(r["TensorName"], df, values)}
    k = {k.name: k for k in getattr(plan, "kernels", [])}.get(r.get("Kernel", ""))
    tensors = getattr(plan, "tensors", None)
    if k is not None and tensors is not None and getattr(k, "precision", "") == "fp16":
        producer = dict(zip(df["TensorName"], df["NodeName"]))
        for t in kernel_inputs(plan).get(k.name, []):
            a = _golden_absmax(t, df, values)
            if a > FP16_MAX and getattr(tensors.get(t), "dtype", "") != "float16":
                return {"where": "input_cast", "tensor": t, "golden_absmax": a,
                        "producer": "" if t in getattr(plan, "graph_inputs", []) else producer.get(t, "")}
        for t in getattr(k, "internal", []):
            a = _golden_absmax(t, df, values)
            if a > FP16_MAX:
                return {"where": "intermediate", "tensor": t, "golden_absmax": a, "producer": producer.get(t, "")}
    if own["golden_absmax"] > FP16_MAX:
        return own
    if k is not None and tensors is not None and values is not None and getattr(k, "precision", "") == "fp16":
        low = _underflow_input(k, plan, df, values, model)
        if low is not None:
            return low
    return {**own, "where": "computation" if tensors is not None else "unknown"}


#: Ops whose result is infinite (or NaN) where an input is 0, with that input's position: an input FP16 flushes
#: to 0 there makes them inf/NaN (Log(0), x/0, 1/0, 0^-p).
SINGULAR_AT_ZERO = {"Log": 0, "Div": 1, "Reciprocal": 0, "Pow": 0}


def _singular_inputs(k, model) -> set[str] | None:
    """The tensors kernel ``k``'s nodes read at a :data:`SINGULAR_AT_ZERO` position (None without ``model``)."""
    if model is None:
        return None
    nodes = set(getattr(k, "nodes", []) or [])
    return {n.input[SINGULAR_AT_ZERO[n.op_type]] for n in model.graph.node
            if n.name in nodes and n.op_type in SINGULAR_AT_ZERO and len(n.input) > SINGULAR_AT_ZERO[n.op_type]}


def _underflow_input(k, plan, df: pd.DataFrame, values: dict, model=None) -> dict | None:
    """The ``"underflow"`` site of FP16 kernel ``k`` (:func:`overflow_site`), or None: the inputs of the kernel
    whose reference holds non-zero values FP16 flushes to 0 (|v| < 2^-25), when the kernel holds an op of
    :data:`SINGULAR_AT_ZERO` (with ``model``: only the inputs that op reads at its singular position, so a
    numerator that flushes to 0 does not count). ``tensor``/``producer``/``flushed``/``golden_absmin``: the
    first such input; ``tensors``: all of them (two tiny divisors of one kernel need both kept non-zero)."""
    if not set(SINGULAR_AT_ZERO) & set(_kernel_ops(k, df)):
        return None
    singular = _singular_inputs(k, model)  # with the model: only what a singular position reads
    producer = dict(zip(df["TensorName"], df["NodeName"]))
    found = []
    for t in dict.fromkeys(kernel_inputs(plan).get(k.name, [])):
        v = values.get(t) if singular is None or t in singular else None
        if v is None:
            continue
        a = np.abs(np.asarray(v, np.float64).reshape(-1))
        tiny = a[(a > 0) & (a < FP16_UNDERFLOW)]
        if tiny.size:
            found.append({"tensor": t, "golden_absmax": _golden_absmax(t, df, values),
                          "golden_absmin": float(tiny.min()), "flushed": int(tiny.size),
                          "producer": "" if t in getattr(plan, "graph_inputs", []) else producer.get(t, "")})
    return {"where": "underflow", **found[0], "tensors": [f["tensor"] for f in found]} if found else None


def _kernel_ops(k, df: pd.DataFrame) -> list[str]:
    """The op types of kernel ``k``'s nodes, from the layer table (``k.op_type`` when its nodes have no row)."""
    ops = df.loc[df["NodeName"].isin(list(getattr(k, "nodes", []) or [])), "OpType"].astype(str).tolist() \
        if "OpType" in df.columns else []
    return ops or [str(getattr(k, "op_type", ""))]


def overflow_keep(r, plan, df: pd.DataFrame, values=None, site: dict | None = None) -> list:
    """The kernels to keep in FP32 so that no FP16 kernel meets the values past 65504 of overflow row ``r``:
    its kernel, then every FP16 kernel that reads a tensor with reference |x| past 65504 downstream of it
    (the row's big outputs, the big FP32 input cast at ``site``, and onwards through whatever reads them:
    kept in FP32 alone, a kernel's big output would only be cast to FP16 at its FP16 consumer's input).
    In plan order. Kernels without a plan (compare-dumps): the row's kernel only."""
    kernels = list(getattr(plan, "kernels", []))
    k = {x.name: x for x in kernels}.get(r.get("Kernel", ""))
    if k is None:
        return []
    if getattr(plan, "tensors", None) is None:
        return [k]
    ins = kernel_inputs(plan)

    sizes: dict[str, float] = {}

    def big(t):
        if t not in sizes:
            sizes[t] = _golden_absmax(t, df, values)
        return sizes[t] > FP16_MAX

    keep, seen = [k], set()
    if site and site["where"] == "underflow":  # store the tiny values in FP32: their FP16 writers too
        for t in site.get("tensors") or [site["tensor"]]:
            writer = next((x for x in kernels if t in x.outputs and x.precision == "fp16"), None)
            keep += [writer] if writer is not None and writer not in keep else []
    queue = [t for t in k.outputs if big(t)] + ([site["tensor"]] if site and site["where"] == "input_cast" else [])
    while queue:
        t = queue.pop(0)
        if t in seen:
            continue
        seen.add(t)
        for c in kernels:
            if c.cast_of or t not in ins.get(c.name, []):
                continue
            if c.precision == "fp16" and c not in keep:
                keep.append(c)
            queue += [o for o in c.outputs if o not in seen and big(o)]
    order = {x.name: i for i, x in enumerate(kernels)}
    return sorted(keep, key=lambda x: order[x.name])


def _constant_site(r, site: dict, plan_kernels, model) -> dict:
    """``site`` as a ``"constant"`` site when a node of row ``r``'s kernel reads an initializer of ``model``
    whose |x| passes FP16 max (the FP16 kernel stores it as inf; toolkit.compiler.passes.check_constants
    reports it as fp16_constant), else ``site`` unchanged. The node that wrote the row's tensor is looked at
    first: in a fused kernel another node's constant (a BatchNormalization's variance, folded into the weights)
    is not the value that overflowed there."""
    k = plan_kernels.get(r.get("Kernel", ""))
    names = set(getattr(k, "nodes", None) or [r["NodeName"]])
    inits = {t.name: t for t in model.graph.initializer}
    own = [n for n in model.graph.node if n.name == r["NodeName"]]
    for node in own + [n for n in model.graph.node if n.name in names and n.name != r["NodeName"]]:
        for i in node.input:
            if i in inits:
                a = np.asarray(array_of(inits[i]))
                if a.dtype.kind == "f" and a.size:
                    absmax = float(np.nanmax(np.abs(a.astype(np.float64))))
                    if absmax > FP16_MAX:
                        return {**site, "where": "constant", "tensor": i, "golden_absmax": absmax,
                                "reader": node.name}
    return site


def _site_text(r, site: dict, plan_kernels) -> str:
    """Where the overflow of row ``r`` happens, with the reference value past FP16 max (:func:`overflow_site`)."""
    node, op = r["NodeName"], r.get("OpType", "")
    op = op if isinstance(op, str) and op.strip() and op != "nan" else ""
    named = f"'{node}' ({op})" if op else f"'{node}'"  # a dump without --model may know no op type
    out_absmax = r.get("GoldenAbsMax", float("nan"))
    out = _beyond_fp16(out_absmax)
    past = f"golden |x| up to {_beyond_fp16(site['golden_absmax'])} > FP16 max {FP16_MAX:.0f}"
    output_too = out_absmax is not None and float(out_absmax) > FP16_MAX
    if site["where"] == "input_cast":
        src = (f"graph input '{site['tensor']}' (FP32)" if not site["producer"] else
               f"'{site['tensor']}' (written in FP32 by '{site['producer']}')")
        what = _what(r, plan_kernels)
        what = (f"'{node}' ({op + ', ' if op else ''}FP16 kernel)" if what == f"'{node}'" else
                f"{what}, an FP16 kernel")
        return (f"FP16 overflow at the input of {what}: it reads {src}, {past}, cast to FP16, which turns it into "
                "inf; " + (f"its output is past FP16 max too (golden |x| up to {out})" if output_too else
                           f"its own output stays within FP16 (golden |x| up to {out})"))
    if site["where"] == "intermediate":
        return (f"FP16 overflow inside {_what(r, plan_kernels)}: its on-chip intermediate '{site['tensor']}' "
                f"(from '{site['producer']}') reaches {past}; " +
                (f"the kernel's output is past FP16 max too (golden |x| up to {out})" if output_too else
                 f"the kernel's output stays within FP16 (golden |x| up to {out})"))
    if site["where"] == "output":
        return f"FP16 overflow at the output of {named}: {past}, which FP16 storage turns into inf"
    if site["where"] == "constant":
        reads = ("it reads" if site.get("reader", node) == node else
                 f"its kernel's node '{site['reader']}' reads")
        return (f"FP16 overflow at {named}: {reads} constant '{site['tensor']}', {past}, which the FP16 "
                f"kernel stores as inf (see the fp16_constant finding); its own output stays within FP16 (golden "
                f"|x| up to {out})" if not output_too else
                f"FP16 overflow at {named}: {reads} constant '{site['tensor']}', {past}, which the FP16 "
                "kernel stores as inf (see the fp16_constant finding)")
    if site["where"] == "underflow":
        src = (f"graph input '{site['tensor']}'" if not site["producer"] else
               f"'{site['tensor']}' (written by '{site['producer']}')")
        more = len(site.get("tensors") or []) - 1
        src += f" and {more} more input(s) like it" if more > 0 else ""
        return (f"FP16 underflow feeds {named}: it reads {src}, whose reference holds {site['flushed']} "
                f"non-zero value(s) below FP16's smallest subnormal (down to {show(site['golden_absmin'], digits=3)}"
                f" < 2^-25 = {FP16_UNDERFLOW:.3g}), which FP16 storage flushes to 0, and '{node}' turns 0 into "
                f"inf/NaN where the reference stays finite (golden |x| up to "
                f"{show(r.get('GoldenAbsMax', float('nan')))})")
    if site["where"] == "propagated":
        return (f"FP16 overflow/NaN/Inf first appears at {named} where the reference is finite, though no "
                f"reference value it reads or writes passes FP16 max {FP16_MAX:.0f} (golden |x| up to "
                f"{show(r.get('GoldenAbsMax', float('nan')))}): its inputs are already abnormal, so it follows from "
                "an error upstream (a value that differs enough to reach 0 or past the FP16 range here)")
    if site["where"] == "unknown":
        return (f"FP16 overflow/NaN/Inf first appears at {named} where the reference is finite (golden |x| "
                f"up to {show(r.get('GoldenAbsMax', float('nan')))}, within FP16 max {FP16_MAX:.0f}): the values "
                "past the FP16 range are in what it reads or inside its computation")
    return (f"FP16 overflow/NaN/Inf first appears at {named} where the reference is finite, though no "
            f"reference value it reads or writes passes FP16 max {FP16_MAX:.0f} (golden |x| up to "
            f"{show(r.get('GoldenAbsMax', float('nan')))}): a step inside its FP16 computation leaves the FP16 range")


def overflow_finding(r, plan_kernels, graph_known=True, fusion_hint=None, model=None, values=None,
                     plan=None, df: pd.DataFrame | None = None) -> Finding:
    """The ``fp16_overflow`` error of overflow row ``r`` (the first, and each later one that is an origin).
    Evidence ``overflow``: where it happens
    (:func:`overflow_site`: the cast of an FP32 input into FP16, an on-chip intermediate, the kernel's output,
    a constant of ``model`` the kernel reads (:func:`_constant_site`), or inside the computation) with the
    reference |x| that passes 65504 there; ``keep_dtype``: the keep_dtype
    entries of the advice (:func:`overflow_keep`). When the kernel's FP16 accumulation overflowed
    (:func:`accumulation_overflow`; evidence key ``accumulation``), the advice is high_precision implmode for
    that op type first (FP32 accumulation, the kernel stays FP16), keep_dtype second. ``plan``/``df``: the
    compiled plan and the layer table (None: the site is judged from the row alone)."""
    ev = _evidence(r)
    acc = accumulation_overflow(r, plan_kernels, model, values) if graph_known else None
    hint = f", or {fusion_hint[r['NodeName']]}" if fusion_hint and r["NodeName"] in fusion_hint else ""
    table = df if df is not None else pd.DataFrame([dict(r)])
    if plan is None:
        plan = SimpleNamespace(kernels=list(plan_kernels.values()))
    if acc is None:
        site = overflow_site(r, plan, table, values, model)
        if site["where"] in ("computation", "intermediate") and model is not None:
            # a fused kernel keeps its intermediates in FP32 (the numerics contract): a value past 65504 there
            # overflows nothing itself, while a constant past 65504 the kernel reads is stored as inf
            site = _constant_site(r, site, plan_kernels, model)
        if site["where"] == "computation" and str(r.get("Role") or "") == "propagated":
            site = {**site, "where": "propagated"}  # its inputs are abnormal already: the error comes from upstream
        ev["overflow"] = site
        keep = overflow_keep(r, plan, table, values, site) if graph_known and site["where"] != "propagated" else []
        if keep:
            ev["keep_dtype"] = keep_names(keep)
        advice = (NO_GRAPH_ADVICE if not graph_known else _keep_kernels_advice(keep) if keep
                  else "fix where the error starts (the first_divergence finding); keeping this kernel alone in "
                  "FP32 does not remove it" if site["where"] == "propagated" else _keep_advice(r, plan_kernels))
        if site["where"] == "input_cast" and keep:
            advice += f": it then reads '{site['tensor']}' in FP32"
        elif site["where"] == "underflow" and keep:
            advice += (": what it reads is then stored and read in FP32, where the small values stay non-zero")
        elif len(keep) > 1:
            advice += ": each of them meets values past FP16 max"
        return Finding("error", "fp16_overflow", r["NodeName"], ev, _site_text(r, site, plan_kernels) + ": "
                       + advice + hint)
    ev["accumulation"] = acc
    ev["overflow"] = {"where": "accumulation", "tensor": r["TensorName"], "producer": r["NodeName"],
                      "golden_absmax": acc["partial_sum_absmax"]}
    k = plan_kernels.get(r.get("Kernel", ""))
    if k is not None and graph_known:
        ev["keep_dtype"] = keep_names([k])
    op = acc["op_type"]
    peak = acc["partial_sum_absmax"]
    sums = (f"most likely passes FP16 max {FP16_MAX:.0f} (the reference inputs are not at hand to measure it)"
            if peak is None else f"reaches |sum| {_beyond_fp16(peak)} > FP16 max {FP16_MAX:.0f}")
    return Finding("error", "fp16_overflow", r["NodeName"], ev,
                   f"FP16 accumulation overflows in '{r['NodeName']}' ({op}, implmode high_performance sums in "
                   f"FP16): the reference values fit FP16 (golden |x| up to "
                   f"{_beyond_fp16(r.get('GoldenAbsMax', float('nan')))}) but the sum it accumulates in FP16 "
                   f"{sums}; "
                   f"run {op} in high_precision implmode (op_select_implmode=\"high_precision\" with "
                   f"optypelist_for_implmode=[\"{op}\"] for that op type only): it then accumulates in FP32 and "
                   f"stays FP16; or {_keep_advice(r, plan_kernels)}" + hint)


def advise(df: pd.DataFrame, plan, compile_findings=(), fusion_hint: dict | None = None,
           outputs=None, model=None, values: dict | None = None, graph_known: bool = True,
           lines=None) -> list[Finding]:
    """Findings, most important first (see module docstring). ``outputs``: the graph output tensor names,
    when known: adds a ``golden_nonfinite`` finding per output whose FP32 reference holds NaN/Inf. ``model``
    (the original onnx.ModelProto), when given: adds a ``nondeterministic_op`` warning per random op;
    ``values``: the reference run's tensors (to read a Dropout ``training_mode`` that is not a constant).
    ``graph_known=False`` (compare-dumps without --model: rows in dump order, producers' inputs unknown): the
    origin is only the first abnormal tensor in dump order, and the advice is to pass --model, not keep_dtype.
    ``lines``: the abnormal lines the table was judged with (a toolkit.compare.metrics.thresholds.Thresholds),
    when known: an origin whose inputs hold their own lines but cross the origin tensor's is said to receive its
    error from upstream (:func:`upstream_as_large`)."""
    kernels = {k.name: k for k in plan.kernels}
    out: list[Finding] = list(f for f in compile_findings)
    if model is not None:
        out += nondeterminism.findings(model, outputs, values)
    if outputs is not None:
        out += golden_nonfinite(df, outputs)
    ov = overflow_rows(df)
    overflows: dict[str, Finding] = {}  # node -> its fp16_overflow finding
    if len(ov):
        # the first overflow row, and every later one that starts its own error (an origin: a second LayerNorm
        # squaring past 65504 as the first does), each with its own site and keep set
        rows = [ov.iloc[0]] + [r for _, r in ov.iloc[1:].iterrows() if str(r.get("Role") or "") == "origin"]
        for r in rows:
            if r["NodeName"] not in overflows:
                overflows[r["NodeName"]] = overflow_finding(r, kernels, graph_known, fusion_hint, model, values,
                                                            plan=plan, df=df)
                out.append(overflows[r["NodeName"]])
    inp = df[(df["OpType"] == "Input") & df["Abnormal"]]
    for _, r in inp.iterrows():
        out.append(Finding("error", "inconsistent_input", r["NodeName"], _evidence(r),
                           f"input '{r['NodeName']}' already differs between the two runs: feed both the same data"))
    origins = df[(df["Role"] == "origin") & (df["OpType"] != "Input")]
    propagated = int((df["Role"] == "propagated").sum())
    for i, (_, r) in enumerate(origins.iterrows()):
        ev = _evidence(r)
        ev["propagated_tensors"] = propagated
        advice, keep = _origin_advice(r, kernels, plan, df)
        overflow = overflows.get(r["NodeName"])
        same = overflow is not None and "keep_dtype" in overflow.evidence \
            and "accumulation" not in overflow.evidence and not _storage_origin(df, r)
        if same:  # the overflow finding's own advice: keep what meets the values past 65504
            keep = [kernels[n] for n in overflow.evidence["keep_dtype"] if n in kernels] or \
                [k for k in plan.kernels if set(k.nodes) & set(overflow.evidence["keep_dtype"])]
            advice = _keep_kernels_advice(keep)
        if keep and graph_known:
            ev["keep_dtype"] = keep_names(keep)
        storage = _storage_origin(df, r)
        if storage:
            ev["storage_rounding"] = dict(storage)
        if fusion_hint and r["NodeName"] in fusion_hint:
            advice += f", or {fusion_hint[r['NodeName']]}"
        kind = "first_divergence" if i == 0 else "divergence_origin"
        consts = [] if same or storage else kernel_constants(r, kernels, compile_findings)
        if consts:
            ev["fp16_constants"] = consts
        group = _what(r, kernels)
        where = ((_storage_where(storage, r, df) if storage else
                  ("is where the error shows, from the FP16 underflow above. "
                   if (overflow.evidence.get("overflow") or {}).get("where") == "underflow" else
                   "is where the error starts with the FP16 overflow above. ") if same else
                  (_fused_where(r, df, plan, lines) or _start_where(r, df, plan, lines)) + _constants_text(consts))
                 + advice if graph_known else
                 "is the first abnormal tensor in dump order" + (f" (device op {group})" if group.startswith("kernel")
                                                                 else "")
                 + "; without --model its inputs cannot be checked, so the error may start earlier (in a tensor "
                 "not dumped); " + NO_GRAPH_ADVICE)
        out.append(Finding("error" if i == 0 else "warning", kind, r["NodeName"], ev,
                           f"'{r['NodeName']}' ({_kernel_facts(r)}) " + where))
    return out


def first_divergence(df: pd.DataFrame) -> dict | None:
    """{node, op_type, tensor, kernel, precision, kind, evidence} of the earliest overflow or origin row (None
    if all is normal); plus ``consumer_nodes`` when the origin is a tensor whose FP16 storage destroys a
    consumer's result (the divergence shows only in the consumer's nodes)."""
    ov = overflow_rows(df)
    org = df[(df["Role"] == "origin") & (df["OpType"] != "Input")]
    cands = []
    if len(ov):
        cands.append((int(ov.iloc[0]["Index"]), ov.iloc[0], "fp16_overflow"))
    if len(org):
        cands.append((int(org.iloc[0]["Index"]), org.iloc[0], "abnormal"))
    if not cands:
        return None
    _, r, kind = min(cands, key=lambda c: c[0])
    out = {"node": r["NodeName"], "op_type": r["OpType"], "tensor": r["TensorName"], "kernel": r.get("Kernel", ""),
           "precision": r.get("Precision", ""), "kind": kind, "evidence": _evidence(r)}
    storage = _storage_origin(df, r) if kind == "abnormal" else None
    if storage:  # the divergence shows in the consumer: a reproducer needs it too
        out["consumer_nodes"] = list(storage.get("consumer_nodes", []))
        out["evidence"]["storage_rounding"] = dict(storage)
    return out


def _fused_where(r, df: pd.DataFrame, plan, lines=None) -> str:
    """For a row written by a kernel that fuses several nodes, when the row's node is not the kernel's anchor
    (the Relu after a MatMul): the kernel is where the error starts, not the node whose tensor it writes ("" for
    any other row)."""
    nodes = [n for n in str(r.get("FusedNodes") or "").split(";") if n]
    kernel = str(r.get("Kernel") or "")
    if len(nodes) < 2 or not kernel or r.get("NodeName") == kernel:
        return ""
    op = str(r.get("KernelOpType") or "")
    return (f"is the output of kernel '{kernel}'{f' ({op})' if op else ''}, which fuses "
            f"{', '.join(repr(n) for n in nodes)}: that kernel is where the error starts; "
            f"{_upstream_text(r, df, plan, lines) or 'its inputs are normal. '}")


def _start_where(r, df: pd.DataFrame, plan, lines=None) -> str:
    upstream = _upstream_text(r, df, plan, lines)
    if upstream:
        return f"is the first tensor to cross its lines, but the error does not start there: {upstream}"
    return "is where the error starts; its inputs are normal. "


def _upstream_text(r, df: pd.DataFrame, plan, lines=None) -> str:
    """'' unless an input of the origin row ``r``'s kernel, normal under its own lines, already crosses the
    line ``r``'s tensor crosses (:func:`upstream_as_large`: typically a line set for ``r``'s tensor alone,
    tighter than the error arriving from upstream); then a sentence with the values, saying that keeping this
    kernel alone in FP32 leaves the upstream part."""
    same = upstream_as_large(r, df, plan, lines)
    if not same:
        return ""
    shown = "; ".join(f"input '{t}' {m} {show(v, digits=4)} (the line here: {show(line, digits=4)})"
                      for t, m, v, line in same[:3])
    return (f"its inputs hold their own lines but already cross the one this tensor crosses ({shown}), so the "
            "error arrives from upstream and keeping this kernel alone in FP32 does not remove it. ")


def upstream_as_large(r, df: pd.DataFrame, plan, lines=None) -> list[tuple[str, str, float, float]]:
    """[(input tensor, metric, its value, the line)]: inputs of ``r``'s kernel (ONNX tensors,
    toolkit.compare.layerwise.kernel_inputs), compared and not abnormal, held to another line on a metric in
    ``r``'s AbnormalMetrics than ``r`` (``lines.for_tensor``: a line set for one tensor alone), whose value
    crosses ``r``'s line (the registry's direction). Empty without ``lines``, when ``r`` has no kernel or
    crossed no metric line (an overflow)."""
    crossed = r.get("AbnormalMetrics")
    crossed = [crossed] if isinstance(crossed, str) else list(crossed) if isinstance(crossed, (list, tuple)) else []
    crossed = [m for m in crossed if m in METRICS and m in df.columns]
    ins = kernel_inputs(plan).get(str(r.get("Kernel") or ""), []) if plan is not None else []
    if not crossed or not ins or lines is None:
        return []
    mine = lines.for_tensor(r["TensorName"])
    rows = df[df["TensorName"].isin(ins) & (df["TensorName"] != r["TensorName"])]
    rows = rows[~abnormal_mask(rows) & has_metrics(rows)]
    out = []
    for _, u in rows.iterrows():
        for m in crossed:
            line, theirs = mine.get(m), u.get(m)
            if not _finite(line) or not _finite(theirs) or lines.for_tensor(u["TensorName"]).get(m) == line:
                continue
            if float(theirs) == float(line) or METRICS[m].is_abnormal(float(theirs), float(line)):
                out.append((u["TensorName"], m, float(theirs), float(line)))
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool) and math.isfinite(v)


#: fp16_constant evidence keys of a change that alters what a kernel computes (before a mere integer
#: inexactness, which a constant like 50000 → 50016 shows without harm)
MATERIAL_CHANGES = ("overflow", "underflow_to_zero", "norm_change", "value_change")


def kernel_constants(r, plan_kernels, compile_findings) -> list[dict]:
    """[{"name", "reader", "change"}]: the constants FP16 changes (the compiler's fp16_constant findings,
    toolkit.compiler.passes.check_constants) that a node of the origin row ``r``'s kernel reads, the material
    changes first (:data:`MATERIAL_CHANGES`), at most 3; "change" in the compiler's words (``describe``);
    "source", for a constant a compile pass computed (a BatchNormalization folded into a Conv's weight), where
    it comes from in the model (``folded_phrase``)."""
    k = plan_kernels.get(str(r.get("Kernel") or ""))
    nodes = set(getattr(k, "nodes", None) or [r.get("NodeName")])
    hits = [f for f in compile_findings if getattr(f, "kind", "") == "fp16_constant"
            and isinstance(f.evidence, dict) and f.evidence.get("reader") in nodes]
    hits.sort(key=lambda f: not any(c in f.evidence for c in MATERIAL_CHANGES))
    return [{"name": f.subject, "reader": f.evidence["reader"], "change": describe(f.evidence),
             **({"source": folded_phrase(f.evidence["folded_from"])} if f.evidence.get("folded_from") else {})}
            for f in hits[:3]]


def _constants_text(consts: list[dict]) -> str:
    """"It reads constant 'W' (by 'conv'), which FP16 changes (...). " for :func:`kernel_constants`."""
    if not consts:
        return ""
    parts = [f"'{c['name']}'{' (' + c['source'] + ')' if c.get('source') else ''} (by '{c['reader']}'), which FP16 "
             f"changes ({c['change']})" for c in consts]
    return f"It reads constant{'s' if len(parts) > 1 else ''} {'; '.join(parts)}. "


def _kernel_facts(r) -> str:
    """"OpType, kernel K in P" of a layer-table row without the parts a dump does not know (no op type, no
    kernel): never "(, kernel add in fp16)"."""
    kernel = (f"kernel {r.get('Kernel')}" + (f" in {r.get('Precision')}" if r.get("Precision") else "")) \
        if r.get("Kernel") else ""
    return join_present(r.get("OpType", ""), kernel)
