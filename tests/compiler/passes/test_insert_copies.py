"""Host-device copies (toolkit/compiler/passes/insert_copies.py) as real plan steps, one per tensor."""

from __future__ import annotations

import numpy as np

from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.engine import Session

R = np.random.default_rng(11)
W = (R.standard_normal((16, 16)) * 0.3).astype(np.float32)
X = R.standard_normal((4, 16)).astype(np.float32)


def mlp():
    """mm (MatMul, FP16) -> tanh -> mm2 (MatMul, FP16) -> tanh2 -> y."""
    return make_model([N("MatMul", ["x", "W"], ["a"], "mm"), N("Tanh", ["a"], ["t"], "tanh"),
                       N("MatMul", ["t", "W"], ["b"], "mm2"), N("Tanh", ["b"], ["y"], "tanh2")],
                      [("x", [4, 16])], ["y"], {"W": W})


def kernel(plan, node):
    """The kernel executing original node ``node``."""
    return next(k for k in plan.kernels if node in k.nodes)


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
