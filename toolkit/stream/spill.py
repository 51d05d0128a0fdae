"""Spilled arrays: a mapping that holds arrays in memory up to a byte budget and writes the rest to ``.npy`` files
in a private temporary folder, read back memory-mapped.

A streamed diagnosis stores every reference segment's boundary tensors and the device's live values at each cut
(toolkit.stream.stores). Held in memory they grow with the model (151 MB of boundaries on a 12-layer stack of
4 MiB segments); spilled, the process holds only the budget plus the pages of the arrays being read. A value read
back equals the one stored bit for bit (``.npy`` keeps dtype, shape and bytes).

Files are named by a counter, never by the tensor's name (names come from an untrusted model). The folder,
``<prefix><pid>-<random>``, is created with :func:`tempfile.mkdtemp` (``TMPDIR`` applies) and removed by
:meth:`SpillStore.close`, when the store is garbage-collected, or at exit; a folder left by a process that was
killed is removed by the next store that creates one (:func:`sweep_stale`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Hashable, Iterator, MutableMapping
from pathlib import Path

import numpy as np

#: Default bytes held in memory before arrays go to disk.
DEFAULT_MEMORY_BYTES = 256 << 20


def _nbytes(value) -> int:
    if isinstance(value, list):
        return sum(_nbytes(x) for x in value)
    return int(getattr(value, "nbytes", 0) or 0)


def _copy(value):
    if isinstance(value, list):
        return [np.array(x, copy=True) for x in value]
    return None if value is None else np.array(value, copy=True)


def _spillable(value) -> bool:
    # a 0-d or empty array stays in memory: numpy maps neither (a 0-d file comes back as shape (1,))
    return isinstance(value, np.ndarray) and not value.dtype.hasobject and value.ndim > 0 and value.size > 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def sweep_stale(prefix: str, folder: str | None = None) -> list[str]:
    """Remove the spill folders ``<prefix><pid>-*`` in ``folder`` (default: the temporary folder) whose process
    is gone (a run killed with SIGKILL, or a machine that lost power, leaves its folder behind). A folder whose
    process still runs, or whose name carries no pid, is left alone. Returns the folders removed."""
    base = Path(folder or tempfile.gettempdir())
    removed = []
    try:
        entries = list(base.glob(f"{prefix}*-*"))
    except OSError:
        return removed
    for p in entries:
        pid = p.name[len(prefix):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)) or not p.is_dir() or p.is_symlink():
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(str(p))
    return removed


class SpillStore(MutableMapping):
    """{key: array} kept in memory while the bytes held stay under ``memory_bytes``, on disk past it.

    Args:
        memory_bytes: bytes of arrays held in memory (default :data:`DEFAULT_MEMORY_BYTES`); 0 spills every
            numeric array. Lists of arrays (ONNX sequences), object, 0-d and empty arrays always stay in memory.
        prefix: the temporary folder's name prefix.

    Values are copied when stored (an arena view may be overwritten later). A spilled value is returned as a
    read-only ``numpy.memmap`` of its file.

    Raises:
        OSError: the temporary folder or a file cannot be written (disk full, TMPDIR not writable).
    """

    def __init__(self, memory_bytes: int = DEFAULT_MEMORY_BYTES, prefix: str = "npuscope-spill-"):
        self.memory_bytes = int(memory_bytes)
        self._prefix = prefix
        self._memory: dict = {}
        self._files: dict = {}
        self._sizes: dict = {}
        self._held = 0
        self._folder: Path | None = None
        self._finalizer = None
        self._counter = 0

    def _path(self) -> Path:
        if self._folder is None:
            sweep_stale(self._prefix)
            self._folder = Path(tempfile.mkdtemp(prefix=f"{self._prefix}{os.getpid()}-"))
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(self._folder), True)
        self._counter += 1
        return self._folder / f"{self._counter}.npy"

    def __setitem__(self, key: Hashable, value) -> None:
        if key in self:
            del self[key]
        if isinstance(value, np.generic):
            value = np.asarray(value)
        size = _nbytes(value)
        if not _spillable(value) or self._held + size <= self.memory_bytes:
            self._memory[key] = _copy(value)
            self._held += size
        else:
            path = self._path()
            np.save(path, np.ascontiguousarray(value), allow_pickle=False)
            self._files[key] = path
        self._sizes[key] = size

    def __getitem__(self, key: Hashable):
        if key in self._memory:
            return self._memory[key]
        return np.load(self._files[key], mmap_mode="r", allow_pickle=False)

    def __delitem__(self, key: Hashable) -> None:
        if key in self._memory:
            del self._memory[key]
            self._held -= self._sizes[key]
        else:
            self._files.pop(key).unlink(missing_ok=True)
        del self._sizes[key]

    def __contains__(self, key) -> bool:
        return key in self._sizes

    def __iter__(self) -> Iterator:
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)

    def nbytes(self) -> int:
        """Bytes of every stored array (in memory and on disk)."""
        return sum(self._sizes.values())

    def spilled_bytes(self) -> int:
        """Bytes of the arrays on disk."""
        return sum(self._sizes[k] for k in self._files)

    def close(self) -> None:
        """Drop every value and remove the temporary folder."""
        self._memory.clear()
        self._files.clear()
        self._sizes.clear()
        self._held = 0
        if self._finalizer is not None:
            self._finalizer()
