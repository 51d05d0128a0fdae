"""Which kernels may share bytes between an input and an output (the ``aggressive`` policy), and the test the
static checker uses to accept such a share.

- **in-place**: an elementwise kernel writes its output over one input of the same shape and dtype whose
  bytes nobody reads afterwards. Kernels are onnxruntime sessions bound to arena addresses; only op types in
  :data:`INPLACE_OPS` are allowed, each verified to give bit-identical results when input and output are bound
  to the same address, in FP32 and FP16 (tests/test_memcheck_inplace.py).
- **view**: Reshape/Flatten/Squeeze/Unsqueeze/Identity outputs take their input's offset; the kernel still runs
  and copies the bytes onto themselves (verified safe by the same test), so the base keeps its content and
  both stay readable. The base's block lives as long as any view of it.
"""

from __future__ import annotations

#: Single-node elementwise kernels whose onnxruntime CPU kernel is verified in-place safe.
INPLACE_OPS = frozenset({"Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf",
                         "HardSwish", "HardSigmoid", "LeakyRelu", "Clip", "Softplus",
                         "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"})
#: Data-movement kernels planned as views of their input (same bytes, new shape).
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def _single_node(k) -> bool:
    return k.fusion == "none" and len(k.nodes) == 1 and k.placement == "NPU"


def same_layout(a, b) -> bool:
    """Same storage dtype and byte size (TensorSpecs)."""
    return a.dtype == b.dtype and a.nbytes == b.nbytes and a.storage == b.storage == "arena"


def is_view(k, src, dst) -> bool:
    """Kernel ``k`` makes ``dst`` a view of its first input ``src`` (TensorSpecs)."""
    return _single_node(k) and k.op_type in VIEW_OPS and k.inputs[:1] == [src.name] and same_layout(src, dst)


def can_inplace(k, src, dst) -> bool:
    """Kernel ``k`` may write ``dst`` over its input ``src`` (same shape and dtype, verified op type)."""
    return (_single_node(k) and k.op_type in INPLACE_OPS and src.name in k.inputs and len(k.outputs) == 1
            and same_layout(src, dst) and list(src.shape or []) == list(dst.shape or []))


def benign_share(k, src, dst) -> bool:
    """Writing ``dst`` at ``src``'s exact offset is safe for kernel ``k`` (a view, or a verified in-place)."""
    return src.offset == dst.offset and (is_view(k, src, dst) or can_inplace(k, src, dst))


def find_aliases(kernels, tensors, life, exclusive: set[str]) -> dict[str, tuple[str, str]]:
    """{tensor: (tensor it shares bytes with, "view" | "inplace")} for the aggressive policy.

    A view always aliases. An in-place output aliases an input whose whole alias group (the input, its views,
    what it was made in place from) has no read after this step. Tensors in ``exclusive`` (disable_reuse)
    never alias. ``life``: {tensor: Lifetime} (toolkit.memory.lifetimes).
    """
    root: dict[str, str] = {}
    group_last: dict[str, int] = {}

    def find(t):
        while root.get(t, t) != t:
            t = root[t]
        return t

    out: dict[str, tuple[str, str]] = {}
    for i, k in enumerate(kernels):
        if len(k.outputs) != 1 or k.outputs[0] in exclusive:
            continue
        dst = tensors.get(k.outputs[0])
        if dst is None or dst.storage != "arena":
            continue
        for name in dict.fromkeys(k.inputs):
            src = tensors.get(name)
            if src is None or name in exclusive or src.storage != "arena":
                continue
            r = find(name)
            last = group_last.get(r, life[name].last)
            if is_view(k, src, dst):
                kind = "view"
            elif can_inplace(k, src, dst) and last <= i and life[dst.name].stream == "npu":
                kind = "inplace"
            else:
                continue
            out[dst.name] = (name, kind)
            root[dst.name] = r
            group_last[r] = max(last, life[dst.name].last)
            break
    return out
