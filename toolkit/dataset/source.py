"""The inputs of a dataset run: the sorted ``.npz`` files of a folder, read one at a time.

Nothing is loaded when the folder is listed: :func:`list_inputs` returns names and paths only, and each
input's bytes are read (:func:`read_bytes`) and parsed (:func:`load_feed`) by the worker that evaluates it,
so the memory of a run does not depend on how many files the folder holds.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from toolkit.errors import InputError
from toolkit.inputs import check_feed


@dataclass(frozen=True)
class InputRef:
    """One input file of a dataset folder: ``name`` (the file name, e.g. ``0001.npz``) and ``path``."""

    name: str
    path: str


def list_inputs(folder: str | Path) -> list[InputRef]:
    """The ``*.npz`` files directly in ``folder``, sorted by name. Raises InputError when there is none."""
    folder = Path(folder)
    files = sorted(p for p in folder.glob("*.npz") if p.is_file())
    if not files:
        raise InputError(f"--inputs directory '{folder}' holds no .npz files; write one per input set "
                         "(np.savez(path, name=array))")
    return [InputRef(p.name, str(p.resolve())) for p in files]


def read_bytes(ref: InputRef) -> bytes:
    """The raw bytes of the input file (InputError when it cannot be read)."""
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

    Raises:
        InputError: not an npz archive, a corrupt or pickled member, or a feed that does not fit the model.
    """
    source = f"input '{name}'"
    if not data.startswith(b"PK"):
        raise InputError(f"{source} is not an .npz (zip) archive ({len(data)} bytes, no zip signature); "
                         "write it with np.savez(path, name=array)")
    try:
        archive = np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"{source} cannot be read as .npz ({_first_line(exc)}); re-save it with np.savez") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InputError(f"{source} holds a single array, not an .npz archive; save with np.savez(path, name=array)")
    feed = {}
    with archive:
        for key in archive.files:
            try:
                feed[key] = archive[key]
            except ValueError as exc:
                why = "an object (pickled) array, refused for safety" if "pickle" in str(exc) else _first_line(exc)
                raise InputError(f"{source}: array {key!r} is {why}; re-save plain numeric arrays with np.savez") from None
            except (OSError, EOFError, zipfile.BadZipFile) as exc:
                raise InputError(f"{source}: array {key!r} is corrupt ({_first_line(exc)}); re-save it with np.savez") from None
    check_feed(feed, specs, source)
    return {spec.name: feed[spec.name] for spec in specs}


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
