"""True tensor lifetimes from a plan's kernel list, stream-aware.

A tensor is *written* at the step of the kernel that outputs it (graph inputs at step -1, when the runtime
copies the feeds in) and *read* at every step whose kernel lists it as an input (graph outputs once more at
step ``len(kernels)``, when the results are read back).

Streams: NPU-placed kernels run in order on the NPU stream. A CPU-placed kernel (AI_CPU: control flow,
NonMaxSuppression, ``MemcpyD2H`` copies, ...) is launched at its step on the ``cpu`` stream and runs
asynchronously; the NPU stream only waits for it (an event) at the first later NPU kernel that reads one of
its outputs or an output of a later CPU kernel (:func:`sync_step`; or at the end of the graph). So a tensor read by a CPU kernel at step ``s`` stays live until that synchronising step, not
until ``s``: a planner that uses kernel order only frees it too early and the NPU stream can re-use its
bytes while the CPU op still reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Lifetime:
    """first: step of the write (-1 for graph inputs); last: last step at which the bytes are still read
    (stream-aware); reads: the steps of the kernels that read it, in order (``n`` = graph output read-back);
    stream: ``npu`` or ``cpu`` (the stream of the kernel that writes it)."""

    first: int
    last: int
    reads: list[int] = field(default_factory=list)
    stream: str = "npu"
    read_end: dict[int, int] = field(default_factory=dict)  # read step -> step at which that read has ended


def sync_step(kernels, s: int) -> int:
    """The step at which the NPU stream knows CPU kernel ``s`` has finished: the first later NPU kernel that
    reads an output of ``s`` or of a CPU kernel launched after it (the CPU stream runs in order, so waiting for
    a later CPU kernel waits for ``s`` too), else ``len(kernels)`` (end of graph). With host-device copies the
    NPU reader is the ``MemcpyH2D`` of a CPU result."""
    outs = set(kernels[s].outputs)
    for j in range(s + 1, len(kernels)):
        k = kernels[j]
        if k.placement == "CPU":
            outs.update(k.outputs)
        elif outs.intersection(k.inputs):
            return j
    return len(kernels)


def lifetimes(kernels, graph_inputs, graph_outputs, stream_aware: bool = True) -> dict[str, Lifetime]:
    """{tensor: Lifetime} for every tensor a kernel reads or writes (see module docstring).

    Args:
        kernels: KernelSpec list in execution order (``inputs``, ``outputs``, ``placement``).
        graph_inputs / graph_outputs: tensor names.
        stream_aware: extend reads of CPU-placed kernels to their synchronising step; ``False`` gives
            lifetimes by kernel order only.
    """
    n = len(kernels)
    out: dict[str, Lifetime] = {t: Lifetime(-1, -1) for t in graph_inputs}
    for i, k in enumerate(kernels):
        end = sync_step(kernels, i) if stream_aware and k.placement == "CPU" else i
        for t in k.inputs:
            lt = out.setdefault(t, Lifetime(i, i))
            lt.reads.append(i)
            lt.read_end[i] = max(lt.read_end.get(i, i), end)
            lt.last = max(lt.last, end)
        for t in k.outputs:  # kernels are in topological order: a tensor is written before it is read
            out[t] = Lifetime(i, i, stream="cpu" if k.placement == "CPU" else "npu")
    for t in graph_outputs:
        if t in out:
            out[t].reads.append(n)
            out[t].read_end[n] = n
            out[t].last = n
    return out
