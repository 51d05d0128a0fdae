"""The plan two dump sets imply: a :class:`toolkit.compiler.plan.Plan` whose kernels are the target's ops.

compare-dumps compiles nothing, yet compare's advisor (:func:`toolkit.compare.advisor.advise`) reads a plan:
kernel names, the ONNX nodes each kernel ran, the tensors it reads and writes, its precision. This module
builds that plan from the pairs (:mod:`toolkit.dumps.match`) and their result rows (:mod:`toolkit.dumps.table`)
with the real ``KernelSpec`` / ``TensorSpec`` records, so every field the advisor may read exists (an ad-hoc
object with only ``name`` and ``nodes`` made the advisor fail on ``cast_of`` as soon as a tensor was abnormal).

One kernel per ``Kernel`` value of the table (the target's device op or npuscope kernel; a row without one
stands for its own node): ``nodes`` = the mapping's originals (``FusedNodes``) or the row's node, ``inputs`` =
the ONNX tensors its node or fused group reads (empty without a model), ``outputs`` = the tensors of its rows,
``precision`` = "" (unknown: a dump shows the dtype an output was stored in, not the one the op computed in; the
advisor then gives keep_dtype advice as a candidate), ``op_type`` = the device op type (else the ONNX op type),
``op_class`` from the numerics contract by the ONNX op type; ``tensors`` carry the dumped dtype (the target's,
else the golden's). No offsets, lifetimes or casts: dumps carry none (``cast_of`` None, ``storage`` "host").
"""

from __future__ import annotations

import pandas as pd

from toolkit.compiler.plan import KernelSpec, Plan, TensorSpec
from toolkit.precision.contract import op_class

from .match import Pair


def plan_of_pairs(pairs: list[Pair], df: pd.DataFrame, outputs: list[str] | None = None) -> Plan:
    """The plan of ``pairs`` (rows of ``df`` in the same order, see module docstring). ``outputs``: the model's
    output tensors (None without a model). Raises nothing: missing values give empty fields."""
    kernels: dict[str, KernelSpec] = {}
    tensors: dict[str, TensorSpec] = {}
    for p, (_, r) in zip(pairs, df.iterrows()):
        if str(r.get("CompareFailReason") or "").startswith("fused into"):
            continue  # kept on chip by the device op: written by no kernel of its own
        name = p.kernel or p.node
        k = kernels.get(name)
        if k is None:
            k = kernels[name] = KernelSpec(name, p.kernel_op_type or p.op_type, op_class(p.op_type).name,
                                           list(p.fused) or [p.node], inputs=list(p.inputs), precision="")
        elif p.node not in k.nodes:
            k.nodes.append(p.node)
            k.inputs += [t for t in p.inputs if t not in k.inputs]
        if p.tensor not in k.outputs:
            k.outputs.append(p.tensor)
        dtype = str(r.get("DataType") or r.get("GroundTruthDataType") or "")
        tensors[p.tensor] = TensorSpec(p.tensor, dtype if dtype != "nan" else "", None, storage="host",
                                       producer=name)
    for k in kernels.values():  # a tensor a fused group writes itself is no input of it
        k.inputs = [t for t in k.inputs if t not in k.outputs]
    return Plan(model="", config={}, kernels=list(kernels.values()), tensors=tensors, graph_inputs=[],
                graph_outputs=list(outputs or []))
