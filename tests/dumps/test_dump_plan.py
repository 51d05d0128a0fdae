"""The plan two dump sets imply (toolkit.dumps.dump_plan): real plan records, one kernel per target op."""

from __future__ import annotations

import pandas as pd

from toolkit.compare.layerwise import kernel_inputs
from toolkit.compiler.plan import KernelSpec
from toolkit.dumps.dump_plan import plan_of_pairs
from toolkit.dumps.match import Pair


def _row(tensor, precision, reason=""):
    return {"TensorName": tensor, "Precision": precision, "DataType": "float16" if precision == "fp16" else "float32",
            "CompareFailReason": reason}


def test_kernels_are_target_ops_with_every_plan_field():
    pairs = [Pair("MatMul", "mm", "t", 0, None, None, "", "", [], "fused into fused_op", ("x", "w")),
             Pair("Relu", "relu", "u", 0, None, None, "fused_op", "MatMulV2", ["mm", "relu"], "", ("x", "w")),
             Pair("Mul", "mul", "y", 0, None, None, "mul", "Mul", [], "", ("u", "two"))]
    df = pd.DataFrame([_row("t", "", "fused into fused_op"), _row("u", "fp16"), _row("y", "fp32")])
    plan = plan_of_pairs(pairs, df, ["y"])
    assert all(isinstance(k, KernelSpec) for k in plan.kernels)
    assert [(k.name, k.nodes, k.outputs, k.precision) for k in plan.kernels] == [
        ("fused_op", ["mm", "relu"], ["u"], ""), ("mul", ["mul"], ["y"], "")]  # dumps do not show compute dtypes
    assert kernel_inputs(plan) == {"fused_op": ["x", "w"], "mul": ["u", "two"]}
    assert plan.graph_outputs == ["y"] and plan.tensors["u"].dtype == "float16"
