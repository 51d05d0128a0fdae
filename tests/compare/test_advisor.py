"""The advisor (toolkit/compare/advisor.py): overflow rows need a finite reference, golden non-finite rows,
accumulation overflow, and overflow sites inside fused kernels."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.compare.advisor import advise, golden_nonfinite_rows, overflow_rows
from toolkit.compare.layerwise import golden_range
from toolkit.compare.metrics import compare_tensors
from toolkit.config.schema import Config
from toolkit.diagnose import diagnose, prepare
from toolkit.engine import Session


def _model(nodes, inputs, outputs, inits=None, opset=17) -> onnx.ModelProto:
    """``inputs`` / ``outputs``: [(name, shape)] of float tensors; ``inits``: {name: array}."""
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


ROWS, COLS = 4, 4096


def test_accumulation_overflow_needs_an_fp16_accumulating_kernel_and_a_sum_past_65504():
    from types import SimpleNamespace

    from toolkit.compare.advisor import accumulation_overflow

    k = SimpleNamespace(name="rm", precision="fp16", implmode="high_performance", fusion="none", exec_nodes=["rm"],
                        nodes=["rm"])
    row = {"Kernel": "rm", "OpType": "ReduceMean", "NodeName": "rm", "GoldenAbsMax": 50.0}
    # without the reference inputs (compare-dumps) the kernel kind alone is the evidence
    assert accumulation_overflow(row, {"rm": k}) == {"op_type": "ReduceMean", "implmode": "high_performance",
                                                     "partial_sum_absmax": None}
    hp = SimpleNamespace(**{**vars(k), "implmode": "high_precision"})
    assert accumulation_overflow(row, {"rm": hp}) is None
    assert accumulation_overflow({**row, "GoldenAbsMax": 7e4}, {"rm": k}) is None  # the value itself overflows
    m = _model([helper.make_node("ReduceMean", ["x"], ["y"], name="rm", axes=[1], keepdims=1)],
               [("x", [ROWS, COLS])], [("y", [ROWS, 1])])
    small = np.full((ROWS, COLS), 0.01, np.float32)  # sum 40.96: no FP16 accumulation overflow
    assert accumulation_overflow(row, {"rm": k}, m, {"x": small}) is None
    big = np.random.default_rng(8).uniform(0, 100, (ROWS, COLS)).astype(np.float32)
    got = accumulation_overflow(row, {"rm": k}, m, {"x": big})
    assert got["partial_sum_absmax"] == pytest.approx(big.astype(np.float64).sum(1).max(), rel=1e-9)


def fp16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def shown(v: float) -> str:
    """How a |x| past 65504 reads in a message: the whole number rounded up."""
    return str(math.ceil(v))


def _fake(kernels, tensors, graph_inputs=()):
    return SimpleNamespace(kernels=kernels, tensors={n: SimpleNamespace(name=n, dtype=d) for n, d in tensors.items()},
                           graph_inputs=list(graph_inputs))


def _k(name, nodes, inputs, outputs, internal=(), precision="fp16"):
    return SimpleNamespace(name=name, nodes=list(nodes), inputs=list(inputs), outputs=list(outputs),
                           internal=list(internal), precision=precision, cast_of=None, op_class="elementwise",
                           implmode="high_precision", fusion="ub", exec_nodes=None, rule="SomeFusion")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_overflow_site_inside_a_fused_kernel_and_inside_the_computation():
    from toolkit.compare.advisor import overflow_finding as finding
    from toolkit.compare.advisor import overflow_site

    x = np.array([[2.0, 3.0]], np.float32)
    up = x * np.float32(4e4)  # on chip, past 65504
    y = up * np.float32(1e-4)
    values = {"x": x, "up": up, "y": y}
    fused = _k("k", ["mul_up", "mul_down"], ["x"], ["y"], internal=["up"])
    plan = _fake([fused], {"x": "float32", "y": "float16"}, ["x"])
    df = pd.DataFrame([{"TensorName": "up", "NodeName": "mul_up", "OpType": "Mul", "Kernel": "k", "GoldenAbsMax": float(up.max())},
                       {"TensorName": "y", "NodeName": "mul_down", "OpType": "Mul", "Kernel": "k", "GoldenAbsMax": float(y.max()),
                        "OverFlow": True}])
    r = df.iloc[1]
    site = overflow_site(r, plan, df, values)
    assert (site["where"], site["tensor"], site["producer"]) == ("intermediate", "up", "mul_up")
    assert site["golden_absmax"] == pytest.approx(float(np.abs(up).max()))
    f = finding(r, {"k": fused}, plan=plan, df=df, values=values)
    assert "intermediate 'up'" in f.recommendation and shown(float(up.max())) in f.recommendation
    assert f.evidence["keep_dtype"] == ["mul_up"]  # a keep_dtype node keeps its whole kernel in FP32
    # nothing past 65504 anywhere: the overflow is inside the computation, and the text does not claim a value
    small = {"x": x, "up": x * np.float32(2), "y": x}
    site = overflow_site(r, plan, df.assign(GoldenAbsMax=[6.0, 3.0]), small)
    assert site["where"] == "computation" and site["golden_absmax"] == pytest.approx(3.0)
    f = finding(r, {"k": fused}, plan=plan, df=df.assign(GoldenAbsMax=[6.0, 3.0]), values=small)
    assert "no reference value it reads or writes passes FP16 max" in f.recommendation


FP16_MAX = 65504.0


def _row(tensor: str, device, golden, npu_dump: str) -> dict:
    row = {"Index": 0, "OpType": "Relu", "NodeName": tensor, "TensorName": tensor, "Kernel": "k",
           "NPUDump": "k", "DataType": npu_dump, **golden_range(golden)}
    row.update(compare_tensors(device, golden))
    return row


@pytest.mark.parametrize("golden, device, overflow", [
    # the reference's own NaN/Inf, mirrored on the device: not overflow
    ([np.nan, np.inf, -np.inf, 1.0], [np.nan, np.inf, -np.inf, 1.0], False),
    ([np.inf, 2.0, 3.0, 4.0], [np.inf, 2.0, 3.0, 4.0], False),
    # device non-finite where the reference is finite: overflow
    ([np.nan, 7e4, 1.0, 2.0], [np.nan, np.inf, 1.0, 2.0], True),
    ([1.0, 2.0, 3.0, 4.0], [1.0, np.nan, 3.0, 4.0], True),
    # a finite reference value beyond 65504 in an FP16 tensor (saturated on the device): overflow
    ([np.inf, 7e4, 1.0, 2.0], [np.inf, 65504.0, 1.0, 2.0], True),
])
def test_overflow_rows_need_a_finite_reference(golden, device, overflow):
    """Kind, table level: overflow = device non-finite where the golden is finite, or a finite golden
    beyond the FP16 range; the golden's own NaN/Inf never counts (checked against numpy masks)."""
    g = np.array(golden, np.float32)
    d = np.array(device, np.float16)
    expected = bool(np.any(np.isfinite(g) & ~np.isfinite(d.astype(np.float32)))
                    or np.any(np.isfinite(g) & (np.abs(g) > FP16_MAX)))
    assert expected == overflow
    df = pd.DataFrame([{"Index": -1, "OpType": "Input", "NodeName": "x", "TensorName": "x", "Kernel": "",
                        **compare_tensors(np.ones(2, np.float32), np.ones(2, np.float32))},
                       _row("y", d, g, "float16")])
    df["Role"] = ""
    assert len(overflow_rows(df)) == int(overflow)
    gn = golden_nonfinite_rows(df, ["y"])
    assert len(gn) == int(not np.isfinite(g).all())


def test_advise_lists_golden_nonfinite_only_with_outputs():
    g = np.array([np.nan, 1.0, 2.0, 3.0], np.float32)
    df = pd.DataFrame([_row("y", g.astype(np.float16), g, "float16")])
    df["Role"] = ""
    plan = type("P", (), {"kernels": []})()
    assert [f.kind for f in advise(df, plan)] == []
    assert [f.kind for f in advise(df, plan, outputs=["y"])] == ["golden_nonfinite"]


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e3])
@pytest.mark.parametrize("where", ["intermediate", "input_cast"])
def test_overflow_text_says_whether_the_output_is_past_fp16_too(scale, where):
    """The sentence about the kernel's output follows the output's own reference magnitude: 'stays within FP16'
    only when it does (|y| <= 65504), 'past FP16 max too' otherwise; an input overflow at a fused kernel names the
    kernel and its nodes, not one node that does not read the input."""
    from toolkit.compare.advisor import overflow_finding as finding
    from toolkit.compare.advisor import overflow_site

    x = np.array([[2.0, 3.0]], np.float32)
    up = x * np.float32(4e4)  # past 65504
    y = up * np.float32(scale)
    if where == "intermediate":
        values = {"x": x, "up": up, "y": y}
        k = _k("k", ["mul_up", "mul_down"], ["x"], ["y"], internal=["up"])
        plan = _fake([k], {"x": "float32", "y": "float16"}, ["x"])
        rows = [{"TensorName": "up", "NodeName": "mul_up", "OpType": "Mul", "Kernel": "k",
                 "GoldenAbsMax": float(up.max())}]
    else:  # the graph input itself is past 65504 and cast to FP16 at the fused kernel's input
        values = {"big": up, "y": y, "mid": up}
        k = _k("k", ["scale_in", "mul_down"], ["big"], ["y"], internal=["mid"])
        plan = _fake([k], {"big": "float32", "y": "float16"}, ["big"])
        rows = []
    df = pd.DataFrame(rows + [{"TensorName": "y", "NodeName": "mul_down", "OpType": "Mul", "Kernel": "k",
                               "GoldenAbsMax": float(np.abs(y).max()), "OverFlow": True}])
    assert overflow_site(df.iloc[-1], plan, df, values)["where"] == where
    f = finding(df.iloc[-1], {"k": k}, plan=plan, df=df, values=values)
    past = float(np.abs(y).max()) > FP16_MAX
    text = f.recommendation
    if where == "input_cast":
        assert "input of kernel 'k' (scale_in, mul_down)" in text, text
    assert ("past FP16 max too" in text) == past and ("stays within FP16" in text) == (not past), text


@pytest.mark.parametrize("absmax, words", [(1.12453e6, "past FP16 max 65504, its largest values become inf"),
                                           (65505.0, "past FP16 max 65504"), (3.5e4, "rounded within FP16 noise"),
                                           (2.0, "rounded within FP16 noise")])
def test_a_storage_origin_says_whether_fp16_rounds_or_overflows_it(absmax, words):
    """The origin text of a tensor whose FP16 storage breaks its consumer: values past FP16 max are not 'rounded
    within FP16 noise', they become inf."""
    from toolkit.compare.advisor import _storage_where

    ev = {"metric": "CosineSimilarity", "exact_value": 0.99999, "stored_value": 0.5, "consumer_node": "ln",
          "consumer_op_type": "LayerNormalization", "consumer_precision": "fp32"}
    text = _storage_where(ev, {"GoldenAbsMax": absmax})
    assert words in text
    assert ("within FP16 noise" in text) == (absmax <= 65504)


# ------------------------------------------------------------------ an origin inside a fused kernel
def _cancel_then(after: str, seed: int):
    """x (~1e4, near-equal column pairs) → MatMul 'diff' by ±1 (their differences, ~0.1..3: FP16's rounding of
    the inputs, ulp 8, destroys them) → ``after`` ('relu' Relu, or 'bias' Add of a constant) → y."""
    rng = np.random.default_rng(seed)
    w = np.zeros((16, 8), np.float32)
    for j in range(8):
        w[2 * j, j], w[2 * j + 1, j] = 1, -1
    tail = helper.make_node("Relu", ["d"], ["y"], name="relu") if after == "relu" else \
        helper.make_node("Add", ["d", "b"], ["y"], name="bias")
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.full(8, 0.5, np.float32), "b")]
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["d"], name="diff"), tail], "cancel",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits)
    base = rng.uniform(9000, 11000, (4, 8))
    x = np.empty((4, 16))
    x[:, 0::2], x[:, 1::2] = base + rng.uniform(0.1, 3, (4, 8)), base
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), {"x": x.astype(np.float32)}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("after", ["relu", "bias"])
@pytest.mark.parametrize("fusion_level", [0, 2])
def test_an_origin_inside_a_fused_kernel_names_the_kernel_not_only_the_node_it_writes(tmp_path, after, fusion_level):
    model, feeds = _cancel_then(after, seed=len(after) + fusion_level)
    d = feeds["x"].astype(np.float64) @ numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    d16 = feeds["x"].astype(np.float16).astype(np.float64) @ numpy_helper.to_array(model.graph.initializer[0])
    assert np.abs(d - d16).max() > 1.0  # independently: the MatMul's FP16 inputs lose the differences
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    diag, _ = diagnose(prepare(str(mp), str(ip)), Config(precision_mode="force_fp16", fusion_level=fusion_level))
    first = [f for f in diag.findings if f.kind == "first_divergence"]
    assert first and "diff" in first[0].evidence.get("keep_dtype", [])
    assert (first[0].subject == "diff") == (fusion_level == 0)  # fused: the row is the tail's tensor
    if first[0].subject == "diff":  # unfused: the MatMul itself
        assert "is where the error starts; its inputs are normal" in first[0].recommendation
    else:  # fused: the tensor is the tail's, the kernel (anchored at the MatMul) is named as where it starts
        assert first[0].subject == after and "is the output of kernel 'diff'" in first[0].recommendation
        assert "'diff'" in first[0].recommendation.split("which fuses")[1]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("k", [1e5, 1e6, 3e7])
def test_an_overflow_at_a_constant_names_the_constant_its_own_node_reads(tmp_path, k):
    """Conv → BatchNormalization (running_var 1e12, folded into the Conv's weights) → Relu → Mul by ``k`` (past
    FP16 max) → Conv, fused into one kernel: the Mul's constant overflows, not the BatchNormalization's."""
    rng = np.random.default_rng(int(np.log10(k)))
    c = 8
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in (
        ("W", rng.standard_normal((c, c, 3, 3)) * 0.3), ("g", np.ones(c)), ("bb", np.zeros(c)), ("mean", np.zeros(c)),
        ("var", np.full(c, 1e12)), ("k", np.array(k)), ("W2", rng.standard_normal((4, c, 1, 1)) * 0.3))]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "bb", "mean", "var"], ["bn"], name="bn", epsilon=1e-5),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "k"], ["m"], name="rescale"),
             helper.make_node("Conv", ["m", "W2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "convbn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), mp)
    np.savez(ip, x=rng.standard_normal((1, c, 8, 8)).astype(np.float32))
    assert np.isinf(np.float16(k))  # independently: the Mul's constant is past FP16 max
    diag, _ = diagnose(prepare(str(mp), str(ip)), Config(precision_mode="force_fp16"))
    ov = [f for f in diag.findings if f.kind == "fp16_overflow"]
    assert ov and ov[0].subject == "rescale"
    assert "reads constant 'k'" in ov[0].recommendation and "'var'" not in ov[0].recommendation


# ------------------------------------------------------------------ a line tighter than the error from upstream
def _chain(depth: int, width: int, scale: float, seed: int):
    """x → MatMul h1 → ... → MatMul h{depth} = y, weights ~N(0, 1/width) so every h stays ~``scale``."""
    rng = np.random.default_rng(seed)
    ws = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for _ in range(depth)]
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"W{i}"], [f"h{i + 1}" if i + 1 < depth else "y"],
                              name=f"mm{i + 1}") for i in range(depth)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, width])],
                          [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(ws)])
    x = (rng.standard_normal((8, width)) * scale).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), {"x": x}, ws


def _fp16_chain_errors(x, ws):
    """Max |error| of each h_i of an FP16 chain (inputs, weights and outputs rounded to FP16, FP32 compute)
    against float64, computed here with numpy."""
    r16 = lambda a: a.astype(np.float16).astype(np.float64)
    exact, dev, errs = x.astype(np.float64), r16(x), []
    for w in ws:
        exact, dev = exact @ w.astype(np.float64), r16(dev @ r16(w))
        errs.append(float(np.abs(dev - exact).max()))
    return errs


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("depth,k,scale,ratio", [(6, 4, 1.0, 4), (14, 10, 1.0, 25), (8, 6, 30.0, 25),
                                                 (5, 3, 0.05, 10)])
def test_a_tensor_line_tighter_than_the_error_arriving_from_upstream_is_not_called_an_origin_with_normal_inputs(
        tmp_path, depth, k, scale, ratio):
    """A line set on h_k alone, ``ratio`` times tighter than the FP16 error h_{k-1} already carries (its own
    lines are the default ones, which it holds). The answer is either an earlier start whose keep set reaches
    mm_k, or mm_k with the error said to arrive from upstream (the input's value quoted as numpy finds it);
    never "mm_k is where the error starts; its inputs are normal". With the line on h_1 (its input is the graph
    input, exact) mm1 is the real start."""
    model, feeds, ws = _chain(depth, 32, scale, seed=depth)
    errs = _fp16_chain_errors(feeds["x"], ws)
    line = errs[k - 2] / ratio  # h_{k-1}'s error, computed independently, is ``ratio`` times the line
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    for tensor, upstream in ((f"h{k}", True), ("h1", False)):
        diag, _ = diagnose(prepare(str(mp), str(ip)), Config(precision_mode="force_fp16", fusion_level=0),
                           thresholds=f"{tensor}:MaxAbsoluteError>{line:.3g}")
        first = [f for f in diag.findings if f.kind == "first_divergence"]
        assert first
        text, subject = first[0].recommendation, first[0].subject
        if not upstream:
            assert subject == "mm1" and "is where the error starts; its inputs are normal" in text
        elif subject == f"mm{k}":
            assert "its inputs are normal" not in text and "arrives from upstream" in text
            quoted = float(re.search(rf"input 'h{k - 1}' MaxAbsoluteError ([0-9.e+-]+)", text).group(1))
            assert quoted == pytest.approx(errs[k - 2], rel=0.25)
        else:  # an earlier start: its advice must reach the tensor whose line is crossed
            assert int(subject[2:]) < k and f"mm{k}" in first[0].evidence.get("keep_dtype", [])


# ------------------------------------------------------------------ the origin's kernel reads a constant FP16 changes
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op,scale,fusion_level", [("MatMul", 1.5e-7, 0), ("MatMul", 1.5e-7, 2), ("Conv", 1.5e-7, 0),
                                                   ("Conv", 1.5e-7, 2)])
def test_an_origin_whose_kernel_reads_a_constant_fp16_changes_names_it_in_the_finding_and_the_first_screen(
        tmp_path, op, scale, fusion_level):
    """Weights small enough that FP16 flushes many of them to zero or to subnormals (checked with numpy), in a
    MatMul or Conv followed by Relu and a Mul (fused into one kernel at fusion_level 2): the origin
    finding and the report's "Why" name the constant, not only the metrics."""
    from toolkit.report import context

    rng = np.random.default_rng(int(scale * 1e8) + fusion_level)
    w = (rng.standard_normal((16, 16) if op == "MatMul" else (8, 8, 3, 3)) * scale).astype(np.float32)
    w16 = w.astype(np.float16).astype(np.float32)
    assert np.linalg.norm(w16 - w) / np.linalg.norm(w) > 0.01  # FP16 changes the weights (independently)
    first = helper.make_node(op, ["x", "W"], ["a"], name="lin", **({"pads": [1, 1, 1, 1]} if op == "Conv" else {}))
    shape = [4, 16] if op == "MatMul" else [1, 8, 6, 6]
    g = helper.make_graph([first, helper.make_node("Relu", ["a"], ["r"], name="relu"),
                           helper.make_node("Mul", ["r", "k"], ["y"], name="amp")], "small_w",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.float32(4.0), "k")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(model, mp)
    np.savez(ip, x=rng.standard_normal(shape).astype(np.float32))
    diag, _ = diagnose(prepare(str(mp), str(ip)), Config(precision_mode="force_fp16", fusion_level=fusion_level))
    found = [f for f in diag.findings if f.kind == "first_divergence"]
    assert found, [f.kind for f in diag.findings]
    consts = found[0].evidence.get("fp16_constants") or []
    assert consts and consts[0]["name"] == "W" and consts[0]["reader"] == "lin"
    assert "It reads constant 'W' (by 'lin'), which FP16 changes" in found[0].recommendation
    assert "reads constant 'W'" in context.answer_section(diag)["why"]


# ------------------------------------------------------------------ FP16 underflow feeding an op infinite at 0
def _underflow_model(kind: str, seed: int):
    """A tensor t whose reference holds non-zero values below 2^-25 (FP16 flushes them to 0), read by an op
    that is infinite at 0; returns (model, feeds, t's reference values computed here with numpy, producer of
    t or "" for a graph input, the singular node)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    if kind == "softmax_log":  # logits spread ~40: the smallest probabilities ~1e-15
        w = (rng.standard_normal((16, 10)) * 3).astype(np.float32)
        nodes = [helper.make_node("MatMul", ["x", "W"], ["l"], name="logits"),
                 helper.make_node("Softmax", ["l"], ["t"], axis=-1, name="softmax"),
                 helper.make_node("Log", ["t"], ["y"], name="log")]
        l = x.astype(np.float64) @ w
        e = np.exp(l - l.max(-1, keepdims=True))
        return (_model(nodes, [("x", [2, 16])], [("y", [2, 10])], {"W": w}), {"x": x},
                e / e.sum(-1, keepdims=True), "softmax", "log")
    if kind == "tiny_ratio":  # a / b, both ~1e-9 (FP16 flushes both: 0/0), the ratio ~1; b is the divisor
        nodes = [helper.make_node("Mul", ["x", "s"], ["a"], name="shrink_a"),
                 helper.make_node("Abs", ["x"], ["ax"], name="abs"),
                 helper.make_node("Add", ["ax", "off"], ["ax1"], name="offset"),
                 helper.make_node("Mul", ["ax1", "s"], ["b"], name="shrink_b"),
                 helper.make_node("Div", ["a", "b"], ["y"], name="ratio")]
        model = _model(nodes, [("x", [2, 16])], [("y", [2, 16])], {"s": np.float32(1e-9), "off": np.float32(0.1)})
        b = (np.abs(x).astype(np.float64) + np.float32(0.1)) * np.float32(1e-9)
        return model, {"x": x}, b, "shrink_b", "ratio"  # the divisor is what makes x/0
    # a graph input with tiny values goes into Log: the input's cast to FP16 flushes them
    tiny = (np.abs(x) * 1e-9 + 1e-10).astype(np.float32)
    nodes = [helper.make_node("Log", ["d"], ["y"], name="log")]
    return _model(nodes, [("d", [2, 16])], [("y", [2, 16])]), {"d": tiny}, tiny.astype(np.float64), "", "log"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("kind", ["softmax_log", "tiny_ratio", "input_log"])
@pytest.mark.parametrize("seed", [0, 1])
def test_an_fp16_underflow_feeding_an_op_infinite_at_zero_is_named_and_its_advice_restores_the_output(
        tmp_path, kind, seed):
    """The NaN/Inf is not "a step inside the computation": the finding names the input FP16 flushes to 0 (how
    many values, counted here with numpy), and its keep set (the consumer, and the FP16 producer so the tiny
    values are stored in FP32) applied gives finite outputs."""
    model, feeds, t_ref, producer, node = _underflow_model(kind, seed)
    flushed = int(((np.abs(t_ref) > 0) & (np.abs(t_ref) < 2.0 ** -25)).sum())
    assert flushed and (np.abs(t_ref).astype(np.float16) == 0).sum() >= flushed  # FP16 flushes them
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    cfg = Config(precision_mode="force_fp16", fusion_level=0)
    diag, _ = diagnose(prepare(str(mp), str(ip)), cfg)
    ov = [f for f in diag.findings if f.kind == "fp16_overflow"]
    assert ov and ov[0].subject == node and ov[0].evidence["overflow"]["where"] == "underflow"
    site = ov[0].evidence["overflow"]
    assert site["flushed"] == flushed and site["producer"] == producer
    assert "FP16 underflow feeds" in ov[0].recommendation and "step inside" not in ov[0].recommendation
    keep = ov[0].evidence["keep_dtype"]
    assert set(keep) == {node, producer} - {""}
    out = Session(model, Config(precision_mode="force_fp16", fusion_level=0, keep_dtype=keep),
                  input_shapes={k: list(v.shape) for k, v in feeds.items()}).run(feeds).outputs["y"]
    assert np.isfinite(out).all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("scale", [2e-5, 3e-5])
def test_nan_inf_at_a_node_whose_inputs_are_abnormal_points_upstream_without_a_keep_set(tmp_path, scale):
    """h·h underflows in FP16 (h ~ ``scale``): the variance, its root and the divisor differ, and the Div that
    turns the divisor into inf is only where it shows. Its fp16_overflow finding says so and advises no keep set
    of its own; the first divergence is the square."""
    rng = np.random.default_rng(int(scale * 1e6))
    w = (rng.standard_normal((64, 64)) * scale / 8).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
             helper.make_node("Mul", ["h", "h"], ["h2"], name="sq"),
             helper.make_node("ReduceMean", ["h2"], ["var"], axes=[1], keepdims=1, name="var"),
             helper.make_node("Sqrt", ["var"], ["sd"], name="sqrt"),
             helper.make_node("Add", ["sd", "eps"], ["sde"], name="add_eps"),
             helper.make_node("Div", ["h", "sde"], ["y"], name="norm")]
    model = _model(nodes, [("x", [2, 64])], [("y", [2, 64])], {"W": w, "eps": np.float32(1e-12)})
    x = rng.standard_normal((2, 64)).astype(np.float32)
    h2 = (x.astype(np.float64) @ w) ** 2
    assert (h2 < 2.0 ** -25).mean() > 0.5  # most squares flush to 0 in FP16 (independently)
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(model, mp)
    np.savez(ip, x=x)
    diag, _ = diagnose(prepare(str(mp), str(ip)), Config())
    ov = [f for f in diag.findings if f.kind == "fp16_overflow" and f.subject == "norm"]
    assert ov  # the Div shows NaN/Inf: it is said to come from upstream, with no keep set of its own
    assert ov[0].evidence["overflow"]["where"] == "propagated" and "keep_dtype" not in ov[0].evidence
    assert "its inputs are already abnormal" in ov[0].recommendation
    first = [f for f in diag.findings if f.kind == "first_divergence"]
    assert first and first[0].subject == "sq"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("var", [1e12, 4e13])
def test_an_origin_reading_a_folded_batchnorm_weight_says_where_the_weight_comes_from(tmp_path, var):
    """Conv → BatchNormalization (running_var ``var``: the folded weights W/sqrt(var) become FP16 subnormals,
    checked with numpy) → Relu: the origin names the compiler's folded constant with its source in the model
    (the Conv's weight and the BatchNormalization), in the finding and on the first screen."""
    from toolkit.report import context

    rng = np.random.default_rng(int(np.log10(var)))
    w = (rng.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32)
    folded = w / np.sqrt(var + 1e-5)
    assert (np.abs(folded) < 6.1e-5).all() and (folded.astype(np.float16) == 0).any()  # subnormal, some flush
    c = np.ones(8, np.float32)
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"], name="bn", epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "k"], ["y"], name="amp")]
    model = _model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 8, 6, 6])],
                   {"cw": w, "g": c, "b": 0 * c, "m": 0 * c, "v": c * var, "k": np.float32(np.sqrt(var) / 100)})
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(model, mp)
    np.savez(ip, x=rng.standard_normal((1, 8, 6, 6)).astype(np.float32))
    diag, _ = diagnose(prepare(str(mp), str(ip)), Config(precision_mode="force_fp16", fusion_level=2))
    first = [f for f in diag.findings if f.kind == "first_divergence"]
    assert first
    consts = first[0].evidence.get("fp16_constants") or []
    assert consts and "BatchNormalization 'bn'" in consts[0].get("source", "") and "'cw'" in consts[0]["source"]
    assert "BatchNormalization 'bn'" in first[0].recommendation
    assert "BatchNormalization 'bn'" in context.answer_section(diag)["why"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fusion_level", [0, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_storage_origin_names_the_fused_kernel_that_cancels_not_the_node_its_row_ends_with(tmp_path, fusion_level,
                                                                                          seed):
    """Two Gemms with near-equal weights (outputs ~2e3) → Sub 'diff' (their difference ~1e-2: FP16 storage of
    the Gemm outputs, ulp 1-2, destroys it; checked with numpy) → Mul 'amp'. Fused (Gemm+Sub+Mul in one
    kernel) the consumer that cannot work from the rounded values is that kernel, named with its nodes, never
    "'amp' (Mul) cannot work"; unfused it is 'diff' itself."""
    rng = np.random.default_rng(seed)
    wa = rng.standard_normal((16, 16)).astype(np.float32)
    wb = (wa + rng.standard_normal((16, 16)) * 1e-3).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "Wa", "bias"], ["p"], name="gemm_a"),
             helper.make_node("Gemm", ["x", "Wb", "bias"], ["q"], name="gemm_b"),
             helper.make_node("Sub", ["p", "q"], ["d"], name="diff"),
             helper.make_node("Mul", ["d", "k"], ["y"], name="amp")]
    model = _model(nodes, [("x", [2, 16])], [("y", [2, 16])],
                   {"Wa": wa, "Wb": wb, "bias": np.full(16, 2000, np.float32), "k": np.float32(100.0)})
    x = rng.standard_normal((2, 16)).astype(np.float32)
    p, q = x.astype(np.float64) @ wa + 2000, x.astype(np.float64) @ wb + 2000
    d16 = p.astype(np.float16).astype(np.float64) - q.astype(np.float16).astype(np.float64)
    assert np.linalg.norm(d16 - (p - q)) > 0.5 * np.linalg.norm(p - q)  # FP16 storage destroys the difference
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(model, mp)
    np.savez(ip, x=x)
    diag, _ = diagnose(prepare(str(mp), str(ip)), Config(fusion_level=fusion_level))
    first = [f for f in diag.findings if f.kind == "first_divergence"]
    assert first and "storage_rounding" in first[0].evidence
    text = first[0].recommendation
    assert "'amp' (Mul" not in text and "'amp' runs in FP16" not in text
    kernel = first[0].evidence["storage_rounding"].get("consumer_kernel")
    if fusion_level == 2 and kernel != "diff":  # the Sub is fused with a Gemm and the Mul
        fused = diag.table.loc[diag.table["Kernel"] == kernel, "NodeName"].tolist()
        assert len(fused) > 1 and f"kernel '{kernel}' ({', '.join(fused)}" in text
    else:
        assert "but 'diff' (Sub" in text


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("big", [1e5, 3e6])
def test_an_overflow_in_a_fused_kernel_reading_a_constant_past_fp16_names_the_constant_not_the_fp32_intermediate(
        tmp_path, big):
    """MatMul → Mul by ``big`` (past 65504: FP16 stores the constant as inf) → Mul by 1/``big``, fused into one
    kernel whose intermediates are FP32: the cause is the constant and the node reading it, not the on-chip
    intermediate (it holds the large value without overflowing)."""
    rng = np.random.default_rng(int(big) % 97)
    w = (rng.standard_normal((16, 16)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Mul", ["m", "big"], ["up"], name="scale_up"),
             helper.make_node("Mul", ["up", "small"], ["y"], name="scale_down")]
    model = _model(nodes, [("x", [2, 16])], [("y", [2, 16])],
                   {"W": w, "big": np.float32(big), "small": np.float32(1 / big)})
    assert np.isinf(np.float16(big))  # independently: FP16 cannot hold the constant
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(model, mp)
    np.savez(ip, x=rng.standard_normal((2, 16)).astype(np.float32))
    diag, _ = diagnose(prepare(str(mp), str(ip)), Config(precision_mode="force_fp16", fusion_level=2))
    ov = [f for f in diag.findings if f.kind == "fp16_overflow"]
    assert ov and ov[0].evidence["overflow"]["where"] == "constant"
    assert ov[0].evidence["overflow"]["tensor"] == "big" and ov[0].evidence["overflow"].get("reader") == "scale_up"
    assert "intermediate" not in ov[0].recommendation and "'scale_up' reads constant 'big'" in ov[0].recommendation


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("blocks", [2, 3])
@pytest.mark.parametrize("scale", [300.0])
def test_every_overflow_that_starts_its_own_error_gets_its_overflow_finding(tmp_path, blocks, scale):
    """``blocks`` unfused LayerNorm-like branches read x (× 1, 1.5, 2 ...: x − mean, Pow 2, ReduceMean, + eps,
    Sqrt, Div) and are summed; each branch's squares pass 65504 (numpy) on inputs that are still exact: every
    branch's Pow is an fp16_overflow finding with its own keep set, none a bare divergence_origin whose inputs are
    "normal"."""
    nodes, inits = [], {"two": 2.0, "eps": 1e-5}
    outs = []
    for b in range(blocks):
        inits[f"c{b}"] = 1.0 + 0.5 * b
        nodes += [helper.make_node("Mul", ["x", f"c{b}"], [f"i{b}"], name=f"in{b}"),
                  helper.make_node("ReduceMean", [f"i{b}"], [f"m{b}"], name=f"mean{b}", axes=[-1]),
                  helper.make_node("Sub", [f"i{b}", f"m{b}"], [f"d{b}"], name=f"sub{b}"),
                  helper.make_node("Pow", [f"d{b}", "two"], [f"p{b}"], name=f"pow{b}"),
                  helper.make_node("ReduceMean", [f"p{b}"], [f"v{b}"], name=f"var{b}", axes=[-1]),
                  helper.make_node("Add", [f"v{b}", "eps"], [f"ve{b}"], name=f"adde{b}"),
                  helper.make_node("Sqrt", [f"ve{b}"], [f"s{b}"], name=f"sqrt{b}"),
                  helper.make_node("Div", [f"d{b}", f"s{b}"], [f"n{b}"], name=f"div{b}")]
        outs.append(f"n{b}")
    nodes.append(helper.make_node("Sum", outs, ["y"], name="sum"))
    model = _model(nodes, [("x", [4, 64])], [("y", [4, 64])], inits, opset=17)
    x = (np.random.default_rng(blocks).standard_normal((4, 64)) * scale).astype(np.float32)
    for b in range(blocks):  # numpy: each branch's squares pass FP16 max
        d = x.astype(np.float64) * (1.0 + 0.5 * b)
        d = d - d.mean(-1, keepdims=True)
        assert (d * d).max() > 65504, b
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", x=x)
    diag, _ = diagnose(prepare(str(tmp_path / "m.onnx"), str(tmp_path / "x.npz")),
                       Config(precision_mode="force_fp16", fusion_level=0))
    over = {f.subject: f for f in diag.findings if f.kind == "fp16_overflow"}
    assert set(over) == {f"pow{b}" for b in range(blocks)}, [(f.kind, f.subject) for f in diag.findings]
    assert all(f"pow{b}" in over[f"pow{b}"].evidence["keep_dtype"] for b in range(blocks))
    assert not any(f.kind == "divergence_origin" and "inputs are normal" in f.recommendation for f in diag.findings)


@pytest.mark.parametrize("op", ["Add", "", float("nan"), None])
@pytest.mark.parametrize("where", ["input_cast", "intermediate", "output", "constant", "underflow", "propagated",
                                   "unknown", "computation"])
def test_an_overflow_site_text_never_shows_an_empty_op_type(op, where):
    """A row without an op type (compare-dumps without --model) is named by its node alone: never "'y' ()" or
    "(, FP16 kernel)"; with one, the op type follows the name."""
    from toolkit.compare.advisor import _site_text

    r = {"NodeName": "y", "OpType": op, "GoldenAbsMax": 7e4, "Kernel": ""}
    site = {"where": where, "golden_absmax": 7e4, "tensor": "t", "producer": "", "flushed": 3, "golden_absmin": 1e-9,
            "reader": "y"}
    text = _site_text(r, site, {})
    assert "()" not in text and "(," not in text and "(nan" not in text and "(None" not in text, text
    if where != "intermediate":  # that one names the kernel, not the node's op type
        assert ("'y' (Add" in text) == (op == "Add"), text
