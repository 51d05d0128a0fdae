"""Where the compile cache lives, whether it is used, and how big it may grow.

Resolution (first that is set wins):

- mode: ``Config.op_compiler_cache_mode`` (the converter's option name) — ``enable`` (read and write entries,
  default), ``disable`` (neither), ``force`` (never read, always rebuild and overwrite). A config that does
  not set it takes ``$NPUSCOPE_COMPILE_CACHE_MODE`` (the test suite sets ``disable``), else ``enable``.
- directory: ``Config.op_compiler_cache_dir``, else ``$NPUSCOPE_COMPILE_CACHE``, else
  ``$XDG_CACHE_HOME/npuscope/compile``, else ``~/.cache/npuscope/compile``.
- a folder that is a file (or under one) is a ConfigError naming where it came from, and so is an invalid
  ``$NPUSCOPE_COMPILE_CACHE_MODE`` (named as the environment variable, not as a command-line option).
- a folder that exists but cannot be written (:func:`unwritable_reason`) is not an error for a compile (it
  runs without storing entries and warns once); ``npuscope cache info`` reports it, ``cache clear`` refuses it.
- size limit: ``$NPUSCOPE_COMPILE_CACHE_MAX_BYTES`` in bytes (default 2 GiB); least-recently-used entries
  are evicted when a write takes the cache above it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from toolkit.core.errors import ConfigError

MODES = ("enable", "disable", "force")
DEFAULT_MAX_BYTES = 2 << 30
ENV_DIR = "NPUSCOPE_COMPILE_CACHE"
ENV_MODE = "NPUSCOPE_COMPILE_CACHE_MODE"
ENV_MAX = "NPUSCOPE_COMPILE_CACHE_MAX_BYTES"


def default_mode() -> str:
    """``$NPUSCOPE_COMPILE_CACHE_MODE`` or ``enable`` (the converter's default); read when a Config is made.

    Raises:
        ConfigError: the variable holds something other than one of :data:`MODES` (named in the message).
    """
    raw = os.environ.get(ENV_MODE, "").strip()
    if raw and raw not in MODES:
        from toolkit.core.text import suggest

        raise ConfigError(f"environment variable {ENV_MODE}={raw!r} is not a cache mode{suggest(raw, MODES)}; "
                          f"set it to one of {', '.join(MODES)} or unset it")
    return raw or "enable"


def default_dir() -> Path:
    """``$NPUSCOPE_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/npuscope/compile``, else ``~/.cache/npuscope/compile``."""
    env = os.environ.get(ENV_DIR, "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base).expanduser() if base else Path.home() / ".cache"
    return root / "npuscope" / "compile"


def check_dir(root: Path, what: str) -> None:
    """Refuse a cache folder that is, or lies under, an existing non-folder (a file): entries could never be
    stored there. ``what`` names where the path came from (an environment variable or option).

    Raises:
        ConfigError: one line naming ``what``, the path and the file in the way.
    """
    for p in (root, *root.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                kind = f"a broken symbolic link (to '{os.readlink(p)}')" if p.is_symlink() and not p.exists() \
                    else "a file"
                where = f"is {kind}" if p == root else f"lies under {kind} '{p}'"
                raise ConfigError(f"{what} = '{root}' {where}, not a folder; point it to a folder (created if "
                                  "missing) or unset it")
            return


def cache_problem(root: Path) -> str | None:
    """Why the compile cache in ``root`` cannot store entries, or None: one of npuscope's own folders in it
    (``<root>/v2`` and its namespace folders) is a file or another non-folder, or :func:`unwritable_reason`."""
    from toolkit.cache.store import KINDS, LAYOUT

    root = Path(root)
    for p in [root / LAYOUT] + [root / LAYOUT / k for k in KINDS]:
        if (p.exists() or p.is_symlink()) and not p.is_dir():
            return f"'{p}' is not a folder (npuscope keeps its entries there); remove it"
    return unwritable_reason(root)


def unwritable_reason(root: Path) -> str | None:
    """Why files cannot be created in the folder ``root``, or None when they can. An existing folder is probed
    by creating and deleting a temporary file in it (``tempfile.mkstemp``: permissions, read-only or virtual
    file systems such as /proc); a missing one by ``os.access`` (write + search) on its nearest existing
    parent, which would have to create it. Nothing is left behind."""
    import tempfile

    root = Path(root)
    if root.is_dir():
        try:
            fd, name = tempfile.mkstemp(prefix=".npuscope-probe-", dir=root)
        except OSError as exc:
            return f"creating a file there fails: {exc.strerror or type(exc).__name__}"
        os.close(fd)
        try:
            os.unlink(name)
        except OSError:
            pass
        return None
    parent = next((p for p in root.parents if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"'{parent}' does not allow creating it"
    return None


def _dir_source(explicit: str) -> str:
    if explicit:
        return "op_compiler_cache_dir"
    if os.environ.get(ENV_DIR, "").strip():
        return f"environment variable {ENV_DIR}"
    return "the default compile cache folder"


def max_bytes() -> int:
    """The size limit in bytes (``$NPUSCOPE_COMPILE_CACHE_MAX_BYTES``, default 2 GiB). Raises ConfigError."""
    raw = os.environ.get(ENV_MAX, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        val = int(raw)
        if val < 0:
            raise ValueError
    except ValueError:
        raise ConfigError(f"{ENV_MAX} = '{raw}'; expected a size in bytes >= 0, e.g. 2147483648") from None
    return val


@dataclass(frozen=True)
class Settings:
    """mode (one of MODES), root directory, size limit in bytes."""

    mode: str
    root: Path
    limit: int

    @property
    def reads(self) -> bool:
        return self.mode == "enable"

    @property
    def writes(self) -> bool:
        return self.mode in ("enable", "force")


def from_config(cfg: dict | object | None) -> Settings:
    """Settings from a Config, a plan's config dict (plan.json) or None (defaults).

    Raises:
        ConfigError: an invalid mode; a cache folder that is a file or lies under one (checked unless the
            mode is ``disable``): compiles stop with this error rather than silently running uncached.
    """
    get = (cfg.get if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))) if cfg is not None \
        else (lambda k, d=None: d)
    mode = get("op_compiler_cache_mode", None) or default_mode()
    if mode not in MODES:
        raise ConfigError(f"op_compiler_cache_mode = '{mode}' is not valid; expected one of {', '.join(MODES)}")
    where = get("op_compiler_cache_dir", "") or ""
    root = Path(where).expanduser() if where else default_dir()
    if mode != "disable":
        check_dir(root, _dir_source(where))
    return Settings(mode, root, max_bytes())
