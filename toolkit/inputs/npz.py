"""Load a user's ``.npz`` input file safely (no pickle) and check it against the model's inputs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from toolkit.core.dtypes import is_ml_dtype, value_kind
from toolkit.core.errors import InputError
from toolkit.core.userpaths import check_path, path_problem, shown_path
from toolkit.inputs.npzread import read_npz
from toolkit.inputs.spec import InputSpec
from toolkit.inputs.validate import check_feed, conform_feed


def npz_files(folder: str | os.PathLike) -> list[Path]:
    """Every entry directly in ``folder`` whose name ends in ``.npz`` in any letter case (``A.NPZ`` too), sorted
    by name: the input sets of an ``--inputs`` folder. Entries that are not regular files (folders, broken links)
    are listed too, so that reading them gives a one-line error instead of a silent skip. Raises InputError (exit
    2) when the folder cannot be listed (permission denied, a name too long, ...)."""
    try:
        return sorted((p for p in Path(folder).iterdir() if p.name.lower().endswith(".npz")), key=lambda p: p.name)
    except OSError as exc:
        why = path_problem(folder) or exc.strerror or type(exc).__name__
        raise InputError(f"--inputs folder '{shown_path(folder)}' cannot be listed: {why}; give a readable folder "
                         "of .npz files") from None


def load_npz(path: str | os.PathLike, model_inputs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """Read ``path`` (``np.savez`` / ``np.savez_compressed`` output) and return input name -> array.

    Reading is bounded (:func:`toolkit.inputs.npzread.read_npz`): each member's name, compression method,
    .npy header and sizes are checked before any data is inflated, so a zip bomb or a header declaring more
    than this machine's memory is one InputError, never a MemoryError. Object arrays (which need pickle and can
    run code) are refused.
    Arrays are conformed (:func:`toolkit.inputs.validate.conform_array`: a big-endian array such as ``>f4``
    becomes native, a str/bytes array for an ONNX STRING input an object array of str), then checked with :func:`toolkit.inputs.validate.check_feed`: keys equal the model's
    input names, dtypes equal, ranks and static dims equal (dynamic dims accept any size).

    Args:
        path: the ``.npz`` file.
        model_inputs: the model's inputs, e.g. from :func:`toolkit.inputs.spec.input_specs`.

    Returns:
        dict in the order of ``model_inputs``; arrays are fully read into memory, in native byte order.

    Raises:
        InputError: a path the file system refuses (toolkit.core.userpaths.check_path: a name too long, a symbolic
            link loop, a file on the way, permission denied), file missing, not a regular file (a folder,
            /dev/null, a pipe), empty (0 bytes) or not an
            npz (zip) archive, a member that is not a .npy array, an array needs pickle, a member compressed
            otherwise than stored/deflate, a malformed .npy header, declared sizes that disagree or exceed
            memory, a stream that inflates past its declared size, or the feed does not fit.
    """
    path = Path(path)
    source = f"npz file {str(path)!r}"
    check_path(path, "npz file", InputError, "pass an existing .npz written by np.savez")
    if not path.is_file():
        if path.exists():
            raise InputError(f"{source} exists but is not a regular file (it is {_file_kind(path)}); pass an "
                             ".npz file written by np.savez")
        raise InputError(f"{source} does not exist; pass an existing .npz written by np.savez")
    _check_magic(path, source)
    feed = read_npz(path, source)  # every member checked before any data is inflated (zip bombs refused)
    feed = conform_feed(restore_declared(feed, model_inputs), model_inputs)
    check_feed(feed, model_inputs, source)
    return {spec.name: feed[spec.name] for spec in model_inputs}


def restore_declared(feed: dict[str, np.ndarray], model_inputs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """``feed`` with each array for an input the model declares in an ml_dtypes dtype (bfloat16, float8_*, int4,
    uint2, ...) given in that dtype, when it holds exactly that dtype's values: an array in the standard dtype
    npuscope writes them in (float32, int8, uint8: toolkit.core.artifacts.storable — repro/inputs.npz, outputs.npz)
    is converted when the conversion is exact, a raw void array of the same item size (what ``np.savez`` makes of
    an ml_dtypes array) is reinterpreted. Other arrays are left for :func:`~toolkit.inputs.validate.check_feed`
    to judge (a float32 array with values bfloat16 cannot hold is refused there, naming the dtype)."""
    by_name = {s.name: s for s in model_inputs}
    return {k: (_as_declared(v, by_name[k].dtype) if k in by_name and is_ml_dtype(by_name[k].dtype) else v)
            for k, v in feed.items()}


def _as_declared(arr: np.ndarray, want: np.dtype) -> np.ndarray:
    if arr.dtype == want:
        return arr
    if arr.dtype.kind == "V" and arr.dtype.itemsize == want.itemsize and arr.dtype.names is None:
        return arr.view(want)

    if arr.dtype.kind not in "iuf" or value_kind(arr.dtype) != value_kind(want):  # floats for floats, ints for ints
        return arr
    with np.errstate(all="ignore"):
        converted = arr.astype(want)
        exact = np.array_equal(converted.astype(arr.dtype), arr, equal_nan=arr.dtype.kind == "f")
    return converted if exact else arr


#: First bytes of a zip archive (local file header, or the end record of an empty archive): PKWARE APPNOTE 4.3.
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
#: First bytes of a single-array .npy file (numpy.lib.format, NEP 1).
_NPY_MAGIC = b"\x93NUMPY"


def _check_magic(path: Path, source: str) -> None:
    """Refuse, before numpy reads it, a file that is empty or not a zip archive: numpy would raise EOFError
    (which click reports as an abort) or fall back to pickle and advise ``allow_pickle``. Raises InputError."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise InputError(f"{source} cannot be read ({exc.strerror}); check its permissions") from None
    if not head:
        raise InputError(f"{source} is empty (0 bytes); write it with np.savez(path, name=array)")
    if head.startswith(_NPY_MAGIC):
        raise InputError(f"{source} is a single-array .npy file, not an npz (zip) archive; "
                         "save with np.savez(path, name=array)")
    if not head.startswith(_ZIP_MAGIC):
        raise InputError(f"{source} is not an npz (zip) archive (it starts with {head[:4]!r}); "
                         "write it with np.savez(path, name=array)")


def _file_kind(path: Path) -> str:
    """What a path that is not a regular file is: 'a folder', 'a character device', ... (os.stat mode)."""
    import stat

    mode = path.stat().st_mode
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"
