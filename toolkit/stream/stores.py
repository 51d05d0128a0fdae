"""Tensor stores of a streamed diagnosis: the reference's and the device's tensors as read-only mappings that keep
only some arrays in memory and compute any other one again from the boundary tensors stored for its segment.

They stand where an all-in-memory diagnosis passes ``{tensor: array}`` dicts (golden, device): origin isolation,
the advisor, triage, the reproducer and tune's ranking read them by name, and a value computed again equals the
one the streamed pass compared, bit for bit (the same onnxruntime sessions and kernels on the same inputs).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

from toolkit.ort.segments import SegmentedReference
from toolkit.stream.spill import DEFAULT_MEMORY_BYTES, SpillStore


def _copy(value):
    if isinstance(value, list):
        return [np.array(x, copy=True) for x in value]
    return None if value is None else np.array(value, copy=True)


def nbytes_of(value) -> int:
    """Bytes of an array or of a list of arrays (0 for anything else)."""
    if isinstance(value, list):
        return sum(nbytes_of(x) for x in value)
    return int(getattr(value, "nbytes", 0) or 0)


class _Recomputing(Mapping):
    """Kept arrays, else the value of the tensor's segment computed again (the last ``cache`` segments kept)."""

    def __init__(self, names, kept: dict, cache: int):
        self._names = list(dict.fromkeys(names))
        self._known = set(self._names)
        self.kept = kept
        self._cache: OrderedDict[int, dict] = OrderedDict()
        self._cache_size = cache
        #: segments computed again since the pass (for the report's timings and tests)
        self.recomputed = 0

    def _segment_of(self, name: str) -> int | None:
        raise NotImplementedError

    def _compute(self, index: int) -> dict:
        raise NotImplementedError

    def keep(self, name: str, value) -> None:
        """Keep a copy of ``value`` as ``name``'s array."""
        self.kept[name] = _copy(value)

    def __getitem__(self, name: str):
        if name in self.kept:
            return self.kept[name]
        if name not in self._known:
            raise KeyError(name)
        s = self._segment_of(name)
        if s is None:
            raise KeyError(name)
        values = self._cache.get(s)
        if values is None:
            values = self._compute(s)
            self.recomputed += 1
            self._cache[s] = values
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(s)
        return values[name]

    def __contains__(self, name) -> bool:
        return name in self._known

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class GoldenStore(_Recomputing):
    """The FP32 reference tensors of a streamed run ({tensor: array} as toolkit.diagnose's ``golden``).

    Args:
        reference: the segmented reference (toolkit.ort.segments.SegmentedReference).
        feeds: the graph inputs as fed (always kept).
        options: onnxruntime RunOptions for every segment run.
        cache: segments computed again that stay in memory (the most recently used).
        memory_bytes: bytes of boundary tensors held in memory; the rest go to disk (toolkit.stream.spill).

    :meth:`advance` runs the next segment during the streamed pass and stores its boundary tensors (those later
    segments read, and the graph outputs); every other tensor is computed again from them when asked for."""

    def __init__(self, reference: SegmentedReference, feeds: dict, options=None, cache: int = 2,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES):
        names = list(feeds)
        for seg in reference.segments:
            names += [t for t in seg.outputs + seg.exposed]
        consts = reference.constant_outputs()
        super().__init__(names + list(consts), {**feeds, **consts}, cache)
        self.reference, self.options = reference, options
        self.boundary = SpillStore(memory_bytes, "npuscope-reference-")
        self.done = -1

    def _segment_of(self, name: str) -> int | None:
        return self.reference.segment_of.get(name)

    def _inputs(self, index: int) -> Mapping:
        seg = self.reference.segments[index]
        return {t: self.boundary[t] if t in self.boundary else self.kept[t] for t in seg.inputs}

    def _compute(self, index: int) -> dict:
        return self.reference.run(index, self._inputs(index), self.options)

    def advance(self) -> tuple[int, dict]:
        """(index, {tensor: array}) of the next segment, run on the stored boundary; its ``outputs`` are stored as
        boundary tensors."""
        self.done += 1
        seg = self.reference.segments[self.done]
        values = self._compute(self.done)
        for t in seg.outputs:
            if t in values:
                self.boundary[t] = values[t]
        return self.done, values

    def boundary_bytes(self) -> int:
        """Bytes of the stored boundary tensors (in memory and on disk)."""
        return self.boundary.nbytes()


class DeviceStore(_Recomputing):
    """The device's tensors of a streamed run ({tensor: array} as toolkit.diagnose.device_tensors gives them:
    kernel outputs in their storage dtype, the feeds, graph outputs folded to constants).

    Args:
        runtime: the NpuRuntime of the pass; its arena is used again to compute a segment once the pass is over.
        feeds: the graph inputs as fed (kept).
        cuts: kernel indices where device segments start (0 first).
        cache: segments computed again that stay in memory.
        memory_bytes: bytes of checkpoint values held in memory; the rest go to disk (toolkit.stream.spill).

    The pass calls :meth:`checkpoint` before the kernel at each cut: the values live there
    (NpuRuntime.live_at) are copied, and NpuRuntime.run_range computes the segment again from them."""

    def __init__(self, runtime, feeds: dict, cuts: list[int], cache: int = 2,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES):
        self.runtime = runtime
        kernels = runtime.kernels
        self._writer: dict[str, int] = {}
        for i, ek in enumerate(kernels):
            for _, t in ek.fetches:
                self._writer.setdefault(t, i)
        self.cuts = sorted(set([0, *cuts]))
        self._live = {c: runtime.live_at(c) for c in self.cuts}
        self.checkpoints: dict[int, list[str]] = {}  # cut -> the tensors stored for it in self._values
        self._values = SpillStore(memory_bytes, "npuscope-device-")
        super().__init__(list(self._writer) + list(feeds) + list(runtime.const_outputs),
                         {**{k: np.array(v, copy=True) for k, v in runtime.const_outputs.items()}, **feeds}, cache)

    def written_by_kernel(self, name: str) -> bool:
        """Whether a kernel of the plan writes ``name``."""
        return name in self._writer

    def checkpoint(self, index: int) -> None:
        """Copy the values live before kernel ``index`` (a cut) while the pass stands there."""
        if index in self._live:
            for t in self._live[index]:
                self._values[(index, t)] = self.runtime.read(t)
            self.checkpoints[index] = list(self._live[index])

    def checkpoint_bytes(self) -> int:
        """Bytes of the stored checkpoints (in memory and on disk)."""
        return self._values.nbytes()

    def _segment_of(self, name: str) -> int | None:
        i = self._writer.get(name)
        if i is None:
            return None
        return max(c for c in self.cuts if c <= i)

    def _compute(self, start: int) -> dict:
        later = [c for c in self.cuts if c > start]
        stop = later[0] if later else len(self.runtime.kernels)
        live = {t: self._values[(start, t)] for t in self.checkpoints[start]}
        return self.runtime.run_range(live, start, stop, dump=True).dumps


class Restricted(Mapping):
    """The part of a tensor mapping named in ``names`` (a subset's tensors, toolkit.compare.subset)."""

    def __init__(self, values: Mapping, names):
        self.values, self.names = values, set(names)

    def __getitem__(self, name: str):
        if name not in self.names:
            raise KeyError(name)
        return self.values[name]

    def __contains__(self, name) -> bool:
        return name in self.names and name in self.values

    def __iter__(self):
        return (t for t in self.values if t in self.names)

    def __len__(self) -> int:
        return sum(1 for _ in self)
