"""The compiled plan: kernels in execution order, tensors with storage dtypes and arena offsets.

The plan is plain data (JSON-serialisable through :meth:`Plan.to_json`); the runtime builds executable kernels
from it and the model it was compiled from.

plan.json format (version 1)::

    {"version": 1, "model": "<file>", "config": {...}, "arena_bytes": int, "lower_bound_bytes": int,
     "alignment": int,
     "kernels": [{"name", "op_type", "op_class", "precision", "implmode", "rule", "fusion",
                  "nodes": [original node names], "inputs": [...], "outputs": [...], "internal": [...],
                  "cast_of": tensor or null, "placement": "NPU"|"CPU", "exec_nodes": [...]}],
     "tensors": [{"name", "dtype", "shape", "nbytes", "storage": "arena"|"dynamic"|"host",
                  "offset", "first", "last", "producer", "stream": "npu"|"cpu", "alias_of": tensor or null}],
     "folded": [tensor names computed at compile time], "graph_inputs": [...], "graph_outputs": [...]}

``first``/``last`` are kernel indices (0-based; -1 = before the first kernel, i.e. a graph input);
``offset``/``nbytes`` are bytes into the one device arena. ``first`` is the step that writes the tensor,
``last`` the last step whose read of it may still be in flight (stream-aware: a CPU-placed reader holds it
until the NPU stream synchronises with it, toolkit.memory.lifetimes; graph outputs: ``len(kernels)``).
``stream`` is the stream of its writer; ``alias_of`` names the tensor whose bytes it shares on purpose (a view
or an in-place output; the ``aggressive`` policy). Fields missing from a hand-written plan take these defaults:
stream "npu", alias_of null.

``storage``: ``arena`` (device, at ``offset``), ``dynamic`` (device, data-dependent shape, allocated when
produced), ``host`` (host memory: outputs of CPU-placed kernels, string and non-tensor values; never in the
arena). Placement: a kernel with ``placement`` "CPU" runs on the host (AI_CPU) in FP32. Host-device copies are
kernels of their own with ``fusion`` "copy": ``op_type`` "MemcpyD2H" (placement "CPU") writes
``<tensor>::d2h`` in host memory for CPU readers of a device tensor; "MemcpyH2D" (placement "NPU") writes
``<tensor>::h2d`` on the device for NPU readers of a host tensor (``#2``, ``#3`` appended if the model already
has that name). A copy's (and a Cast's) ``cast_of`` is the ONNX tensor whose value it carries, so every
derived name maps back to one ONNX name; ONNX tensors keep their own names wherever they are stored.

``npuscope memcheck --plan`` and ``npuscope run --plan`` load this format
(:func:`load_plan`); offsets and lifetimes may be edited by hand, kernels and tensor layouts may not.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field


@dataclass
class KernelSpec:
    """One unit of device work.

    Attributes:
        name: unique kernel name (the anchor node's name for fused kernels).
        op_type: the anchor op type, or the fused op's name (e.g. ``LayerNorm``).
        op_class: numerics-contract class (toolkit.precision.contract).
        nodes: original ONNX node names executed by this kernel (provenance), in order.
        rule: the fusion rule that created it, or ``None``.
        fusion: ``none`` | ``graph`` | ``ub`` (buffer fusion) | ``cast`` | ``copy`` (host-device copy).
        inputs / outputs: tensor names read / written (outputs are visible outside the kernel).
        internal: ONNX tensors the fusion kept on chip (never written to the arena).
        precision: ``fp16`` or ``fp32`` (storage dtype of its float32 outputs and compute dtype of its inputs).
        implmode: ``high_precision`` | ``high_performance``.
        cast_of: for inserted Cast and copy kernels, the ONNX tensor whose value they carry.
        placement: ``NPU`` or ``CPU`` (AI_CPU: ops the NPU does not support or ``op_placement`` puts there,
            and ``MemcpyD2H`` copies; always FP32). A copy's placement is its destination side.
    """

    name: str
    op_type: str
    op_class: str
    nodes: list[str]
    rule: str | None = None
    fusion: str = "none"
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    internal: list[str] = field(default_factory=list)
    precision: str = "fp32"
    implmode: str = "high_precision"
    cast_of: str | None = None
    placement: str = "NPU"
    exec_nodes: list[str] = field(default_factory=list)  # names of the compiled-graph nodes it executes

    def copy(self) -> "KernelSpec":
        """An independent copy (each list field copied; the other fields are strings or None): what
        ``copy.deepcopy`` gives, ~10x faster (a tune trial copies every kernel of the partition snapshot)."""
        k = copy.copy(self)
        k.nodes, k.inputs, k.outputs = list(self.nodes), list(self.inputs), list(self.outputs)
        k.internal, k.exec_nodes = list(self.internal), list(self.exec_nodes)
        return k


@dataclass
class TensorSpec:
    """A tensor the runtime stores. dtype is the *storage* numpy dtype name; shape has ints (None if dynamic)."""

    name: str
    dtype: str
    shape: list | None
    nbytes: int = 0
    storage: str = "arena"
    offset: int = -1
    first: int = -1
    last: int = -1
    producer: str | None = None
    stream: str = "npu"
    alias_of: str | None = None


@dataclass
class Plan:
    model: str
    config: dict
    kernels: list[KernelSpec]
    tensors: dict[str, TensorSpec]
    graph_inputs: list[str]
    graph_outputs: list[str]
    folded: list[str] = field(default_factory=list)
    arena_bytes: int = 0
    lower_bound_bytes: int = 0
    alignment: int = 512
    version: int = 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tensors"] = [asdict(t) for t in self.tensors.values()]
        return d

    def to_json(self, path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=1)

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        d = dict(d)
        d["kernels"] = [KernelSpec(**k) for k in d["kernels"]]
        d["tensors"] = {t["name"]: TensorSpec(**t) for t in d["tensors"]}
        return cls(**d)

    # ------------------------------------------------------------------ queries
    def kernel_of_tensor(self) -> dict[str, KernelSpec]:
        """{tensor name: kernel that writes it or fused it away}."""
        out = {}
        for k in self.kernels:
            for t in k.outputs + k.internal:
                out.setdefault(t, k)
        return out

    def precision_counts(self) -> dict[str, int]:
        """{"fp16": n, "fp32": n, "cast": n, "copy": n} kernel counts (Casts and copies counted apart)."""
        counts: dict[str, int] = {}
        for k in self.kernels:
            key = k.fusion if k.fusion in ("cast", "copy") else k.precision
            counts[key] = counts.get(key, 0) + 1
        return counts

    def placement_counts(self) -> dict[str, int]:
        """{"NPU": n, "CPU": n, "MemcpyH2D": n, "MemcpyD2H": n}: compute kernels per placement (Casts count as
        NPU kernels), and copy kernels per direction."""
        counts = {"NPU": 0, "CPU": 0, "MemcpyH2D": 0, "MemcpyD2H": 0}
        for k in self.kernels:
            key = k.op_type if k.fusion == "copy" else k.placement
            counts[key] = counts.get(key, 0) + 1
        return counts
