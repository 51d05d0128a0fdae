"""Kernel isolation (toolkit/reexec/isolate.py): casts that overflow stay silent, and kernel inputs seen through
copies."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
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


def _attention_through(move: str, seed: int):
    """q = x·Wq, k = x·Wk, kt = ``move``(k) (a Transpose, or a Reshape to the same shape), s = q·kt, softmax, y = p·v:
    the data-movement node 'k_t' between the FP16 MatMul that rounds k and the attention that reads it."""
    import onnx

    rng = np.random.default_rng(seed)
    w = {n: rng.standard_normal((64, 64)).astype(np.float32) * 0.5 for n in ("Wq", "Wk")}
    if move == "transpose":
        mv = [helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1])]
        extra = []
    else:
        mv = [helper.make_node("Reshape", ["k", "shape"], ["kt"], name="k_t")]
        extra = [onnx.numpy_helper.from_array(np.array([1, 64, 32], np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q"], name="q_proj"),
             helper.make_node("MatMul", ["x", "Wk"], ["k"], name="k_proj"), *mv,
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
             helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"], name="pv")]
    f = onnx.TensorProto.FLOAT
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", f, [1, 32, 64]),
                                          helper.make_tensor_value_info("v", f, [1, 32, 64])],
                          [helper.make_tensor_value_info("y", f, [1, 32, 64])],
                          [onnx.numpy_helper.from_array(a, n) for n, a in w.items()] + extra)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {n: rng.standard_normal((1, 32, 64)).astype(np.float32) * 2 for n in ("x", "v")}
    return model, feeds



@pytest.mark.parametrize("move", ["transpose", "reshape"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_data_movement_node_is_never_the_storage_origin_or_advised_alone(tmp_path, move, seed):
    """The attention reads k through a data-movement node 'k_t': keeping it alone in FP32 changes nothing (checked
    on the device run here: its input is already rounded), so it is never the origin; in the default mixed mode it
    takes its producer's precision, so no advised set names it, and a set naming 'k_proj' makes it FP32 too (plan
    checked)."""
    import onnx

    from toolkit.diagnose import diagnose, prepare

    model, feeds = _attention_through(move, seed)
    cfg = Config()
    shapes = {k: v.shape for k, v in feeds.items()}
    base = Session(model, cfg, input_shapes=shapes).run(feeds).outputs["y"]
    kept = Session(model, Config(keep_dtype=["k_t"]), input_shapes=shapes).run(feeds).outputs["y"]
    np.testing.assert_array_equal(base, kept)  # keeping the movement node alone changes nothing
    follows = compile_model(model, Config(keep_dtype=["k_proj"]), input_shapes=shapes).plan
    assert {k.name: k.precision for k in follows.kernels}["k_t"] == "fp32"
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", **feeds)
    diag, _ = diagnose(prepare(str(tmp_path / "m.onnx"), str(tmp_path / "x.npz")), cfg,
                       thresholds="CosineSimilarity>=0.999999")
    for f in diag.findings:
        ev = f.evidence if isinstance(f.evidence, dict) else {}
        assert "k_t" not in (ev.get("keep_dtype") or []) and f.subject != "k_t", (f.kind, f.subject, ev)
    roles = diag.table.set_index("TensorName")["Role"]
    assert roles.get("kt") != "origin"
