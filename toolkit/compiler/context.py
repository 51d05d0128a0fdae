"""What one compile works on and gives back: the pass context (:class:`CompileContext`), a fusion group
(:class:`Group`), a pass's own result (:class:`PassResult`) and the compile's result (:class:`CompileResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from toolkit.compiler.plan import KernelSpec, Plan
from toolkit.config.schema import Config
from toolkit.core.records import CacheRecord, Finding, PassLog
from toolkit.ir.graph import Graph


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
    #: facts about nodes of the partitioned graph that precision-stage passes cache, keyed (pass, node name); the
    #: graph no longer changes after partition, and recompile_precision's contexts share this dict with the
    #: compile's, so its re-runs do not work them out again
    memo: dict = field(default_factory=dict)

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
class CompileResult:
    plan: Plan
    #: the compiled graph (folded, BN-folded), ONNX names kept; read-only: the compile cache serialises it on
    #: its writer thread after compile_model returns (copy it before changing it)
    model: onnx.ModelProto
    passes: list[PassLog]
    findings: list[Finding]
    fusion_stats: dict
    compile_ms: float
    #: the compile state after the structure stage (kernels before precision): the input of
    #: :func:`toolkit.compiler.pipeline.recompile_precision`
    stage: "CompileContext | None" = None
    #: the compile cache's record (toolkit.cache.compile_cache): key, status hit/miss/patched, kernel hit and
    #: miss counts, log lines; None when the cache is disabled
    cache: CacheRecord | None = None

    def fusion_result_json(self, graph_id: str = "0_0") -> dict:
        """fusion_result.json in the converter's format: keyed ``session_and_graph_id_<session>_<graph>`` as the
        converter writes it, counts as strings (no ``repository_hit_times``: we have no fusion repository)."""
        def fmt(level):
            return {k: {"match_times": str(v["match_times"]), "effect_times": str(v["effect_times"])}
                    for k, v in self.fusion_stats[level].items()}
        return {f"session_and_graph_id_{graph_id}": {"graph_fusion": fmt("graph_fusion"), "ub_fusion": fmt("ub_fusion")}}

    def log_lines(self) -> list[str]:
        lines = []
        for p in self.passes:
            state = f"ran, {p.changed} change(s)" if p.ran else f"skipped ({p.reason})"
            lines.append(f"[{p.name}] {state}; ops {p.ops_before} -> {p.ops_after}; kernels {p.kernels_after}; {p.ms:.1f} ms")
            lines.extend(f"    {ln}" for ln in p.log)
        return lines
