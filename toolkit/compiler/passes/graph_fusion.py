"""Pass ``graph_fusion``: apply the registered graph-fusion rules (toolkit.compiler.rules) at fusion level 2.

Each rule can be switched off by name in the fusion switch file (GraphFusion section); entries for converter
passes npuscope does not simulate are logged here as warnings (toolkit.compiler.fusion_switch). Nodes already in a
group are not matched again. Every match attempt is counted (match_times) and every applied fusion too
(effect_times); refusals are logged with their reason.
"""

from __future__ import annotations

from toolkit.compiler import fusion_switch
from toolkit.compiler.context import Group, PassResult
from toolkit.compiler.registry import register_pass
from toolkit.compiler.rules import Match, Refused, load_rules


@register_pass("graph_fusion", requires=("shapes",), min_level=2, optional=True)
def run(ctx) -> PassResult:
    g = ctx.graph
    # converter passes the switch file names that npuscope does not simulate: logged and reported, not errors
    log, found = fusion_switch.findings(ctx.config)
    ctx.findings += found
    changed = 0
    for rule in load_rules():
        if not ctx.config.switch("GraphFusion", rule.name):
            log.append(f"{rule.name}: off in fusion switch file")
            continue
        for node in list(g.nodes):
            if node.op_type not in rule.anchors or node.name in ctx.node_group:
                continue
            res = rule.match(g, node)
            if res is None:
                continue
            if isinstance(res, Match) and any(n.name in ctx.node_group for n in res.nodes):
                res = Refused("overlaps an earlier fusion", res.nodes)
            ctx.count_fusion("graph_fusion", rule.name, True, isinstance(res, Match))
            if isinstance(res, Refused):
                log.append(f"{rule.name} refused at {node.name}: {res.reason} "
                           f"[{', '.join(n.name for n in res.nodes)}]")
                continue
            names = [n.name for n in res.nodes]
            ctx.add_group(Group(names[0], res.op_type, rule.name, "graph", names))
            changed += 1
            log.append(f"{rule.name}: {res.op_type} <- {', '.join(names)}")
    return PassResult(changed, log)
