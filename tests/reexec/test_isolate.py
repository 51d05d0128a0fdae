"""Kernel isolation (toolkit/reexec/isolate.py): casts that overflow stay silent, and kernel inputs seen through
copies."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
from onnx import helper

from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.engine import Session
from toolkit.ort.reference import ReferenceRunner


def test_isolation_cast_overflow_is_silent():
    from toolkit.reexec.isolate import _as_stored

    big = np.array([1e5, -1e5, 1.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _as_stored(big, "float16")
    np.testing.assert_array_equal(out, np.array([np.inf, -np.inf, 1.0], np.float16))


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


def test_kernel_inputs_and_isolation_see_through_copies():
    """Roles (origin / propagated) and single-kernel isolation map copy outputs back to ONNX names."""
    from toolkit import samples
    from toolkit.reexec.isolate import isolate
    from toolkit.compare.layerwise import kernel_inputs

    spec = samples.sample("detector_head")
    model, feeds = spec.build(), spec.make_inputs(0)
    plan = compile_model(model, Config(), input_shapes={k: v.shape for k, v in feeds.items()}).plan
    nms = next(n for n in model.graph.node if n.op_type == "NonMaxSuppression")
    inits = {i.name for i in model.graph.initializer}
    assert kernel_inputs(plan)[nms.name] == [i for i in nms.input if i and i not in inits]
    assert any(t.endswith("::d2h") for t in kernel(plan, nms.name).inputs)
    onnx_names = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    assert all(t in onnx_names for ins in kernel_inputs(plan).values() for t in ins)

    sess = Session(mlp(), Config(op_placement={"tanh": "CPU"}))
    golden = ReferenceRunner(mlp()).run({"x": X})
    local = isolate(sess.runtime, "tanh", golden)  # the device reads 'a' as FP16, widened to FP32 for the host
    np.testing.assert_array_equal(local["t"], ort_single("Tanh", golden["a"].astype(np.float16).astype(np.float32)))
