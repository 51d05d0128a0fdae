"""The compile pipeline as data (toolkit.compiler.stages): stage order, requires/provides, postconditions."""

from __future__ import annotations

import pytest

from toolkit import samples
from toolkit.compiler import pipeline, stages
from toolkit.compiler.context import CompileContext
from toolkit.compiler.registry import PASSES
from toolkit.config.schema import Config
from toolkit.ir.graph import Graph
from toolkit.ir.load import load_model

MODELS = ["resnet_small", "transformer_block", "detector_head"]


def test_every_requirement_is_provided_by_an_earlier_pass():
    provided: set[str] = set()
    for name in stages.PASS_ORDER:
        info = PASSES[name]
        assert set(info.requires) <= provided, (name, info.requires, provided)
        provided |= set(info.provides)


def test_every_registered_pass_is_staged_once():
    assert sorted(stages.PASS_ORDER) == sorted(set(stages.PASS_ORDER))
    assert set(stages.PASS_ORDER) == {n for n in PASSES if n in stages.PASS_ORDER}
    assert stages.PASS_ORDER == stages.STRUCTURE + stages.PRECISION


def test_a_requirement_no_earlier_pass_provides_is_an_error(monkeypatch):
    model = load_model(samples.sample_path("resnet_small"))
    monkeypatch.setattr(stages, "STRUCTURE", tuple(n for n in stages.STRUCTURE if n != "infer_shapes"))
    with pytest.raises(pipeline.PipelineError, match="requires shapes"):
        pipeline.compile_model(model, Config(op_compiler_cache_mode="disable"))


@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("fusion_level", [0, 2])
def test_each_pass_ensures_what_it_declares(model_name, fusion_level):
    config = Config(fusion_level=fusion_level, op_compiler_cache_mode="disable")
    bound = pipeline.bind(load_model(samples.sample_path(model_name)), config)
    ctx = CompileContext(Graph(bound.model), config)
    checked = 0
    for stage in (stages.STRUCTURE, stages.PRECISION):
        for name in stage:
            pipeline._run_stage(ctx, config, (name,), ())
            for what, holds in PASSES[name].ensures:
                assert holds(ctx), f"{name}: {what}"
                checked += 1
    assert checked >= 3


@pytest.mark.parametrize("model_name", MODELS)
def test_a_precision_recompile_starts_from_the_partition_snapshot(model_name):
    model = load_model(samples.sample_path(model_name))
    base = pipeline.compile_model(model, Config(precision_mode="force_fp16", op_compiler_cache_mode="disable"))
    fp32 = pipeline.recompile_precision(base, Config(precision_mode="force_fp32", op_compiler_cache_mode="disable"))
    full = pipeline.compile_model(model, Config(precision_mode="force_fp32", op_compiler_cache_mode="disable"))
    assert fp32.stage is base.stage
    assert [k.nodes for k in fp32.plan.kernels] == [k.nodes for k in full.plan.kernels]
    assert [k.precision for k in fp32.plan.kernels] == [k.precision for k in full.plan.kernels]
    assert {k.precision for k in fp32.plan.kernels} == {"fp32"}
    assert [p.name for p in fp32.passes] == list(stages.PASS_ORDER)
