"""The fusion_result.json parser (toolkit/logs/parsers/fusion_result.py): bad entries counted."""

from __future__ import annotations

import json

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
