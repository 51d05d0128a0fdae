"""Compile a model: bind its input shapes, then run the two stages of toolkit.compiler.stages.

:func:`compile_model` = :func:`bind` + :func:`compile_bound`; the compile cache (toolkit.cache.compile_cache)
wraps the same two steps (it looks the bound model up before the passes run). The structure stage's end state
(the partition snapshot, ``CompileResult.stage``) is the input of :func:`recompile_precision`, which re-runs
only the precision stage. Every pass's log lines and the op count before/after go into the compile log.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from dataclasses import dataclass

import onnx

from toolkit.compiler import fusion_switch, stages
from toolkit.compiler.context import CompileContext, CompileResult, PassResult
from toolkit.compiler.passes.bind_shapes import bind_input_shapes, check_inference
from toolkit.compiler.registry import PASSES, PassInfo
from toolkit.config.schema import Config
from toolkit.core.records import PassLog
from toolkit.ir.graph import Graph
from toolkit.ir.load import normalise_node_names
from toolkit.ir.proto_checks import densify_sparse_initializers
from toolkit.ort.terminate import reraise_if_terminated


class PipelineError(RuntimeError):
    """A pass's ``requires`` is not provided by a pass that ran before it (a pass disabled, switched off or
    below the fusion level while a later pass needs what it provides): an internal error, not a user's."""


_SNAPSHOT_FIELDS = ("groups", "node_group", "kernels", "folded", "folded_nodes", "findings", "fusion_stats", "provenance",
                    "absorbed")


def _run_optional(info: PassInfo, ctx: CompileContext) -> PassResult:
    """Run an optimisation pass; if it raises, put back the graph and context it started from and log why."""
    snap_graph = ctx.graph.snapshot()
    snap = {f: copy.deepcopy(getattr(ctx, f)) for f in _SNAPSHOT_FIELDS}
    try:
        return info.fn(ctx)
    except Exception as exc:  # noqa: BLE001 - an optimisation must never fail the compile
        reraise_if_terminated(exc)
        msg = " ".join(str(exc).split())[:300] or type(exc).__name__
        logging.getLogger("npuscope.compiler").warning("pass %s failed (%s: %s); compiling without it",
                                                        info.name, type(exc).__name__, msg)
        ctx.graph = Graph.restored(snap_graph)
        for f, v in snap.items():
            setattr(ctx, f, v)
        return PassResult(0, [f"FAILED ({type(exc).__name__}: {msg}); state restored, compiling without this pass"])


@dataclass
class Bound:
    """A copy of the model to compile with unique node names and its input shapes bound (:func:`bind`)."""

    model: onnx.ModelProto
    declared: dict
    shapes: dict


def bind(model: onnx.ModelProto, config: Config, input_shapes=None) -> Bound:
    """Copy ``model``, give it the loader's unique node names and bind its dynamic dims (``input_shapes``
    over ``config.input_shape``). Raises ConfigError / ModelError for shapes the model cannot take."""
    fusion_switch.check_config(config)
    work = onnx.ModelProto()
    work.CopyFrom(model)
    # kernels look nodes up by name: a ModelProto built in memory (not through load_model) may have empty or
    # repeated node names, which would make different nodes collide; give them the loader's unique names
    normalise_node_names(work)
    densify_sparse_initializers(work, "model")  # as load_model does (onnxruntime runs sparse initializers dense)
    shapes = dict(config.input_shapes())
    shapes.update(input_shapes or {})
    declared = bind_input_shapes(work, shapes, check=False, where=config.where("input_shape"))
    return Bound(work, declared, shapes)


def compile_bound(bound: Bound, config: Config, *, model_path: str = "", disabled: tuple[str, ...] = (),
                  t0: float | None = None) -> CompileResult:
    """Run both stages over ``bound.model`` (changed in place; it becomes ``CompileResult.model``).
    ``t0``: the perf_counter start of the whole compile (default: now). Raises ModelError, PipelineError."""
    t0 = time.perf_counter() if t0 is None else t0
    check_inference(bound.model, bound.declared, bound.shapes)
    ctx = CompileContext(Graph(bound.model), config, model_path)
    logs = _run_stage(ctx, config, stages.STRUCTURE, disabled)
    stage = _snapshot(ctx)
    logs += _run_stage(ctx, config, stages.PRECISION, disabled)
    ctx.graph.sync()
    plan = ctx.plan
    plan.model = model_path
    return CompileResult(plan, ctx.graph.model, logs, ctx.findings, ctx.fusion_stats,
                         (time.perf_counter() - t0) * 1e3, stage=stage)


def compile_model(model: onnx.ModelProto, config: Config | None = None, *, input_shapes=None,
                  model_path: str = "", disabled: tuple[str, ...] = ()) -> CompileResult:
    """Run both stages over a copy of ``model`` (no compile cache: toolkit.engine.compile_model adds it).

    Args:
        model: a loaded, checked model (toolkit.ir.load.load_model). Not modified.
        config: options (defaults if None).
        input_shapes: {input name: dims} binding dynamic dims; overrides ``config.input_shape``.
        model_path: recorded in the plan.
        disabled: pass names to skip (for tests / experiments).

    Returns:
        CompileResult with the Plan, the compiled ONNX graph, per-pass logs, findings and fusion counts.

    Raises:
        ModelError: dynamic dims left unbound, unsupported constructs.
        PipelineError: a disabled pass is required by a later one.
    """
    config = config or Config()
    t0 = time.perf_counter()
    return compile_bound(bind(model, config, input_shapes), config, model_path=model_path, disabled=disabled,
                         t0=t0)


#: config fields the passes before precision assignment read: a change to any of them needs a full compile
STRUCTURAL_FIELDS = ("fusion_level", "fusion_switch_file", "input_shape")


def recompile_precision(compiled: CompileResult, config: Config) -> CompileResult:
    """Re-run only the precision stage (placement, precision, casts, copies, constant checks, memory) with a
    new config, on the partition snapshot of ``compiled`` (``compiled.stage``: its folded, fused and
    partitioned graph). Used by stage
    triage, tuning and placement advice, where only precision or placement options (``op_placement``) change.

    Raises:
        ValueError: ``config`` differs from the compiled one in a structural field (STRUCTURAL_FIELDS).
    """
    old = compiled.plan.config
    for f in STRUCTURAL_FIELDS:
        if old.get(f) != getattr(config, f):
            raise ValueError(f"config field {f} changed; compile again")
    base = compiled.stage
    t0 = time.perf_counter()
    ctx = dataclasses.replace(base, config=config, kernels=[k.copy() for k in base.kernels], plan=None,
                              findings=[f for f in base.findings], provided=set(base.provided))
    logs = _run_stage(ctx, config, stages.PRECISION, ())
    plan = ctx.plan
    plan.model = compiled.plan.model
    prior = [p for p in compiled.passes if p.name not in stages.PRECISION]
    return CompileResult(plan, compiled.model, prior + logs, ctx.findings, compiled.fusion_stats,
                         (time.perf_counter() - t0) * 1e3, stage=base)


def _log_pass(p: PassLog) -> None:
    """The pass's compile-log lines through the ``npuscope.compiler`` logger (INFO: the summary line with op
    counts; DEBUG: each detail line, e.g. every fusion match and placement decision), so NPUSCOPE_LOG_LEVEL=1
    shows the compile as it happens (toolkit.logs.plog)."""
    log = logging.getLogger("npuscope.compiler")
    if not log.isEnabledFor(logging.INFO):
        return
    state = f"ran, {p.changed} change(s)" if p.ran else f"skipped ({p.reason})"
    log.info("[%s] %s; ops %d -> %d; kernels %d; %.1f ms", p.name, state, p.ops_before, p.ops_after,
             p.kernels_after, p.ms)
    for line in p.log:
        log.debug("[%s] %s", p.name, line)


def _snapshot(ctx: CompileContext) -> CompileContext:
    """The context at the end of the structure stage, kept apart from the one the precision stage changes."""
    return dataclasses.replace(ctx, kernels=[k.copy() for k in ctx.kernels], findings=list(ctx.findings),
                               provided=set(ctx.provided), plan=None)


def _skip_reason(info: PassInfo, config: Config, disabled) -> str:
    if info.name in disabled:
        return "disabled"
    if config.fusion_level < info.min_level:
        return f"fusion_level {config.fusion_level} < {info.min_level}"
    if info.switch and not config.switch(*info.switch):
        return f"off in fusion switch file ({info.switch[1]})"
    return ""


def _run_stage(ctx: CompileContext, config: Config, stage: tuple[str, ...], disabled) -> list[PassLog]:
    """Run ``stage``'s passes in order. A skipped pass (disabled, below the fusion level, switched off) still
    counts as providing what it provides: the passes that follow work on the graph unchanged by it. Raises
    PipelineError when a pass requires something no earlier pass provides."""
    logs = []
    for name in stage:
        info = PASSES[name]
        before = len(ctx.graph.nodes)
        reason = _skip_reason(info, config, disabled)
        missing = [r for r in info.requires if r not in ctx.provided]
        if missing:
            raise PipelineError(f"compiler pass {info.name} requires {', '.join(missing)}, which no earlier pass "
                                f"provides (order: {', '.join(stages.STRUCTURE + stages.PRECISION)})")
        ts = time.perf_counter()
        if reason:
            res = PassResult()
        elif info.optional:
            res = _run_optional(info, ctx)
        else:
            res = info.fn(ctx)
        ctx.provided.update(info.provides)
        logs.append(PassLog(info.name, not reason, reason, before, len(ctx.graph.nodes), len(ctx.kernels),
                            res.changed, (time.perf_counter() - ts) * 1e3, res.log))
        _log_pass(logs[-1])
    return logs
