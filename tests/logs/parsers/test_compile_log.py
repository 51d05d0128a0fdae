"""The compile.log parser (toolkit/logs/parsers/compile_log.py): the documented format and a real compile log."""

from __future__ import annotations

from tests.logs.helpers import COMPILE_LOG
from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import compile_log, fusion_result


def test_compile_log_parser_on_the_documented_format(tmp_path):
    path = tmp_path / "compile.log"
    path.write_text(COMPILE_LOG)
    assert detect_format(path).parser.name == "compile_log"
    res = compile_log.parse(path)
    assert res.malformed == 2
    p = res.tables["compile_passes"]
    assert p["Pass"].tolist() == ["fold_batchnorm", "graph_fusion", "buffer_fusion", "optional_pass", "plan_memory"]
    assert p["OpsBefore"].tolist() == [29, 27, 27, 27, 27] and p["OpsAfter"].tolist() == [27] * 5
    assert p["Ran"].tolist() == [True, True, True, False, True] and p["Reason"].iloc[3] == "fusion level 0"
    assert p["Ms"].tolist() == [0.9, 4.0, 0.4, 0.0, 0.4]
    f = res.tables["fusion_decisions"]
    assert f["Kind"].tolist() == ["fold", "fold", "match", "refused", "match"]
    assert f["Op"].iloc[2] == "LayerNorm" and f["Nodes"].iloc[2] == "ln_mean, ln_sub, ln_pow"
    assert f["Nodes"].iloc[3] == "sig_1" and f["Rule"].iloc[4] == "TbeCubeElemwiseFusionPass"
    mem = res.tables["compile_memory"].iloc[0]
    assert (mem["Policy"], mem["ArenaBytes"], mem["Tensors"], mem["LowerBoundBytes"]) == ("aggressive", 98304, 15, 65536)
    assert {(x.kind, x.subject) for x in res.findings} == {("fusion_refused", "SwishFusionPass"),
                                                             ("compile_pass_failed", "plan_memory")}


def test_compile_log_parser_reads_a_real_compile_log(tmp_path):
    from toolkit import samples
    from toolkit.core.artifacts import write_compile_artifacts
    from toolkit.engine import compile_model

    compiled = compile_model(samples.sample("transformer_block").build())
    files = write_compile_artifacts(compiled, tmp_path)
    res = compile_log.parse(files["compile_log"])
    p = res.tables["compile_passes"]
    assert res.malformed == 0
    assert p["Pass"].tolist() == [x.name for x in compiled.passes]
    assert p["OpsBefore"].tolist() == [x.ops_before for x in compiled.passes]
    assert p["KernelsAfter"].tolist() == [x.kernels_after for x in compiled.passes]
    matches = res.tables["fusion_decisions"]
    n_fused = sum(v["effect_times"] for lvl in compiled.fusion_stats.values() for k, v in lvl.items()
                  if k != "ConvBatchnormFusionPass")
    assert int((matches["Kind"] == "match").sum()) == n_fused
    assert res.tables["compile_memory"]["ArenaBytes"].iloc[0] == compiled.plan.arena_bytes
    fr = fusion_result.parse(files["fusion_result"]).tables["fusion_counts"]
    assert sorted(fr["Pass"]) == sorted(k for lvl in compiled.fusion_stats.values() for k in lvl)


def test_a_compile_log_with_a_utf8_bom_keeps_its_first_pass(tmp_path):
    """Kind: a BOM before the first pass header: the header is read, not malformed."""
    first = COMPILE_LOG.splitlines()[0]
    path = tmp_path / "compile.log"
    path.write_bytes(b"\xef\xbb\xbf" + COMPILE_LOG.encode())
    assert detect_format(path).parser.name == "compile_log"
    res = compile_log.parse(path)
    assert res.tables["compile_passes"]["Pass"].iloc[0] == first[1:first.index("]")]
    assert res.malformed == 2  # the two bad lines COMPILE_LOG holds ("garbage between passes", the cut header)
