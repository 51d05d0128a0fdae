"""The part of a model around a set of nodes: producers and consumers a few hops out, and the path on to the
graph outputs. What the report's graph view draws (toolkit.report.graph).

:func:`neighbourhood` returns the edges as a DataFrame with columns Src, Dst (node names; a graph output is the
pseudo-node ``output:<name>``, a run of path nodes left out is ``… N nodes …``) and Tensor (the tensor on the
edge; "" for an elided run). Nodes are named by NodeProto.name, as the per-tensor table's NodeName column; an
unnamed node by its first output.
"""

from __future__ import annotations

from collections import deque

import onnx
import pandas as pd

#: Hops out from the centre nodes (producers and consumers) by default.
HOPS = 2
#: Most nodes the path from the centre to one graph output keeps; a longer path keeps its first
#: PATH_HEAD and last PATH_TAIL nodes with one ``… N nodes …`` pseudo-node between.
PATH_KEEP, PATH_HEAD, PATH_TAIL = 14, 8, 4
#: Most nodes of the neighbourhood itself (nearest first) before the paths are added.
MAX_AROUND = 60
COLUMNS = ["Src", "Dst", "Tensor"]


def node_name(node: onnx.NodeProto) -> str:
    """A node's display name: NodeProto.name, else its first output's name."""
    return node.name or next((o for o in node.output if o), node.op_type)


def _index(graph: onnx.GraphProto):
    producer, consumers = {}, {}
    for node in graph.node:
        name = node_name(node)
        for o in node.output:
            if o:
                producer[o] = name
        for i in node.input:
            if i:
                consumers.setdefault(i, []).append(name)
    succ, pred = {}, {}
    for tensor, dsts in consumers.items():
        src = producer.get(tensor)
        if src is None:
            continue
        for dst in dsts:
            succ.setdefault(src, {})[dst] = tensor
            pred.setdefault(dst, {})[src] = tensor
    return producer, succ, pred


def _around(centre: list[str], succ: dict, pred: dict, hops: int, limit: int) -> list[str]:
    """Nodes within ``hops`` of ``centre`` either way, nearest first, at most ``limit`` (centre always in)."""
    seen = list(dict.fromkeys(centre))
    queue = deque((c, 0) for c in seen)
    while queue and len(seen) < limit:
        node, d = queue.popleft()
        if d >= hops:
            continue
        for nxt in list(pred.get(node, {})) + list(succ.get(node, {})):
            if nxt not in seen:
                seen.append(nxt)
                queue.append((nxt, d + 1))
                if len(seen) >= limit:
                    break
    return seen


def _path(start: list[str], goal: str, succ: dict) -> list[str] | None:
    """A shortest forward path from any of ``start`` to ``goal`` (node names, ends included), None if none."""
    back = {s: None for s in start}
    queue = deque(start)
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while back[path[-1]] is not None:
                path.append(back[path[-1]])
            return path[::-1]
        for nxt in succ.get(node, {}):
            if nxt not in back:
                back[nxt] = node
                queue.append(nxt)
    return None


def neighbourhood(model: onnx.ModelProto, centre: list[str], hops: int = HOPS) -> pd.DataFrame:
    """Edges (:data:`COLUMNS`) of the subgraph around the ``centre`` node names: every node within ``hops``
    producer/consumer steps (at most :data:`MAX_AROUND`, nearest first) and a shortest path from the centre to
    each graph output (long paths elided in the middle, see :data:`PATH_KEEP`), ending at ``output:<name>``.

    Empty (with the columns) when ``centre`` names no node of the main graph. Subgraph bodies (If/Loop) are
    not entered. Raises nothing on a well-formed ModelProto.
    """
    graph = model.graph
    names = {node_name(n) for n in graph.node}
    centre = [c for c in dict.fromkeys(centre) if c in names]
    if not centre:
        return pd.DataFrame(columns=COLUMNS)
    producer, succ, pred = _index(graph)
    keep = set(_around(centre, succ, pred, hops, MAX_AROUND))
    edges = {(s, d): t for s in keep for d, t in succ.get(s, {}).items() if d in keep}
    for out in graph.output:
        src = producer.get(out.name)
        if src is None:
            continue
        path = _path(centre, src, succ)
        if path is None:
            continue
        sink = f"output:{out.name}"
        if len(path) > PATH_KEEP:
            head, tail = path[:PATH_HEAD], path[-PATH_TAIL:]
            gap = f"… {len(path) - PATH_HEAD - PATH_TAIL} nodes …"
            chain = [(a, b, succ[a][b]) for a, b in zip(head, head[1:])]
            chain += [(head[-1], gap, ""), (gap, tail[0], "")]
            chain += [(a, b, succ[a][b]) for a, b in zip(tail, tail[1:])]
        else:
            chain = [(a, b, succ[a][b]) for a, b in zip(path, path[1:])]
        chain.append((path[-1], sink, out.name))
        for a, b, t in chain:
            edges.setdefault((a, b), t)
    return pd.DataFrame([{"Src": s, "Dst": d, "Tensor": t} for (s, d), t in edges.items()], columns=COLUMNS)
