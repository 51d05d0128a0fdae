"""Graph-fusion rules: each is pattern + check + rewrite, registered by name (the converter's pass names).

A rule's ``match(graph, anchor) -> Match | Refused | None`` looks at one anchor node: ``None`` means the
pattern is not there; :class:`Refused` means the pattern is there but the check failed (with the reason and
the nodes involved); :class:`Match` lists the nodes to fuse. The rewrite is the same for every rule: the
matched nodes become one kernel whose intermediates stay in FP32 on chip; the kernel records the rule name
and the original node names (provenance). The math inside the kernel is the original nodes', so a fusion
changes only where rounding happens, never the formula.
"""

from toolkit.compiler.rules import activation, attention, norm
from toolkit.compiler.rules.registry import (
    RULE_MODULES,
    RULES,
    Match,
    Refused,
    Rule,
    load_rules,
    rule,
)

#: The built-in rule modules (imported here so their rules are registered).
BUILT_IN = (activation, attention, norm)
__all__ = ["BUILT_IN", "RULE_MODULES", "RULES", "Match", "Refused", "Rule", "load_rules", "rule"]
