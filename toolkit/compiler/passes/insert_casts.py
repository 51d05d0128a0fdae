"""Pass ``insert_casts``: real Cast kernels wherever a float tensor is stored in one precision and read by a
kernel of the other. One Cast per (tensor, target) is shared by all readers. Cast output tensors are named
``<tensor>__cast_fp16`` / ``__cast_fp32``; KernelSpec.cast_of names the source.

Float tensors are those of ONNX type float32 ("FP32-origin") or float16 ("FP16-origin", e.g. a model exported
in FP16); other types (integers, bool, double, bfloat16) are never cast. Storage precision of a float tensor
(:func:`storage_precision`; plan_memory turns it into the plan's dtype):

- graph inputs: their origin dtype;
- ``must_keep_origin_dtype``: every float tensor keeps its origin dtype, and no Cast is inserted (a kernel
  reads each input in its origin dtype);
- an FP16-origin graph output keeps its declared float16 (a kernel computing in FP32 rounds it once at its
  output, which is the model's final Cast back to float16);
- otherwise the precision of the kernel that writes it: an FP32 kernel stores FP16-origin outputs in FP32
  (force_fp32, keep_dtype, black list, CPU), an FP16 kernel stores FP32-origin outputs in FP16.

A kernel reads every float input in its own precision: FP16-origin inputs of an FP32 kernel are cast up
(exact), FP32-origin inputs of an FP16 kernel cast down (rounded), FP32-stored FP16-origin inputs of an FP16
kernel cast back down.
"""

from __future__ import annotations

from onnx import TensorProto

from toolkit.compiler.context import PassResult
from toolkit.compiler.plan import KernelSpec
from toolkit.compiler.registry import register_pass

#: ONNX element type -> precision name of the float types the precision passes handle.
FLOAT_ORIGINS = {TensorProto.FLOAT: "fp32", TensorProto.FLOAT16: "fp16"}


def origin(g, name: str) -> str | None:
    """``"fp32"`` / ``"fp16"`` for a float32 / float16 tensor of graph ``g``, ``None`` for any other or untyped."""
    vt = g.vtype(name)
    return FLOAT_ORIGINS.get(vt.elem_type) if vt is not None else None


def storage_precision(g, name: str, k: KernelSpec, mode: str, precision: str | None = None) -> str | None:
    """Storage precision (``fp16``/``fp32``) of tensor ``name`` written by kernel ``k`` under precision_mode
    ``mode`` when ``k`` has ``precision`` (default ``k.precision``); ``None`` for non-float tensors. Cast
    kernels store in their own precision (module docstring)."""
    precision = precision or k.precision
    o = origin(g, k.cast_of or name)
    if o is None:
        return None
    if k.fusion == "cast":
        return precision
    if mode == "must_keep_origin_dtype" or (o == "fp16" and name in g.outputs):
        return o
    return precision


def _cast(t: str, precision: str) -> KernelSpec:
    name = f"{t}__cast_{precision}"
    return KernelSpec(name=f"Cast_{name}", op_type="Cast", op_class="vector", nodes=[], rule=None, fusion="cast",
                      inputs=[t], outputs=[name], precision=precision, implmode="high_precision", cast_of=t,
                      placement="NPU")


@register_pass("insert_casts", requires=("precision",), provides=("casts",))
def run(ctx) -> PassResult:
    g = ctx.graph
    mode = ctx.config.precision_mode
    storage = {t: origin(g, t) for t in g.inputs}
    made: dict[tuple[str, str], str] = {}
    out: list[KernelSpec] = []
    for k in ctx.kernels:
        new_inputs = []
        for t in k.inputs:
            have = storage.get(t)
            if have is None or have == k.precision or mode == "must_keep_origin_dtype":
                new_inputs.append(t)
                continue
            key = (t, k.precision)
            if key not in made:
                cast = _cast(t, k.precision)
                made[key] = cast.outputs[0]
                out.append(cast)
                storage[cast.outputs[0]] = k.precision
            new_inputs.append(made[key])
        k.inputs = new_inputs
        out.append(k)
        for t in k.outputs:
            storage[t] = storage_precision(g, t, k, mode)
    ctx.kernels = out
    return PassResult(len(made), [f"{len(made)} Cast kernels inserted"])
