"""`compile(model, config) -> CompileResult`: one flat, ordered list of named passes.

A pass is a function ``run(ctx) -> PassResult`` registered with :func:`register_pass`, which records its
name, what it requires from earlier passes, what it provides, the minimum fusion level at which it runs and
the fusion-switch name (converter format) that can turn it off. Every pass's log lines and the op count
before/after go into the compile log.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import onnx

from toolkit.config import Config
from toolkit.ir.graph import Graph
from toolkit.compiler.plan import KernelSpec, Plan


@dataclass
class PassResult:
    """What a pass did: ``changed`` (count of edits), ``log`` lines (human-readable)."""

    changed: int = 0
    log: list[str] = field(default_factory=list)


@dataclass
class Group:
    """Nodes a fusion rule put into one kernel (provenance: rule + original node names)."""

    name: str
    op_type: str
    rule: str
    fusion: str  # "graph" | "ub"
    nodes: list[str]


@dataclass
class Finding:
    """A diagnostic: severity (info/warning/error), kind, subject, evidence dict, recommendation."""

    severity: str
    kind: str
    subject: str
    evidence: dict
    recommendation: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class CompileContext:
    graph: Graph
    config: Config
    model_path: str = ""
    groups: dict[str, Group] = field(default_factory=dict)   # group name -> Group
    node_group: dict[str, str] = field(default_factory=dict)  # node name -> group name
    kernels: list[KernelSpec] = field(default_factory=list)
    plan: Plan | None = None
    folded: list[str] = field(default_factory=list)
    #: names of the nodes fold_constants removed (computed at compile time)
    folded_nodes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    fusion_stats: dict = field(default_factory=lambda: {"graph_fusion": {}, "ub_fusion": {}})
    provided: set[str] = field(default_factory=set)
    #: node name -> (rule, original node names) for nodes a rewrite created or changed (e.g. BN folded into Conv)
    provenance: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    #: tensor name -> node name that absorbed it (a rewrite removed the tensor)
    absorbed: dict[str, str] = field(default_factory=dict)
    #: snapshot taken right after partition (see recompile_precision)
    stage: object = None

    def add_group(self, group: Group) -> None:
        self.groups[group.name] = group
        for n in group.nodes:
            self.node_group[n] = group.name

    def count_fusion(self, level: str, rule: str, matched: bool, effective: bool) -> None:
        """Tally match/effect counts per rule in fusion_result.json's shape (counts kept as ints here)."""
        entry = self.fusion_stats[level].setdefault(rule, {"match_times": 0, "effect_times": 0})
        entry["match_times"] += int(matched)
        entry["effect_times"] += int(effective)


@dataclass
class PassInfo:
    name: str
    fn: Callable[[CompileContext], PassResult]
    requires: tuple[str, ...]
    provides: tuple[str, ...]
    min_level: int
    switch: tuple[str, str] | None  # (level, converter pass name)
    optional: bool = False  # an optimisation: if it raises, the compile goes on without it (logged)


#: The ordered pass list; modules under toolkit.compiler.passes append to it on import, in PASS_ORDER.
PASSES: dict[str, PassInfo] = {}
PASS_ORDER = ("fold_constants", "infer_shapes", "fold_batchnorm", "graph_fusion", "buffer_fusion", "partition",
              "place_ops", "assign_precision", "insert_casts", "insert_copies", "check_constants", "plan_memory")


def register_pass(name: str, *, requires=(), provides=(), min_level: int = 0, switch=None, optional=False):
    """Decorator registering a pass function under ``name`` (see module docstring).

    ``optional=True`` marks an optimisation: when it raises, :func:`compile_model` restores the state from
    before the pass, logs why, and goes on (a valid model must compile even if an optimisation cannot handle it).
    """

    def deco(fn):
        PASSES[name] = PassInfo(name, fn, tuple(requires), tuple(provides), min_level, switch, optional)
        return fn

    return deco


@dataclass
class PassLog:
    name: str
    ran: bool
    reason: str
    ops_before: int
    ops_after: int
    kernels_after: int
    changed: int
    ms: float
    log: list[str]


@dataclass
class CompileResult:
    plan: Plan
    #: the compiled graph (folded, BN-folded), ONNX names kept; read-only: the compile cache serialises it on
    #: its writer thread after compile_model returns (copy it before changing it)
    model: onnx.ModelProto
    passes: list[PassLog]
    findings: list[Finding]
    fusion_stats: dict
    compile_ms: float
    #: the compile state after partition (kernels before precision), for :func:`recompile_precision`
    stage: object = None
    #: the compile cache's record (toolkit.cache.compile_cache): key, status hit/miss/patched, kernel hit and
    #: miss counts, log lines; None when the cache is disabled
    cache: dict | None = None

    def fusion_result_json(self, graph_id: str = "0_0") -> dict:
        """fusion_result.json in the converter's format (counts as strings)."""
        def fmt(level):
            return {k: {"match_times": str(v["match_times"]), "effect_times": str(v["effect_times"])}
                    for k, v in self.fusion_stats[level].items()}
        return {graph_id: {"graph_fusion": fmt("graph_fusion"), "ub_fusion": fmt("ub_fusion")}}

    def log_lines(self) -> list[str]:
        lines = []
        for p in self.passes:
            state = f"ran, {p.changed} change(s)" if p.ran else f"skipped ({p.reason})"
            lines.append(f"[{p.name}] {state}; ops {p.ops_before} -> {p.ops_after}; kernels {p.kernels_after}; {p.ms:.1f} ms")
            lines.extend(f"    {ln}" for ln in p.log)
        return lines


def _load_passes() -> None:
    # import for registration side effects, in order
    from toolkit.compiler import passes  # noqa: F401


_SNAPSHOT_FIELDS = ("groups", "node_group", "kernels", "folded", "folded_nodes", "findings", "fusion_stats", "provenance",
                    "absorbed")


def _run_optional(info: PassInfo, ctx: CompileContext) -> PassResult:
    """Run an optimisation pass; if it raises, put back the graph and context it started from and log why."""
    snap_graph = ctx.graph.snapshot()
    snap = {f: copy.deepcopy(getattr(ctx, f)) for f in _SNAPSHOT_FIELDS}
    try:
        return info.fn(ctx)
    except Exception as exc:  # noqa: BLE001 - an optimisation must never fail the compile
        msg = " ".join(str(exc).split())[:300] or type(exc).__name__
        logging.getLogger("npuscope.compiler").warning("pass %s failed (%s: %s); compiling without it",
                                                        info.name, type(exc).__name__, msg)
        ctx.graph = Graph.restored(snap_graph)
        for f, v in snap.items():
            setattr(ctx, f, v)
        return PassResult(0, [f"FAILED ({type(exc).__name__}: {msg}); state restored, compiling without this pass"])


def compile_model(model: onnx.ModelProto, config: Config | None = None, *, input_shapes=None,
                  model_path: str = "", disabled: tuple[str, ...] = ()) -> CompileResult:
    """Run the pass list over a copy of ``model``.

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
    """
    _load_passes()
    from toolkit.compiler.passes.bind_shapes import bind_input_shapes, check_inference
    from toolkit.ir.load import normalise_node_names
    from toolkit.ir.proto_checks import densify_sparse_initializers

    config = config or Config()
    t0 = time.perf_counter()
    work = onnx.ModelProto()
    work.CopyFrom(model)
    # kernels look nodes up by name: a ModelProto built in memory (not through load_model) may have empty or
    # repeated node names, which would make different nodes collide; give them the loader's unique names
    normalise_node_names(work)
    densify_sparse_initializers(work, "model")  # as load_model does (onnxruntime runs sparse initializers dense)
    shapes = dict(config.input_shapes())
    shapes.update(input_shapes or {})
    declared = bind_input_shapes(work, shapes, check=False, where=config.where("input_shape"))
    from toolkit.cache import compile_cache  # the compile cache (docs/compile-cache.md); None when disabled

    cached = compile_cache.begin(work, config, disabled, model_path, t0)
    if cached is not None and cached.result is not None:
        # a hit: this bound model compiled before, so its shape-inference check passed then; a patch: it differs
        # from one that did only in Conv values and attributes that keep every shape (toolkit.cache.patch)
        return cached.result
    check_inference(work, declared, shapes)
    ops_before = len(work.graph.node)
    ctx = CompileContext(Graph(work), config, model_path)
    logs = _run_passes(ctx, config, PASS_ORDER, disabled)
    ctx.graph.sync()
    plan = ctx.plan
    plan.model = model_path
    result = CompileResult(plan, ctx.graph.model, logs, ctx.findings, ctx.fusion_stats,
                           (time.perf_counter() - t0) * 1e3, stage=ctx.stage)
    if cached is not None:
        cached.finish(result, ops_before)
    return result


#: config fields the passes before precision assignment read: a change to any of them needs a full compile
STRUCTURAL_FIELDS = ("fusion_level", "fusion_switch_file", "input_shape")
#: re-run by recompile_precision: placement (``op_placement`` is not structural) and everything after it
_PRECISION_PASSES = PASS_ORDER[PASS_ORDER.index("place_ops"):]


def recompile_precision(compiled: CompileResult, config: Config) -> CompileResult:
    """Re-run only the passes from ``place_ops`` on (placement, precision, casts, copies, constant checks,
    memory) with a new config, reusing the folded, fused and partitioned graph of ``compiled``. Used by stage
    triage, tuning and placement advice, where only precision or placement options (``op_placement``) change.

    Raises:
        ValueError: ``config`` differs from the compiled one in a structural field (STRUCTURAL_FIELDS).
    """
    import copy
    import dataclasses

    old = compiled.plan.config
    for f in STRUCTURAL_FIELDS:
        if old.get(f) != getattr(config, f):
            raise ValueError(f"config field {f} changed; compile again")
    base = compiled.stage
    t0 = time.perf_counter()
    ctx = dataclasses.replace(base, config=config, kernels=copy.deepcopy(base.kernels), plan=None,
                              findings=[f for f in base.findings], provided=set(base.provided))
    logs = _run_passes(ctx, config, _PRECISION_PASSES, ())
    plan = ctx.plan
    plan.model = compiled.plan.model
    prior = [p for p in compiled.passes if p.name not in _PRECISION_PASSES]
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


def _run_passes(ctx, config, names, disabled):
    logs = []
    for name in names:
        info = PASSES[name]
        before = len(ctx.graph.nodes)
        reason = ""
        if name in disabled:
            reason = "disabled"
        elif config.fusion_level < info.min_level:
            reason = f"fusion_level {config.fusion_level} < {info.min_level}"
        elif info.switch and not config.switch(*info.switch):
            reason = f"off in fusion switch file ({info.switch[1]})"
        missing = [r for r in info.requires if r not in ctx.provided]
        if not reason and missing:
            reason = f"requires {', '.join(missing)}"
        ts = time.perf_counter()
        if reason:
            res = PassResult()
        elif info.optional:
            res = _run_optional(info, ctx)
        else:
            res = info.fn(ctx)
        ctx.provided.update(info.provides)
        logs.append(PassLog(name, not reason, reason, before, len(ctx.graph.nodes), len(ctx.kernels),
                            res.changed, (time.perf_counter() - ts) * 1e3, res.log))
        _log_pass(logs[-1])
        if name == "partition":
            import copy
            import dataclasses

            ctx.stage = dataclasses.replace(ctx, kernels=copy.deepcopy(ctx.kernels), findings=list(ctx.findings),
                                            provided=set(ctx.provided), plan=None)
    return logs
