"""``diagnose MODEL --device-dumps DIR``: a real device's dumps against our FP32 reference, with the full advisor.

The device side is a folder of dumps the device wrote (raw files, read by :mod:`toolkit.dumps.raw`, or ``.npy``
conversions; any name form and the nested layout :mod:`toolkit.dumps.readers` reads), resolved to ONNX tensors
through the recorded ``original_op``, an optional ``--mapping`` and the op names (:func:`toolkit.dumps.match.
target_tensors`). The model is compiled with the given options (our plan stands for what those options imply)
and the FP32 reference runs on the same inputs (give the inputs the device ran: ``--inputs``). Then:

1. the layer table (toolkit.compare.layerwise.layer_table): per-tensor metrics, first divergence, roles;
2. origin vs propagated (:func:`refine_device_origins`): each origin's kernel is re-run alone on the simulated
   device on the reference's inputs (toolkit.reexec.isolate). Locally abnormal: the precision itself loses the
   tensor (an origin; the advisor's keep_dtype advice applies). Locally normal: the kernel is re-run on the
   *device's* dumped inputs and compared with the device's output: if they differ, the device's kernel itself
   computes something else (an origin of kind ``device_kernel``: finding ``device_kernel_deviation``); if they
   agree, the error came in with its inputs (propagated);
3. the advisor (toolkit.compare.advisor.advise): FP16 overflow, inconsistent inputs, first divergence with
   keep_dtype advice;
4. the precision audit (:mod:`toolkit.dumps.audit`): dumped dtypes against what the options imply; with
   ``profile`` also op_summary's Input/Output Data Types.

:func:`audit_profile` is the audit alone, when only a device profile (op_summary) is given.

Rows our plan stores but the device did not dump read "no device dump"; unreadable dumps keep their reason.
Dumps that name no node of the model are rows "device dump not in the model" (last, as compare-dumps lists them)
and, unless they are ops the converter adds (Cast, TransData), one ``device_dump_not_in_the_model`` finding (a
warning when a graph output has no device dump).
A tensor the device dumps is compared even where our plan fuses it into a kernel: the device may not have fused
it, and its dump is what it computed (a fused-away tensor the device did not dump keeps the "fused into" row).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from toolkit.compare.advisor import advise, first_divergence
from toolkit.compare.counts import layer_counts
from toolkit.compare.diagnosis import Diagnosis
from toolkit.compare.layerwise import layer_table
from toolkit.compare.metrics import compare_tensors, resolve_thresholds
from toolkit.compare.metrics.thresholds import line_origins
from toolkit.compare.tasks import run_tasks
from toolkit.config.schema import Config
from toolkit.core.env import environment
from toolkit.core.errors import InputError
from toolkit.core.records import Finding
from toolkit.diagnose import (
    Prepared,
    _kernel_times,
    _passes_frame,
    _precision_frame,
    _reference_run,
    _verdict,
)
from toolkit.engine import Session, shapes_of
from toolkit.inputs.digest import input_digests
from toolkit.ir.load import loaded_sha256
from toolkit.profile.attribution import read_device_profile
from toolkit.reexec.isolate import isolate

from .audit import AUDIT_COLUMNS, audit_dumped, audit_findings, audit_op_summary
from .entry import NODE, DumpReadError
from .mapping import load_mapping
from .match import target_tensors
from .readers import SideSpec, read_side

NO_DEVICE_DUMP = "no device dump"


def _noop(msg: str) -> None:
    pass


@dataclass
class DeviceDumps:
    """The device side: ``arrays`` {ONNX tensor: array as dumped}, ``dtypes`` {tensor: dtype name},
    ``unreadable`` {tensor: "device dump unreadable (<file>): <reason>"}, ``unmapped`` (dumps that name nothing
    of the model), ``detail`` (the reader's line for the report), ``ops`` {tensor: (device op that wrote it, its
    op type)}: the op as the device names it (a raw dump's op, the op of a file name), never our plan's kernel,
    which may fuse ops the device ran apart."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    ops: dict[str, tuple[str, str]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)
    detail: str = ""
    not_in_model: list = field(default_factory=list)  # the DumpEntry of each ``unmapped`` dump


def read_device_dumps(model, folder: str, mapping: str | None = None) -> DeviceDumps:
    """Read ``folder`` and resolve it to ``model``'s tensors (see module docstring). Raises InputError for a
    folder with no dump, or no dump naming a tensor of the model."""
    side = read_side(SideSpec(folder, "device-dumps"))
    by, extra = target_tensors(model, side, load_mapping(mapping) if mapping else None)
    out = DeviceDumps(unmapped=[e.source for e in extra], detail=side.detail, not_in_model=list(extra))
    for tensor, entry in by.items():
        out.ops[tensor] = (entry.kernel or (entry.name if entry.keyed_by == NODE else ""), entry.op_type)
        try:
            arr = np.asarray(entry.load())
        except DumpReadError as exc:
            out.unreadable[tensor] = f"device dump unreadable ({entry.source}): {exc}"
            continue
        out.arrays[tensor], out.dtypes[tensor] = arr, arr.dtype.name
    if not by:
        raise InputError(f"--device-dumps '{folder}': none of its {len(side.entries)} dump(s) names a node of the "
                         "model (by original_op, --mapping or op name); give the dumps of this model, or a --mapping "
                         "of the fused device ops")
    return out


def refine_device_origins(df: pd.DataFrame, runtime, golden: dict, device: dict, thresholds=None) -> pd.DataFrame:
    """Step 2 of the module docstring on a copy of ``df``; ``attrs["device_origins"]`` = {tensor: {"kernel",
    "on_device_inputs_cosine", "on_device_inputs_red"}} for the origins of kind device_kernel."""
    df = df.copy()
    for col in ("LocalCosineSimilarity", "LocalRelativeEuclideanDistance"):
        df[col] = np.nan
    df["LocalAbnormal"] = pd.Series(None, index=df.index, dtype=object)
    kernels = {k.name: k for k in runtime.plan.kernels}
    deviant: dict[str, dict] = {}
    for i in list(df.index[df["Role"] == "origin"]):
        kname, t = df.at[i, "Kernel"], df.at[i, "TensorName"]
        if kname not in kernels or t not in golden or t not in device:
            continue
        local = isolate(runtime, kname, golden, stored=False)
        if local is None or t not in local:
            continue
        row = compare_tensors(local[t], golden[t], thresholds=thresholds)
        df.at[i, "LocalCosineSimilarity"] = row.get("CosineSimilarity")
        df.at[i, "LocalRelativeEuclideanDistance"] = row.get("RelativeEuclideanDistance")
        df.at[i, "LocalAbnormal"] = bad = bool(row["Abnormal"] or row["OverFlow"])
        if bad:
            continue
        same_inputs = isolate(runtime, kname, device, stored=True)
        if same_inputs is None or t not in same_inputs:
            continue
        dev = compare_tensors(device[t], same_inputs[t], thresholds=thresholds)
        if dev["Abnormal"] or dev["OverFlow"]:
            deviant[t] = {"kernel": kname, "on_device_inputs_cosine": dev.get("CosineSimilarity"),
                          "on_device_inputs_red": dev.get("RelativeEuclideanDistance"),
                          "on_device_inputs_max_abs_error": dev.get("MaxAbsoluteError")}
        else:
            df.at[i, "Role"] = "propagated"
    df.attrs = {**df.attrs, "device_origins": deviant}
    return df


def _deviation_findings(df: pd.DataFrame, dumps: DeviceDumps) -> list[Finding]:
    """One ``device_kernel_deviation`` error per device origin, about the device op that wrote the tensor
    (``dumps.ops``; our simulated kernel when the dump names no op): evidence ``device_op``, ``device_op_type``,
    ``kernel`` (the simulated kernel re-run), ``node`` (the ONNX node whose output it is)."""
    out = []
    nodes = dict(zip(df["TensorName"], df["NodeName"]))
    for t, ev in df.attrs.get("device_origins", {}).items():
        op, op_type = dumps.ops.get(t) or ("", "")
        op = op or ev["kernel"]
        node = str(nodes.get(t) or "")
        simulated = "the simulated kernel" if op == ev["kernel"] else f"npuscope's simulated kernel '{ev['kernel']}'"
        out.append(Finding("error", "device_kernel_deviation", op,
                           {"tensor": t, **ev, "device_op": op, "device_op_type": op_type, "node": node},
                           f"the device op '{op}'{f' ({op_type})' if op_type else ''} output '{t}' differs from "
                           f"{simulated} run on the device's own inputs, while the simulated kernel on the "
                           "reference's inputs is within the lines: the device op itself computes something else "
                           "(its implementation, format or memory); run it alone on the device"
                           + (f", and try keep_dtype for '{node}'" if node else "")))
    return out


def _defer_to_device(findings: list[Finding], df: pd.DataFrame) -> list[Finding]:
    """The advisor's findings on a device origin (``df.attrs["device_origins"]``: the simulated kernel holds the
    lines on the reference's and follows them on the device's inputs) advise no keep_dtype of our plan: the
    simulated precision does not lose the tensor, the device op does (its device_kernel_deviation finding)."""
    deviant = df.attrs.get("device_origins", {})
    for f in findings:
        ev = f.evidence if isinstance(f.evidence, dict) else {}
        if f.kind == "device_kernel_deviation" or ev.get("tensor") not in deviant:
            continue
        ev.pop("keep_dtype", None)
        op = next((g.subject for g in findings if g.kind == "device_kernel_deviation"
                   and g.evidence.get("tensor") == ev["tensor"]), deviant[ev["tensor"]]["kernel"])
        f.recommendation = (f"the simulated kernel '{deviant[ev['tensor']]['kernel']}' computes '{ev['tensor']}' within "
                            "the lines on the reference's inputs, and the device's output differs from it on the "
                            f"device's own inputs: keep_dtype of the simulated plan is no fix; the device op '{op}' "
                            "computes something else (device_kernel_deviation)")
    return findings


def _device_ops(df: pd.DataFrame, dumps: DeviceDumps) -> pd.DataFrame:
    """NPUDump of each dumped row = the device op that wrote it (the compare tool's meaning), not our kernel."""
    for i, t in zip(df.index, df["TensorName"]):
        op = (dumps.ops.get(t) or ("", ""))[0]
        if op:
            df.at[i, "NPUDump"] = op
    return df


def _device_rows(df: pd.DataFrame, dumps: DeviceDumps) -> pd.DataFrame:
    """Rows the plan stores but the device did not dump say so, or why the dump could not be read: an unreadable
    file is keyed by the op its name gives, so its reason also goes to the other rows of that op's kernel."""
    by_kernel = {k: dumps.unreadable[t] for t, k in zip(df["TensorName"], df["Kernel"]) if t in dumps.unreadable and k}
    missing = df["CompareFailReason"] == "not stored by the NPU plan"
    for i in df.index[missing]:
        t, k = df.at[i, "TensorName"], df.at[i, "Kernel"]
        df.at[i, "CompareFailReason"] = dumps.unreadable.get(t) or by_kernel.get(k) or NO_DEVICE_DUMP
    return df


def _not_in_model_rows(df: pd.DataFrame, dumps: DeviceDumps) -> pd.DataFrame:
    """``df`` with one row per device dump that names no node of the model (op ``name``, output ``index``; as
    compare-dumps lists them): TensorName ``<op>:<index>``, CompareFailReason "device dump not in the model"."""
    if not dumps.not_in_model:
        return df
    rows = [{"TensorName": f"{e.name}:{e.index}" if e.keyed_by == NODE else e.name, "NodeName": e.name,
             "OpType": e.op_type, "TensorIndex": e.index, "NPUDump": e.kernel or e.name,
             "TargetDump": e.source, "CompareFailReason": "device dump not in the model", "Abnormal": False,
             "OverFlow": False} for e in dumps.not_in_model]
    extra = pd.DataFrame(rows, columns=df.columns.union(list(rows[0]), sort=False))
    out = pd.concat([df, extra], ignore_index=True)
    out.attrs = df.attrs
    for col in ("Abnormal", "OverFlow"):
        if col in out.columns:
            out[col] = out[col].fillna(False).astype(bool)
    return out


#: Device op types the converter adds to a model (precision Casts, format conversions): their dumps name no node
#: of the model by design, so they are rows but no reason for a finding.
CONVERTER_OPS = ("Cast", "TransData")


def _not_in_model_finding(df: pd.DataFrame, dumps: DeviceDumps, outputs: list[str]) -> list[Finding]:
    """One finding for the device dumps that name no node of the model, other than ops the converter adds
    (:data:`CONVERTER_OPS`): a warning when some graph output has no device dump (one of them may be it, under a
    fused op's name), else info."""
    entries = [e for e in dumps.not_in_model if e.op_type not in CONVERTER_OPS]
    if not entries:
        return []
    names = [f"{e.name}:{e.index}" if e.keyed_by == NODE else e.name for e in entries]
    reasons = dict(zip(df["TensorName"], df["CompareFailReason"]))
    missing = [o for o in outputs if reasons.get(o) == NO_DEVICE_DUMP]
    shown = ", ".join(f"'{n}'" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    text = (f"{len(names)} device dump(s) name no node of the model ({shown}): give --mapping from each device op "
            "to the original nodes it computes (docs/compare-dumps.md), or check that the folder holds this model's "
            "dumps")
    if missing:
        text += (f"; graph output(s) {', '.join(repr(o) for o in missing)} have no device dump, and one of these "
                 "may be it under a fused op's name")
    return [Finding("warning" if missing else "info", "device_dump_not_in_the_model", names[0],
                    {"dumps": len(names), "names": names[:20], "files": [e.source for e in entries[:20]],
                     "outputs_without_dump": missing}, text)]


def diagnose_device(prep: Prepared, config: Config, device_dumps: str | None = None, *, profile: str | None = None,
                    mapping: str | None = None, thresholds=None, task_metrics=(), progress=_noop):
    """Run the device diagnosis; returns (Diagnosis, extras as toolkit.diagnose.diagnose gives them, audit
    DataFrame of :data:`toolkit.dumps.audit.AUDIT_COLUMNS`). ``profile``: an op_summary / kernel_details file
    for the audit from its data types. Raises InputError (unreadable folder, no dump of the model) and the
    errors of the compile."""
    t0 = time.perf_counter()
    progress(f"reading device dumps {device_dumps}")
    dumps = read_device_dumps(prep.model, device_dumps, mapping)
    progress("compiling (our plan stands for the options given)")
    sess = Session(prep.model, config, input_shapes=shapes_of(prep.feeds), model_path=str(prep.path))
    progress("running the FP32 reference")
    golden = _reference_run(prep)
    device = {**dumps.arrays, **prep.feeds}
    outputs = [o.name for o in prep.model.graph.output]
    # the device's dumps decide what is compared: a tensor it dumped is compared even where our plan fuses it
    from_table = layer_table(prep.model, sess.plan, golden, device, thresholds, device_decides=True)
    df = _device_ops(_device_rows(refine_device_origins(from_table, sess.runtime, golden, device, thresholds),
                                  dumps), dumps)
    findings = _defer_to_device(_deviation_findings(df, dumps) + advise(
        df, sess.plan, sess.compiled.findings, outputs=outputs, model=prep.model, values=golden,
        lines=resolve_thresholds(thresholds)), df)
    findings += _not_in_model_finding(df, dumps, outputs)
    df = _not_in_model_rows(df, dumps)
    audit = audit_dumped(sess.plan, prep.model, config, dumps.dtypes)
    if profile:
        audit = pd.concat([audit, audit_profile(sess.plan, prep.model, config, profile)[0]], ignore_index=True)
    findings += audit_findings(audit)
    tasks = run_tasks(prep.zoo_name, list(task_metrics), {o: golden[o] for o in outputs if o in golden},
                      {o: device[o] for o in outputs if o in device}, prep.model)
    first = first_divergence(df)
    lines = resolve_thresholds(thresholds)
    stage = "precision" if first else "none"
    verdict, reasons = _verdict(df, outputs, tasks, stage, findings, lines=lines, kernels=len(sess.plan.kernels))
    origin_nodes = [first["node"]] if first else []
    summary = {
        "verdict": verdict, "reasons": reasons, "model": str(prep.path), "model_name": prep.name,
        "model_sha256": (loaded_sha256(prep.path) or "") if prep.path else "", "inputs": prep.inputs_origin,
        "inputs_sha256": input_digests(prep.feeds), "seed": prep.seed, "config": config.to_dict(),
        "thresholds": dict(lines), "threshold_origins": line_origins(lines), "stage": stage,
        "first_divergence": first, "origin_nodes": origin_nodes,
        "timings_ms": {"total_ms": (time.perf_counter() - t0) * 1e3},
        "counts": {**layer_counts(df), "kernels": len(sess.plan.kernels), "onnx_nodes": len(prep.model.graph.node)},
        "device_dumps": {"path": str(device_dumps), "tensors": len(dumps.arrays), "unreadable": len(dumps.unreadable),
                         "unmapped": len(dumps.unmapped), "detail": dumps.detail, "mapping": mapping or "",
                         "precision_mismatches": len(audit)},
    }
    plan = sess.plan
    diag = Diagnosis(summary=summary, table=df, findings=findings, passes=_passes_frame(sess.compiled),
                     fusion_result=sess.compiled.fusion_result_json(), precision=_precision_frame(plan, prep.model),
                     kernel_times=_kernel_times(plan, []), tasks=tasks,
                     triage={"stage": stage, "npu_first_divergence": first}, environment=environment())
    extra = {"golden": golden, "device": device, "compiled": sess.compiled, "origin_nodes": origin_nodes,
             "npu_outputs": {o: device[o] for o in outputs if o in device}}
    return diag, extra, audit


def audit_profile(plan, model, config, profile: str) -> tuple[pd.DataFrame, int]:
    """(audit rows, rows matched) of a device profile's data types (see toolkit.dumps.audit.audit_op_summary)."""
    summary, _ = read_device_profile(profile)
    return audit_op_summary(plan, model, config, summary)


__all__ = ["AUDIT_COLUMNS", "DeviceDumps", "audit_profile", "diagnose_device", "read_device_dumps",
           "refine_device_origins"]
