"""Graph-fusion rules: each is pattern + check + rewrite, registered by name (the converter's pass names).

A rule's ``match(graph, anchor) -> Match | Refused | None`` looks at one anchor node: ``None`` means the
pattern is not there; :class:`Refused` means the pattern is there but the check failed (with the reason and
the nodes involved); :class:`Match` lists the nodes to fuse. The rewrite is the same for every rule: the
matched nodes become one kernel whose intermediates stay in FP32 on chip; the kernel records the rule name
and the original node names (provenance). The math inside the kernel is the original nodes', so a fusion
changes only where rounding happens, never the formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Match:
    nodes: list  # NodeProto, in graph order
    op_type: str  # the fused op's name, e.g. "LayerNorm"
    detail: str = ""


@dataclass
class Refused:
    reason: str
    nodes: list = field(default_factory=list)


@dataclass
class Rule:
    name: str  # converter-style pass name, used in fusion_result.json and the fusion switch file
    anchors: frozenset  # op types that can start a match
    match: Callable  # (Graph, NodeProto) -> Match | Refused | None
    level: str = "GraphFusion"


#: Registered rules, in the order they are tried.
RULES: list[Rule] = []


def rule(name: str, anchors):
    """Decorator: register ``fn(graph, anchor)`` as a graph-fusion rule."""

    def deco(fn):
        RULES.append(Rule(name, frozenset(anchors), fn))
        return fn

    return deco


def load_rules() -> list[Rule]:
    from toolkit.compiler.rules import attention, activation, norm  # noqa: F401  (registration order)

    return RULES
