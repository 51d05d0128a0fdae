"""The graph-fusion rule registry: :class:`Rule`, the :func:`rule` decorator and :func:`load_rules` (the order
rules are tried in); see toolkit.compiler.rules."""

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


#: Registered rules, in registration order (which depends on which module was imported first: use
#: :func:`load_rules` for the order they are tried in).
RULES: list[Rule] = []

#: The built-in rule modules, in the order their rules are tried (attention before its parts, then
#: activations, then norms); rules registered from elsewhere (plugins, tests) come after them.
RULE_MODULES = ("attention", "activation", "norm")


def rule(name: str, anchors):
    """Decorator: register ``fn(graph, anchor)`` as a graph-fusion rule."""

    def deco(fn):
        RULES.append(Rule(name, frozenset(anchors), fn))
        return fn

    return deco


def load_rules() -> list[Rule]:
    """Every registered rule in the order graph_fusion tries them: the built-in modules in RULE_MODULES order,
    each module's rules in definition order, then any other rule in registration order. The order does not
    depend on which module happened to be imported first (it decides which of two overlapping matches wins,
    and it is part of the compile cache key)."""
    def rank(item):
        pos, r = item
        mod = getattr(r.match, "__module__", "").rsplit(".", 1)[-1]
        return (RULE_MODULES.index(mod) if mod in RULE_MODULES else len(RULE_MODULES), pos)

    return [r for _, r in sorted(enumerate(RULES), key=rank)]
