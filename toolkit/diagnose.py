"""`diagnose`: compile, run the FP32 reference and the NPU plan on the same inputs, compare every tensor,
advise, triage the stage, check the task, and return a :class:`Diagnosis`.

Verdict: FAIL when a final output is abnormal or could not be compared, no tensor at all could be compared,
a task check fails or the compile stage changed the math; WARN when intermediate tensors are abnormal, the
FP32 reference of a graph output holds NaN/Inf (finding ``golden_nonfinite``), the compiler found
FP16-unrepresentable constants, or any other error-severity finding stands, but the outputs and tasks hold
(a verdict is never PASS beside an error finding); PASS otherwise.

A model without graph outputs is a ModelError (nothing to compare). A graph output the compiler computed at
compile time (constant folding) is compared as the folded constant against the reference's output.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import pandas as pd

from toolkit.compare.advisor import advise, first_divergence, golden_nonfinite_rows
from toolkit.compare.counts import abnormal_mask, layer_counts
from toolkit.compare.diagnosis import Diagnosis
from toolkit.compare.layerwise import (
    golden_range,
    layer_table,
    not_compared_reason,
    sequence_as_tensor,
)
from toolkit.compare.metrics import compare_tensors
from toolkit.compare.metrics.registry import METRICS
from toolkit.compare.metrics.spec import HIGHER_IS_BETTER
from toolkit.compare.metrics.thresholds import (
    line_origins,
    noise_covers,
    resolve_thresholds,
)
from toolkit.compare.nondeterminism import dependent_tensors
from toolkit.compare.subset import Subset, select
from toolkit.compare.tasks import run_tasks
from toolkit.compiler.passes.bind_shapes import raise_if_reference_fails
from toolkit.compiler.pipeline import recompile_precision
from toolkit.config.schema import Config
from toolkit.core.env import environment
from toolkit.core.errors import ModelError, UsageError
from toolkit.core.records import Finding
from toolkit.core.text import show, show_crossed, show_vs
from toolkit.engine import Session, shapes_of
from toolkit.inputs.digest import input_digests
from toolkit.ir.load import load_model, loaded_sha256
from toolkit.ir.neighbourhood import neighbourhood
from toolkit.ort.reference import ReferenceRunner, inferred_types
from toolkit.ort.segments import DEFAULT_SEGMENT_BYTES
from toolkit.ort.terminate import own_run_options
from toolkit.compare.metrics.reductions import within_noise
from toolkit.precision.contract import FP32_CANCELLING_OPS, FP32_ROUNDING, expected_fp32_noise
from toolkit.reexec.isolate import fp16_input_origins
from toolkit.reexec.refine import refine_origins
from toolkit.runtime.npu import KernelRuntimeError
from toolkit.source import _zoo_name_of, prepare_inputs, resolve_model
from toolkit.core.ray_cluster import check_address
from toolkit.stream.distributed import distributed_comparison
from toolkit.stream.stores import Restricted
from toolkit.stream.streamed import should_stream, streamed_comparison


def _noop(msg: str) -> None:
    pass


@dataclasses.dataclass
class Prepared:
    """A model and feed ready to diagnose (see :func:`prepare`)."""

    model: onnx.ModelProto
    name: str
    path: Path
    zoo_name: str | None
    feeds: dict
    inputs_origin: str
    seed: int | None


def prepare(model_arg: str | None, inputs: str | None = None, seed: int = 0, val_range: str | None = None,
            progress=_noop, input_shapes: dict | None = None) -> Prepared:
    src = resolve_model(model_arg)
    progress(f"loading {src.path}")
    model = load_model(src.path)
    require_outputs(model, src.path)
    feed = prepare_inputs(model, src, inputs, seed, val_range, input_shapes)
    progress(f"inputs: {feed.origin}")
    zname = src.name if src.kind == "zoo" else _zoo_name_of(src.path)
    return Prepared(model, src.name, src.path, zname, feed.arrays, feed.origin, feed.seed)


def _for_tensor(lines, name):
    """The lines of tensor ``name`` (a Thresholds' own lines for it; a plain mapping: itself)."""
    return lines.for_tensor(name) if hasattr(lines, "for_tensor") else lines


def require_outputs(model: onnx.ModelProto, path) -> None:
    """Raise ModelError when ``model`` declares no graph output: nothing it computes could be compared (a
    comparison of the inputs with themselves would pass on nothing)."""
    if not len(model.graph.output):
        raise ModelError(f"the model has no graph outputs ('{path}'): there is nothing to compare; declare the "
                         "tensors to check as graph outputs when exporting it")


def device_tensors(run, feeds: dict) -> dict:
    """{tensor: array} the device side of a comparison holds: the dumps of ``run`` (a RunResult of a run with
    ``dump=True``, storage dtype), the graph inputs as fed, and the graph outputs the plan returns without a
    dump (outputs folded to a constant at compile time)."""
    device = {**run.dumps, **feeds}
    for k, v in run.outputs.items():
        device.setdefault(k, v)
    return device


def layer_analysis(model: onnx.ModelProto, runtime, golden: dict, device: dict, thresholds=None) -> pd.DataFrame:
    """The per-tensor analysis of one input, shared by every path that judges layers (a single-input diagnose /
    compare, each input of a dataset run, signoff's layer tables), so the same input gives the same Abnormal
    flags, Roles and first divergence everywhere: toolkit.compare.layerwise.layer_table, then
    toolkit.compare.layerwise.refine_origins (single-kernel isolation; FP16 storage-rounding origins), then
    toolkit.reexec.isolate.fp16_input_origins.

    Args:
        model: the loaded model; runtime: the NpuRuntime that ran (its plan and built kernels are re-used);
        golden: reference tensors, the feeds included; device: :func:`device_tensors`; thresholds: abnormal
        lines (toolkit.compare.metrics.parse_thresholds syntax, a dict, or None for the defaults).

    Returns:
        the layer table (toolkit.compare.layerwise.RESULT_COLUMNS; ``attrs["storage_origins"]``).
    """
    return refine_table(layer_table(model, runtime.plan, golden, device, thresholds), model, runtime, golden, device,
                        thresholds)


def refine_table(df: pd.DataFrame, model: onnx.ModelProto, runtime, golden, device, thresholds=None) -> pd.DataFrame:
    """The origin refinement of a layer table (toolkit.reexec.refine.refine_origins, then
    toolkit.reexec.isolate.fp16_input_origins): the steps of :func:`layer_analysis` after the table, shared with
    the streamed path (``golden`` / ``device``: toolkit.stream.stores mappings)."""
    df = refine_origins(df, runtime, golden, thresholds)
    return fp16_input_origins(df, runtime.plan, model, golden, device, thresholds)


def _precision_frame(plan, model) -> pd.DataFrame:
    op_of = {n.name: n.op_type for n in model.graph.node}
    counts: dict[str, dict[str, int]] = {}
    for k in plan.kernels:
        if k.fusion == "copy":  # host-device copies: no precision of their own
            continue
        if k.fusion == "cast":
            counts.setdefault("Cast (inserted)", {"FP16": 0, "FP32": 0})["FP16" if k.precision == "fp16" else "FP32"] += 1
            continue
        for n in k.nodes:
            c = counts.setdefault(op_of.get(n, k.op_type), {"FP16": 0, "FP32": 0})
            c["FP16" if k.precision == "fp16" else "FP32"] += 1
    return pd.DataFrame([{"OpType": t, **c} for t, c in sorted(counts.items())])


def _kernel_times(plan, kernel_ms) -> pd.DataFrame:
    rows = [{"Kernel": k.name, "OpType": k.op_type, "Precision": k.precision, "Nodes": len(k.nodes), "HostMs": ms}
            for k, ms in zip(plan.kernels, kernel_ms)]
    if not rows:  # a model with no kernels (outputs are inputs or constants)
        return pd.DataFrame(columns=["Kernel", "OpType", "Precision", "Nodes", "HostMs"])
    return pd.DataFrame(rows).sort_values("HostMs", ascending=False).reset_index(drop=True)


def _passes_frame(compiled) -> pd.DataFrame:
    return pd.DataFrame([{"Pass": p.name, "Ran": p.ran, "Reason": p.reason, "OpsBefore": p.ops_before,
                          "OpsAfter": p.ops_after, "KernelsAfter": p.kernels_after, "Changes": p.changed,
                          "Ms": round(p.ms, 2)} for p in compiled.passes])


def _quick_close(d, g) -> bool:
    """Cheap screen: same shape, same non-finite positions, max|d-g| <= 1e-3·max|g| + 1e-6. Computed in the
    tensors' own precision (float32 unless a side is float64): its rounding, ~1e-7 relative, cannot move a
    verdict at the 1e-3 line, and a float64 copy of every tensor cost ~40 ms on PP-OCRv4 rec."""
    d, g = np.asarray(d), np.asarray(g)
    if d.shape != g.shape:
        return False
    if d.dtype.kind not in "fc" or g.dtype.kind not in "fc":
        return bool(np.array_equal(d, g))
    work = np.result_type(d.dtype, g.dtype, np.float32)
    d, g = d.astype(work, copy=False), g.astype(work, copy=False)
    fd, fg = np.isfinite(d), np.isfinite(g)
    if not np.array_equal(fd, fg):
        return False
    if not fg.any():
        return True
    if not fg.all():
        d, g = d[fg], g[fg]
    return bool(float(np.max(np.abs(d - g))) <= 1e-3 * float(np.max(np.abs(g))) + 1e-6)


def _finite_rms(v) -> float:
    """RMS of the finite values of a float array (0.0 for none, or for a non-float value)."""
    a = np.asarray(v)
    if a.dtype.kind != "f" or not a.size:
        return 0.0
    a = a.astype(np.float64).ravel()
    a = a[np.isfinite(a)]
    return float(np.sqrt(np.mean(a * a))) if a.size else 0.0


class _TriageScreen:
    """Triage's comparison made while the force_fp32 run goes (``NpuRuntime.run(on_kernel=...)``): each kernel
    output is screened against the reference the moment it is written, while it is still the arena's view, and
    only the metric rows of tensors that fail the screen are kept, so no copy of the run's tensors is held.

    A tensor fails when it is abnormal beyond FP32 rounding (compared with the contract's FP32 rounding
    allowance, toolkit.precision.contract.FP32_ROUNDING, as the layer table compares an FP32 kernel): one that
    crosses a line the user set only within FP32 rounding (the allowance excuses default lines only) is kept
    apart in ``tight``: no FP32 plan can meet that line, which is no compile-stage fault. The output of a node
    that adds or subtracts (toolkit.precision.contract.FP32_CANCELLING_OPS) carries its operands' rounding, so
    its FP32 rounding is judged at the larger of its own and its operands' RMS magnitude (a cancellation of two
    values ~1e4 leaves ~1e-3 of rounding on a small difference); the operands' RMS is taken as the screen sees
    them, or, for an operand no kernel writes (fused inside a kernel, a graph input), from ``golden`` (in a
    streamed pass only if the segment just run holds it: nothing is computed again).

    ``order``: {tensor: position in the model's node order}; a tensor after the earliest failure found so far
    cannot be the first divergence and is not compared. ``producer``: {tensor: the node that writes it}."""

    def __init__(self, golden: dict, thresholds, skip: set, order: dict, producer: dict | None = None):
        self.golden, self.thresholds, self.skip, self.order = golden, thresholds, skip, order
        self.producer = producer or {}
        #: {tensor: RMS of its reference value} of the operands of adding nodes, taken as the screen sees them (a
        #: streamed pass holds them then; looking them up later would compute their segment again)
        self.operand_rms: dict[str, float] = {}
        self.operands = {i for n in self.producer.values() if n.op_type in FP32_CANCELLING_OPS for i in n.input if i}
        self.checked: set[str] = set()
        self.failed: dict[str, dict] = {}
        self.tight: dict[str, dict] = {}  # {tensor: row} crossing a user line within FP32 rounding
        self.first = len(order)

    def see(self, t: str, value) -> None:
        if t not in self.golden or t in self.skip or self.order.get(t, self.first + 1) > self.first:
            return
        d, d_reason = sequence_as_tensor(value)
        g, g_reason = sequence_as_tensor(self.golden[t])
        if d_reason or g_reason or d is None or g is None:  # a ragged sequence: not compared (layer table)
            return
        self.checked.add(t)
        if t in self.operands:
            self.operand_rms[t] = _finite_rms(g)
        if _quick_close(d, g):
            return
        row = compare_tensors(d, g, thresholds=self.thresholds, expected_noise=expected_fp32_noise(), tensor=t)
        if not (row["Abnormal"] or row["OverFlow"]):
            return
        scale = self._fp32_scale(t, d, g, row)
        if scale is not None:  # within FP32 rounding (no OverFlow): it crosses a line FP32 cannot meet
            row["FP32RelativeError"] = scale
            self.tight[t] = row
            return
        self.failed[t] = row
        self.first = min(self.first, self.order[t])

    def _fp32_scale(self, t: str, d, g, row: dict) -> float | None:
        """The RMS error of ``t`` relative to the magnitude its FP32 rounding is judged at, when it is within
        FP32 rounding (:data:`~toolkit.precision.contract.FP32_ROUNDING`); None when it is not."""
        if row["OverFlow"] or row["WithinExpectedNoise"] is None:
            return None
        d64, g64 = np.asarray(d, np.float64).ravel(), np.asarray(g, np.float64).ravel()
        both = np.isfinite(d64) & np.isfinite(g64)
        if not both.any():
            return None
        absd, absy = np.abs(d64[both] - g64[both]), np.abs(g64[both])
        rms_d, rms_y = float(np.sqrt(np.mean(absd ** 2))), float(np.sqrt(np.mean(absy ** 2)))
        if row["WithinExpectedNoise"] is True:
            return rms_d / rms_y if rms_y else 0.0
        node = self.producer.get(t)
        if node is None or node.op_type not in FP32_CANCELLING_OPS:
            return None
        operand = 0.0
        for i in node.input:
            if i in self.operand_rms:
                operand = max(operand, self.operand_rms[i])
            elif i and i in self.golden:  # a graph input, or a tensor fused inside a kernel (not screened)
                held = self.golden.held(i) if isinstance(self.golden, _SegmentFirst) else self.golden[i]
                operand = max(operand, _finite_rms(held) if held is not None else 0.0)
        if operand <= rms_y or not within_noise(absd, np.maximum(absy, operand), FP32_ROUNDING["rtol"],
                                                 FP32_ROUNDING["atol"]):
            return None
        row["FP32OperandRMS"] = operand
        return rms_d / operand

    def on_kernel(self, _index, _spec, outputs: dict) -> None:
        for t, v in outputs.items():
            self.see(t, v)


#: the advisor's findings that name where the error starts and advise a keep_dtype for it
_ADVISED_ORIGINS = frozenset({"first_divergence", "divergence_origin", "fp16_overflow"})


def subset_origins(findings: list[Finding], first: dict | None, model: onnx.ModelProto, kept: dict):
    """(findings, first divergence) of a subset run (``kept``: toolkit.compare.subset.select), where an origin
    cannot be told when what its node reads was left out: the error may start before it. Each origin finding
    (:data:`_ADVISED_ORIGINS`) whose node reads a tensor the subset did not compare (the graph inputs are) is
    replaced by one ``origin_outside_subset`` warning that names the first abnormal node inside the subset, the
    tensors it reads that were not compared, and how to find the origin; it advises no keep_dtype (advice from
    a subset is not verified). The first divergence gets ``basis`` "subset" and ``reads_uncompared``."""
    produced = {o for n in model.graph.node for o in n.output if o}  # constants and graph inputs: not left out
    reads = {n.name: [i for i in n.input if i in produced] for n in model.graph.node}
    compared = set(kept["tensors"])
    out, replaced = [], {}
    for f in findings:
        missing = [i for i in reads.get(f.subject, ()) if i not in compared]
        if f.kind not in _ADVISED_ORIGINS or not missing:
            out.append(f)
            continue
        replaced.setdefault(f.subject, missing)
    for node, missing in replaced.items():
        out.append(Finding(
            "warning", "origin_outside_subset", node, {"reads_uncompared": missing, "subset": kept["options"]},
            f"'{node}' is the first abnormal node inside the subset ({kept['options']}), but what it reads "
            f"({', '.join(repr(m) for m in missing[:4])}{' ...' if len(missing) > 4 else ''}) was not compared, so "
            "the error may start before it: run without the subset (or widen it) to find where it starts and a "
            "verified keep_dtype fix; no advice from a subset"))
    if first and first.get("node") in replaced:
        first = {**first, "basis": "subset", "reads_uncompared": replaced[first["node"]]}
    return out, first


def triage(prep: Prepared, config: Config, golden: dict, thresholds, compiled=None) -> dict:
    """Run the same compilation in force_fp32 (keep_dtype cleared; with ``compiled``, the NPU compile, only
    the precision passes run again: recompile_precision): a divergence there beyond FP32 rounding is a
    compile-stage fault (a rewrite or fusion changed the math) at its first divergent kernel; otherwise the
    divergence is a precision matter.

    Each kernel output is screened cheaply as the run writes it (:class:`_TriageScreen`: no tensor of the run
    is kept); one that fails the screen is compared with the full metrics and the contract's FP32 rounding
    allowance (toolkit.precision.contract.FP32_ROUNDING; no FP16 noise allowance), and the first one abnormal
    beyond FP32 rounding in the model's node order is the fp32 first divergence. A tensor that crosses a line the
    user set (``thresholds``) only within FP32 rounding is no divergence: it is listed in ``fp32_tight_lines``
    (the line is tighter than FP32 rounding of those values; finding ``line_tighter_than_fp32``). Graph outputs folded at compile
    time are screened as the constants the plan returns. Tensors that depend on a nondeterministic op
    (toolkit.compare.nondeterminism) are skipped: the two runs draw different random numbers, which is no
    compile-stage fault. A streamed diagnosis runs the same triage inside its pass (:class:`SteppedTriage`).

    Returns:
        {"fp32_first_divergence": None or {node, op_type, tensor, kernel, precision, kind, evidence},
         "fp32_tensors_checked": tensors compared up to and including the first divergence (all when none),
         "fp32_tight_lines": [{node, op_type, tensor, kernel, lines: {metric: the user's line}, values:
         {metric: the FP32 plan's value}, relative_error (RelativeEuclideanDistance), MaxAbsoluteError,
         reference_abs_max, fp32_rtol}] of the tensors, up to the first divergence in node order, that cross a
         user line within FP32 rounding}."""
    sess = _triage_session(prep, config, compiled)
    order, producer = _node_order(prep.model)
    screen = _TriageScreen(golden, thresholds, dependent_tensors(prep.model, golden), order, producer)
    sess.runtime.run(prep.feeds, on_kernel=screen.on_kernel)
    return _triage_result(screen, sess, order, producer)


def _tight_lines(screen: "_TriageScreen", owner: dict, order: dict, producer: dict, upto: int) -> list[dict]:
    """The ``fp32_tight_lines`` records of :func:`triage` (tensors in node order up to position ``upto``)."""
    lines = resolve_thresholds(screen.thresholds)
    out = []
    for t in sorted(screen.tight, key=order.__getitem__):
        if order[t] > upto:
            break
        row, node, k = screen.tight[t], producer[t], owner.get(t)
        own = lines.for_tensor(t)
        crossed = [m for m in row["AbnormalMetrics"] if m in own]
        out.append({"node": node.name, "op_type": node.op_type, "tensor": t, "kernel": k.name if k else "",
                    "lines": {m: float(own[m]) for m in crossed}, "values": {m: float(row[m]) for m in crossed},
                    "relative_error": float(row["FP32RelativeError"]),
                    "MaxAbsoluteError": float(row["MaxAbsoluteError"]),
                    "reference_abs_max": golden_range(screen.golden[t]).get("GoldenAbsMax"),
                    **({"operand_rms": row["FP32OperandRMS"]} if "FP32OperandRMS" in row else {}),
                    "fp32_rtol": FP32_ROUNDING["rtol"]})
    return out


def tight_line_finding(tight: list[dict]) -> Finding | None:
    """The ``line_tighter_than_fp32`` warning of :func:`triage`'s ``fp32_tight_lines`` (None when empty): the
    plan re-run in force_fp32 crosses a line the user set, but only within FP32 rounding, so the line is tighter
    than FP32 rounding of these values and no precision setting can meet it. Evidence: the first such tensor's
    record, plus ``tensors`` (all of them, in node order)."""
    if not tight:
        return None
    first = tight[0]

    def crossed_text(m, line):
        v_txt, l_txt = show_vs(first["values"][m], line)
        return f"{m} {v_txt} {'<' if METRICS[m].direction == HIGHER_IS_BETTER else '>'} {l_txt}"
    crossed = ", ".join(crossed_text(m, line) for m, line in first["lines"].items())
    more = f" (and {len(tight) - 1} more tensor(s))" if len(tight) > 1 else ""
    of = (f"the operands it adds or subtracts (RMS {show(first['operand_rms'])})" if "operand_rms" in first
          else f"values up to |x| {show(first['reference_abs_max'])}")
    return Finding(
        "warning", "line_tighter_than_fp32", first["node"], {**first, "tensors": [r["tensor"] for r in tight]},
        f"'{first['tensor']}'{more} crosses the line you set ({crossed}) even with the plan re-run in "
        f"force_fp32, where it differs from the FP32 reference only by FP32 rounding (relative error "
        f"{show(first['relative_error'])} in RMS, of {of}; the contract's FP32 rounding is rtol "
        f"{show(first['fp32_rtol'])}): the line is tighter than FP32 rounding of these values, no precision "
        "setting can meet it; loosen it (--thresholds / --atol / --rtol)")


def _triage_session(prep: Prepared, config: Config, compiled) -> Session:
    cfg = dataclasses.replace(config, precision_mode="force_fp32", keep_dtype=[])
    again = recompile_precision(compiled, cfg) if compiled is not None else None
    return Session(prep.model, cfg, input_shapes=shapes_of(prep.feeds), compiled=again)


def _node_order(model: onnx.ModelProto) -> tuple[dict[str, int], dict]:
    """({tensor: position in the model's node order}, {tensor: the node that writes it})."""
    order, producer = {}, {}
    for node in model.graph.node:
        for t in node.output:
            if t and t not in order:
                order[t], producer[t] = len(order), node
    return order, producer


def _triage_result(screen: "_TriageScreen", sess: Session, order: dict, producer: dict) -> dict:
    """:func:`triage`'s result once ``sess``'s force_fp32 run went through ``screen`` (the folded graph outputs
    are screened here)."""
    for name, value in sess.runtime.const_outputs.items():
        screen.see(name, value)
    owner = sess.plan.kernel_of_tensor()
    for t in sorted(screen.checked, key=order.__getitem__):
        if order[t] > screen.first:
            break
        row = screen.failed.get(t)
        if row is None:
            continue
        node, k = producer[t], owner.get(t)
        ev = {m: row[m] for m in ("CosineSimilarity", "RelativeEuclideanDistance", "MaxAbsoluteError")}
        ev.update({"tensor": t, "kernel": k.name if k else "", "fp32_rtol": FP32_ROUNDING["rtol"]})
        return {"fp32_first_divergence": {"node": node.name, "op_type": node.op_type, "tensor": t,
                                          "kernel": k.name if k else "", "precision": "fp32",
                                          "kind": "compile_stage", "evidence": ev},
                "fp32_tensors_checked": sum(1 for c in screen.checked if order[c] <= order[t]),
                "fp32_tight_lines": _tight_lines(screen, owner, order, producer, order[t])}
    return {"fp32_first_divergence": None, "fp32_tensors_checked": len(screen.checked),
            "fp32_tight_lines": _tight_lines(screen, owner, order, producer, len(order))}


class _SegmentFirst(Mapping):
    """The reference values of a streamed pass for the triage screen: those of the segment just run
    (``values``), else the golden store's (which computes a segment again from its stored boundary)."""

    def __init__(self, store: Mapping):
        self.store, self.values = store, {}

    def __getitem__(self, name: str):
        got = self.values.get(name)
        return got if got is not None else self.store[name]

    def __contains__(self, name) -> bool:
        return name in self.store

    def held(self, name: str):
        """The value of ``name`` if the segment just run holds it, else None (never computed again)."""
        return self.values.get(name)

    def __iter__(self):
        return iter(self.store)

    def __len__(self) -> int:
        return len(self.store)


class SteppedTriage:
    """:func:`triage` run inside a streamed pass (toolkit.stream.streamed, its ``on_segment`` hook) instead of
    after it: the force_fp32 plan advances, kernel by kernel in plan order, as far as the reference segments
    computed so far reach (every kernel whose outputs lie in segments up to the one just run), and each output is
    screened against that segment's values while the pass holds them, so the reference is not computed a second
    time. The same screen on the same values as :func:`triage`: the same result.

    Args: as :func:`triage` (``compiled`` the NPU compile), plus ``only`` (a subset's tensors; None: all)."""

    def __init__(self, prep: Prepared, config: Config, thresholds, compiled, only: set | None = None):
        self.prep, self.thresholds, self.only = prep, thresholds, only
        self.sess = _triage_session(prep, config, compiled)
        self.order, self.producer = _node_order(prep.model)
        self.view: _SegmentFirst | None = None
        self.screen: _TriageScreen | None = None
        self.need: list[int] = []
        self.next = 0
        self.ms = 0.0

    def _setup(self, golden: Mapping, segment_of: dict) -> None:
        self.view = _SegmentFirst(golden)
        self.screen = _TriageScreen(self.view, self.thresholds, dependent_tensors(self.prep.model, golden), self.order,
                                    self.producer)
        self.need = _kernel_segments(self.sess.runtime, segment_of)

    def __call__(self, stream_pass, segment: int, values: dict) -> None:
        t0 = time.perf_counter()
        if self.screen is None:
            golden = stream_pass.golden if self.only is None else Restricted(stream_pass.golden, self.only)
            self._setup(golden, stream_pass.reference.segment_of)
        stop = self.next
        while stop < len(self.need) and self.need[stop] <= segment:
            stop += 1
        self._advance(stop, values)
        self.ms += (time.perf_counter() - t0) * 1e3

    def _advance(self, stop: int, values: dict) -> None:
        if stop <= self.next:
            return
        self.view.values = values
        try:
            if self.next == 0:
                self.sess.runtime.run_range(dict(self.prep.feeds), 0, stop, dump=False, on_kernel=self.screen.on_kernel)
            else:
                self.sess.runtime.continue_range(self.next, stop, on_kernel=self.screen.on_kernel)
        finally:
            self.view.values = {}
        self.next = stop

    def result(self, golden: Mapping) -> dict:
        """:func:`triage`'s result. Kernels the pass's segments did not reach (none when every segment ran) run
        now, screened against ``golden`` (the pass's store as the pass left it, restricted to the subset)."""
        t0 = time.perf_counter()
        if self.screen is None:  # the pass ran no reference segment
            self._setup(golden, {})
        self._advance(len(self.sess.runtime.kernels), {})
        out = _triage_result(self.screen, self.sess, self.order, self.producer)
        self.ms += (time.perf_counter() - t0) * 1e3
        return out


def _kernel_segments(runtime, segment_of: dict) -> list[int]:
    """Per kernel of ``runtime``'s plan: the last reference segment (index) it needs to be screened, i.e. the
    highest segment of its outputs and of every earlier kernel's (plan order is kept; outputs no segment
    computes count 0)."""
    out, last = [], 0
    for ek in runtime.kernels:
        for _, t in ek.fetches:
            last = max(last, segment_of.get(t, 0))
        out.append(last)
    return out


def _nothing_compared(df, outputs) -> str:
    """'' unless the layer table compared tensors and every one of them holds no element (an input with a
    dimension of size 0: two empty tensors agree exactly, so every metric passes on nothing); then a short
    text naming an output's shape, e.g. "output 'b' is 0x4"."""
    if not len(df) or "ComparedCount" not in df.columns:
        return ""
    compared = df[df["CompareFailReason"].fillna("").astype(str).str.strip() == ""]
    if not len(compared) or (compared["ComparedCount"].fillna(0) > 0).any():
        return ""
    outs = compared[compared["TensorName"].isin(outputs)]
    r = outs.iloc[0] if len(outs) else compared.iloc[0]
    what = "output" if len(outs) else "tensor"
    return f"{what} '{r['TensorName']}' is {r.get('Shape') or 'empty'}"


def _verdict(df, outputs, tasks, stage, findings, lines=None, kernels: int | None = None) -> tuple[str, list[str]]:
    """(verdict, reasons). ``lines``: the abnormal lines used ({metric: value}, resolve_thresholds), when known:
    the reasons then print them, each value next to its line (toolkit.core.text.show_vs: the line exactly,
    the value with the digits it takes to read on its side of the line). A PASS/WARN says in one reason how many
    tensors cross a default line within their expected FP16 or FP32 rounding noise (WithinExpectedNoise, AbnormalMetrics;
    docs/thresholds.md). ``kernels``: how many kernels the plan runs; 0 (the whole graph computed at compile
    time) is a WARN that says nothing of the device was simulated."""
    def metric_text(m, v, crossed, tensor):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            return f"{m} {v}"
        if m not in crossed or m not in METRICS:
            return f"{m} {show(v)}"
        own = _for_tensor(lines, tensor) if lines is not None else None  # this tensor's own lines
        below, line = METRICS[m].direction == HIGHER_IS_BETTER, (own or {}).get(m)
        if line is None:
            return f"{m} {show_crossed(v, below)}"
        v_txt, l_txt = show_vs(v, line)
        return f"{m} {v_txt} {'<' if below else '>'} {l_txt}"

    reasons = []
    out_rows = df[df["TensorName"].isin(outputs)]
    bad_out = out_rows[out_rows["Abnormal"] | out_rows["OverFlow"]]
    for _, r in bad_out.iterrows():
        crossed = r.get("AbnormalMetrics")
        crossed = list(crossed) if isinstance(crossed, (list, tuple)) else []
        shown = {m: r.get(m) for m in (crossed or ["CosineSimilarity", "RelativeEuclideanDistance"])
                 if m in r and r.get(m) == r.get(m)}
        evidence = ", ".join(metric_text(m, v, crossed, r["TensorName"]) for m, v in shown.items())
        reasons.append(f"output '{r['TensorName']}' is abnormal ({evidence or 'not comparable: ' + str(r.get('CompareFailReason', ''))})")
    for _, r in out_rows[~(out_rows["Abnormal"] | out_rows["OverFlow"])].iterrows():
        why = not_compared_reason(r)
        if why:
            reasons.append(f"output '{r['TensorName']}' could not be compared ({why}): nothing vouches for it")
    if len(df) and not (df["CompareFailReason"].fillna("").astype(str).str.strip() == "").any():
        reasons.append("no tensor could be compared; the verdict cannot rest on nothing")
    for t in tasks:
        if not t["passed"]:
            reasons.append(f"task check {t['name']} failed: {t['detail']}")
    if stage == "compile":
        reasons.append("the compiled plan diverges even in force_fp32: a compile-stage fault")
    if reasons:
        return "FAIL", reasons
    n_ab = int(abnormal_mask(df).sum())
    if n_ab:
        reasons.append(f"{n_ab} intermediate tensor(s) abnormal; outputs and task checks hold")
    for _, r in golden_nonfinite_rows(df, outputs).iterrows():
        reasons.append(f"the FP32 reference output '{r['TensorName']}' holds NaN/Inf ({int(r['GoldenNaN'])} NaN, "
                       f"{int(r['GoldenInf'])} Inf): the model computes it in FP32; compared where finite")
    if any(f.kind == "fp16_constant" for f in findings):
        reasons.append("constants not representable in FP16 (see findings)")
    if kernels == 0:
        reasons.append(f"{NO_KERNEL}: every output is a constant folded at compile time or a graph input passed "
                       "through, so nothing of the NPU was simulated and there is no device computation to check")
    empty = _nothing_compared(df, outputs)
    if empty:
        reasons.append(f"{NOTHING_COMPARED}: every compared tensor is empty ({empty}), so nothing vouches for "
                       "the device; feed inputs that give the model data (no dimension of size 0)")
    explained = {"golden_nonfinite"} | ({"first_divergence", "divergence_origin"} if n_ab else set())
    errors = [f for f in findings if f.severity == "error" and f.kind not in explained]
    if errors:
        reasons.append(f"{len(errors)} finding(s) to read before signoff: "
                       + ", ".join(f"{f.kind} at '{f.subject}'" for f in errors[:5])
                       + (" ..." if len(errors) > 5 else "") + " (see findings)")
    judged = resolve_thresholds(None) if lines is None else lines
    names = df["TensorName"] if "TensorName" in df.columns else [None] * len(df)
    n_noise = sum(1 for w, c, t in zip(df.get("WithinExpectedNoise", []), df.get("AbnormalMetrics", []), names)
                  if isinstance(w, (bool, np.bool_)) and w and isinstance(c, (list, tuple))
                  and any(noise_covers(m, _for_tensor(judged, t)) for m in c))
    noise = [(f"{n_noise} tensor(s) cross a default line within the expected FP16/FP32 rounding noise (listed "
              "in AbnormalMetrics)")] if n_noise else []
    if reasons:
        return "WARN", reasons + noise
    if noise:
        return "PASS", ["no tensor abnormal; outputs and task checks hold"] + noise
    return "PASS", ["every compared tensor within the abnormal lines; outputs and task checks hold"]


def agree_severity(findings: list[Finding], verdict: str) -> list[Finding]:
    """``findings`` with severities that agree with the verdict: under a PASS or WARN verdict (the outputs and
    task checks hold) no finding is an error; an "error" becomes a "warning" (evidence ``severity_was``)."""
    if verdict == "FAIL":
        return findings
    return [dataclasses.replace(f, severity="warning", evidence={**f.evidence, "severity_was": "error"})
            if f.severity == "error" else f for f in findings]


#: The first words of the reasons that make a verdict rest on nothing checked (see :func:`ship_sentence`).
NO_KERNEL = "no kernel ran"
NOTHING_COMPARED = "no element was compared"


def ship_sentence(verdict: str, reasons: list[str]) -> str:
    """One sentence: can the model ship as compiled, and why (from the verdict and its first reason). A WARN
    whose reasons say nothing was checked (:data:`NO_KERNEL`, :data:`NOTHING_COMPARED`) cannot tell."""
    unchecked = next((r for r in reasons if r.startswith((NO_KERNEL, NOTHING_COMPARED))), None)
    if verdict == "WARN" and unchecked is not None:
        return f"Cannot tell whether it can ship: {unchecked}."
    why = reasons[0] if reasons else ""
    why = why.removesuffix("; outputs and task checks hold")  # the WARN sentence says so itself
    if verdict == "PASS":
        return "Can ship as compiled: every output and task check holds within the abnormal lines."
    if verdict == "WARN":
        return (f"Can ship as compiled, with care: the outputs and task checks hold, but {why}; read the "
                "findings before signoff.")
    return f"Cannot ship as compiled: {why}."


def _timed(fn, *args) -> tuple[object, float]:
    """(fn(*args), its wall time in ms)."""
    ts = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - ts) * 1e3


def _reference_run(prep: Prepared, options=None, only=None, types: dict | None = None) -> dict:
    """Golden tensors (the feeds included) of the FP32 onnxruntime reference (ReferenceRunner), run with the
    onnxruntime RunOptions ``options`` (None: the process-wide ones a signal terminates); ``only``: the tensors
    to expose (a subset's, toolkit.compare.subset; None: every tensor); ``types``: the model's inferred types
    (toolkit.ort.reference.inferred_types; None: inferred here)."""
    golden = ReferenceRunner(prep.model, only=only, types=types).run(prep.feeds, options)
    golden.update(prep.feeds)
    return golden


class _Background:
    """``fn(*args)`` on a daemon thread; :meth:`result` waits and returns its value or raises its exception.

    Daemon: an interrupted diagnose (Ctrl-C, SIGTERM) exits without waiting for onnxruntime to finish."""

    def __init__(self, fn, *args):
        self._out: dict = {}
        self._thread = threading.Thread(target=self._work, args=(fn, args), name="npuscope-background", daemon=True)
        self._thread.start()

    def _work(self, fn, args) -> None:
        try:
            self._out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by result()
            self._out["error"] = exc

    def wait(self) -> None:
        """Wait for the thread, whatever it returns or raises."""
        self._thread.join()

    def result(self):
        self._thread.join()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]


def _run_or_explain(sess, prep: Prepared):
    """The NPU run; a kernel failure on inputs the model itself cannot take becomes a one-line ModelError
    (toolkit.compiler.passes.bind_shapes.raise_if_reference_fails), any other stays an internal error."""
    try:
        return sess.run(prep.feeds, dump=True)
    except KernelRuntimeError as exc:
        raise_if_reference_fails(prep.model, prep.feeds, exc)
        raise


def diagnose(prep: Prepared, config: Config, thresholds=None, task_metrics=(), progress=_noop,
             subset: Subset | None = None, stream: bool | None = None,
             segment_bytes: int = DEFAULT_SEGMENT_BYTES, ray: str | None = None,
             ray_parts: int | None = None) -> tuple[Diagnosis, dict]:
    """Run the whole diagnosis; returns (Diagnosis, extras {"golden", "device", "compiled", "origin_nodes",
    "npu_outputs", "runtime", "lines"}: the reference tensors, the device side, the CompileResult, the nodes a
    reproducer needs, the plan's graph outputs, the NpuRuntime that ran, with its built kernels, and the
    abnormal lines it judged with (a Thresholds)).

    The FP32 reference runs on a thread while the plan compiles (onnxruntime releases the GIL while it runs).
    When the diagnosis fails before it needs the reference (a compile error), that thread is waited for before
    the error propagates: an interpreter torn down under a thread still inside onnxruntime aborts the process.
    Measured and dropped: the force_fp32 triage alongside the comparison, and the analysis imports (pandas)
    alongside the compile or the kernel build: both sides are mostly Python and slowed each other as much as
    they gained.

    ``subset`` (toolkit.compare.subset): only its tensors are compared and kept (graph inputs and outputs
    always); ``summary["subset"]`` says what was left out. Raises ConfigError for a selection that matches
    nothing, before anything runs.

    ``stream`` (None: automatic, toolkit.stream.streamed.should_stream): True runs the reference segment by
    segment and compares each tensor as the plan writes it (toolkit.stream.streamed; ``segment_bytes`` per
    segment, bytes), so the tensors of both runs are never all held; ``golden`` and ``device`` in the extras are
    then toolkit.stream.stores mappings that compute a tensor again from its segment's stored boundary. The
    results are the same either way; ``summary["streamed"]`` says how it ran.

    ``ray`` (a Ray cluster address: 'auto', 'local' or host:port) streams (``stream`` None or True) with the
    plan's kernels split into ``ray_parts`` contiguous parts (None: the cluster's CPU count), each a Ray task
    that runs its kernels and the reference segments they need from the previous part's hand-over
    (toolkit.stream.distributed); the rows come back in order (the same layer table), and the driver's stores
    are filled with the boundaries the parts return, so refinement, advice, triage and verdict run here as on
    one machine. ``summary["streamed"]["parts"]`` lists the parts. Raises UsageError for ``stream=False`` with
    ``ray``, ``ray_parts`` without ``ray``, no ray package or an unreachable address."""
    require_outputs(prep.model, prep.path)
    if ray_parts is not None and not ray:
        raise UsageError(f"--ray-parts {ray_parts} splits a pass across a Ray cluster; give --ray ADDRESS too")
    if ray and stream is False:
        raise UsageError(f"--ray {ray} splits the streamed pass across a Ray cluster; drop --no-stream")
    if ray:
        check_address(ray)
    kept = select(prep.model, subset) if subset is not None and subset.active else None
    types = inferred_types(prep.model)
    if ray or should_stream(prep.model, stream, types, prep.feeds):
        with own_run_options() as options:
            return _diagnose(prep, config, thresholds, task_metrics, progress, None, kept,
                             streaming={"options": options, "types": types, "segment_bytes": segment_bytes,
                                        "ray": ray, "ray_parts": ray_parts, "config": config})
    with own_run_options() as options:
        reference = _Background(_timed, _reference_run, prep, options,
                                kept["tensors"] if kept is not None else None, types)
        try:
            return _diagnose(prep, config, thresholds, task_metrics, progress, reference, kept)
        except KeyboardInterrupt:  # the CLI exits at once without finalising the interpreter (toolkit.cli)
            raise
        except BaseException:
            options.terminate = True  # its result is not wanted: a model that loops forever must not hang here
            reference.wait()
            raise


def _streamed(prep: Prepared, sess, thresholds, kept: dict | None, streaming: dict, progress, t: dict):
    """(npu RunResult, golden, device, layer table, ``summary["streamed"]`` record, SteppedTriage or None) of a
    streamed pass (toolkit.stream.streamed); on one machine the force_fp32 triage runs inside the pass
    (:class:`SteppedTriage`), across a Ray cluster after it. ``t`` gets the timings."""
    only = set(kept["tensors"]) if kept is not None else None
    stepped = None
    ts = time.perf_counter()
    try:
        if streaming.get("ray"):  # the kernels split across a Ray cluster (toolkit.stream.distributed)
            st = distributed_comparison(prep.model, sess.runtime, prep.feeds, thresholds, model_path=prep.path,
                                        config=streaming["config"], address=streaming["ray"],
                                        parts=streaming.get("ray_parts"), segment_bytes=streaming["segment_bytes"],
                                        only=only, types=streaming["types"], progress=progress)
        else:
            stepped = SteppedTriage(prep, streaming["config"], thresholds, sess.compiled, only)
            st = streamed_comparison(prep.model, sess.runtime, prep.feeds, thresholds,
                                     segment_bytes=streaming["segment_bytes"], only=only,
                                     options=streaming["options"], types=streaming["types"], progress=progress,
                                     on_segment=stepped)
    except KernelRuntimeError as exc:
        raise_if_reference_fails(prep.model, prep.feeds, exc)
        raise
    t["reference_run_ms"] = st.reference_ms
    t["npu_run_ms"] = (time.perf_counter() - ts) * 1e3 - st.reference_ms - (stepped.ms if stepped else 0.0)
    golden, device = st.golden, st.device
    if only is not None:
        golden, device = Restricted(golden, only), Restricted(device, only)
    progress("refining origins (kernels re-run alone on the reference's inputs)")
    df = refine_table(st.table, prep.model, sess.runtime, golden, device, thresholds)
    record = {"segments": st.segments, "device_segments": st.device_segments,
              "segment_bytes": streaming["segment_bytes"], "kept_bytes": st.kept_bytes,
              "boundary_bytes": st.golden.boundary_bytes(), "checkpoint_bytes": st.device.checkpoint_bytes(),
              "peak_rss_bytes": st.peak_rss_bytes}
    if st.parts:
        record.update({"ray": streaming["ray"], "parts": st.parts})
    return st.run, golden, device, df, record, stepped


def _diagnose(prep: Prepared, config: Config, thresholds, task_metrics, progress, reference,
              kept: dict | None = None, streaming: dict | None = None) -> tuple[Diagnosis, dict]:
    t = {}
    t0 = time.perf_counter()
    progress("compiling" if streaming else "compiling (the FP32 reference runs alongside)")
    sess = Session(prep.model, config, input_shapes=shapes_of(prep.feeds), model_path=str(prep.path))
    t["compile_ms"] = sess.compiled.compile_ms
    t["kernel_build_ms"] = sess.runtime.build_ms
    outputs = [o.name for o in prep.model.graph.output]
    streamed = stepped = None
    if streaming is not None:
        progress(f"streaming: the NPU plan ({len(sess.plan.kernels)} kernels) and the FP32 reference segment by "
                 "segment, each tensor compared as it is written")
        ts = time.perf_counter()
        npu, golden, device, df, streamed, stepped = _streamed(prep, sess, thresholds, kept, streaming, progress, t)
        t["stream_ms"] = (time.perf_counter() - ts) * 1e3  # both runs, the comparison and the refinement
        ts = time.perf_counter()
    else:
        progress(f"running the NPU plan ({len(sess.plan.kernels)} kernels)")
        ts = time.perf_counter()
        npu = _run_or_explain(sess, prep)
        t["npu_run_ms"] = (time.perf_counter() - ts) * 1e3
        progress("waiting for the FP32 reference (onnxruntime)")
        golden, t["reference_run_ms"] = reference.result()
        ts = time.perf_counter()
        progress("comparing tensors")
        device = device_tensors(npu, prep.feeds)  # graph outputs folded at compile time: the constant the plan returns
        if kept is not None:  # --nodes / --layers / --until / --outputs-only: the rest is neither compared nor kept
            golden = {k: v for k, v in golden.items() if k in kept["tensors"]}
            device = {k: v for k, v in device.items() if k in kept["tensors"]}
        df = layer_analysis(prep.model, sess.runtime, golden, device, thresholds)
    if kept is not None:
        df = df[df["TensorName"].isin(kept["tensors"])].reset_index(drop=True)
    findings = advise(df, sess.plan, sess.compiled.findings, outputs=outputs, model=prep.model, values=golden,
                      lines=resolve_thresholds(thresholds))
    for name, arr in prep.feeds.items():
        a = np.asarray(arr) if arr is not None and not isinstance(arr, list) else None
        if a is not None and a.dtype.kind == "f" and not np.isfinite(a).all():
            findings.insert(0, Finding("warning", "nonfinite_input", name,
                                       {"nan": int(np.isnan(a).sum()), "inf": int(np.isinf(a).sum()), "size": int(a.size)},
                                       f"input '{name}' holds NaN/Inf values; metrics cover only positions where both "
                                       "runs are finite: check the input data"))
    first = first_divergence(df)
    if kept is not None:
        findings, first = subset_origins(findings, first, prep.model, kept)
    t["compare_ms"] = (time.perf_counter() - ts) * 1e3
    ts = time.perf_counter()
    if stepped is not None:  # the force_fp32 run went along the streamed pass
        tri = stepped.result(golden)
        t["triage_run_ms"] = t["triage_ms"] = stepped.ms
    else:
        progress("stage triage: re-running the plan in force_fp32")
        tri, t["triage_run_ms"] = _timed(triage, prep, config, golden, thresholds, sess.compiled)
        t["triage_ms"] = (time.perf_counter() - ts) * 1e3
    fp32_first = tri["fp32_first_divergence"]
    stage = "compile" if fp32_first else ("precision" if first else "none")
    if stage == "compile":
        findings.insert(0, Finding("error", "compile_stage_fault", fp32_first["node"], fp32_first["evidence"],
                                   f"the plan diverges from the reference even in force_fp32 at kernel "
                                   f"'{fp32_first['kernel']}', beyond FP32 rounding: a rewrite or fusion changed "
                                   "the math; switch that fusion off (fusion_switch_file) and report it"))
    tight = tight_line_finding(tri.get("fp32_tight_lines") or [])
    if tight is not None:
        findings.insert(1 if stage == "compile" else 0, tight)
    tasks = run_tasks(prep.zoo_name, list(task_metrics),
                      {o: golden[o] for o in outputs if o in golden}, npu.outputs, prep.model)

    lines = resolve_thresholds(thresholds)
    verdict, reasons = _verdict(df, outputs, tasks, stage, findings, lines=lines, kernels=len(sess.plan.kernels))
    findings = agree_severity(findings, verdict)
    origin = fp32_first if stage == "compile" else first
    k_by_name = {k.name: k for k in sess.plan.kernels}
    origin_nodes = []
    if origin:
        k = k_by_name.get(origin["kernel"])
        origin_nodes = list(k.nodes) if k is not None and len(k.nodes) > 1 else [origin["node"]]
        origin_nodes += [n for n in origin.get("consumer_nodes", []) if n not in origin_nodes]  # storage origin
    t["total_ms"] = (time.perf_counter() - t0) * 1e3
    sha = (loaded_sha256(prep.path) or "") if prep.path else ""  # the bytes compiled, even if the file changed since
    summary = {
        "verdict": verdict, "ship": ship_sentence(verdict, reasons), "reasons": reasons, "model": str(prep.path),
        "model_name": prep.name,
        "model_sha256": sha, "inputs": prep.inputs_origin, "inputs_sha256": input_digests(prep.feeds),
        "seed": prep.seed, "config": config.to_dict(),
        "thresholds": dict(lines), "threshold_origins": line_origins(lines),
        **({"thresholds_per_tensor": lines.to_json()["per_tensor"]} if lines.per_tensor else {}),
        "stage": stage, "first_divergence": first, "origin_nodes": origin_nodes, "timings_ms": t,
        "counts": {**layer_counts(df), "kernels": len(sess.plan.kernels), "onnx_nodes": len(prep.model.graph.node)},
    }
    summary["streamed"] = streamed or {"segments": 0}
    if kept is not None:
        summary["subset"] = {k: kept[k] for k in ("options", "left_out_nodes", "left_out_tensors")}
    plan = sess.plan
    diag = Diagnosis(
        summary=summary, table=df, findings=findings, passes=_passes_frame(sess.compiled),
        fusion_result=sess.compiled.fusion_result_json(), precision=_precision_frame(plan, prep.model),
        memory={"arena_bytes": plan.arena_bytes, "lower_bound_bytes": plan.lower_bound_bytes,
                "tensors_in_arena": sum(1 for x in plan.tensors.values() if x.storage == "arena"),
                "tensors_outside": sum(1 for x in plan.tensors.values() if x.storage != "arena")},
        kernel_times=_kernel_times(plan, npu.kernel_ms), tasks=tasks,
        triage={"stage": stage, "fp32_first_divergence": fp32_first,
                "fp32_tensors_checked": tri["fp32_tensors_checked"], "npu_first_divergence": first,
                "fp32_tight_lines": tri.get("fp32_tight_lines") or []},
        environment=environment(), neighbourhood=neighbourhood(prep.model, origin_nodes))
    return diag, {"golden": golden, "device": device, "compiled": sess.compiled, "origin_nodes": origin_nodes,
                  "npu_outputs": npu.outputs, "runtime": sess.runtime, "lines": lines}
