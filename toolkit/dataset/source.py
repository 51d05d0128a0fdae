"""The inputs of a dataset run: the sorted ``.npz`` files of a folder, read one at a time.

Nothing is loaded when the folder is listed: :func:`list_inputs` returns names and paths only, and each
input's bytes are read (:func:`read_bytes`) and parsed (:func:`load_feed`) by the worker that evaluates it,
so the memory of a run does not depend on how many files the folder holds.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from toolkit.core.artifacts import save_npz
from toolkit.core.errors import InputError
from toolkit.core.text import escape_surrogates
from toolkit.inputs import check_feed
from toolkit.inputs.loader import load_sets, split_spec
from toolkit.inputs.npz import npz_files, restore_declared
from toolkit.inputs.npzread import npz_headers, read_npz
from toolkit.inputs.validate import conform_feed


@dataclass(frozen=True)
class InputRef:
    """One input file of a dataset folder: ``name`` (the file name as reports show it, e.g. ``0001.npz``; bytes
    that are not UTF-8 escaped, ``\\xff\\xfe.npz``) and ``path`` (the file itself, as the file system spells it)."""

    name: str
    path: str


def list_inputs(folder: str | Path) -> list[InputRef]:
    """Every entry named ``*.npz`` directly in ``folder``, sorted by name: regular files and also entries
    that cannot be read as one (broken symbolic links, folders, FIFOs, ...), which :func:`read_bytes` turns
    into one-line errors, so they become error rows instead of being skipped. Paths are absolute (symbolic
    links are kept, not resolved). A file name holding bytes that are not UTF-8 (legal on Linux) is an ordinary
    input: its path is kept as it is, its name — what inputs.csv, summary.json, the store and the report show —
    is escaped (:func:`toolkit.core.text.escape_surrogates`: ``b"\\xff\\xfe.npz"`` reads ``\\xff\\xfe.npz``).
    Raises InputError when there is no entry, or when the folder cannot be listed."""
    folder = Path(folder)
    files = npz_files(folder)
    if not files:
        raise InputError(f"--inputs directory '{folder}' holds no .npz files; write one per input set "
                         "(np.savez(path, name=array))")
    return [InputRef(escape_surrogates(p.name), str(p.absolute())) for p in files]


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def unreadable_reason(ref: InputRef) -> str:
    """Why ``ref`` is not a regular file that can be read ('' when it is one): a broken symbolic link, a
    folder, FIFO, socket or device (checked with stat, without opening it: a FIFO would block)."""
    try:
        mode = os.stat(ref.path).st_mode
    except OSError as exc:
        if os.path.islink(ref.path):
            return f"is a broken symbolic link (to '{os.readlink(ref.path)}': {exc.strerror})"
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return ""
    kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
    return f"is {kind}, not a regular .npz file"


def read_bytes(ref: InputRef) -> bytes:
    """The raw bytes of the input file. Raises InputError (one line: what the entry is, how to fix) when it
    is not a readable regular file (:func:`unreadable_reason`) or reading fails."""
    why = unreadable_reason(ref)
    if why:
        raise InputError(f"input '{ref.name}' {why}; replace it with an .npz file or remove it from the folder")
    try:
        return Path(ref.path).read_bytes()
    except OSError as exc:
        raise InputError(f"input '{ref.name}' cannot be read ({exc.strerror}); check the file") from None


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's bytes (hex), read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(2**20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_feed(name: str, data: bytes, specs) -> dict[str, np.ndarray]:
    """Parse the bytes of an ``.npz`` (``np.savez`` output) into {input name: array}, as
    :func:`toolkit.inputs.load_npz` does for a path: no pickle (object arrays refused), then
    :func:`toolkit.inputs.check_feed` against the model's input specs.

    Reading is bounded (:func:`toolkit.inputs.npzread.read_npz`): a zip bomb, a member compressed otherwise
    than stored/deflate, a malformed .npy header or a declared size larger than memory is an InputError (an
    error row of the dataset run), never a MemoryError.

    Raises:
        InputError: not an npz archive, a corrupt, pickled or oversized member, or a feed that does not fit.
    """
    source = f"input '{name}'"
    if not data.startswith(b"PK"):
        raise InputError(f"{source} is not an .npz (zip) archive ({len(data)} bytes, no zip signature); "
                         "write it with np.savez(path, name=array)")
    feed = read_npz(data, source)  # bounded: members checked before any data is inflated (zip bombs refused)

    feed = conform_feed(restore_declared(feed, specs), specs)  # ml_dtypes, big-endian, str arrays (as load_npz)
    check_feed(feed, specs, source)
    return {spec.name: feed[spec.name] for spec in specs}


def header_feed(ref: InputRef) -> dict[str, np.ndarray] | None:
    """Stand-ins for the arrays of an ``.npz`` input, read from the ``.npy`` headers only (no data): for each
    member a read-only zero-strided view with the member's shape and dtype (no memory), enough for
    :func:`toolkit.inputs.check_feed` and for compiling the plan of its shapes. None when the file is not a
    readable regular .npz or fails any check of :func:`toolkit.inputs.npzread.npz_headers` (a zip bomb, a
    header declaring more than memory, ...): the evaluation then reports it as an error row."""
    if unreadable_reason(ref):
        return None
    try:
        headers = npz_headers(ref.path, f"input '{ref.name}'")  # the checks of load_feed, before any data
    except InputError:  # its evaluation reports it, as an error row
        return None
    feed = {}
    for key, h in headers.items():
        native = h.dtype.newbyteorder("=") if h.dtype.byteorder not in ("=", "|") else h.dtype  # as load_feed
        feed[key] = np.broadcast_to(np.zeros((), native), h.shape)
    return feed


#: Most sets a loader may give to a dataset run (they are held in memory once, then written as files).
MAX_LOADER_SETS = 1000


def write_loader_sets(spec: str, specs, folder: str | Path, max_sets: int = MAX_LOADER_SETS) -> list[str]:
    """Write every set the loader script ``spec`` gives (toolkit.inputs.loader: called once, each set checked
    against the model's ``specs``) into ``folder`` as ``<script>-00000.npz``, ``<script>-00001.npz``, ... with
    fixed timestamps (toolkit.core.artifacts.save_npz): the same sets give the same bytes, so a dataset run over
    them resumes as a run over a folder does. Returns the file names.

    Raises:
        InputError: as toolkit.inputs.loader.load_sets, or more than ``max_sets`` sets.
    """
    too_many = (f"the limit for a loader in a dataset run ({max_sets}; its sets are held in memory once); write "
                "them as .npz files into a folder and pass the folder, which is streamed whatever its size")
    stem = split_spec(spec)[0].stem
    names = []
    for i, (_, feed) in enumerate(load_sets(spec, specs, max_sets, too_many)):
        name = f"{stem}-{i:05d}.npz"
        with open(Path(folder) / name, "wb") as fh:
            save_npz(fh, feed, fixed_time=True)
        names.append(name)
    return names
