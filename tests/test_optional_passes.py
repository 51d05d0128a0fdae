"""Fault kind: an optimisation pass (PassInfo.optional) raises after it has already changed the graph and the
compile context. The compile must go on from the state before that pass, exactly as if the pass had been
disabled, and say so in the pass log; every optional pass, on models where each one has work to do."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from toolkit.compiler import pipeline
from toolkit.config.schema import Config
from toolkit.runtime.npu import NpuRuntime

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"
OPTIONAL = [name for name in pipeline.PASS_ORDER
            if (pipeline._load_passes() or True) and pipeline.PASSES[name].optional]


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 2 for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        out[i.name] = (rng.random(shape) if dtype.kind == "f" else rng.integers(0, 2, shape)).astype(dtype)
    return out


def _plan(cr) -> dict:
    d = cr.plan.to_dict()
    d.pop("config", None)
    return d


def test_every_optimisation_pass_is_covered():
    assert set(OPTIONAL) >= {"fold_constants", "fold_batchnorm", "graph_fusion", "buffer_fusion"}


@pytest.mark.parametrize("sample", ["resnet_small", "transformer_block"])
@pytest.mark.parametrize("name", OPTIONAL)
def test_failing_optimisation_pass_leaves_the_compile_as_if_disabled(monkeypatch, sample, name):
    model = onnx.load(str(SAMPLES / f"{sample}.onnx"))
    feeds = _feeds(model)
    shapes = {k: v.shape for k, v in feeds.items()}
    cfg = Config(precision_mode="force_fp32", op_compiler_cache_mode="disable")
    ref = pipeline.compile_model(model, cfg, input_shapes=shapes, disabled=(name,))

    info = pipeline.PASSES[name]

    def runs_then_raises(ctx):
        res = info.fn(ctx)  # the real pass changes the graph and the context ...
        ctx.graph.nodes.reverse()  # ... and more damage, so that a half-restored state shows
        ctx.graph.consts.clear()
        ctx.findings.append(pipeline.Finding("error", "bogus", "x", {}, ""))
        raise ValueError(f"planted failure after {res.changed} change(s)")

    monkeypatch.setitem(pipeline.PASSES, name, dataclasses.replace(info, fn=runs_then_raises))
    got = pipeline.compile_model(model, cfg, input_shapes=shapes)
    log = {p.name: p for p in got.passes}[name]
    assert log.log and log.log[0].startswith("FAILED (ValueError: planted failure")
    assert _plan(got) == _plan(ref)
    assert [f.to_dict() for f in got.findings] == [f.to_dict() for f in ref.findings]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    outs = NpuRuntime(got).run(feeds).outputs
    for o, w in zip(model.graph.output, want):
        np.testing.assert_allclose(outs[o.name], w, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(w).max())))
