"""Precision audit: which ops a real device ran in another dtype than the requested options imply.

The options (precision_mode, keep_dtype, modify_mixlist; the converter's names) are compiled into our plan
(toolkit.compiler.passes.assign_precision): each kernel's precision is what they imply, and
:func:`implied_by` names the rule that decided it, in the order the pass applies them (AI_CPU placement,
force_fp32, must_keep_origin_dtype, keep_dtype, force_fp16, allow_fp32_to_fp16, the black / white list, gray:
follows its input). Two audits compare that with what the device wrote:

- :func:`audit_dumped` — the dtypes of the device's dumped tensors ({ONNX tensor: dtype}) against the plan's
  storage dtype of the same tensor (or, for a tensor our plan fuses away, its kernel's precision);
- :func:`audit_op_summary` — the Output Data Types (else Input Data Types) of msprof's op_summary rows
  (toolkit.profile.attribution.read_device_profile brings them to one schema) whose Op Name is a kernel of the
  plan or one of its ONNX nodes (the dump tools' file-name form, toolkit.dumps.match.norm, is tried too).

Only floating-point tensors are audited (an integer tensor has no precision to choose). :data:`AUDIT_COLUMNS`:
Source ("dump" / "op_summary" / "kernel_details"), OpName (device op / dump), NodeName (ONNX node), OpType, Kernel (ours),
TensorName ("" for op_summary rows), ExpectedDataType, DataType (the device's), ImpliedBy. Every row is a
mismatch; :func:`audit_findings` turns them into ``precision_mismatch`` warnings (one per kernel).
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pandas as pd

from toolkit.core.records import Finding
from toolkit.precision.options import MIXLIST_MODES, keep_sets, mixlists

from .match import norm

AUDIT_COLUMNS = ["Source", "OpName", "NodeName", "OpType", "Kernel", "TensorName", "ExpectedDataType", "DataType",
                 "ImpliedBy"]
#: device / numpy / ONNX dtype spellings -> one name (numpy's); op_summary writes FLOAT16, DT_FLOAT16, FLOAT, ...
_FLOAT_NAMES = {"float16": "float16", "fp16": "float16", "half": "float16", "float": "float32", "float32": "float32",
                "fp32": "float32", "double": "float64", "float64": "float64", "bf16": "bfloat16",
                "bfloat16": "bfloat16"}


def dtype_name(text) -> str | None:
    """The numpy name of a float dtype spelled ``text`` ("DT_FLOAT16", "FLOAT16", "float16", "FLOAT", a numpy
    dtype); None for a non-float or unknown spelling."""
    if isinstance(text, np.dtype):
        text = text.name
    key = str(text).strip().lower()
    key = key[3:] if key.startswith("dt_") else key
    return _FLOAT_NAMES.get(key)


def implied_by(kernel, op_types: set[str], config) -> str:
    """The option (or rule) that gives ``kernel`` its precision under ``config`` (see the module docstring)."""
    mode = config.precision_mode
    names, types = keep_sets(config.keep_dtype)
    if kernel.placement == "CPU":
        return "AI_CPU placement (always FP32)"
    if mode in ("force_fp32", "must_keep_origin_dtype"):
        return f"precision_mode {mode}"
    keep = [names[n] for n in kernel.nodes if n in names] + [types[t] for t in sorted(op_types) if t in types]
    if keep:
        return f"keep_dtype {keep[0]}"
    if mode not in MIXLIST_MODES:
        return f"precision_mode {mode}"
    lists = mixlists(config.modify_mixlist)
    for key in ("black-list", "white-list"):
        hit = sorted(op_types & lists[key])
        if hit:
            return f"{mode} {key} ({hit[0]})"
    return f"{mode} gray-list (follows its input)"


class _PlanView:
    """The plan's kernels by name, by ONNX node and by file-name form, with their op types."""

    def __init__(self, plan, model: onnx.ModelProto):
        op_of = {n.name: n.op_type for n in model.graph.node}
        self.producer = {t: n for n in model.graph.node for t in n.output if t}
        self.kernels = [k for k in plan.kernels if k.fusion not in ("cast", "copy")]
        self.ops = {k.name: {op_of.get(n, k.op_type) for n in k.nodes} | {k.op_type} for k in self.kernels}
        self.by_name: dict[str, object] = {}
        for k in self.kernels:
            for name in (k.name, *k.nodes):
                self.by_name.setdefault(name, k)
                self.by_name.setdefault(norm(name), k)
        self.tensors = plan.tensors

    def expected(self, tensor: str, kernel) -> str:
        spec = self.tensors.get(tensor)
        if spec is not None and dtype_name(spec.dtype):
            return dtype_name(spec.dtype)
        return "float16" if kernel.precision == "fp16" else "float32"

    def kernel_of_tensor(self, tensor: str):
        node = self.producer.get(tensor)
        return None if node is None else self.by_name.get(node.name)


def audit_dumped(plan, model: onnx.ModelProto, config, dumped: dict[str, object]) -> pd.DataFrame:
    """Rows (:data:`AUDIT_COLUMNS`, Source "dump") for the float tensors whose dumped dtype (``dumped``:
    {ONNX tensor: dtype or dtype name}) differs from the plan's for ``config``. Tensors the model does not
    produce (graph inputs, ops the device added) are not audited."""
    view = _PlanView(plan, model)
    rows = []
    for tensor, dt in dumped.items():
        got, k = dtype_name(dt), view.kernel_of_tensor(tensor)
        if got is None or k is None:
            continue
        want = view.expected(tensor, k)
        if got != want:
            node = view.producer[tensor]
            rows.append({"Source": "dump", "OpName": k.name, "NodeName": node.name, "OpType": node.op_type,
                         "Kernel": k.name, "TensorName": tensor, "ExpectedDataType": want, "DataType": got,
                         "ImpliedBy": implied_by(k, view.ops[k.name], config)})
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)


def _cell_dtypes(cell) -> list[str]:
    if not isinstance(cell, str):
        return []
    return [d for d in (dtype_name(p.strip().strip('"')) for p in re.split(r"[;,]", cell)) if d]


def audit_op_summary(plan, model: onnx.ModelProto, config, summary: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(rows of :data:`AUDIT_COLUMNS`, rows matched to a kernel) for an op_summary frame (columns Op Name, OP
    Type, Output Data Types, Input Data Types). Source is the table the frame was read from (its
    ``attrs["table"]``: "op_summary" or "kernel_details", toolkit.profile.attribution.read_device_profile),
    "op_summary" when it does not say. A row's dtype is its first float output dtype (else first float input
    dtype); rows with no float dtype or no kernel of ours are skipped."""
    source = str(summary.attrs.get("table") or "op_summary")
    view = _PlanView(plan, model)
    rows, matched = [], 0
    for _, r in summary.iterrows():
        op = str(r.get("Op Name", ""))
        k = view.by_name.get(op) or view.by_name.get(norm(op))
        got = (_cell_dtypes(r.get("Output Data Types")) or _cell_dtypes(r.get("Input Data Types")) or [None])[0]
        if k is None or got is None:
            continue
        matched += 1
        want = next((view.expected(t, k) for t in k.outputs if dtype_name(view.tensors[t].dtype)), None) \
            if all(t in view.tensors for t in k.outputs) else None
        want = want or ("float16" if k.precision == "fp16" else "float32")
        if got != want:
            node = op if op in k.nodes else (k.nodes[-1] if k.nodes else "")
            rows.append({"Source": source, "OpName": op, "NodeName": node, "OpType": str(r.get("OP Type", "")),
                         "Kernel": k.name, "TensorName": "", "ExpectedDataType": want, "DataType": got,
                         "ImpliedBy": implied_by(k, view.ops[k.name], config)})
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS).drop_duplicates(["OpName", "DataType"]), matched


def audit_findings(audit: pd.DataFrame) -> list[Finding]:
    """One ``precision_mismatch`` warning per kernel of ``audit``'s rows (evidence: tensors, dtypes, rule)."""
    out = []
    for kernel, rows in audit.groupby("Kernel", sort=False):
        r = rows.iloc[0]
        ev = {"expected": r["ExpectedDataType"], "device": r["DataType"], "implied_by": r["ImpliedBy"],
              "source": r["Source"], "tensors": [t for t in rows["TensorName"] if t], "op_names": list(rows["OpName"])}
        out.append(Finding("warning", "precision_mismatch", kernel, ev,
                           f"the device ran '{r['OpName']}' in {r['DataType']} where {r['ImpliedBy']} implies "
                           f"{r['ExpectedDataType']}: check the options the model was converted with (the "
                           "converter's precision_mode, keep_dtype, modify_mixlist) or the op's supported dtypes"))
    return out
