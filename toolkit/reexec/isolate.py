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

from toolkit.compare.advisor import overflow_rows
from toolkit.compare.layerwise import (
    _mark_storage_origin,
    golden_range,
    noise_allowance,
)
from toolkit.compare.metrics import compare_tensors, dtype_class
from toolkit.ir.graph import node_reads
from toolkit.ort.terminate import reraise_if_terminated
from toolkit.precision.contract import expected_noise
from toolkit.precision.options import MIXLIST_MODES
from toolkit.reexec.repro import run_subgraph


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
        if t in runtime.weights:  # a weight or constant the kernel reads (toolkit.runtime.kernels.bound_values)
            values.append(runtime.weights[t])
            continue
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


# ------------------------------------------------------------------ FP16 storage upstream of a kernel
#: Hops upstream :func:`fp32_fix` may take (each adds the producers of the inputs whose stored values still
#: break the result once everything already found runs in FP32).
MAX_HOPS = 6
#: Rows :func:`fp16_input_origins` examines at most (each costs a few small onnxruntime sessions).
MAX_ROWS = 16


def headline_metric(golden_value) -> str:
    """The metric that judges a tensor of this dtype: ExactMatchRate for integer/bool tensors (indices, masks:
    cosine is undefined there), CosineSimilarity for float tensors (toolkit.compare.metrics.dtype_class)."""
    return "ExactMatchRate" if dtype_class(np.asarray(golden_value).dtype) == "integer" else "CosineSimilarity"


def _boundary(model, nodes: list[str]) -> list[str]:
    """Tensors the ONNX ``nodes`` read from outside themselves, initializers left out, in reading order."""
    wanted = set(nodes)
    ns = [n for n in model.graph.node if n.name in wanted]
    produced = {o for n in ns for o in n.output}
    inits = {i.name for i in model.graph.initializer}
    return list(dict.fromkeys(t for n in ns for t in node_reads(n) if t not in produced and t not in inits))


def _as_reference_dtype(device_value, golden_value):
    """A device value in the reference's dtype (FP16 storage read back as float32: exact)."""
    g = np.asarray(golden_value)
    return np.asarray(device_value).astype(g.dtype, copy=False) if g.dtype.kind in "fiub" else g


def _differs(t: str, golden: dict, device: dict) -> bool:
    if t not in device or t not in golden:
        return False
    d, g = np.asarray(device[t]), np.asarray(golden[t])
    return d.shape == g.shape and not np.array_equal(_as_reference_dtype(d, g), g, equal_nan=g.dtype.kind == "f")


def _judge_fp32(model, nodes, golden, device, t, stored, thresholds, noise) -> dict | None:
    """The compare row of ``t`` from ``nodes`` run alone in FP32 (toolkit.reexec.repro.run_subgraph) on the
    reference values of their inputs, those in ``stored`` replaced by the device's (as the plan stored them);
    None if they cannot run alone."""
    feeds = dict(golden)
    feeds.update({s: _as_reference_dtype(device[s], golden[s]) for s in stored})
    try:
        out = run_subgraph(model, nodes, feeds, outputs=[t])
    except Exception as exc:  # a node onnxruntime cannot run alone, a boundary without reference value: no verdict
        reraise_if_terminated(exc)
        return None
    return compare_tensors(out[t], golden[t], thresholds=thresholds, expected_noise=noise, tensor=t) if t in out else None


def _inherited_noise(kernel, tensor: str, inputs, owner: dict, golden: dict) -> dict[str, float]:
    """The noise allowance the layer table gives ``kernel``'s output ``tensor`` once it runs in FP32 on
    ``inputs`` written by FP16 kernels (toolkit.compare.layerwise.noise_allowance: its op class' noise, or
    the FP16 noise of those producers scaled by the output's magnitude over theirs, whichever is larger)."""
    from types import SimpleNamespace

    allowed = {s: expected_noise(owner[s].op_class) for s in inputs if owner[s].precision == "fp16"}
    absmax = {t: golden_range(golden[t]).get("GoldenAbsMax") for t in [tensor, *allowed] if t in golden}
    fp32 = SimpleNamespace(op_class=kernel.op_class, precision="fp32")
    return noise_allowance(fp32, tensor, list(allowed), allowed, {k: v for k, v in absmax.items() if v})


def _bad(row) -> bool:
    return bool(row["Abnormal"] or row["OverFlow"])


def fp32_fix(plan, model, golden: dict, device: dict, kernel, tensor: str, thresholds=None) -> dict | None:
    """What must run in FP32 for ``kernel``'s output ``tensor`` to match the reference, when keeping ``kernel``
    alone in FP32 is not enough because the values it reads were rounded to FP16 upstream.

    The kernel's ONNX nodes run in FP32 (:func:`toolkit.reexec.repro.run_subgraph`) on the values the plan
    stored for their inputs (``device``: FP16-stored tensors rounded, FP32 ones carrying whatever FP16 rounding
    flowed into them), judged against the reference with the kernel's op-class noise allowance. Normal:
    keeping ``kernel`` in FP32 is enough (None). Abnormal: the inputs whose stored value alone breaks it (each
    replaced by its reference value in turn; all that differ if none alone does) are blamed, their producer
    kernels join the set, and the set runs again, up to :data:`MAX_HOPS` times (rounding that an exact op such
    as a Mul by 1, a Relu or an FP32 kernel passes on is found further up). Once the set holds, each kernel a
    hop added is dropped again when the set holds without it (a data-movement kernel such as a Transpose of
    FP16-stored values changes nothing in FP32), so every kernel it names is needed.

    Returns None (``kernel`` alone in FP32 is enough, or no set was found), else {"kernels": every kernel of the
    set, ``kernel`` first; "keep_kernels": those of them in FP16 that keep_dtype must move (in a mixlist mode not
    a data-movement kernel whose producers the set keeps: it takes their precision), in plan order;
    "culprits": the tensors blamed at the last hop (where the rounding that matters is stored); "hops";
    "metric": the metric of ``tensor``'s dtype (:func:`headline_metric`); "exact_value": ``kernel`` in FP32 on
    the reference inputs; "stored_value": in FP32 on its inputs as the plan stored them}.
    """
    owner = plan.kernel_of_tensor()
    metric = headline_metric(golden[tensor])
    graph_inputs = set(plan.graph_inputs)

    def judged(kernels: list) -> tuple[dict | None, list[str], list[str]]:
        """(``tensor``'s row with ``kernels`` run in FP32 on the stored values of their other inputs, those
        inputs that differ from the reference, the nodes run)."""
        nodes = list(dict.fromkeys(n for k in kernels for n in k.nodes))
        differ = [t for t in _boundary(model, nodes)
                  if t not in graph_inputs and t in owner and _differs(t, golden, device)]
        noise = _inherited_noise(kernel, tensor, differ, owner, golden)
        return _judge_fp32(model, nodes, golden, device, tensor, differ, thresholds, noise), differ, nodes

    keep, first, culprits = [kernel], None, []
    for hop in range(MAX_HOPS + 1):
        together, differ, nodes = judged(keep)
        if together is None:
            return None
        first = first or together
        if not _bad(together):
            if hop == 0:
                return None
            # drop each kernel the hops added that the set does not need (last added first): one whose values
            # come out as it read them, a Transpose of FP16-stored data, changes nothing in FP32
            for p in reversed(keep[1:]):
                fewer = [k for k in keep if k is not p]
                row = judged(fewer)[0]
                if row is not None and not _bad(row):
                    keep = fewer
            culprits = [s for s in culprits if owner[s] in keep]  # a dropped kernel's value is no culprit
            exact = _judge_fp32(model, list(kernel.nodes), golden, device, tensor, (), thresholds,
                                expected_noise(kernel.op_class)) or {}
            order = {k.name: i for i, k in enumerate(plan.kernels)}
            # in a mixlist mode a data-movement kernel (a gray op) takes its input's precision
            # (toolkit.compiler.passes.assign_precision): one whose producers are kept in FP32 follows them, so
            # keep_dtype need not name it (in force_fp16 it does not follow, and is named)
            mixed = plan.config.get("precision_mode") in MIXLIST_MODES
            follows = {k.name for k in keep if mixed and k.op_class == "data_movement" and k is not kernel
                       and all(owner[t] in keep for t in k.inputs if t in owner)}
            fp16 = sorted((k for k in keep if k.precision == "fp16" and k.name not in follows),
                          key=lambda k: order.get(k.name, 0))
            return {"kernels": [k.name for k in keep], "keep_kernels": [k.name for k in fp16],
                    "culprits": culprits, "hops": hop, "metric": metric,
                    "exact_value": exact.get(metric), "stored_value": first.get(metric)}
        if not differ:
            return None
        noise = _inherited_noise(kernel, tensor, differ, owner, golden)
        alone = {s: _judge_fp32(model, nodes, golden, device, tensor, [s], thresholds, noise) for s in differ} \
            if len(differ) > 1 else {differ[0]: together}
        culprits = [s for s, r in alone.items() if r is not None and _bad(r)] or differ
        for s in culprits:
            p = owner[s]
            if p not in keep:
                keep.append(p)
    return None


def _candidates(df, kernels: dict, storage: dict) -> list:
    """Rows :func:`fp16_input_origins` examines: origins of FP16 kernels abnormal alone (LocalAbnormal); the
    consumers of refine_origins' storage origins; FP32 rows refine_origins found normal alone (LocalAbnormal
    False) but abnormal, with no storage origin to explain them. FP16 overflow rows
    (toolkit.compare.advisor.overflow_rows) are left to the overflow finding."""
    consumers = {ev.get("consumer_tensor") for ev in storage.values()}
    maybe = (df["Role"] == "origin") | ((df["Role"] == "propagated") & df["Abnormal"]) | df["TensorName"].isin(consumers)
    if not maybe.any():
        return []
    overflow = set(overflow_rows(df).index)
    out = []
    for i in df.index[maybe]:
        k, t, role = kernels.get(df.at[i, "Kernel"]), df.at[i, "TensorName"], df.at[i, "Role"]
        if k is None or df.at[i, "OpType"] == "Input" or i in overflow:  # the overflow advice covers those
            continue
        local = df.at[i, "LocalAbnormal"]
        if (role == "origin" and k.precision == "fp16" and local is True) or t in consumers or \
                (role == "propagated" and local is False and bool(df.at[i, "Abnormal"])):
            out.append(i)
    return out[:MAX_ROWS]


def fp16_input_origins(df, plan, model, golden: dict, device: dict, thresholds=None):
    """Move an origin to the FP16 storage upstream when keeping its kernel in FP32 would not fix it
    (:func:`fp32_fix`): an ArgMax / TopK / comparison / Cast-to-int whose result flips because its float input,
    written in FP16 by an FP16 producer (directly or through exact ops), ties or rounds differently; a Softmax
    reading offset logits an FP16 Add wrote. Applied after toolkit.compare.layerwise.refine_origins (``df``
    its result, ``golden`` the reference's tensors, ``device`` the plan's stored tensors); returns a copy.

    For each row of :func:`_candidates` with a fix found: the row becomes 'propagated', the storage origins
    refine_origins had blamed for it too, and each culprit tensor becomes the origin (Abnormal, its
    ``AbnormalMetrics`` the lines it crosses, else FP16StorageRounding), its evidence in
    ``df.attrs["storage_origins"]`` as refine_origins writes it ({"consumer_kernel", "consumer_node",
    "consumer_op_type", "consumer_tensor", "consumer_nodes" (the other nodes of the set, for the reproducer),
    "consumer_precision", "exact_cosine", "stored_cosine" (float outputs)}) plus "metric", "exact_value",
    "stored_value" (the consumer run in FP32 on reference and on stored inputs: ExactMatchRate for an integer
    output, whose cosine is undefined) and "keep_kernels" (the FP16 kernels to keep in FP32). Storage origins
    left as refine_origins found them get "metric", "exact_value" and "stored_value" too."""
    df = df.copy()
    storage = {k: dict(v) for k, v in (df.attrs.get("storage_origins") or {}).items()}
    kernels = {k.name: k for k in plan.kernels}
    owner = plan.kernel_of_tensor()
    row_of = {}
    for i, name in zip(df.index, df["TensorName"]):
        row_of.setdefault(name, i)
    for i in _candidates(df, kernels, storage):
        k, t = kernels[df.at[i, "Kernel"]], df.at[i, "TensorName"]
        if t not in golden:
            continue
        fix = fp32_fix(plan, model, golden, device, k, t, thresholds)
        if fix is None or not fix["keep_kernels"]:
            continue
        df.at[i, "Role"] = "propagated"
        for src in [s for s, ev in storage.items() if ev.get("consumer_tensor") == t]:
            del storage[src]
            if src in row_of and src not in fix["culprits"]:
                df.at[row_of[src], "Role"] = "propagated"
        mine = {n for s in fix["culprits"] for n in owner[s].nodes}
        for src in fix["culprits"]:
            ev = {"consumer_kernel": k.name, "consumer_node": df.at[i, "NodeName"],
                  "consumer_op_type": df.at[i, "OpType"], "consumer_tensor": t,
                  "consumer_nodes": [n for kn in fix["kernels"] for n in kernels[kn].nodes if n not in mine],
                  "consumer_precision": k.precision, "metric": fix["metric"], "exact_value": fix["exact_value"],
                  "stored_value": fix["stored_value"], "keep_kernels": list(fix["keep_kernels"])}
            if fix["metric"] == "CosineSimilarity":
                ev.update(exact_cosine=fix["exact_value"], stored_cosine=fix["stored_value"])
            storage[src] = ev
            if src in row_of:
                _mark_storage_origin(df, row_of[src], thresholds)
    _add_metric(storage, kernels, model, golden, device, thresholds)
    df.attrs = {**df.attrs, "storage_origins": storage}
    return df


def _add_metric(storage: dict, kernels: dict, model, golden, device, thresholds) -> None:
    """Add "metric", "exact_value", "stored_value" to refine_origins' evidence (an FP32 consumer): its cosines
    for a float output; for an integer one, ExactMatchRate of the consumer run in FP32 on the reference and on
    the stored values of the tensor."""
    for src, ev in storage.items():
        t = ev.get("consumer_tensor")
        if "metric" in ev or t not in golden:
            continue
        metric = headline_metric(golden[t])
        ev["metric"] = metric
        if metric == "CosineSimilarity":
            ev.update(exact_value=ev.get("exact_cosine"), stored_value=ev.get("stored_cosine"))
            continue
        nodes = list(getattr(kernels.get(ev.get("consumer_kernel")), "nodes", None) or ev.get("consumer_nodes", []))
        exact = _judge_fp32(model, nodes, golden, device, t, (), thresholds, None) or {}
        stored = _judge_fp32(model, nodes, golden, device, t, [src] if src in device else [], thresholds, None) or {}
        ev.update(exact_value=exact.get(metric), stored_value=stored.get(metric))
