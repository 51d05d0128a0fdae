"""Output folders and the files commands write (plan.json, compile.log, fusion_result.json, dumps, npz).

Nothing the user gave us is overwritten: an explicit ``--out`` folder must be new or empty; default folders
are ``reports/<model>-<YYYYmmdd-HHMMSS>[-n]``. Files are written to a temporary name and renamed, and a
failed command removes the folder it created (no partial report left behind).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import time
import unicodedata
import zipfile
from pathlib import Path

import numpy as np

from toolkit.core.csvjson import json_text
from toolkit.core.dtypes import standard
from toolkit.core.errors import ModelError, UsageError
from toolkit.core.text import escape_surrogates, printable
from toolkit.core.userpaths import check_path

#: Windows device names, reserved with any extension (CON, CON.txt): https://learn.microsoft.com/windows/win32/fileio/naming-a-file
_RESERVED = re.compile(r"(CON|PRN|AUX|NUL|COM[0-9¹²³]|LPT[0-9¹²³])(\..*)?", re.IGNORECASE)


def _kept(ch: str) -> bool:
    """ASCII letters, digits and ``._-``; beyond ASCII every letter, combining mark and digit (Unicode
    categories L*, M*, N*). Everything else (path separators, spaces, punctuation, symbols, control and
    format characters such as bidi overrides) is replaced."""
    if ch.isascii():
        return ch.isalnum() or ch in "._-"
    return unicodedata.category(ch)[0] in "LMN"


def safe_filename(name: str, max_len: int = 120) -> str:
    """A file-system-safe, readable version of a model/tensor/node name: NFC-normalised, every run of other
    characters than :func:`_kept` ones becomes '_', leading/trailing '.'/'_' removed, a Windows device name
    (CON, nul.txt, ...) prefixed with '_', cut to at most ``max_len`` UTF-8 bytes (file systems count bytes:
    255 on ext4/APFS) at a character boundary. Never empty ("tensor"), never '.' or '..'.
    ``"模型 #1"`` -> ``"模型_1"``; ``"a/b:0"`` -> ``"a_b_0"``."""
    text = unicodedata.normalize("NFC", name)
    s = "".join(ch if _kept(ch) else "/" for ch in text)
    s = re.sub("/+", "_", s).strip("._") or "tensor"
    if _RESERVED.fullmatch(s):
        s = "_" + s
    s = s.encode("utf-8")[:max_len].decode("utf-8", "ignore").rstrip(".")
    return s or "tensor"


def new_run_dir(base: str | Path, stem: str) -> Path:
    """A fresh ``base/<stem>-<time>`` folder name (not created)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(base) / f"{safe_filename(stem)}-{stamp}"
    n = 2
    while path.exists():
        path = Path(base) / f"{safe_filename(stem)}-{stamp}-{n}"
        n += 1
    return path


def out_path(explicit: str | Path | None) -> Path | None:
    """``Path(explicit)`` of an explicit ``--out`` that is neither empty text nor an existing file (the checks
    every output folder shares; :func:`check_out` and toolkit.dataset.store.check_store_out add theirs), or
    None without ``explicit``.

    Raises:
        UsageError (exit 2): empty text, an existing file, or a path the file system refuses to look at
            (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way,
            permission denied).
    """
    if explicit is None:
        return None
    if not str(explicit).strip():
        raise UsageError("--out is empty; give a new folder name")
    path = Path(explicit)
    st = check_path(path, "--out", fix="choose another --out (a new or empty folder)")
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"--out '{path}' is an existing file; give a new folder name")
    return path


def check_out(explicit: str | Path | None) -> Path | None:
    """Refuse an explicit ``--out`` that cannot be a new or empty folder, before any work is done.

    Commands call this first thing (before loading a model or inputs, compiling or running), and
    :func:`output_dir` calls it again when it creates the folder. ``explicit`` None (no ``--out``): nothing to
    check, returns None; else returns ``Path(explicit)``. Nothing is created.

    Raises:
        UsageError (exit 2): an empty string, an existing file, an existing folder that is not empty (or
        cannot be listed), a path the file system refuses (:func:`out_path`: a name too long, a link loop, ...).
    """
    path = out_path(explicit)
    if path is None:
        return None
    try:
        taken = path.is_dir() and any(path.iterdir())
    except OSError as exc:
        raise UsageError(f"cannot read output folder '{path}' ({exc.strerror}); choose a new --out") from None
    if taken:
        raise UsageError(f"output folder '{path}' already exists and is not empty; choose a new --out")
    return path


@contextlib.contextmanager
def output_dir(explicit: str | None, base: str | Path, stem: str):
    """Yield a new, empty output folder; remove it again if the body raises (an empty folder the user gave is
    kept, emptied of what the body wrote). ``explicit`` (``--out``) is
    checked again here (:func:`check_out`; the folder may have changed since the command's own early check);
    without it: a fresh ``base/<stem>-<time>`` folder (:func:`new_run_dir`). Raises UsageError (exit 2) as
    :func:`check_out` does, or when the folder cannot be created."""
    path = check_out(explicit) or new_run_dir(base, stem)
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder '{path}' ({exc.strerror}); choose a writable --out") from None
    try:
        yield path
    except BaseException:
        if created:
            shutil.rmtree(path, ignore_errors=True)
        else:  # the user's folder, empty when we took it: remove what this run put in it, keep the folder
            for entry in path.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically (a temporary file, then renamed). A lone surrogate in
    ``text`` (a file name whose bytes are not UTF-8, as ``os.fsdecode`` gives it) is written as its escape
    (:func:`toolkit.core.text.escape_surrogates`: ``\\xff``), never raised as UnicodeEncodeError. Raises
    OSError when the file cannot be written."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(escape_surrogates(text), encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_json(path: Path, data) -> Path:
    """Write ``data`` as strict JSON (toolkit.core.csvjson.json_text: NaN / inf as null) to ``path``, atomically."""
    return write_text(path, json_text(data))


def write_compile_artifacts(compiled, out: Path) -> dict[str, Path]:
    """plan.json, compile.log, fusion_result.json and findings.json into ``out``."""
    files = {
        "plan": out / "plan.json",
        "compile_log": out / "compile.log",
        "fusion_result": out / "fusion_result.json",
        "compile_findings": out / "compile_findings.json",
    }
    write_json(files["plan"], compiled.plan.to_dict())
    # one line per entry, names escaped (toolkit.core.text.printable): a plain-text file people cat
    write_text(files["compile_log"], "\n".join(map(printable, compiled.log_lines())) + "\n")
    write_json(files["fusion_result"], compiled.fusion_result_json())
    write_json(files["compile_findings"], [f.to_dict() for f in compiled.findings])
    return files


def storable(value, name: str = "array") -> np.ndarray:
    """``value`` as npuscope writes it into every .npy / .npz (outputs.npz, ``--dump`` files, repro/, dataset
    stores): an array of a dtype plain numpy reads back without pickle (docs/array-files.md). Strings (object
    arrays of str, as onnxruntime returns ONNX STRING tensors; bytes) become numpy unicode ``<U``; ml_dtypes
    arrays become the standard dtype that holds their values exactly — bfloat16 / float8 / float4 → float32,
    int4 / int2 → int8, uint4 / uint2 → uint8 (:func:`toolkit.core.dtypes.standard`); other arrays
    are unchanged (no copy). ``name`` names the value in errors.

    Raises:
        ModelError: ``value`` has no array form without pickle (an empty optional (None), a sequence of tensors
            of different shapes, an object array of non-strings).
    """
    what = "an empty optional (None)" if value is None else None
    if what is None:
        try:
            arr = standard(value)
            if arr.dtype.hasobject:
                raise TypeError("object array")
            return arr
        except (TypeError, ValueError) as exc:
            what = (f"a sequence of {len(value)} tensors" if isinstance(value, (list, tuple))
                    else f"not a plain array ({exc})")
    raise ModelError(f"'{name}' is {what}; npuscope writes numeric and string tensors only (no pickle): make the "
                     "model return a tensor there (e.g. ConcatFromSequence)")


def save_npz(file, arrays, fixed_time: bool = False) -> None:
    """Write ``arrays`` ({key: value}) as an .npz (a zip of .npy members named ``<key>.npy``, uncompressed, as
    ``np.savez`` writes it: numpy.lib.format) into ``file`` (a path or a binary file object), every value through
    :func:`storable` and without pickle, so ``np.load(file, allow_pickle=False)`` reads every key back. Keys are
    written as given, also ``file`` or ``allow_pickle`` (which ``np.savez(**arrays)`` would take as its own
    arguments). ``fixed_time``: every member dated 1980-01-01, so the same arrays give the same bytes (a file
    whose sha256 identifies its data). Raises ModelError (:func:`storable`)."""
    members = {str(key): storable(value, str(key)) for key, value in arrays.items()}
    with zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, arr in members.items():
            name = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)) if fixed_time else f"{key}.npy"
            with zf.open(name, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=False)


def save_npy(path: Path, value, name: str = "array") -> np.ndarray:
    """Write one value as ``.npy`` through :func:`storable` (no pickle); returns the array written."""
    arr = storable(value, name)
    with open(path, "wb") as fh:
        np.lib.format.write_array(fh, arr, allow_pickle=False)
    return arr


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write arrays to a new .npz (refuses to overwrite an existing file) with :func:`save_npz`: strings as
    ``<U``, ml_dtypes arrays in their exact standard dtype (docs/array-files.md). Raises UsageError (the path: it
    exists, its folder does not, it cannot be written, or the file system refuses it: a name too long, a link
    loop, ...), ModelError (a value with no array form)."""
    if check_path(path, "--save-outputs", fix="choose another --save-outputs") is not None:
        raise UsageError(f"output file '{path}' already exists; choose another --save-outputs")
    if not path.parent.is_dir():
        raise UsageError(f"--save-outputs '{path}': folder '{path.parent}' does not exist; create it or choose another path")
    tmp = path.with_name(path.name + ".tmp.npz")
    try:
        save_npz(tmp, arrays)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write '{path}' ({exc.strerror}); choose a writable --save-outputs") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_dumps(dumps: dict[str, np.ndarray], plan, folder: Path) -> Path:
    """Every kernel output as ``<tensor>.npy`` (safe names, :func:`save_npy`) plus index.json {file: {tensor,
    kernel, dtype, shape[, stored_dtype]}}: ``dtype`` is the tensor's own dtype (``bfloat16``, ``int4``, ``object``
    for strings), ``stored_dtype`` the dtype of the file when :func:`storable` converted it (float32, int8, <U..);
    ``toolkit.dumps.readers`` restores ml_dtypes from it. Values with no array form (sequences, empty
    optionals) are not dumped (docs/array-files.md). Raises UsageError (exit 2) when ``folder`` is an existing
    file, cannot be created, or the file system refuses it (a name too long, a link loop, ...)."""
    st = check_path(folder, "--dump", fix="choose another --dump (a new or empty folder)")
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"--dump '{folder}' is an existing file; give a new folder name")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create dump folder '{folder}' ({exc.strerror}); choose a writable --dump") from None
    owner = plan.kernel_of_tensor()
    index, used = {}, set()
    for tensor, arr in dumps.items():
        if owner.get(tensor) is not None and owner[tensor].fusion == "cast":
            continue  # a Cast kernel's output stands for no ONNX tensor
        try:
            stored = storable(arr, tensor)
        except ModelError:
            continue  # a sequence / empty optional: no tensor to dump
        base = safe_filename(tensor)
        fname, n = f"{base}.npy", 2
        while fname in used:
            fname, n = f"{base}__{n}.npy", n + 1
        used.add(fname)
        save_npy(folder / fname, stored)
        k = owner.get(tensor)
        index[fname] = {"tensor": tensor, "kernel": k.name if k else None, "dtype": str(np.asarray(arr).dtype),
                        "shape": list(np.shape(arr))}
        if stored.dtype != np.asarray(arr).dtype:
            index[fname]["stored_dtype"] = str(stored.dtype)
    write_json(folder / "index.json", index)
    return folder


def check_dump_dir(dump_dir: str | None, out: str | None) -> None:
    """Refuse, before any work, a ``--dump`` folder that cannot be written.

    Raises:
        UsageError (exit 2): an existing file, a non-empty folder (or one that cannot be listed), the same folder
            as ``--out`` or one that holds ``--out``, or a ``--dump`` / ``--out`` path the file system refuses
            (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way,
            permission denied).
    """
    if not dump_dir:
        return
    d = Path(dump_dir)
    st = check_path(d, "--dump", fix="choose another --dump (a new or empty folder)")
    if out:
        check_path(out, "--out", fix="choose another --out (a new or empty folder)")
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"--dump '{d}' is an existing file; give a new folder for the dumps")
    try:
        taken = st is not None and any(d.iterdir())
    except OSError as exc:
        raise UsageError(f"cannot read --dump folder '{d}' ({exc.strerror}); choose a new --dump") from None
    if taken:
        raise UsageError(f"--dump folder '{d}' already exists and is not empty; choose a new --dump")
    if out and d.resolve() == Path(out).resolve():
        raise UsageError(f"--dump and --out both name '{d}'; give the dumps their own folder")
    if out and d.resolve() in Path(out).resolve().parents:
        raise UsageError(f"--out '{out}' lies inside --dump '{d}' (the dump folder must be new or empty); "
                         "give each its own folder")
