"""Fetch and verify the real models we test against: PaddleOCR PP-OCRv4 (detection, recognition, direction).

Source: the RapidOCR wheel ``rapidocr-onnxruntime==1.4.4`` on PyPI (Apache-2.0), which ships PaddleOCR's
models converted to ONNX (paddle2onnx) under ``rapidocr_onnxruntime/models/``. We download the wheel with
the user's own pip (``python -m pip download --no-deps``), check the wheel's sha256, extract the three
``.onnx`` files, check each file's sha256 and place it in the cache with an atomic rename. Nothing is
executed from the wheel. The models are never committed to the repository.

Cache location (:func:`cache_dir`): ``$NPUSCOPE_MODEL_CACHE`` if set, else the platform's user cache
directory + ``npuscope/models`` (Linux ``$XDG_CACHE_HOME`` or ``~/.cache``; macOS ``~/Library/Caches``;
Windows ``%LOCALAPPDATA%``).

Offline (:data:`WHEEL_ENV`): ``NPUSCOPE_ZOO_WHEEL=/path/to/rapidocr_onnxruntime-1.4.4-py3-none-any.whl`` makes
every command take the models from that local copy of the wheel instead of downloading it (still sha256-checked,
wheel and models); the variable may also name a folder holding that wheel, or holding the ``.onnx`` files
themselves (e.g. the wheel's ``rapidocr_onnxruntime/models/`` extracted), each checked against its pinned sha256.

Errors: every failure (unknown name, pip failure, checksum mismatch, missing member) raises
:class:`toolkit.core.errors.UserError` with a one-line message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from toolkit.core.errors import ConfigError, UserError
from toolkit.core.folders import check_dir, unwritable_reason

#: pip requirement of the wheel that carries the models.
WHEEL_REQUIREMENT = "rapidocr-onnxruntime==1.4.4"
#: File name pip writes for :data:`WHEEL_REQUIREMENT`.
WHEEL_FILENAME = "rapidocr_onnxruntime-1.4.4-py3-none-any.whl"
#: sha256 (hex) of the wheel file; about 14.9 MB.
WHEEL_SHA256 = "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"
#: Folder inside the wheel that holds the models.
WHEEL_MODELS_DIR = "rapidocr_onnxruntime/models/"
#: Environment variable that overrides :func:`cache_dir`.
CACHE_ENV = "NPUSCOPE_MODEL_CACHE"
#: Environment variable naming a local copy of the wheel (or a folder holding it or the .onnx files): no download.
WHEEL_ENV = "NPUSCOPE_ZOO_WHEEL"
#: What the download errors suggest.
OFFLINE_HINT = (f"or work offline: set {WHEEL_ENV}=/path/to/{WHEEL_FILENAME} (a local copy of the wheel, e.g. "
                f"from 'pip download --no-deps {WHEEL_REQUIREMENT}' on a machine with network access)")
#: Seconds we wait for ``pip download`` before giving up.
PIP_TIMEOUT_S = 600

_CHUNK = 1 << 20  # bytes read per hashing step


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """One fetchable model.

    Attributes:
        name: short name used on the command line, e.g. ``"ppocr_rec"``.
        filename: file name inside the wheel's ``models/`` folder and in the cache.
        sha256: expected sha256 of the ``.onnx`` file (lower-case hex).
        input_name: name of the single graph input (all three use ``"x"``, NCHW float32).
        input_shape: default static input shape (N, C, H, W) in pixels; the models declare N/H/W dynamic.
        description: one line on what the model does and its output.
    """

    name: str
    filename: str
    sha256: str
    input_name: str
    input_shape: tuple[int, int, int, int]
    description: str


#: Short name -> :class:`ZooModel`. Shapes follow PaddleOCR/RapidOCR defaults (rec 3x48x320, cls 3x48x192).
MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel(
            "ppocr_det",
            "ch_PP-OCRv4_det_infer.onnx",
            "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
            "x",
            (1, 3, 640, 640),
            "PP-OCRv4 text detection (DB); output (N,1,H,W) text probability map in [0,1]",
        ),
        ZooModel(
            "ppocr_rec",
            "ch_PP-OCRv4_rec_infer.onnx",
            "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
            "x",
            (1, 3, 48, 320),
            "PP-OCRv4 text recognition (SVTR-LCNet, CTC); output (N,T,6625) softmax; "
            "metadata 'character' holds the dictionary",
        ),
        ZooModel(
            "ppocr_cls",
            "ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            "x",
            (1, 3, 48, 192),
            "PP-OCR v2.0 text direction classifier; output (N,2) softmax over labels ['0', '180']",
        ),
    )
}


def cache_dir() -> Path:
    """Directory holding fetched models (not created here).

    Returns ``$NPUSCOPE_MODEL_CACHE`` when set and non-empty, else ``<user cache dir>/npuscope/models``.
    """
    override = os.environ.get(CACHE_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "npuscope" / "models"


def sha256_file(path: Path) -> str:
    """sha256 (lower-case hex) of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_info(name: str) -> ZooModel:
    """The :class:`ZooModel` for a short name; raises UserError listing the known names."""
    try:
        return MODELS[name]
    except KeyError:
        raise UserError(
            f"unknown zoo model {name!r}: expected one of {', '.join(sorted(MODELS))}; "
            "pass one of these names or a path to an .onnx file"
        ) from None


def _check_cache_env() -> None:
    """Refuse ``$NPUSCOPE_MODEL_CACHE`` naming a file (or a path under one), as the compile cache does for
    ``$NPUSCOPE_COMPILE_CACHE`` (toolkit.cache.settings.check_dir). Raises ConfigError (exit 2)."""
    if os.environ.get(CACHE_ENV, "").strip():
        check_dir(cache_dir(), f"environment variable {CACHE_ENV}")


def _prepare_cache_dir() -> Path:
    """Create the model cache folder and check that files can be created in it (a temporary file, deleted).
    Raises ConfigError (exit 2) when ``$NPUSCOPE_MODEL_CACHE`` is set (the user's setting), else UserError,
    with one line naming the folder and the reason."""
    target_dir = cache_dir()
    error = ConfigError if os.environ.get(CACHE_ENV, "").strip() else UserError
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(
            f"cannot create model cache {target_dir} ({exc.strerror}); set {CACHE_ENV} to a writable folder"
        ) from None
    problem = unwritable_reason(target_dir)
    if problem:
        raise error(f"model cache {target_dir} is not writable ({problem}); set {CACHE_ENV} to a writable folder")
    return target_dir


def cached_path(name: str) -> Path:
    """Where model ``name`` lives in the cache (it may not exist yet)."""
    return cache_dir() / model_info(name).filename


def is_cached(name: str) -> bool:
    """True when the cached file exists and its sha256 matches."""
    path = cached_path(name)
    return path.is_file() and sha256_file(path) == model_info(name).sha256


def fetch(name: str, *, wheel: Path | None = None) -> Path:
    """Return the path of a verified copy of zoo model ``name``, downloading it if needed.

    A cached file is returned as is when its sha256 matches. Otherwise the wheel is downloaded with pip
    (or ``wheel``, a local copy of it, is used), its sha256 is checked, and ``name`` is extracted and
    verified; the other zoo models missing from the cache are extracted too (one download serves all three).

    Args:
        name: a key of :data:`MODELS`.
        wheel: optional path to an already downloaded ``rapidocr_onnxruntime-1.4.4`` wheel (offline use);
            it must still match :data:`WHEEL_SHA256`.

    Raises:
        UserError: unknown name, pip failure, wheel or model sha256 mismatch, model missing from wheel,
            cache directory not writable.
        ConfigError: ``$NPUSCOPE_MODEL_CACHE`` is a file or lies under one, cannot be created or cannot be
            written (exit 2); checked before downloading.
    """
    info = model_info(name)
    _check_cache_env()
    if is_cached(name):
        return cached_path(name)
    _prepare_cache_dir()  # before any download: a cache we cannot write would waste it
    others = [n for n in MODELS if n != name and not is_cached(n)]
    local = wheel is None and os.environ.get(WHEEL_ENV, "").strip()
    if local:
        _install_from_env(Path(local).expanduser(), name, others)
    elif wheel is not None:
        _install_from_wheel(Path(wheel), name, others)
    else:
        with tempfile.TemporaryDirectory(prefix="npuscope-zoo-") as tmp:
            _install_from_wheel(_pip_download(Path(tmp)), name, others)
    return cache_dir() / info.filename


def fetch_all(*, wheel: Path | None = None) -> dict[str, Path]:
    """Fetch every zoo model; returns short name -> verified path. Raises like :func:`fetch`."""
    return {name: fetch(name, wheel=wheel) for name in MODELS}


def resolve(name_or_path: str | os.PathLike) -> Path:
    """Turn a CLI model argument into a file path: a zoo short name is fetched, a path must exist.

    Raises:
        UserError: the argument is neither a known zoo name nor an existing file.
    """
    text = os.fspath(name_or_path)
    if text in MODELS:
        return fetch(text)
    path = Path(text).expanduser()
    if path.is_file():
        return path
    raise UserError(
        f"model {text!r} is neither a zoo name ({', '.join(sorted(MODELS))}) nor an existing file; "
        "check the path or use one of the zoo names"
    )


def _pip_download(dest: Path) -> Path:
    """Run ``pip download --no-deps`` for the wheel into ``dest``; return the wheel path."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "-q", "--dest", str(dest), WHEEL_REQUIREMENT,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(
            f"could not download {WHEEL_REQUIREMENT} with pip ({type(exc).__name__}: {exc}); "
            f"check network access, {OFFLINE_HINT}"
        ) from None
    wheel = dest / WHEEL_FILENAME
    if proc.returncode != 0 or not wheel.is_file():
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
        reason = lines[-1] if lines else f"exit code {proc.returncode}, no {WHEEL_FILENAME} written"
        raise UserError(
            f"pip could not download {WHEEL_REQUIREMENT}: {reason}; "
            f"check network access / pip index settings, {OFFLINE_HINT}"
        )
    return wheel


def _install_from_env(path: Path, name: str, others: list[str]) -> None:
    """Install from ``$NPUSCOPE_ZOO_WHEEL``: a wheel file, a folder holding the wheel, or a folder holding the
    .onnx files (each verified by sha256 and copied into the cache). Raises UserError naming the variable."""
    where = f"{WHEEL_ENV}={path}"
    if path.is_dir():
        if (path / WHEEL_FILENAME).is_file():
            path = path / WHEEL_FILENAME
        elif (path / MODELS[name].filename).is_file():
            _install_from_folder(path, name, others, where)
            return
        else:
            raise UserError(f"{where} is a folder holding neither {WHEEL_FILENAME} nor {MODELS[name].filename}; set "
                            f"{WHEEL_ENV} to the wheel file, or to a folder holding it or the .onnx models")
    if not path.is_file():
        raise UserError(f"{where} does not exist; set {WHEEL_ENV} to a local copy of {WHEEL_FILENAME}, or unset it "
                        "to download the wheel")
    try:
        _install_from_wheel(path, name, others)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None


def _install_from_folder(folder: Path, name: str, others: list[str], where: str) -> None:
    """Copy model ``name`` (then the ``others`` present, best effort) from ``folder`` into the cache, verified."""
    target_dir = _prepare_cache_dir()
    for model in [name] + others:
        src = folder / MODELS[model].filename
        if not src.is_file():
            continue
        try:
            with open(src, "rb") as fh:
                _copy_verified(fh, MODELS[model], target_dir)
        except UserError as exc:
            if model == name:
                raise UserError(f"{where}: {exc}") from None


def _install_from_wheel(wheel: Path, name: str, others: list[str]) -> None:
    """Verify ``wheel``, extract model ``name`` into the cache (verified, renamed atomically), then the
    ``others`` on a best-effort basis (a failure there is reported when that model is fetched itself)."""
    if not wheel.is_file():
        raise UserError(f"wheel {wheel} does not exist; pass the path of {WHEEL_FILENAME}")
    actual = sha256_file(wheel)
    if actual != WHEEL_SHA256:
        raise UserError(
            f"wheel {wheel.name} has sha256 {actual}, expected {WHEEL_SHA256}; "
            f"the download is corrupt or not {WHEEL_REQUIREMENT}: delete it and fetch again"
        )
    target_dir = _prepare_cache_dir()
    try:
        with zipfile.ZipFile(wheel) as zf:
            _extract_verified(zf, MODELS[name], target_dir)
            for other in others:
                try:
                    _extract_verified(zf, MODELS[other], target_dir)
                except UserError:
                    pass
    except zipfile.BadZipFile:
        raise UserError(f"wheel {wheel} is not a valid zip archive; delete it and fetch again") from None


def _extract_verified(zf: zipfile.ZipFile, info: ZooModel, target_dir: Path) -> Path:
    """Stream one member to a temp file in ``target_dir``, check sha256, then ``os.replace`` into place."""
    member = WHEEL_MODELS_DIR + info.filename
    try:
        src = zf.open(member)
    except KeyError:
        raise UserError(
            f"{member} is missing from the {WHEEL_REQUIREMENT} wheel; the wheel is not the expected release"
        ) from None
    return _copy_verified(src, info, target_dir)


def _copy_verified(src, info: ZooModel, target_dir: Path) -> Path:
    """Stream the binary file object ``src`` (closed here) into ``target_dir`` as model ``info``: a temp file,
    sha256 checked, then ``os.replace`` into place. Raises UserError on a sha256 mismatch."""
    final = target_dir / info.filename
    fd, tmp_name = tempfile.mkstemp(prefix=info.filename + ".", suffix=".part", dir=target_dir)
    digest = hashlib.sha256()
    try:
        with src, os.fdopen(fd, "wb") as out:
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != info.sha256:
            raise UserError(
                f"model {info.filename} from the wheel has sha256 {digest.hexdigest()}, expected {info.sha256}; "
                "the content differs from the pinned release: report this, do not use the file"
            )
        os.chmod(tmp_name, 0o644)  # mkstemp creates 0600; the cache is a plain shared read-only file
        os.replace(tmp_name, final)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return final
