"""Graph helpers (toolkit/ir/graph.py): which top-level node holds a node of an If/Loop/Scan body."""

import onnx
import pytest

from tests.graphs import nested_control_flow
from toolkit.ir.graph import enclosing_nodes


def _walk(g: onnx.GraphProto, top: str | None, out: dict) -> None:
    """Independent recursive walk: every named node below a top-level node maps to it."""
    for n in g.node:
        holder = top or n.name
        if top is not None and n.name:
            out.setdefault(n.name, holder)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _walk(sub, holder, out)


@pytest.mark.parametrize("kind", ["If", "Loop"])
@pytest.mark.parametrize("depth", [1, 2, 4])
def test_every_node_inside_a_body_at_any_depth_maps_to_its_top_level_node(kind, depth):
    model = nested_control_flow(depth, kind)
    expected: dict = {}
    _walk(model.graph, None, expected)
    found = enclosing_nodes(model.graph)
    assert found == expected
    top = f"cf_{depth - 1}"
    assert found["inner_mul"] == found["inner_add"] == top
    assert all(found[f"cf_{i}"] == top for i in range(depth - 1))
    assert not set(found) & {n.name for n in model.graph.node}  # top-level nodes are not inner nodes


def test_a_graph_without_control_flow_has_no_inner_nodes():
    model = nested_control_flow(1, "If")
    model.graph.ClearField("node")
    assert enclosing_nodes(model.graph) == {}
