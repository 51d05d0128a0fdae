"""The fusion_result.json parser (toolkit/logs/parsers/fusion_result.py): bad entries counted."""

from __future__ import annotations

import json

import pytest

from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import fusion_result


# ----------------------------------------------------------------------------------------- fusion_result.json
def test_fusion_result_parser_counts_bad_entries(tmp_path):
    data = {"session_and_graph_id_0_0": {
        "graph_fusion": {"AConv2dMulFusion": {"match_times": "3", "effect_times": "1"},
                         "BadCount": {"match_times": "x", "effect_times": "1"}},
        "ub_fusion": {"TbeCubeElemwiseFusionPass": {"match_times": 7, "effect_times": 7}, "NotADict": 5}}}
    path = tmp_path / "fusion_result.json"
    path.write_text(json.dumps(data, indent=4))
    assert detect_format(path).parser.name == "fusion_result"
    res = fusion_result.parse(path)
    t = res.tables["fusion_counts"]
    assert res.malformed == 2 and t["Pass"].tolist() == ["AConv2dMulFusion", "TbeCubeElemwiseFusionPass"]
    assert t["MatchTimes"].tolist() == [3, 7] and t["EffectTimes"].tolist() == [1, 7]
    assert [(f.kind, f.subject) for f in res.findings] == [("fusion_not_applied", "AConv2dMulFusion")]
    path.write_text(json.dumps(data)[:60])                   # truncated
    res = fusion_result.parse(path)
    assert res.malformed == 1 and res.records == 0


def _graph(gid: str, hits=None) -> dict:
    entry = {"match_times": "2", "effect_times": "2"}
    if hits is not None:
        entry["repository_hit_times"] = hits
    return {f"session_and_graph_id_{gid}": {"graph_fusion": {"ConvBatchnormFusionPass": entry},
                                            "ub_fusion": {"TbeConvBnreluFusionPass": dict(entry)}}}


def test_appended_objects_and_repository_hit_times(tmp_path):
    """Older toolchains append one object per graph with no separator; newer ones count repository hits."""
    path = tmp_path / "fusion_result.json"
    path.write_text(json.dumps(_graph("0_0", "1")) + json.dumps(_graph("0_1")) + "\n" + json.dumps(_graph("1_0", 0)))
    assert detect_format(path).parser.name == "fusion_result"
    res = fusion_result.parse(path)
    t = res.tables["fusion_counts"]
    assert res.records == 3 + 6 and res.malformed == 0  # records: 3 graph entries and their 6 pass counts
    assert t["Graph"].tolist() == ["session_and_graph_id_0_0"] * 2 + ["session_and_graph_id_0_1"] * 2 + \
        ["session_and_graph_id_1_0"] * 2
    assert t["RepositoryHitTimes"].tolist()[:2] == [1, 1] and t["RepositoryHitTimes"].isna().tolist()[2:4] == [True] * 2
    assert t["RepositoryHitTimes"].tolist()[4:] == [0, 0]


@pytest.mark.parametrize("tail,malformed", [("{\"broken", 1), ("", 0)])
def test_an_appended_file_cut_short_keeps_the_whole_objects(tmp_path, tail, malformed):
    path = tmp_path / "fusion_result.json"
    path.write_text(json.dumps(_graph("0_0")) + tail)
    res = fusion_result.parse(path)
    assert res.records == 1 + 2 and res.malformed == malformed  # one graph entry, two pass counts


def test_a_bad_repository_hit_count_is_malformed(tmp_path):
    path = tmp_path / "fusion_result.json"
    path.write_text(json.dumps(_graph("0_0", "many")))
    assert fusion_result.parse(path).malformed == 2


def test_our_fusion_result_uses_the_converters_keys(tmp_path):
    from toolkit import samples
    from toolkit.config.schema import Config
    from toolkit.engine import compile_model

    import onnx

    compiled = compile_model(onnx.load(str(samples.sample_path("resnet_small"))), Config())
    fr = compiled.fusion_result_json()
    assert list(fr) == ["session_and_graph_id_0_0"]
    entries = [e for level in fr["session_and_graph_id_0_0"].values() for e in level.values()]
    assert entries and all(set(e) == {"match_times", "effect_times"} and
                           all(isinstance(v, str) for v in e.values()) for e in entries)
    path = tmp_path / "fusion_result.json"
    path.write_text(json.dumps(fr))
    assert fusion_result.parse(path).records == len(fr) + len(entries)  # graph entries and pass counts


# ------------------------------------------------------------------------------------------- no fusion at all
def test_a_fusion_result_without_fusions_counts_its_graphs(tmp_path):
    """Kind: graphs whose graph_fusion and ub_fusion are empty (a model no pass matched) are a valid file: each
    graph is a record and a note says no fusion pass fired."""
    graphs = {f"session_and_graph_id_0_{i}": {"graph_fusion": {}, "ub_fusion": {}} for i in range(2)}
    path = tmp_path / "fusion_result.json"
    path.write_text(json.dumps(graphs, indent=1))
    assert detect_format(path).parser.name == "fusion_result"
    res = fusion_result.parse(path)
    assert (res.records, res.malformed) == (len(graphs), 0) and res.tables["fusion_counts"].empty
    assert res.notes[0] == f"0 fusion pass count(s) in {len(graphs)} graph(s)"
    assert any(n.startswith("no fusion pass fired") for n in res.notes)


def test_our_fusion_result_of_a_model_without_fusions_is_read(tmp_path):
    """npuscope's own fusion_result.json for a single Relu: one graph, no pass count."""
    import onnx
    from onnx import TensorProto, helper

    from toolkit.config.schema import Config
    from toolkit.engine import compile_model

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fr = compile_model(model, Config()).fusion_result_json()
    path = tmp_path / "fusion_result.json"
    path.write_text(json.dumps(fr))
    res = fusion_result.parse(path)
    assert res.records == len(fr) == 1 and res.malformed == 0
    assert res.notes[0] == "0 fusion pass count(s) in 1 graph(s)"


def test_a_fusion_result_with_a_bom_is_read(tmp_path):
    data = _graph("0_0")
    path = tmp_path / "fusion_result.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(data).encode())
    assert detect_format(path).parser.name == "fusion_result"
    assert fusion_result.parse(path).tables["fusion_counts"]["Pass"].tolist() == \
        [p for level in data["session_and_graph_id_0_0"].values() for p in level]
