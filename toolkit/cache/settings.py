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

from toolkit.cache.store import KINDS, LAYOUT
from toolkit.config.cache_mode import MODES, default_mode
from toolkit.core.errors import ConfigError
from toolkit.core.folders import check_dir, unwritable_reason

DEFAULT_MAX_BYTES = 2 << 30
ENV_DIR = "NPUSCOPE_COMPILE_CACHE"
ENV_MAX = "NPUSCOPE_COMPILE_CACHE_MAX_BYTES"


def default_dir() -> Path:
    """``$NPUSCOPE_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/npuscope/compile``, else ``~/.cache/npuscope/compile``."""
    env = os.environ.get(ENV_DIR, "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base).expanduser() if base else Path.home() / ".cache"
    return root / "npuscope" / "compile"


def cache_problem(root: Path) -> str | None:
    """Why the compile cache in ``root`` cannot store entries, or None: one of npuscope's own folders in it
    (``<root>/v2`` and its namespace folders) is a file or another non-folder, or :func:`unwritable_reason`."""
    root = Path(root)
    for p in [root / LAYOUT] + [root / LAYOUT / k for k in KINDS]:
        if (p.exists() or p.is_symlink()) and not p.is_dir():
            return f"'{p}' is not a folder (npuscope keeps its entries there); remove it"
    return unwritable_reason(root)


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


def compile_cache(config: dict | None) -> dict | None:
    """The compile cache a compile with ``config`` (a ``Config.to_dict()``, as recorded in summary.json) uses,
    resolved as the compile resolves it (toolkit.cache.settings.from_config: the config, else
    ``$NPUSCOPE_COMPILE_CACHE``, else the default folder): {"mode": enable|disable|force, "dir": absolute
    folder path, "dir_from": "op_compiler_cache_dir" | "NPUSCOPE_COMPILE_CACHE" | "default", "max_bytes": size
    limit in bytes}. None when ``config`` is not a compile config (no ``op_compiler_cache_mode`` key, e.g. the
    compare-dumps config); {"error": message} when the settings are invalid (the compile refused them too)."""
    if not isinstance(config, dict) or "op_compiler_cache_mode" not in config:
        return None

    try:
        settings = from_config(config)
    except ConfigError as exc:
        return {"error": str(exc)}
    explicit = config.get("op_compiler_cache_dir") or ""
    source = "op_compiler_cache_dir" if explicit else (ENV_DIR if os.environ.get(ENV_DIR, "").strip() else "default")
    return {"mode": settings.mode, "dir": str(Path(settings.root).absolute()), "dir_from": source,
            "max_bytes": settings.limit}
