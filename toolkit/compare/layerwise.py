"""Per-tensor comparison of an NPU run with the FP32 reference, matched through fusion provenance.

Every tensor a node of the original model produces gets a row, in execution order. A tensor the NPU plan
still stores is compared (toolkit.compare.metrics) with an expected-noise allowance: where FP16 rounding has
flowed in (:func:`noise_allowance`), an FP16 kernel's output gets its op class' FP16 noise from the numerics
contract, and an FP32 kernel downstream of FP16 data gets its class' noise or the noise its inputs carry,
scaled by what the op does to their magnitude, whichever is larger; a kernel that computes in FP32 from FP32
data only (a force_fp32 plan, nodes kept in FP32 ahead of any FP16 data) gets the contract's FP32 rounding
allowance (toolkit.precision.contract.FP32_ROUNDING: our kernels and onnxruntime sum in different orders, so
FP32 results of large values differ by more than the default absolute lines allow). The allowance covers the default abnormal
lines only (toolkit.compare.metrics.noise_covers): a line the user set (named in ``--thresholds``, even at its
default value; any other value or metric) is applied as given, so on those lines compare agrees with
compare-dumps, which applies no allowance (docs/thresholds.md). In the table ``AbnormalMetrics`` names every line a row crosses, also the default lines crossed
within the expected noise (the row is then ``WithinExpectedNoise`` and not ``Abnormal``, unless another line or
OverFlow makes it so). A tensor the compiler removed gets a reason instead: computed at
compile time, or fused into kernel K — except a tensor computed at compile time whose value the device side
still holds (a graph output folded to a constant, which the plan returns): that constant is compared with
the reference, since it matches only if the folder is right. A tensor that depends on a nondeterministic op
(toolkit.compare.nondeterminism: RandomUniform, Dropout in training mode, ...) is not compared either: the
two runs draw different random numbers; its reason names the op. The columns are fixed
(:data:`RESULT_COLUMNS`). Each row names the kernel that produced the tensor and the original
nodes fused into it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pandas as pd

from toolkit.compare.metrics import ROW_KEYS, compare_tensors, resolve_thresholds
from toolkit.compare.metrics.registry import METRICS
from toolkit.compare.nondeterminism import dependent_tensors
from toolkit.compare.nondeterminism import reason as nondeterministic_reason
from toolkit.core.text import shape_text
from toolkit.precision.contract import expected_fp32_noise, expected_noise

INFO_COLUMNS = ["Index", "OpType", "NodeName", "TensorName", "TensorIndex", "Kernel", "KernelIndex",
                "KernelOpType", "FusedNodes", "Rule", "Precision", "ImplMode", "NPUDump", "DataType", "GroundTruth",
                "GroundTruthDataType", "Shape"]
#: NPUDump / DataType / GroundTruth / GroundTruthDataType keep the compare tool's meanings (msaccucmp result CSV):
#: the NPU op name (our kernel) and the dtype it stored; the golden op name (the ONNX node) and its dtype.
RANGE_COLUMNS = ["GoldenMin", "GoldenMax", "GoldenAbsMax"]
LOCAL_COLUMNS = ["LocalCosineSimilarity", "LocalRelativeEuclideanDistance", "LocalAbnormal"]
#: The columns of the layer table (result.csv), in this order, whatever the model: :data:`INFO_COLUMNS`,
#: :data:`RANGE_COLUMNS`, the metric row of :func:`toolkit.compare.metrics.compare_tensors`
#: (:data:`~toolkit.compare.metrics.ROW_KEYS`: CompareFailReason, OverFlow, ..., metrics, ..., Abnormal,
#: AbnormalMetrics), Role, then :data:`LOCAL_COLUMNS` (filled by :func:`refine_origins`). A value that does not
#: apply to a row is empty ("" in text columns, NaN elsewhere).
RESULT_COLUMNS = INFO_COLUMNS + RANGE_COLUMNS + list(ROW_KEYS) + ["Role"] + LOCAL_COLUMNS
#: Text columns: "" where not applicable.
TEXT_COLUMNS = [c for c in INFO_COLUMNS if c not in ("Index", "TensorIndex", "KernelIndex")] + \
    ["CompareFailReason", "Role"]


#: CompareFailReason prefixes of rows rightly not compared: the value is the device's by construction (a
#: kernel's on-chip intermediate, or computed at compile time). Other reasons mean the tensor could not be
#: compared (non-finite everywhere, shape or dtype mismatch, depends on a nondeterministic op, ...).
FUSED_INTO = "fused into kernel"
COMPILE_TIME = "computed at compile time"
SAME_BY_CONSTRUCTION = (FUSED_INTO, COMPILE_TIME)


def not_compared_reason(row) -> str | None:
    """Why ``row`` (a layer-table row) carries no metrics, or None when it was compared or needs no
    comparison (:data:`SAME_BY_CONSTRUCTION`)."""
    why = row.get("CompareFailReason")
    why = why.strip() if isinstance(why, str) else ""
    return None if not why or why.startswith(SAME_BY_CONSTRUCTION) else why


def golden_range(y) -> dict:
    """{"GoldenMin", "GoldenMax", "GoldenAbsMax"} over the finite values of a numeric reference tensor (float64);
    {} for an empty, non-numeric or all-non-finite one."""
    try:
        a = np.asarray(y)
        if a.size == 0 or a.dtype.kind not in "fiub":
            return {}
        lo, hi = float(a.min()), float(a.max())  # one pass each, no float64 copy (conversion is monotonic)
        if np.isfinite(lo) and np.isfinite(hi):  # no NaN/inf: the finite range is the whole range
            return {"GoldenMin": lo, "GoldenMax": hi, "GoldenAbsMax": max(abs(lo), abs(hi))}
        f = a.astype(np.float64)
        fin = f[np.isfinite(f)]
        if fin.size == 0:
            return {}
        return {"GoldenMin": float(fin.min()), "GoldenMax": float(fin.max()), "GoldenAbsMax": float(np.abs(fin).max())}
    except Exception:
        return {}


class LayerRows:
    """The rows of the layer table one tensor at a time, so a streamed comparison (toolkit.stream) can build
    each row the moment both values exist and drop the arrays: :meth:`input_row` / :meth:`tensor_row` return a
    row and remember what later rows need (each compared tensor's noise allowance and reference |x| max), and
    :meth:`frame` puts rows together as :func:`layer_table` does. A tensor's row must come after the rows of
    the tensors its kernel reads (any topological order: the model's node order or the plan's kernel order).

    Args: as :func:`layer_table`; ``random_src``: :func:`toolkit.compare.nondeterminism.dependent_tensors` of
    the model (the tensors not compared because they depend on a nondeterministic op); ``device_decides``: the
    device values are a real device's dumps, so a tensor the device holds is compared even where ``plan`` fuses
    it into a kernel (the device may not have fused it; toolkit.dumps.device_diagnosis).
    """

    def __init__(self, model: onnx.ModelProto, plan, thresholds=None, use_noise: bool = True,
                 random_src: dict | None = None, device_decides: bool = False):
        self.plan, self.thresholds, self.use_noise = plan, thresholds, use_noise
        self.device_decides = device_decides
        self.owner = plan.kernel_of_tensor()
        self.reads16 = fp16_affected_kernels(plan)
        self.ins = kernel_inputs(plan)
        self.allowed: dict[str, dict] = {}  # {tensor: expected-noise allowance its comparison used}
        self.absmax: dict[str, float] = {}  # {tensor: reference |x| max}
        self.kindex = {k.name: i for i, k in enumerate(plan.kernels)}
        self.folded = set(plan.folded)
        self.graph_outputs = {o.name for o in model.graph.output}
        self.random_src = random_src or {}
        #: {tensor: (row Index, producing node, output index)} in table order (graph inputs first)
        self.position: dict[str, tuple] = {}
        idx = 0
        for name in plan.graph_inputs:
            self.position.setdefault(name, (idx, None, 0))
            idx += 1
        for node in model.graph.node:
            for ti, t in enumerate(node.output):
                if t:
                    self.position.setdefault(t, (idx, node, ti))
                    idx += 1

    def input_row(self, name: str, values: tuple | None = None) -> dict:
        """The row of graph input ``name``; compared when ``values`` (reference value, device value) is given."""
        stored = self.plan.tensors.get(name)  # a graph input is stored in its declared dtype (FP16-origin: fp16)
        row = {"Index": self.position[name][0], "OpType": "Input", "NodeName": name, "TensorName": name,
               "TensorIndex": 0, "Kernel": "", "KernelIndex": -1, "GroundTruth": name,
               "Precision": "fp16" if stored is not None and stored.dtype == "float16" else "fp32"}
        if values is not None:
            row.update(compare_tensors(values[1], values[0], thresholds=self.thresholds, tensor=name))
        return row

    def tensor_row(self, t: str, g, d=None, stored: bool = False, index: int | None = None,
                   node=None, ti: int | None = None) -> dict:
        """The row of node output ``t``: ``g`` its reference value (None: not exposed), ``d`` the device's
        (storage dtype), ``stored`` whether the device side holds ``t`` at all (False: the reason says why it
        is not compared). ``index`` / ``node`` / ``ti``: its place in the table (default: the model's)."""
        if node is None:
            index, node, ti = self.position[t]
        k = self.owner.get(t)
        row = {"Index": index, "OpType": node.op_type, "NodeName": node.name, "TensorName": t, "TensorIndex": ti,
               "Kernel": k.name if k else "", "KernelIndex": self.kindex.get(k.name, -1) if k else -1,
               "GroundTruth": node.name,
               "KernelOpType": k.op_type if k else "", "FusedNodes": ";".join(k.nodes) if k and len(k.nodes) > 1 else "",
               "Rule": (k.rule or "") if k else "", "Precision": k.precision if k else "",
               "ImplMode": k.implmode if k else ""}
        g, seq_reason = sequence_as_tensor(g)
        device_value = None
        if seq_reason is None and stored:
            device_value, seq_reason = sequence_as_tensor(d)
        if g is not None:
            row["GroundTruthDataType"] = str(np.asarray(g).dtype)
            row["Shape"] = shape_text(np.shape(g))
            row.update(golden_range(g))
            if "GoldenAbsMax" in row:
                self.absmax[t] = row["GoldenAbsMax"]
        if t in self.random_src:
            row["CompareFailReason"] = nondeterministic_reason(self.random_src[t])
        elif t in self.folded and not stored:
            row["CompareFailReason"] = f"{COMPILE_TIME} (constant folding)"
        elif k is not None and t in k.internal and not (self.device_decides and stored):
            row["CompareFailReason"] = f"{FUSED_INTO} {k.name}"
        elif not stored:
            row["CompareFailReason"] = "not stored by the NPU plan"
        elif seq_reason is not None:
            row["CompareFailReason"] = seq_reason
        elif g is None:
            row["CompareFailReason"] = "not exposed by the reference run (non-tensor or unknown type)"
        else:
            row["NPUDump"], row["DataType"] = (k.name if k else t), str(np.asarray(device_value).dtype)
            if t in self.folded:  # a folded graph output: the constant the plan returns
                row["Rule"] = "fold_constants"
            # FP16 noise is expected wherever FP16-rounded data has flowed in, FP32 rounding elsewhere (a kernel
            # computing in FP32 from FP32 data, a constant the folder computed); only FP16 allowances propagate
            noise = None
            if self.use_noise and k is not None and k.name in self.reads16:
                noise = self.allowed[t] = noise_allowance(k, t, self.ins.get(k.name, []), self.allowed, self.absmax)
            elif self.use_noise:
                noise = expected_fp32_noise()
            row.update(compare_tensors(device_value, g, thresholds=self.thresholds, expected_noise=noise, tensor=t,
                                       output=t in self.graph_outputs))
        return row

    def frame(self, rows: list[dict]) -> pd.DataFrame:
        """The layer table of ``rows`` (sorted by Index): :data:`RESULT_COLUMNS`, text columns "" where empty,
        Abnormal / OverFlow bools, Role (:func:`assign_roles`)."""
        rows = sorted(rows, key=lambda r: r["Index"])
        df = pd.DataFrame(rows).reindex(columns=RESULT_COLUMNS)
        df[TEXT_COLUMNS] = df[TEXT_COLUMNS].astype(object).fillna("")
        df["Abnormal"] = df["Abnormal"].astype(object).fillna(False).astype(bool)
        df["OverFlow"] = df["OverFlow"].astype(object).fillna(False).astype(bool)
        df["Role"] = assign_roles(df, self.plan) if len(df) else []
        return df


def layer_table(model: onnx.ModelProto, plan, golden: dict, device: dict, thresholds=None,
                use_noise: bool = True, device_decides: bool = False) -> pd.DataFrame:
    """DataFrame of per-tensor rows (see toolkit.compare.diagnosis for the columns), built by :class:`LayerRows`.

    Args:
        model: the original (loaded) model: its node order and names define the rows.
        plan: the compiled Plan the device run executed.
        golden: reference values {tensor: array} (ReferenceRunner.run).
        device: NPU values {tensor: array} (RunResult.dumps, storage dtype).
        thresholds: abnormal lines (toolkit.compare.metrics.parse_thresholds syntax or a dict).
        use_noise: apply the contract's expected FP16 noise to the outputs of kernels affected by FP16
            rounding (see :func:`fp16_affected_kernels`) and its FP32 rounding allowance
            (toolkit.precision.contract.FP32_ROUNDING) to the others; it excuses default lines only (module
            docstring).
        device_decides: ``device`` holds a real device's dumps: every tensor it holds is compared, also one
            ``plan`` fuses into a kernel (:class:`LayerRows`).
    """
    rows_of = LayerRows(model, plan, thresholds, use_noise, dependent_tensors(model, golden), device_decides)
    rows = []
    for name in plan.graph_inputs:
        rows.append(rows_of.input_row(name, (golden[name], device[name]) if name in golden and name in device
                                      else None))
    for t, (index, node, ti) in rows_of.position.items():
        if node is None:
            continue
        rows.append(rows_of.tensor_row(t, golden.get(t), device.get(t), t in device, index, node, ti))
    return rows_of.frame(rows)


def sequence_as_tensor(value):
    """(array, None) for a tensor or a sequence (list) of tensors, which is compared value by value: tensors of
    one shape stacked on a new first axis, of different shapes flattened and concatenated in sequence order (the
    reference and the plan run the same ops, so their tensors' shapes agree); (None, reason) for a sequence
    whose tensors differ in dtype; (None, None) for None."""
    if not isinstance(value, (list, tuple)):
        return value, None
    arrays = [np.asarray(x) for x in value]
    if not arrays:
        return np.zeros((0,), np.float32), None
    if len({a.dtype for a in arrays}) > 1:
        return None, (f"a sequence of {len(arrays)} tensors of different dtypes (not compared); compare its "
                      "tensors as separate outputs")
    if len({a.shape for a in arrays}) > 1:
        return np.concatenate([a.ravel() for a in arrays]), None
    return np.stack(arrays), None


#: ``AbnormalMetrics`` entry of a tensor made abnormal by :func:`refine_origins`: its FP16 storage rounding
#: (within the contract's noise, so no line may be crossed) destroys what a consumer computes from it.
STORAGE_ROUNDING = "FP16StorageRounding"


def _mark_storage_origin(df: pd.DataFrame, i, thresholds) -> None:
    """Row ``i`` (a tensor whose FP16 storage destroys a consumer's result) becomes an abnormal origin; its
    ``AbnormalMetrics`` are the lines its metrics cross once the noise allowance no longer excuses them."""
    lines = resolve_thresholds(thresholds).for_tensor(df.at[i, "TensorName"])
    crossed = [m for m, line in lines.items()
               if m in df.columns and METRICS[m].is_abnormal(df.at[i, m], line)]
    df.at[i, "AbnormalMetrics"] = crossed or [STORAGE_ROUNDING]
    df.at[i, "Abnormal"] = True
    df.at[i, "WithinExpectedNoise"] = False
    df.at[i, "Role"] = "origin"


def noise_allowance(k, tensor: str, inputs, allowed: dict, absmax: dict) -> dict[str, float]:
    """{"rtol", "atol"}: the expected-noise allowance of ``tensor``, written by kernel ``k`` downstream of FP16
    data (:func:`fp16_affected_kernels`).

    What its inputs carry, per input with an allowance (``allowed``, ONNX names as :func:`kernel_inputs` gives
    them): the input's rtol, and its atol scaled by ``absmax[tensor] / absmax[input]`` (reference |x| max,
    ``absmax``); the largest over the inputs. So an op that multiplies by c (x·30000) gets c times its input's
    absolute allowance and keeps its relative one, while an op that cancels large values (a Softmax over logits
    offset by 2e4, a difference of near-equal large numbers) keeps only the relative allowance on its small
    outputs: the rounding it amplifies shows.

    The allowance is the larger of the kernel's op class noise (toolkit.precision.contract.expected_noise) and
    what its inputs carry, for FP16 and FP32 kernels alike: a Relu, a Reshape or an FP32 op passing in-noise
    data on keeps that data's allowance (an FP16 data-movement kernel's own allowance, rtol 1e-3 and no atol,
    flagged values near zero that only carried a cube op's rounding). The larger, not the sum: allowances do not
    grow with the depth of the network, so a deep layer is held to the same tolerance as the noise entering it.
    """
    own = expected_noise(k.op_class)
    rtol, atol = 0.0, 0.0
    out_max = absmax.get(tensor)
    for i in inputs:
        a, in_max = allowed.get(i), absmax.get(i)
        if a is None or not out_max or not in_max or not np.isfinite(out_max / in_max):
            continue
        rtol, atol = max(rtol, a["rtol"]), max(atol, a["atol"] * out_max / in_max)
    return {"rtol": max(own["rtol"], rtol), "atol": max(own["atol"], atol)}


def fp16_affected_kernels(plan) -> set[str]:
    """Kernels whose outputs carry FP16 rounding: FP16 kernels, kernels reading FP16-stored tensors, and
    every kernel downstream of those. Their outputs get the op class' expected FP16 noise allowance; the
    others (all of a force_fp32 plan's) compute in FP32 from FP32 data and get the contract's FP32 rounding
    allowance only (toolkit.precision.contract.FP32_ROUNDING, rtol 1e-5: 100 times tighter than any FP16
    class'), which does not propagate into the FP16 allowances (:func:`noise_allowance`)."""
    affected: set[str] = set()
    tainted: set[str] = set()
    for k in plan.kernels:
        reads = [plan.tensors.get(t) for t in k.inputs]
        if k.precision == "fp16" or any(t is not None and (t.dtype == "float16" or t.name in tainted) for t in reads):
            affected.add(k.name)
            tainted.update(k.outputs)
    return affected


def kernel_inputs(plan) -> dict[str, list[str]]:
    """{kernel name: ONNX tensors it reads}, Cast and copy kernels resolved to the ONNX tensors they carry."""
    cast_src = {k.outputs[0]: k.cast_of for k in plan.kernels if k.cast_of}
    return {k.name: [cast_src.get(t, t) for t in k.inputs] for k in plan.kernels}


def assign_roles(df: pd.DataFrame, plan) -> list[str]:
    """'origin' for an abnormal tensor whose kernel's inputs are all normal, 'propagated' for one with an
    abnormal input, '' otherwise. An input that was not compared and is not known abnormal (no row, or a
    CompareFailReason: a device that did not dump it, a tensor outside a subset) is not taken as normal: it
    counts as abnormal when an input of the kernel that wrote it does, back to the nearest compared tensors
    (graph inputs and weights: normal)."""
    bad = df["Abnormal"] | df["OverFlow"]
    reason = df["CompareFailReason"].fillna("").astype(str).str.strip() if "CompareFailReason" in df else None
    compared = (reason == "") if reason is not None else pd.Series(True, index=df.index)
    abnormal = {t: bool(b) for t, b, c in zip(df["TensorName"], bad, compared) if c or b}  # known good or bad
    ins = kernel_inputs(plan)
    writer = {t: k.name for k in plan.kernels for t in k.outputs}
    done: dict[str, bool] = {}

    def reads(u: str) -> list[str]:
        return ins.get(writer.get(u, ""), [])

    def tainted(t: str) -> bool:
        stack, open_ = [(t, False)], set()
        while stack:  # iterative post-order over uncompared tensors (no recursion limit on deep graphs)
            u, expanded = stack.pop()
            if expanded:
                done[u] = any(abnormal.get(i, done.get(i, False)) for i in reads(u))
                open_.discard(u)
            elif u not in abnormal and u not in done and u not in open_:
                open_.add(u)
                stack.append((u, True))
                stack.extend((i, False) for i in reads(u) if i not in abnormal and i not in done)
        return abnormal.get(t, done.get(t, False))
    roles = []
    for t, k, ab in zip(df["TensorName"], df["Kernel"], bad):
        if not ab or not k:
            roles.append("origin" if ab else "")
            continue
        roles.append("propagated" if any(tainted(i) for i in ins.get(k, [])) else "origin")
    return roles
