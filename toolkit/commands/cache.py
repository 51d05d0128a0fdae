"""``npuscope cache info|clear``: show or empty the compile cache (the CLI only parses arguments)."""

from __future__ import annotations

from toolkit.cache.settings import ENV_DIR, cache_problem, from_config
from toolkit.cache.store import LAYOUT, EntryStore
from toolkit.core.errors import ConfigError, UsageError
from toolkit.core.text import human_bytes

ACTIONS = ("info", "clear")


def _human(n: int) -> str:
    return human_bytes(n)


def _source(folder: str | None) -> str:
    import os

    return "--dir" if folder else (ENV_DIR if os.environ.get(ENV_DIR, "").strip() else "NPUSCOPE_COMPILE_CACHE")


def cache_command(action: str, folder: str | None = None) -> dict:
    """Run ``action`` on the compile cache in ``folder`` (default: the configured folder, see
    toolkit.cache.settings). Only cache entries are counted or deleted (toolkit.cache.store.KINDS/ENTRY_NAME);
    other files are reported ("left N file(s) ... that are not cache entries"). Returns {"summary": [lines],
    "info": {dir, entries, bytes, limit_bytes, foreign_files}, "freed_bytes": int (clear only), "writable": bool}.
    A folder that cannot store entries (toolkit.cache.settings.cache_problem) adds a WARNING line to ``info``
    (exit 0) and makes ``clear`` raise ConfigError (exit 2) when it exists. Raises UsageError for an unknown
    action, ConfigError for a bad size limit variable or a cache folder that is a file (or under one)."""
    if action not in ACTIONS:
        raise UsageError(f"cache action '{action}' is unknown; use one of {', '.join(ACTIONS)}")
    settings = from_config({"op_compiler_cache_dir": folder or "", "op_compiler_cache_mode": "enable"})
    problem = cache_problem(settings.root)
    if action == "clear" and problem and settings.root.exists():
        raise ConfigError(f"cannot clear compile cache '{settings.root}' ({_source(folder)}): it is not writable "
                          f"({problem}); fix that or point {_source(folder)} to another folder")
    store = EntryStore(settings.root, settings.limit)
    out: dict = {}
    if action == "clear":
        out["freed_bytes"] = store.clear()
    info = store.info()
    out["info"] = info
    counts = ", ".join(f"{n} {ns}" for ns, n in sorted(info["entries"].items())) or "no entries"
    if not settings.root.exists():  # an info on a mistyped --dir would otherwise read as an empty cache
        counts += f" (the folder does not exist yet: {_source(folder)} names it; a compile creates it)"
    lines = [f"compile cache: {info['dir']}",
             f"entries: {counts}; {_human(info['bytes'])} of {_human(info['limit_bytes'])} "
             "(NPUSCOPE_COMPILE_CACHE_MAX_BYTES)"]
    if action == "clear":
        lines.insert(1, f"cleared {_human(out['freed_bytes'])}")
    if problem:
        lines.append(f"WARNING: {settings.root} is not writable ({problem}): compiles run without storing entries; "
                     f"point {_source(folder)} to a writable folder")
    out["writable"] = problem is None
    if info["foreign_files"]:
        verb = "left" if action == "clear" else "ignored"
        lines.append(f"{verb} {info['foreign_files']} file(s) under {info['dir']}/{LAYOUT} that are not cache entries")
    out["summary"] = lines
    return out
