"""--nodes / --layers / --until / --outputs-only (toolkit.compare.subset): what is kept and what is left out."""

from __future__ import annotations

import pytest

from tests.graphs import LAYERS, layered_model
from toolkit.compare.subset import Subset, layer_of, select
from toolkit.core.errors import ConfigError


def outs_of(model, names):
    return {o for n in model.graph.node if n.name in names for o in n.output}


@pytest.mark.parametrize("name,layer", [("/model/layers.3/self_attn/MatMul", 3), ("/bert/encoder/layer.11/Add", 11),
                                        ("/h.0/attn/Softmax", 0), ("blocks_2/conv", 2), ("/layers.1/mlp.0/Mul", 1),
                                        ("/shortcut/Add", None), ("/layers3/Add", None)])
def test_layer_index_of_exporter_names(name, layer):
    assert layer_of(name) == layer


@pytest.mark.parametrize("spec,want", [("0", {0}), ("1-2", {1, 2}), ("0,3", {0, 3}), ("0-3", {0, 1, 2, 3}),
                                       ("2-2,0", {0, 2})])
@pytest.mark.parametrize("style", ["/layers.{i}/", "/encoder/layer.{i}/", "/h.{i}/"])
def test_layers_keep_their_nodes_and_the_outputs(spec, want, style):
    m = layered_model(style=style)
    got = select(m, Subset(layers=spec))
    names = {n.name for n in m.graph.node if layer_of(n.name) in want}
    assert got["nodes"] == names
    assert got["tensors"] == outs_of(m, names) | {"x", "out"}
    # left out: the nodes none of whose outputs is compared (the graph output's node is compared)
    assert got["left_out_nodes"] == sum(1 for n in m.graph.node if not set(n.output) & got["tensors"])
    assert got["left_out_nodes"] == len(m.graph.node) - len(names) - ("final" not in names)
    all_outs = {o for n in m.graph.node for o in n.output}
    assert got["left_out_tensors"] == len(all_outs - got["tensors"])


@pytest.mark.parametrize("spec,want", [("*/Relu", [f"/layers.{i}/Relu" for i in range(LAYERS)]),
                                       ("final", ["final"]), ("0-2", ["/layers.0/MatMul", "/layers.0/Add", "/layers.0/Relu"]),
                                       ("4", ["/layers.1/Add"]), ("/layers.1/*,final", ["/layers.1/MatMul", "/layers.1/Add",
                                                                                          "/layers.1/Relu", "final"])])
def test_nodes_by_name_pattern_and_index_range(spec, want):
    m = layered_model()
    assert select(m, Subset(nodes=spec))["nodes"] == set(want)


@pytest.mark.parametrize("k", [0, 4, 12])
def test_until_keeps_the_node_and_those_before_it(k):
    m = layered_model()
    names = [n.name for n in m.graph.node]
    for target in (names[k], m.graph.node[k].output[0]):  # a node name or the tensor it produces
        assert select(m, Subset(until=target))["nodes"] == set(names[:k + 1])


def test_options_narrow_together():
    m = layered_model()
    got = select(m, Subset(layers="0-2", nodes="*/Relu", until="/layers.1/Relu"))
    assert got["nodes"] == {"/layers.0/Relu", "/layers.1/Relu"}


def test_outputs_only_keeps_the_graph_outputs():
    m = layered_model()
    got = select(m, Subset(outputs_only=True))
    assert got["tensors"] == {"x", "out"}
    assert got["nodes"] == {"final"}


@pytest.mark.parametrize("kw,msg", [({"nodes": "/layers.9/Add"}, "matches no node"),
                                    ({"nodes": "/layers.1/Ad"}, "did you mean '/layers.1/Add'"),
                                    ({"layers": "1-x"}, "not an index or an inclusive range"),
                                    ({"layers": "3-1"}, "ends before it starts"),
                                    ({"until": "nowhere"}, "names no node or tensor"),
                                    ({"layers": "0", "nodes": "/layers.2/*"}, "keeps no node")])
def test_bad_selections_are_one_line_errors(kw, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        select(layered_model(), Subset(**kw))
    assert "\n" not in str(e.value)


def test_layers_on_a_model_without_layer_names():
    with pytest.raises(ConfigError, match="no node name of the model carries a layer index"):
        select(layered_model(style="blk{i}_"), Subset(layers="0"))


@pytest.mark.parametrize("option", ["nodes", "layers", "until"])
@pytest.mark.parametrize("empty", ["", " ", ",", " , ,"])
def test_an_option_that_names_nothing_is_refused_not_read_as_everything(option, empty):
    from toolkit.compare.subset import check_options

    with pytest.raises(ConfigError, match=f"--{option} .* names nothing") as e:
        check_options(Subset(**{option: empty}))
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="names nothing"):
        select(layered_model(), Subset(**{option: empty}))


@pytest.mark.parametrize("kw", [{"nodes": "*/Relu"}, {"layers": "0"}, {"until": "/layers.1/Relu"},
                                {"nodes": "*", "layers": "0-1"}])
def test_outputs_only_with_another_selection_is_refused_not_half_ignored(kw):
    with pytest.raises(ConfigError, match="--outputs-only .* would be ignored") as e:
        select(layered_model(), Subset(outputs_only=True, **kw))
    for option in kw:
        assert f"--{option}" in str(e.value)


def test_until_a_graph_input_says_it_is_one():
    m = layered_model()
    with pytest.raises(ConfigError, match="'x' is a graph input"):
        select(m, Subset(until=m.graph.input[0].name))


@pytest.mark.parametrize("dup,other", [(0, 2), (4, 9), (1, -1)])
def test_until_a_name_the_file_gives_several_nodes_is_ambiguous(tmp_path, dup, other):
    """Nodes the file names alike are loaded as 'n', 'n__2', ...: --until 'n' could mean any of them, so it is
    refused naming each; the loaded names and the tensors still select one node."""
    import onnx

    from toolkit.ir.load import load_model

    m = layered_model()
    names = [n.name for n in m.graph.node]
    other = other % len(names)
    twin = names[other]
    m.graph.node[dup].name = twin  # two nodes of the file called `twin`: the earlier one keeps the name
    onnx.save(m, tmp_path / "dup.onnx")
    loaded = load_model(tmp_path / "dup.onnx")
    with pytest.raises(ConfigError, match="ambiguous") as e:
        select(loaded, Subset(until=twin))
    assert f"'{twin}__2'" in str(e.value) and "\n" not in str(e.value)
    loaded_names = [n.name for n in loaded.graph.node]
    assert loaded_names[dup] == twin and loaded_names[other] == f"{twin}__2"
    for target, k in ((f"{twin}__2", other), (loaded.graph.node[dup].output[0], dup),
                      (loaded.graph.node[other].output[0], other)):
        assert select(loaded, Subset(until=target))["nodes"] == set(loaded_names[:k + 1])
    unique = load_model(_saved(tmp_path, layered_model()))  # no renaming: a name is never ambiguous
    assert select(unique, Subset(until=names[dup]))["nodes"] == set(names[:dup + 1])


def _saved(tmp_path, model):
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("kind", ["If", "Loop"])
@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("item", ["inner_add", "inner_*", "cf_0"])
def test_nodes_naming_a_node_inside_a_control_flow_body_select_the_node_that_holds_it(kind, depth, item):
    """Its tensors exist only inside the body: what both runs have is the top-level node's output."""
    from tests.graphs import nested_control_flow

    model = nested_control_flow(depth, kind)
    top = f"cf_{depth - 1}"
    if item == "cf_0" and depth == 1:
        item = top  # cf_0 is the top-level node itself
    kept = select(model, Subset(nodes=item))
    assert kept["nodes"] == {top}
    assert set(next(n for n in model.graph.node if n.name == top).output) <= kept["tensors"]
    with pytest.raises(ConfigError, match="matches no node"):
        select(model, Subset(nodes="nowhere_at_all"))
