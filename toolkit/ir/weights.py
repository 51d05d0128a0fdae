"""Weights that stay on disk: external-data initializers memory-mapped instead of read into the ModelProto.

A model over protobuf's 2 GiB limit keeps its weights in external data files (ONNX external data: a tensor with
``data_location = EXTERNAL`` and ``external_data`` entries ``location`` (relative to the model's folder),
``offset`` and ``length`` in bytes). :func:`toolkit.ir.load.load_model` checks every reference (inside the
model's folder, extent inside the file, length equal to the tensor's bytes) and then, for tensors of at least
:data:`MAP_MIN_BYTES`, records the checked absolute file in an extra ``external_data`` entry
:data:`PATH_KEY` instead of reading the bytes. Everything that needs a tensor's values reads it through
:func:`array_of`: a read-only ``numpy.memmap`` (no copy; pages are read on first touch and shared by every
reader in the process, onnxruntime sessions included, which receive them as external initializers).
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: The extra external_data key holding the checked absolute path of a mapped tensor's data file.
PATH_KEY = "npuscope_path"
#: External tensors at least this large (bytes) stay mapped; smaller ones are read into the proto (1 MiB).
MAP_MIN_BYTES = 1 << 20


#: How :data:`PATH_KEY` holds a path that is not UTF-8 text (a file or folder name with bytes that are not UTF-8,
#: legal on Linux: ``os.fsdecode`` carries them as lone surrogates, which a protobuf string cannot hold): this
#: prefix, then the hex of the path's bytes. Checked paths are absolute, so no real path starts with it.
_FS_BYTES = "fsbytes:"


def _proto_path(path: str) -> str:
    """``path`` as a protobuf string holds it: as it is, or :data:`_FS_BYTES` + the hex of ``os.fsencode(path)``
    when it is not UTF-8 text."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return _FS_BYTES + os.fsencode(path).hex()
    return path


def _fs_path(value: str) -> str:
    """The path :func:`_proto_path` wrote as ``value``."""
    return os.fsdecode(bytes.fromhex(value[len(_FS_BYTES):])) if value.startswith(_FS_BYTES) else value


def _fields(t: TensorProto) -> dict[str, str]:
    f = {e.key: e.value for e in t.external_data}
    if PATH_KEY in f:
        f[PATH_KEY] = _fs_path(f[PATH_KEY])
    return f


def is_mapped(t: TensorProto) -> bool:
    """Whether ``t`` is an external tensor whose data the loader left on disk (it carries :data:`PATH_KEY`)."""
    return t.data_location == TensorProto.EXTERNAL and any(e.key == PATH_KEY for e in t.external_data)


def mark_mapped(t: TensorProto, path: str, offset: int, length: int) -> None:
    """Record the checked data file ``path`` (absolute), ``offset`` and ``length`` (bytes) of external tensor ``t``
    (a path whose bytes are not UTF-8 is kept exactly: :func:`_proto_path`)."""
    keep = [(e.key, e.value) for e in t.external_data if e.key not in ("offset", "length", PATH_KEY)]
    del t.external_data[:]
    for k, v in keep + [("offset", str(offset)), ("length", str(length)), (PATH_KEY, _proto_path(path))]:
        e = t.external_data.add()
        e.key, e.value = k, v


@functools.lru_cache(maxsize=None)
def _memmap(path: str, offset: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if not shape or 0 in shape:
        return np.fromfile(path, dtype=dtype, count=int(np.prod(shape)) if shape else 1,
                           offset=offset).reshape(shape)
    return np.memmap(path, dtype=np.dtype(dtype), mode="r", offset=offset, shape=shape)


_PROTOS: dict[int, tuple[np.ndarray, TensorProto]] = {}  # id(memmap) -> (the memmap, its reference, unnamed)


def array_of(t: TensorProto) -> np.ndarray:
    """The values of ``t`` as a numpy array (dims as shape, dtype from ``data_type``): a read-only memmap for a
    mapped tensor (:func:`is_mapped`; never copied), ``onnx.numpy_helper.to_array`` otherwise."""
    if not is_mapped(t):
        return numpy_helper.to_array(t)
    f = _fields(t)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).str
    arr = _memmap(f[PATH_KEY], int(f.get("offset") or 0), dtype, tuple(int(d) for d in t.dims))
    if id(arr) not in _PROTOS:
        ref = TensorProto()
        ref.CopyFrom(t)
        ref.ClearField("name")
        _PROTOS[id(arr)] = (arr, ref)
    return arr


def tensor_of(arr: np.ndarray, name: str) -> TensorProto:
    """An initializer ``name`` holding ``arr``: the on-disk reference when ``arr`` is a map :func:`array_of` gave
    (no bytes copied), else ``onnx.numpy_helper.from_array``."""
    known = _PROTOS.get(id(arr))
    if known is None or known[0] is not arr:
        return numpy_helper.from_array(arr, name)
    t = TensorProto()
    t.CopyFrom(known[1])
    t.name = name
    return t


def release_pages(arr) -> None:
    """Drop the pages of ``arr`` from this process when it is a memory map :func:`array_of` gave (madvise
    MADV_DONTNEED on its read-only file mapping; nothing otherwise): they stay in the OS page cache, and a later
    read maps them back without reading the disk. For whole-tensor scans (the constant screen) of weights that
    runs then read in part (an embedding table): without it a scan leaves every page counted in the process'
    RSS (Llama 2-layer: +240 MiB)."""
    mm = getattr(arr, "_mmap", None) if isinstance(arr, np.memmap) else None
    if mm is None and isinstance(arr, np.memmap) and isinstance(arr.base, mmap.mmap):
        mm = arr.base
    if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        try:
            mm.madvise(mmap.MADV_DONTNEED)
        except (OSError, ValueError):  # a closed map, or a platform that refuses: the pages simply stay
            pass


def mapped_initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """{initializer name: memmap} of the model's mapped initializers (top-level graph)."""
    return {t.name: array_of(t) for t in model.graph.initializer if is_mapped(t)}


def has_mapped(model: onnx.ModelProto) -> bool:
    """Whether any top-level initializer of ``model`` stays on disk."""
    return any(is_mapped(t) for t in model.graph.initializer)


#: {(path, size, mtime ns): sha256 hex} of data files hashed in this process (or told by
#: :func:`remember_file_digest`, when the loader already hashed the bytes it read)
_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def remember_file_digest(path: str, size: int, mtime_ns: int, hexdigest: str) -> None:
    """Record the sha256 of file ``path`` as of (``size``, ``mtime_ns``): toolkit.ir.load hashes the model
    file it reads, and weights mapped from inside that file need no second pass over it."""
    _FILE_DIGESTS[(path, size, mtime_ns)] = hexdigest


def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    key = (path, size, mtime_ns)
    if key not in _FILE_DIGESTS:
        with open(path, "rb") as fh:
            _FILE_DIGESTS[key] = hashlib.file_digest(fh, "sha256").hexdigest()
    return _FILE_DIGESTS[key]


def file_digest_of(t: TensorProto) -> str:
    """sha256 (hex) of the whole data file of mapped tensor ``t`` (streamed once per (path, size, mtime))."""
    path = _fields(t)[PATH_KEY]
    st = os.stat(path)
    return _file_digest(path, st.st_size, st.st_mtime_ns)


def data_digest(model: onnx.ModelProto, file_digest=None) -> str:
    """sha256 over the data files of the mapped initializers (each hashed once by streaming, remembered by
    (path, size, mtime)), in the order the model names them: part of a cache key, with the model's own bytes
    (which hold each tensor's offset and length).

    ``file_digest``: optional callable(resolved path) -> sha256 hex used for a file this process has not hashed
    yet (toolkit.cache.file_digests: digests remembered across runs); raises OSError as ``open`` does."""
    h = hashlib.sha256()
    seen = set()
    for t in model.graph.initializer:
        if not is_mapped(t):
            continue
        path = _fields(t)[PATH_KEY]
        if path in seen:
            continue
        seen.add(path)
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns)
        if key not in _FILE_DIGESTS and file_digest is not None:
            _FILE_DIGESTS[key] = file_digest(path)
        h.update(f"{path}\0{_file_digest(*key)}\0".encode("utf-8", "surrogatepass"))  # a name that is not UTF-8
    return h.hexdigest()


def for_onnxruntime(model: onnx.ModelProto) -> str | None:
    """Prepare ``model`` (a copy the caller owns; changed in place) for an onnxruntime session that reads its
    mapped weights itself: their :data:`PATH_KEY` entries are removed, leaving ONNX's relative ``location``,
    ``offset`` and ``length``. Returns the folder they are relative to (onnxruntime's session option
    ``session.model_external_initializers_file_folder_path``; onnxruntime memory-maps the files), or None when
    the model maps nothing, its mapped weights come from several folders, a checked file is not at
    folder/location (a location that is a symbolic link), or the folder's name is not UTF-8 text (bytes that
    are not UTF-8: onnxruntime takes options as UTF-8 strings): then nothing is changed."""
    folders = set()
    for t in model.graph.initializer:
        if is_mapped(t):
            f = _fields(t)
            path, loc = f[PATH_KEY], os.path.normpath(f["location"])
            if not path.endswith(os.sep + loc):  # the checked file is not folder/location (a symbolic link)
                return None
            folders.add(os.path.normpath(path[: len(path) - len(loc)]))
    if len(folders) != 1 or _proto_path(next(iter(folders))).startswith(_FS_BYTES):
        return None
    for t in model.graph.initializer:
        if is_mapped(t):
            keep = [(e.key, e.value) for e in t.external_data if e.key != PATH_KEY]
            del t.external_data[:]
            for k, v in keep:
                e = t.external_data.add()
                e.key, e.value = k, v
    return folders.pop()
