"""CPU/NPU op placement: op_placement (op type / node name, node wins), automatic fallback of ops the simulated
NPU does not support (a cpu_fallback finding each), host-device copies as real plan steps, FP32 host kernels
checked against onnxruntime, name-based layer comparison, and memory checks on plans with copies."""

from __future__ import annotations

import copy
import json

import numpy as np
import onnxruntime as ort
import pytest
from tests.graphs import N, make_model
from onnx import TensorProto, helper

from toolkit.compare.layerwise import layer_table
from toolkit.compiler.pipeline import compile_model, recompile_precision
from toolkit.config import Config
from toolkit.engine import Session
from toolkit.errors import ConfigError
from toolkit.memory.dynamic_check import dynamic_check
from toolkit.memory.memcheck import memcheck
from toolkit.memory.planio import attach_plan
from toolkit.memory.static_check import static_conflicts
from toolkit.precision.contract import CONTROL
from toolkit.precision.support import UNSUPPORTED
from toolkit.report.console import compile_summary
from toolkit.runtime.npu import NpuRuntime
from toolkit.runtime.reference import ReferenceRunner

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


def test_copies_are_plan_steps_in_order_with_their_tensors():
    plan = compile_model(mlp(), Config(op_placement={"tanh": "CPU"})).plan
    steps = [(k.op_type, k.inputs, k.outputs, k.placement) for k in plan.kernels]
    assert steps == [
        ("Cast", ["x"], ["x__cast_fp16"], "NPU"),
        ("MatMul", ["x__cast_fp16"], ["a"], "NPU"),
        ("Cast", ["a"], ["a__cast_fp32"], "NPU"),                     # CPU kernels read FP32
        ("MemcpyD2H", ["a__cast_fp32"], ["a__cast_fp32::d2h"], "CPU"),
        ("Tanh", ["a__cast_fp32::d2h"], ["t"], "CPU"),
        ("MemcpyH2D", ["t"], ["t::h2d"], "NPU"),
        ("Cast", ["t::h2d"], ["t__cast_fp16"], "NPU"),
        ("MatMul+Tanh", ["t__cast_fp16"], ["y"], "NPU")]                # mm2 + tanh2 stay fused
    copies = [k for k in plan.kernels if k.fusion == "copy"]
    assert [(k.cast_of, k.precision, k.op_class) for k in copies] == [("a", "fp32", "data_movement"),
                                                                     ("t", "fp32", "data_movement")]
    st = {n: plan.tensors[n].storage for n in ("a__cast_fp32", "a__cast_fp32::d2h", "t", "t::h2d", "y")}
    assert st == {"a__cast_fp32": "arena", "a__cast_fp32::d2h": "host", "t": "host", "t::h2d": "arena",
                  "y": "arena"}
    assert plan.tensors["t"].nbytes == 4 * 16 * 4 and plan.tensors["t"].offset == -1
    assert plan.placement_counts() == {"NPU": 5, "CPU": 1, "MemcpyH2D": 1, "MemcpyD2H": 1}


def test_one_copy_per_tensor_shared_by_all_readers():
    m = make_model([N("Exp", ["x"], ["e"], "exp"), N("Neg", ["e"], ["n1"], "n1"), N("Abs", ["e"], ["n2"], "n2"),
                    N("Add", ["n1", "n2"], ["y"], "add")], [("x", [4, 16])], ["y"])
    cfg = Config(precision_mode="force_fp32", fusion_level=0, op_placement={"Exp": "CPU"})
    plan = compile_model(m, cfg).plan
    h2d = [k for k in plan.kernels if k.op_type == "MemcpyH2D"]
    assert [(k.inputs, k.outputs) for k in h2d] == [(["e"], ["e::h2d"])]
    assert kernel(plan, "n1").inputs == kernel(plan, "n2").inputs == ["e::h2d"]
    out = Session(m, cfg).run({"x": X}).outputs["y"]
    e = np.exp(X)
    np.testing.assert_allclose(out, -e + np.abs(e), rtol=1e-6)


# ------------------------------------------------------------------------------------- comparison
def test_layer_comparison_finds_every_tensor_with_cpu_ops():
    model = mlp()
    golden = ReferenceRunner(model).run({"x": X})
    tables = {}
    for name, cfg in (("npu", Config()), ("cpu", Config(op_placement={"Tanh": "CPU", "mm2": "CPU"}))):
        sess = Session(model, cfg)
        dumps = sess.run({"x": X}, dump=True).dumps
        df = layer_table(model, sess.plan, golden, dumps)
        tables[name] = df
        assert not any("::" in t for t in df["TensorName"])  # copies are no rows of their own
    compared = {n: set(df.loc[df["CompareFailReason"] == "", "TensorName"]) for n, df in tables.items()}
    assert compared["cpu"] >= compared["npu"]
    assert {"a", "t", "b", "y"} <= compared["cpu"]
    cpu = tables["cpu"].set_index("TensorName")
    assert cpu.loc["t", "Kernel"] == "tanh" and cpu.loc["b", "Kernel"] == "mm2" and cpu.loc["b", "Precision"] == "fp32"


def test_kernel_inputs_and_isolation_see_through_copies():
    """Roles (origin / propagated) and single-kernel isolation map copy outputs back to ONNX names."""
    from toolkit import samples
    from toolkit.compare.isolate import isolate
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


def test_recompile_changes_placement_without_a_full_compile():
    base = compile_model(mlp(), Config())
    cfg = Config(op_placement={"Tanh": "CPU"})
    again = recompile_precision(base, cfg)
    fresh = compile_model(mlp(), cfg)
    assert [(k.name, k.placement, k.precision, k.inputs) for k in again.plan.kernels] == \
        [(k.name, k.placement, k.precision, k.inputs) for k in fresh.plan.kernels]
    assert recompile_precision(again, Config()).plan.placement_counts()["CPU"] == 0


# ------------------------------------------------------------------------------------- memory
def stream_model():
    """exp's output is copied to the host for the CPU tanh; neg/abs run on the NPU meanwhile; 'use' reads the
    CPU result through a MemcpyH2D."""
    return make_model([N("Exp", ["x"], ["e"], "exp"), N("Tanh", ["e"], ["th"], "tanh"),
                       N("Neg", ["x"], ["n"], "neg"), N("Abs", ["n"], ["ab"], "abs"),
                       N("Add", ["th", "ab"], ["y"], "use")], [("x", [16, 64])], ["y"])


XS = np.random.default_rng(12).standard_normal((16, 64)).astype(np.float32)


@pytest.mark.parametrize("policy", ["off", "conservative", "aggressive"])
def test_memcheck_is_clean_on_plans_with_copies(policy):
    for cfg in (Config(memory_reuse=policy, op_placement={"Tanh": "CPU"}),
                Config(memory_reuse=policy, precision_mode="force_fp16", op_placement={"Tanh": "CPU", "neg": "CPU"})):
        sess = Session(stream_model(), cfg)
        assert any(k.fusion == "copy" for k in sess.plan.kernels)
        res = memcheck(sess.compiled, sess.plan, {"x": XS})
        assert res.check.clean, (res.check.conflicts[:3], res.check.events[:3], res.check.divergence,
                                 res.check.error)


def test_d2h_source_is_held_until_the_npu_stream_syncs():
    sess = Session(stream_model(), Config(precision_mode="force_fp32", fusion_level=0, op_placement={"Tanh": "CPU"}))
    plan = sess.plan
    names = [k.name for k in plan.kernels]
    assert names == ["exp", "MemcpyD2H_e", "tanh", "neg", "abs", "MemcpyH2D_th", "use"]
    # the D2H copy reads 'e' asynchronously on the CPU stream: the NPU only knows it is done at the H2D
    assert plan.tensors["e"].last == names.index("MemcpyH2D_th")
    bad = copy.deepcopy(plan)  # what a kernel-order planner could do: 'n' reuses e's bytes right after the copy
    bad.tensors["n"].offset = bad.tensors["e"].offset
    found = {(c.writer, c.victim, c.reader, c.kind) for c in static_conflicts(bad)}
    assert ("neg", "e", "MemcpyD2H_e", "stream_read_in_flight") in found
    _, events = dynamic_check(NpuRuntime(attach_plan(sess.compiled, bad)), {"x": XS})
    assert ("neg", "e", "MemcpyD2H_e") in {(e.writer, e.tensor, e.reader) for e in events}


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
