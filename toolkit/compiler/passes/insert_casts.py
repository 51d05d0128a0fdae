"""Pass ``insert_casts``: real Cast kernels wherever a float32-origin tensor is stored in one precision and
read by a kernel of the other. One Cast per (tensor, target) is shared by all readers. Cast output tensors
are named ``<tensor>__cast_fp16`` / ``__cast_fp32``; KernelSpec.cast_of names the source.
"""

from __future__ import annotations

from toolkit.compiler.pipeline import PassResult, register_pass
from toolkit.compiler.plan import KernelSpec


@register_pass("insert_casts", requires=("precision",), provides=("casts",))
def run(ctx) -> PassResult:
    g = ctx.graph
    storage = {t: "fp32" for t in g.inputs}
    made: dict[tuple[str, str], str] = {}
    out: list[KernelSpec] = []
    for k in ctx.kernels:
        new_inputs = []
        for t in k.inputs:
            have = storage.get(t)
            if have is None or not g.is_float32(t) or have == k.precision:
                new_inputs.append(t)
                continue
            key = (t, k.precision)
            if key not in made:
                name = f"{t}__cast_{k.precision}"
                made[key] = name
                out.append(KernelSpec(name=f"Cast_{name}", op_type="Cast", op_class="vector", nodes=[],
                                      rule=None, fusion="cast", inputs=[t], outputs=[name],
                                      precision=k.precision, implmode="high_precision", cast_of=t,
                                      placement=k.placement if k.placement == "NPU" else "NPU"))
                storage[name] = k.precision
            new_inputs.append(made[key])
        k.inputs = new_inputs
        out.append(k)
        for t in k.outputs:
            storage[t] = k.precision if g.is_float32(t) else "native"
    ctx.kernels = out
    return PassResult(len(made), [f"{len(made)} Cast kernels inserted"])
