"""Pass ``insert_copies``: real host-device copy kernels wherever a kernel reads a tensor stored on the other
side.

Where a tensor lives: outputs of CPU-placed kernels, and non-tensor / string graph inputs, in host memory;
every other tensor (graph inputs, NPU kernel outputs, Cast outputs) on the device. A CPU kernel reading a
device tensor gets a ``MemcpyD2H`` kernel (placement ``CPU``, output ``<tensor>::d2h`` in host memory); an NPU
kernel (or Cast) reading a host tensor gets a ``MemcpyH2D`` kernel (placement ``NPU``, output ``<tensor>::h2d``
on the device: in the arena when its shape is static). One copy per (tensor, direction), inserted right before
its first reader and shared by all later readers, as Cast kernels are. Graph outputs need no copy: the
runtime reads results back from either side.

Runs after ``insert_casts`` (Casts are NPU kernels, so an FP16 reader of a CPU result reads a Cast of the H2D
copy, and a CPU reader of an FP16 tensor reads the D2H copy of its FP32 Cast: copies carry the CPU side's
FP32 data) and before ``check_constants``/``plan_memory`` (copies are planned like any kernel output).

A copy kernel's ``cast_of`` names the ONNX tensor whose value it carries (through a Cast if it copies one),
so the runtime, the comparison and the dumps can map ``x::d2h`` back to ``x``.
"""

from __future__ import annotations

from toolkit.compiler.context import PassResult
from toolkit.compiler.passes.place_ops import is_host_value
from toolkit.compiler.plan import KernelSpec
from toolkit.compiler.registry import register_pass

#: {direction: (op_type, tensor suffix, placement of the destination side)}
COPIES = {"d2h": ("MemcpyD2H", "::d2h", "CPU"), "h2d": ("MemcpyH2D", "::h2d", "NPU")}


def copy_name(tensor: str, direction: str, taken: set[str]) -> str:
    """``<tensor>::d2h`` / ``<tensor>::h2d``; ``#2``, ``#3``, ... appended if the model already uses the name."""
    base = tensor + COPIES[direction][1]
    name, n = base, 2
    while name in taken:
        name, n = f"{base}#{n}", n + 1
    return name


def _side(k) -> str:
    return "host" if k.placement == "CPU" else "device"


def _copy(t, name, direction, source, precision, kernel_names) -> KernelSpec:
    op, _, placement = COPIES[direction]
    kname, n = f"{op}_{t}", 2
    while kname in kernel_names:
        kname, n = f"{op}_{t}#{n}", n + 1
    kernel_names.add(kname)
    return KernelSpec(name=kname, op_type=op, op_class="data_movement", nodes=[], rule=None, fusion="copy",
                      inputs=[t], outputs=[name], precision=precision, implmode="high_precision",
                      cast_of=source, placement=placement)


@register_pass("insert_copies", requires=("casts",), provides=("copies",))
def run(ctx) -> PassResult:
    g = ctx.graph
    where = {t: "host" if is_host_value(g, t) else "device" for t in g.inputs}
    source: dict[str, str] = {}     # derived tensor (Cast / copy output) -> ONNX tensor it carries
    precision = {t: "fp32" for t in g.inputs}
    taken = set(g.types) | set(g.producer) | set(g.inputs) | {o for k in ctx.kernels for o in k.outputs}
    kernel_names = {k.name for k in ctx.kernels}
    made: dict[tuple[str, str], str] = {}
    out: list[KernelSpec] = []
    log = []
    for k in ctx.kernels:
        side = _side(k)
        new_inputs = []
        for t in k.inputs:
            have = where.get(t)
            if have is None or have == side:
                new_inputs.append(t)
                continue
            direction = "d2h" if side == "host" else "h2d"
            if (t, direction) not in made:
                name = copy_name(t, direction, taken)
                taken.add(name)
                cp = _copy(t, name, direction, source.get(t, t), precision.get(t, "fp32"), kernel_names)
                out.append(cp)
                made[(t, direction)] = name
                where[name], source[name], precision[name] = side, source.get(t, t), precision.get(t, "fp32")
                log.append(f"{cp.op_type} {t} -> {name} (first reader {k.name})")
            new_inputs.append(made[(t, direction)])
        k.inputs = new_inputs
        out.append(k)
        for t in k.outputs:
            where[t] = side
            src = k.cast_of or t
            precision[t] = k.precision if g.is_float32(src) else "fp32"
            if k.cast_of:
                source[t] = k.cast_of
    ctx.kernels = out
    n_h2d = sum(1 for _, d in made if d == "h2d")
    log.insert(0, f"{len(made)} copy kernels inserted ({n_h2d} MemcpyH2D, {len(made) - n_h2d} MemcpyD2H)")
    return PassResult(len(made), log)
