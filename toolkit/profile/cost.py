"""The cost model: simulated time of every kernel of a plan on a :class:`~toolkit.profile.device.DeviceProfile`.

Formulas (times in µs; FLOPs from toolkit.profile.flops; bytes = storage bytes read and written):

- NPU kernel (roofline, Williams, Waterman & Patterson, "Roofline: an insightful visual performance model for
  multicore architectures", CACM 52(4), 2009)::

      compute_us = cube_flops / (cube_tflops[p] · 1e6) + vector_flops / (vector_tflops[p] · 1e6)
      memory_us  = bytes / (memory_bandwidth_gbps · 1e3)
      duration   = max(compute_us, memory_us) + launch_overhead_us

  ``p`` is the kernel's precision (fp16 / fp32). Bytes are the kernel's inputs and outputs in their storage
  dtype plus the weights its nodes read (2 bytes per float weight element in an FP16 kernel, converted at
  compile time); tensors a fusion keeps on chip (``internal``) cost no bytes, launches are per kernel: that is
  what fusion saves. View kernels (single-node Reshape/Flatten/Squeeze/Unsqueeze/Identity) are metadata on a
  device: 0 µs, no launch.
- CPU-placed kernel (FP32 on the host, same roofline with the host's figures)::

      duration = max(flops / (host_gflops · 1e3), host_bytes / (host_memory_bandwidth_gbps · 1e3))
                 + host_op_overhead_us          (host_bytes: float tensors counted at 4 bytes/element)

- Host-device copy (MemcpyH2D / MemcpyD2H kernels, and transfers the schedule derives)::

      duration = host_device_latency_us + bytes / (h2d_bandwidth_gbps or d2h_bandwidth_gbps · 1e3)

:func:`kernel_costs` returns one row per plan kernel, in plan order, with columns :data:`COST_COLUMNS`:
Index, Kernel, OpType, OpClass, Nodes (';'-joined), Placement (NPU/CPU), Stream (npu/copy/host), Precision,
Fusion, CubeFlops, VectorFlops, Flops, Bytes, HostBytes, ComputeUs, MemoryUs, LaunchUs, DurationUs, Bound
(compute/memory/launch/view/host/transfer), TaskType (the profiler's: AI_CORE, AI_VECTOR_CORE, HOST_CPU,
MEMCPY), IsView, InputShapes, InputDtypes, OutputShapes, OutputDtypes (';'-joined).
"""

from __future__ import annotations

import numpy as np
import onnx
import pandas as pd

from toolkit.compiler.plan import KernelSpec, Plan
from toolkit.memory.aliases import VIEW_OPS
from toolkit.profile.device import DeviceProfile
from toolkit.profile.flops import node_flops, numel

COST_COLUMNS = ["Index", "Kernel", "OpType", "OpClass", "Nodes", "Placement", "Stream", "Precision", "Fusion",
                "CubeFlops", "VectorFlops", "Flops", "Bytes", "HostBytes", "ComputeUs", "MemoryUs", "LaunchUs",
                "DurationUs", "Bound", "TaskType", "IsView", "InputShapes", "InputDtypes", "OutputShapes",
                "OutputDtypes"]
COPY_OPS = {"MemcpyH2D": "h2d", "MemcpyD2H": "d2h"}


# ---------------------------------------------------------------- formulas
def npu_time(cube_flops: float, vector_flops: float, nbytes: float, precision: str,
             dev: DeviceProfile) -> tuple[float, float, float]:
    """(compute_us, memory_us, launch_us) of a device kernel (module docstring)."""
    fp16 = precision == "fp16"
    cube = dev.cube_fp16_tflops if fp16 else dev.cube_fp32_tflops
    vec = dev.vector_fp16_tflops if fp16 else dev.vector_fp32_tflops
    compute = cube_flops / (cube * 1e6) + vector_flops / (vec * 1e6)
    return compute, nbytes / (dev.memory_bandwidth_gbps * 1e3), dev.launch_overhead_us


def host_time(flops: float, nbytes: float, dev: DeviceProfile) -> tuple[float, float, float]:
    """(compute_us, memory_us, overhead_us) of a CPU-placed kernel (module docstring)."""
    return flops / (dev.host_gflops * 1e3), nbytes / (dev.host_memory_bandwidth_gbps * 1e3), dev.host_op_overhead_us


def copy_time(nbytes: float, direction: str, dev: DeviceProfile) -> float:
    """µs of one host-device copy of ``nbytes``; ``direction`` 'h2d' or 'd2h'."""
    bw = dev.h2d_bandwidth_gbps if direction == "h2d" else dev.d2h_bandwidth_gbps
    return dev.host_device_latency_us + nbytes / (bw * 1e3)


def stream_of(k: KernelSpec) -> str:
    """'copy' for copy kernels, 'host' for CPU-placed ones, else 'npu'."""
    if k.fusion == "copy" or k.op_type in COPY_OPS:
        return "copy"
    return "host" if k.placement == "CPU" else "npu"


# ---------------------------------------------------------------- graph facts
class GraphFacts:
    """Shapes, element types and initializers of a compiled graph, plus the plan's tensors."""

    def __init__(self, plan: Plan, model: onnx.ModelProto | None):
        self.plan = plan
        self.shapes: dict[str, list] = {}
        self.itemsize: dict[str, int] = {}
        self.inits: set[str] = set()
        self.nodes: dict[str, onnx.NodeProto] = {}
        if model is not None:
            self._index(model)
        for t in plan.tensors.values():
            if t.shape is not None:
                self.shapes[t.name] = list(t.shape)
            self.itemsize[t.name] = np.dtype(t.dtype).itemsize if t.dtype not in ("", "object") else 0

    def _index(self, model: onnx.ModelProto) -> None:
        g = model.graph
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            tt = vi.type.tensor_type
            if tt.HasField("shape"):
                self.shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if tt.elem_type:
                self.itemsize[vi.name] = _itemsize(tt.elem_type)
        for init in g.initializer:
            self.shapes[init.name] = list(init.dims)
            self.itemsize[init.name] = _itemsize(init.data_type)
            self.inits.add(init.name)
        self.nodes = {n.name: n for n in g.node}

    def shape(self, name: str | None):
        return self.shapes.get(name) if name else None

    def exec_nodes(self, k: KernelSpec) -> list[onnx.NodeProto]:
        return [self.nodes[n] for n in (k.exec_nodes or k.nodes) if n in self.nodes]


def _itemsize(elem_type: int) -> int:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 0


def tensor_bytes(facts: GraphFacts, name: str) -> int:
    """Storage bytes of a plan tensor (its nbytes, else numel · itemsize)."""
    t = facts.plan.tensors.get(name)
    if t is not None and t.nbytes:
        return int(t.nbytes)
    return numel(facts.shape(name)) * facts.itemsize.get(name, 4)


def _weight_names(facts: GraphFacts, k: KernelSpec) -> list[str]:
    seen = set(k.inputs) | set(k.outputs)
    out = []
    for node in facts.exec_nodes(k):
        for i in node.input:
            if i in facts.inits and i not in seen:
                seen.add(i)
                out.append(i)
    return out


def kernel_bytes(facts: GraphFacts, k: KernelSpec) -> tuple[int, int]:
    """(device bytes, host bytes) moved by kernel ``k`` (module docstring)."""
    dev, host = 0, 0
    for name in list(dict.fromkeys(k.inputs + k.outputs)):
        n = tensor_bytes(facts, name)
        dev += n
        host += _as_fp32(facts, name, n)
    for w in _weight_names(facts, k):
        n = numel(facts.shape(w))
        size = facts.itemsize.get(w, 4)
        dev += n * (2 if k.precision == "fp16" and size == 4 and k.placement == "NPU" else size)
        host += n * size
    return dev, host


def _as_fp32(facts: GraphFacts, name: str, nbytes: int) -> int:
    t = facts.plan.tensors.get(name)
    return nbytes * 2 if t is not None and t.dtype == "float16" else nbytes


def kernel_flops(facts: GraphFacts, k: KernelSpec) -> tuple[float, float]:
    cube = vec = 0.0
    for node in facts.exec_nodes(k):
        c, v = node_flops(node, facts.shape)
        cube, vec = cube + c, vec + v
    return cube, vec


# ---------------------------------------------------------------- the table
def is_view(k: KernelSpec) -> bool:
    """A single-node view op on the NPU: metadata only on a device."""
    return k.placement == "NPU" and k.fusion == "none" and len(k.nodes) == 1 and k.op_type in VIEW_OPS


def task_type(k: KernelSpec, cube_flops: float) -> str:
    stream = stream_of(k)
    if stream == "copy":
        return "MEMCPY"
    if stream == "host":
        return "HOST_CPU"
    return "AI_CORE" if cube_flops > 0 or k.op_class == "cube" else "AI_VECTOR_CORE"


def time_row(stream: str, row: dict, dev: DeviceProfile, direction: str = "h2d") -> dict:
    """Fill ComputeUs/MemoryUs/LaunchUs/DurationUs/Bound of a row from its FLOPs and bytes on ``stream``."""
    if stream == "copy":
        dur = copy_time(row["Bytes"], direction, dev)
        row.update(ComputeUs=0.0, MemoryUs=dur - dev.host_device_latency_us, LaunchUs=dev.host_device_latency_us,
                   DurationUs=dur, Bound="transfer")
        return row
    if stream == "host":
        c, m, o = host_time(row["Flops"], row["HostBytes"], dev)
        row.update(ComputeUs=c, MemoryUs=m, LaunchUs=o, DurationUs=max(c, m) + o, Bound="host")
        return row
    if row.get("IsView"):
        row.update(ComputeUs=0.0, MemoryUs=0.0, LaunchUs=0.0, DurationUs=0.0, Bound="view")
        return row
    c, m, lo = npu_time(row["CubeFlops"], row["VectorFlops"], row["Bytes"], row["Precision"], dev)
    bound = "launch" if lo >= max(c, m) else ("compute" if c >= m else "memory")
    row.update(ComputeUs=c, MemoryUs=m, LaunchUs=lo, DurationUs=max(c, m) + lo, Bound=bound)
    return row


def _io_strings(facts: GraphFacts, names: list[str]) -> tuple[str, str]:
    shapes = ";".join(",".join(str(d) for d in (facts.shape(n) or [])) for n in names)
    dtypes = ";".join(facts.plan.tensors[n].dtype if n in facts.plan.tensors else "" for n in names)
    return shapes, dtypes


def kernel_row(facts: GraphFacts, i: int, k: KernelSpec, dev: DeviceProfile) -> dict:
    cube, vec = kernel_flops(facts, k)
    nbytes, host_bytes = kernel_bytes(facts, k)
    stream = stream_of(k)
    if stream == "copy":
        nbytes = host_bytes = tensor_bytes(facts, k.inputs[0]) if k.inputs else 0
    in_s, in_d = _io_strings(facts, k.inputs)
    out_s, out_d = _io_strings(facts, k.outputs)
    row = {"Index": i, "Kernel": k.name, "OpType": k.op_type, "OpClass": k.op_class, "Nodes": ";".join(k.nodes),
           "Placement": k.placement, "Stream": stream, "Precision": k.precision, "Fusion": k.fusion,
           "CubeFlops": cube, "VectorFlops": vec, "Flops": cube + vec, "Bytes": float(nbytes),
           "HostBytes": float(host_bytes), "TaskType": task_type(k, cube), "IsView": is_view(k),
           "InputShapes": in_s, "InputDtypes": in_d, "OutputShapes": out_s, "OutputDtypes": out_d}
    return time_row(stream, row, dev, COPY_OPS.get(k.op_type, "h2d"))


def kernel_costs(plan: Plan, model: onnx.ModelProto | None, device: DeviceProfile) -> pd.DataFrame:
    """One row per kernel of ``plan`` with its simulated cost (columns :data:`COST_COLUMNS`, module docstring).

    Args:
        plan: the compiled plan.
        model: the compiled graph (CompileResult.model) for node shapes and weights; ``None`` counts only
            the plan's tensors (no FLOPs).
        device: the device profile.
    """
    facts = GraphFacts(plan, model)
    rows = [kernel_row(facts, i, k, device) for i, k in enumerate(plan.kernels)]
    return pd.DataFrame(rows, columns=COST_COLUMNS)


def as_placed(row: dict, placement: str, dev: DeviceProfile) -> dict:
    """A copy of a cost row re-timed as if the kernel were placed on ``placement`` ('CPU' or 'NPU')."""
    new = dict(row)
    stream = "host" if placement == "CPU" else "npu"
    new.update(Placement=placement, Stream=stream, TaskType="HOST_CPU" if stream == "host" else row["TaskType"])
    if stream == "host":
        new["IsView"] = False
    return time_row(stream, new, dev)
