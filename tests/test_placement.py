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


# ------------------------------------------------------------------------------------- unsupported ops
def nonzero_model():
    return make_model([N("Relu", ["x"], ["r"], "relu"), N("NonZero", ["r"], ["nz"], "nz"),
                       N("Transpose", ["nz"], ["y"], "tr")],
                      [("x", [4, 16])], [("y", TensorProto.INT64)])


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


