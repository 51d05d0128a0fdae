"""CPU/NPU op placement (toolkit/compiler/passes/place_ops.py): op_placement (op type / node name, node wins),
fused kernels holding a CPU node, automatic fallback of ops the simulated NPU does not support (a
cpu_fallback finding each), and FP32 host kernels checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.engine import Session
from toolkit.core.errors import ConfigError
from toolkit.precision.support import UNSUPPORTED

R = np.random.default_rng(11)
W = (R.standard_normal((16, 16)) * 0.3).astype(np.float32)
X = R.standard_normal((4, 16)).astype(np.float32)


def mlp():
    """mm (MatMul, FP16) -> tanh -> mm2 (MatMul, FP16) -> tanh2 -> y."""
    return make_model([N("MatMul", ["x", "W"], ["a"], "mm"), N("Tanh", ["a"], ["t"], "tanh"),
                       N("MatMul", ["t", "W"], ["b"], "mm2"), N("Tanh", ["b"], ["y"], "tanh2")],
                      [("x", [4, 16])], ["y"], {"W": W})


def ort_single(op, x, **attrs):
    """One ONNX op run by onnxruntime in FP32 on ``x`` (the test's own oracle)."""
    m = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", list(x.shape))], ["y"])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]


def kernel(plan, node):
    """The kernel executing original node ``node``."""
    return next(k for k in plan.kernels if node in k.nodes)


# ------------------------------------------------------------------------------------- op_placement
def test_cpu_op_by_type_runs_fp32_on_host_while_neighbours_stay_fp16():
    sess = Session(mlp(), Config(op_placement={"Tanh": "CPU"}))
    plan = sess.plan
    assert [(kernel(plan, n).placement, kernel(plan, n).precision) for n in ("mm", "tanh", "mm2", "tanh2")] == \
        [("NPU", "fp16"), ("CPU", "fp32"), ("NPU", "fp16"), ("CPU", "fp32")]
    res = sess.run({"x": X}, dump=True)
    assert res.dumps["a"].dtype == np.float16 and res.dumps["b"].dtype == np.float16  # NPU neighbours: FP16
    # the host Tanh is onnxruntime's FP32 Tanh of what the NPU stored (FP16 'a', exactly widened)
    for src, out in (("a", "t"), ("b", "y")):
        want = ort_single("Tanh", res.dumps[src].astype(np.float32))
        assert res.dumps[out].dtype == np.float32
        np.testing.assert_array_equal(res.dumps[out], want)
    np.testing.assert_array_equal(res.outputs["y"], res.dumps["y"])


def test_node_name_entry_wins_over_op_type_entry():
    plan = compile_model(mlp(), Config(op_placement={"Tanh": "CPU", "tanh2": "NPU"})).plan
    assert (kernel(plan, "tanh").placement, kernel(plan, "tanh2").placement) == ("CPU", "NPU")
    plan = compile_model(mlp(), Config(op_placement={"Tanh": "NPU", "tanh2": "CPU"})).plan
    assert (kernel(plan, "tanh").placement, kernel(plan, "tanh2").placement) == ("NPU", "CPU")
    sess = Session(mlp(), Config(op_placement={"Tanh": "NPU", "tanh2": "CPU"}))
    res = sess.run({"x": X}, dump=True)
    np.testing.assert_array_equal(res.outputs["y"], ort_single("Tanh", res.dumps["b"].astype(np.float32)))


def test_fused_kernel_with_a_cpu_node_is_dissolved_and_logged():
    plain = compile_model(mlp(), Config())
    assert kernel(plain.plan, "mm").nodes == ["mm", "tanh"]  # buffer fusion took the Tanh epilogue
    res = compile_model(mlp(), Config(op_placement={"tanh": "CPU"}))
    assert kernel(res.plan, "mm").nodes == ["mm"] and kernel(res.plan, "tanh").placement == "CPU"
    log = next(p for p in res.passes if p.name == "place_ops").log
    assert any("dissolved" in ln and "tanh" in ln for ln in log)
    assert any("tanh (Tanh): CPU, op_placement['tanh']" in ln for ln in log)


# ------------------------------------------------------------------------------------- unsupported ops
def nonzero_model():
    return make_model([N("Relu", ["x"], ["r"], "relu"), N("NonZero", ["r"], ["nz"], "nz"),
                       N("Transpose", ["nz"], ["y"], "tr")],
                      [("x", [4, 16])], [("y", TensorProto.INT64)])


@pytest.mark.parametrize("asked", [{}, {"NonZero": "NPU"}, {"nz": "NPU"}])
def test_unsupported_op_falls_back_to_cpu_with_a_finding(asked):
    res = compile_model(nonzero_model(), Config(op_placement=asked))
    assert kernel(res.plan, "nz").placement == "CPU" and kernel(res.plan, "nz").precision == "fp32"
    found = [f for f in res.findings if f.kind == "cpu_fallback"]
    assert [(f.severity, f.subject, f.evidence["op_type"]) for f in found] == [("warning", "nz", "NonZero")]
    assert found[0].evidence["reason"] == UNSUPPORTED["NonZero"].reason
    assert found[0].evidence.get("requested") == (next(iter(asked.values())) if asked else None)
    # NonZero's output has a data-dependent shape: host memory, then a dynamic device tensor after the copy
    assert (res.plan.tensors["nz"].storage, res.plan.tensors["nz::h2d"].storage) == ("host", "dynamic")
    out = Session(nonzero_model(), Config(op_placement=asked)).run({"x": X}).outputs["y"]
    np.testing.assert_array_equal(out, np.argwhere(np.maximum(X, 0)))


def test_unknown_op_placement_name_is_refused_at_compile_time():
    with pytest.raises(ConfigError) as err:
        compile_model(mlp(), Config(op_placement={"tanhh": "CPU"}))
    msg = str(err.value)
    assert "'tanhh'" in msg and "did you mean 'tanh" in msg and "\n" not in msg
    # an ONNX op type the model does not use is accepted and logged
    res = compile_model(mlp(), Config(op_placement={"Softmax": "CPU"}))
    assert any("'Softmax' matches no node" in ln for ln in next(p for p in res.passes if p.name == "place_ops").log)


# ------------------------------------------------------------------------------------- all on the host
def test_force_fp32_with_every_op_on_cpu_equals_onnxruntime():
    r = np.random.default_rng(13)
    m = make_model([N("MatMul", ["x", "W"], ["a"], "mm"), N("Add", ["a", "B"], ["b"], "add"),
                    N("Relu", ["b"], ["r"], "relu"), N("Reshape", ["r", "S"], ["s"], "reshape"),
                    N("Softmax", ["s"], ["sm"], "softmax", axis=-1), N("ReduceSum", ["sm", "AX"], ["y"], "rsum")],
                   [("x", [4, 16])], ["y"],
                   {"W": (r.standard_normal((16, 16)) * 0.3).astype(np.float32),
                    "B": r.standard_normal(16).astype(np.float32), "S": np.array([8, 8], np.int64),
                    "AX": np.array([1], np.int64)})
    every = {op: "CPU" for op in ("MatMul", "Add", "Relu", "Reshape", "Softmax", "ReduceSum")}
    sess = Session(m, Config(precision_mode="force_fp32", op_placement=every))
    assert {k.placement for k in sess.plan.kernels if k.fusion != "copy"} == {"CPU"}
    assert [k.op_type for k in sess.plan.kernels if k.fusion == "copy"] == ["MemcpyD2H"]  # only the graph input
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]
    np.testing.assert_allclose(sess.run({"x": X}).outputs["y"], want, rtol=1e-6, atol=1e-7)
