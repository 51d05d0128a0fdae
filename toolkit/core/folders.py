"""Checks of a folder the user names for npuscope to write into (the compile cache, the model zoo cache)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from toolkit.core.errors import ConfigError
from toolkit.core.userpaths import path_problem, shown_path


def check_dir(root: Path, what: str) -> None:
    """Refuse a cache folder that is, or lies under, an existing non-folder (a file): entries could never be
    stored there. ``what`` names where the path came from (an environment variable or option).

    Raises:
        ConfigError: one line naming ``what``, the path and the file in the way; or the reason the file system
            refuses to look at the path (toolkit.core.userpaths.path_problem: a name too long, permission
            denied, ...).
    """
    try:
        for p in (root, *root.parents):
            if p.exists() or p.is_symlink():
                if not p.is_dir():
                    kind = f"a broken symbolic link (to '{os.readlink(p)}')" if p.is_symlink() and not p.exists() \
                        else "a file"
                    where = f"is {kind}" if p == root else f"lies under {kind} '{p}'"
                    raise ConfigError(f"{what} = '{root}' {where}, not a folder; point it to a folder (created if "
                                      "missing) or unset it")
                return
    except OSError as exc:  # Path.exists raises for a name too long, a folder that may not be searched
        why = path_problem(root) or exc.strerror or type(exc).__name__
        raise ConfigError(f"{what} = '{shown_path(root)}' cannot be used: {why}; point it to another folder or "
                          "unset it") from None


def unwritable_reason(root: Path) -> str | None:
    """Why files cannot be created in the folder ``root``, or None when they can. An existing folder is probed
    by creating and deleting a temporary file in it (``tempfile.mkstemp``: permissions, read-only or virtual
    file systems such as /proc); a missing one by ``os.access`` (write + search) on its nearest existing
    parent, which would have to create it. Nothing is left behind."""

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
