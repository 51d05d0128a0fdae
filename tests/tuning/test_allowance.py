"""The |fp16 allowance of tune's default target (toolkit/tuning/allowance.py): rounding depth of a plan's
outputs, and what the depth-scaled allowance keeps in FP32 on deep networks with and without a fault."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.config.schema import Config
from toolkit.engine import compile_model
from toolkit.tuning.allowance import FP16_ROUNDING, fp16_allowance, rounding_depths
from toolkit.tuning.tune import tune


def _chain(depth: int, *, width: int = 64, scale: float = 30.0, culprit: int | None = None, reshape: bool = False,
           branches: int = 1, seed: int = 0):
    """x[4, width] → ``depth`` MatMuls 'mm{i}' with orthogonal weights (values stay ~``scale``); ``culprit``:
    that layer's weights scaled by 1e-5 (~1.2e-6: FP16 subnormals, spaced 6e-8) and the next one's by 1e5;
    ``reshape``: a Reshape round trip (data movement) after every MatMul; ``branches`` > 1: a second chain of
    ``depth // 2`` MatMuls from x, added to the first at the end (the longest path decides)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def layer(prev: str, name: str, s: float) -> str:
        q, _ = np.linalg.qr(rng.standard_normal((width, width)))
        inits.append(numpy_helper.from_array((q * s).astype(np.float32), f"W_{name}"))
        nodes.append(helper.make_node("MatMul", [prev, f"W_{name}"], [f"h_{name}"], name=name))
        out = f"h_{name}"
        if reshape:
            nodes.append(helper.make_node("Reshape", [out, "flat"], [f"f_{name}"], name=f"rs1_{name}"))
            nodes.append(helper.make_node("Reshape", [f"f_{name}", "back"], [f"b_{name}"], name=f"rs2_{name}"))
            out = f"b_{name}"
        return out

    prev = "x"
    for i in range(depth):
        s = 1e-5 if i == culprit else (1e5 if culprit is not None and i == culprit + 1 else 1.0)
        prev = layer(prev, f"mm{i}", s)
    if branches > 1:
        other = "x"
        for i in range(depth // 2):
            other = layer(other, f"side{i}", 1.0)
        nodes.append(helper.make_node("Add", [prev, other], ["sum"], name="join"))
        prev = "sum"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    inits += [numpy_helper.from_array(np.array([-1], np.int64), "flat"),
              numpy_helper.from_array(np.array([4, width], np.int64), "back")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, width])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, {"x": (rng.standard_normal((4, width)) * scale).astype(np.float32)}


@pytest.mark.parametrize("depth", [1, 4, 9])
@pytest.mark.parametrize("reshape", [False, True])
@pytest.mark.parametrize("fusion_level", [0, 2])
def test_rounding_depth_counts_the_fp16_roundings_on_the_longest_path(depth, reshape, fusion_level):
    """force_fp16: the input's Cast to FP16 and each MatMul round once (depth + 1); data movement (Reshape) adds
    nothing; a MatMul kept in FP32 removes its rounding but its output is rounded again when an FP16 kernel reads
    it (the Cast back to FP16); two kept in a row remove one rounding, unless an FP16 Reshape sits between them
    (it rounds the first one's output); force_fp32 rounds nothing (depth 1, the floor)."""
    model, feed = _chain(depth, reshape=reshape)
    shapes = {"x": list(feed["x"].shape)}
    plan = compile_model(model, Config(precision_mode="force_fp16", fusion_level=fusion_level),
                         input_shapes=shapes).plan
    assert rounding_depths(plan) == {"y": depth + 1}
    plan32 = compile_model(model, Config(precision_mode="force_fp32"), input_shapes=shapes).plan
    assert rounding_depths(plan32) == {"y": 1}
    if depth >= 4:  # keep mm1 in FP32: mm0 rounds, Cast back to FP16 before mm2 rounds, mm2.. round
        keep = compile_model(model, Config(precision_mode="force_fp16", fusion_level=fusion_level,
                                           keep_dtype=["mm1"]), input_shapes=shapes).plan
        assert rounding_depths(keep) == {"y": depth + 1}
        keep2 = compile_model(model, Config(precision_mode="force_fp16", fusion_level=fusion_level,
                                            keep_dtype=["mm1", "mm2"]), input_shapes=shapes).plan
        assert rounding_depths(keep2) == {"y": depth + 1 if reshape else depth}


def test_rounding_depth_is_the_longest_of_parallel_paths():
    model, feed = _chain(8, branches=2)
    plan = compile_model(model, Config(precision_mode="force_fp16", fusion_level=0),
                         input_shapes={"x": [4, 64]}).plan
    assert rounding_depths(plan) == {"y": 8 + 1 + 1}  # Cast, 8 MatMuls, the Add that joins the 4-MatMul branch


@pytest.mark.parametrize("depth", [1, 2, 16, 100])
def test_the_allowance_grows_with_the_square_root_of_the_depth(depth):
    y = np.random.default_rng(depth).standard_normal(1000) * 100
    rms = math.sqrt(float(np.mean(y ** 2)))
    expect = np.maximum(1e-2, 2.0 ** -10 * math.sqrt(depth) * np.maximum(np.abs(y), rms))
    np.testing.assert_allclose(fp16_allowance(y, 1e-2, depth), expect, rtol=1e-12)
    assert FP16_ROUNDING == 2.0 ** -10
    np.testing.assert_array_equal(fp16_allowance(y, 1e-2, 0), fp16_allowance(y, 1e-2, 1))  # floored at one


def _fp16_chain_error(model, feed, keep=()):
    """max_i |x_i - y_i| / (2^-10·max(|y_i|, rms y)) of the chain emulated in numpy: every MatMul not in ``keep``
    reads FP16-rounded operands, accumulates in float64 and rounds its output to FP16; y in float64."""
    r16 = lambda a: a.astype(np.float16).astype(np.float64)
    weights = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    exact = dev = feed["x"].astype(np.float64)
    for n in model.graph.node:
        if n.op_type == "MatMul":
            w = weights[n.input[1]]
            exact = exact @ w
            dev = dev @ w if n.name in keep else r16(r16(dev) @ r16(w))
    rms = math.sqrt(float(np.mean(exact ** 2)))
    return float((np.abs(dev - exact) / (2.0 ** -10 * np.maximum(np.abs(exact), rms))).max())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("depth,seed", [(12, 0), (16, 2), (24, 5)])
def test_a_deep_fault_free_network_keeps_nothing_and_a_planted_culprit_alone_is_kept(depth, seed):
    """A deep chain computed correctly in FP16 exceeds one rounding's allowance (checked in numpy: the old
    2^-10 bound would keep layers in FP32 for plain rounding) but not sqrt(depth) of it: tune keeps nothing.
    With one layer's weights FP16 subnormals, tune keeps exactly that layer (numpy: keeping it brings the
    error back within the allowance)."""
    model, feed = _chain(depth, seed=seed)
    clean = _fp16_chain_error(model, feed)
    assert 1.0 < clean < math.sqrt(depth + 1)  # more than one rounding's allowance, within the depth's
    res = tune(model, [("x", feed)], Config(precision_mode="force_fp16", fusion_level=0))
    assert res.met and res.chosen == []
    culprit = depth // 2
    faulty, feed = _chain(depth, culprit=culprit, seed=seed)
    assert _fp16_chain_error(faulty, feed) > 5 * math.sqrt(depth + 1)
    assert _fp16_chain_error(faulty, feed, keep={f"mm{culprit}"}) < math.sqrt(depth + 1)
    res = tune(faulty, [("x", feed)], Config(precision_mode="force_fp16", fusion_level=0))
    assert res.met and res.chosen == [f"mm{culprit}"]
