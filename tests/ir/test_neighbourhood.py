"""toolkit.ir.neighbourhood: the edges around centre nodes, the shortest path to every graph output, long paths
elided in the middle, and nothing for a name the model does not have."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from toolkit.ir import neighbourhood as nb


def chain(n: int, branch: bool = False) -> onnx.ModelProto:
    """x -> r0 -> r1 -> ... -> r{n-1} = y (Relu chain); with ``branch`` also r0 -> s (Sigmoid) -> z."""
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}" if i < n - 1 else "y"], name=f"r{i}")
             for i in range(n)]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]
    if branch:
        nodes.append(helper.make_node("Sigmoid", ["t0"], ["z"], name="s"))
        outs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2]))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def edges(df) -> set[tuple[str, str, str]]:
    return set(map(tuple, df[nb.COLUMNS].to_numpy().tolist()))


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_hops_out_both_ways_and_the_path_to_the_output(hops):
    m = chain(9)
    got = edges(nb.neighbourhood(m, ["r4"], hops=hops))
    around = {(f"r{i}", f"r{i + 1}", f"t{i}") for i in range(4 - hops, 4 + hops)}
    path = {(f"r{i}", f"r{i + 1}", f"t{i}") for i in range(4, 8)} | {("r8", "output:y", "y")}
    assert got == around | path


def test_every_output_gets_its_path():
    got = edges(nb.neighbourhood(chain(3, branch=True), ["r0"], hops=1))
    assert ("s", "output:z", "z") in got and ("r2", "output:y", "y") in got and ("r0", "s", "t0") in got


@pytest.mark.parametrize("n", [nb.PATH_KEEP + 1, 40, 200])
def test_a_long_path_is_elided_in_the_middle(n):
    got = edges(nb.neighbourhood(chain(n), ["r0"], hops=0))
    gap = f"… {n - nb.PATH_HEAD - nb.PATH_TAIL} nodes …"
    assert (f"r{nb.PATH_HEAD - 1}", gap, "") in got and (gap, f"r{n - nb.PATH_TAIL}", "") in got
    assert len(got) == (nb.PATH_HEAD - 1) + 2 + (nb.PATH_TAIL - 1) + 1  # head, the gap's two, tail, the output


def test_unknown_centre_is_empty_with_the_columns():
    df = nb.neighbourhood(chain(3), ["not_there"])
    assert df.empty and list(df.columns) == nb.COLUMNS
