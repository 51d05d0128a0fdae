"""Paths the user names (MODEL, ``--out``, ``--inputs``, ``--config``, ``--dump``, ``--save-outputs``, ``--plan``,
``--policy``, ...), looked at without a traceback.

``Path.exists()`` / ``is_dir()`` / ``is_file()`` answer False for a path that is not there, but raise OSError
when the file system refuses to look: a name too long (ENAMETOOLONG: one part over 255 bytes, or the whole over
4096), a folder on the way that may not be searched (EACCES); ``Path.resolve()`` raises RuntimeError on a
symbolic link loop. The function that first looks at a path the user gave (toolkit.core.artifacts.out_path and
check_dump_dir, Config.load, toolkit.source.input_kind, the readers of plans, policies, device files, ...) calls
:func:`check_path` before anything else, so that each of these is one line naming the option, the path, what is
wrong and what to do (exit 2), before any work is done and before any folder is created. After it, the
``Path`` methods on that same path answer without raising.
"""

from __future__ import annotations

import errno
import os
import stat

from toolkit.core.errors import UsageError, UserError

#: The longest file name (one part of a path, bytes) and path most Linux / macOS file systems take, for the
#: message when the file system does not say (``os.pathconf``).
NAME_MAX, PATH_MAX = 255, 4096
#: Paths longer than this (characters) are shown shortened in messages (their start and end).
SHOWN_MAX = 160


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as a message shows it: as it is, or for one longer than :data:`SHOWN_MAX` characters its start and
    end around ``...`` and its length (``out/aaaa...aaaa (304 characters)``)."""
    text = os.fsdecode(path)
    if len(text) <= SHOWN_MAX:
        return text
    return f"{text[:SHOWN_MAX // 2]}...{text[-SHOWN_MAX // 4:]} ({len(text)} characters)"


def _limit(path: bytes, name: str, default: int) -> int:
    """``os.pathconf`` ``name`` of the nearest existing folder above ``path``, else ``default``."""
    parent = os.path.dirname(path) or b"."
    while True:
        try:
            return int(os.pathconf(parent, name))
        except (OSError, ValueError):
            if parent in (b"/", b".", b""):
                return default
            parent = os.path.dirname(parent) or b"."


def _file_on_the_way(path: bytes) -> bytes | None:
    """The first part of ``path`` (a prefix) that exists and is not a folder, when there is one."""
    parts = path.split(b"/")
    for i in range(1, len(parts)):
        prefix = b"/".join(parts[:i]) or b"/"
        try:
            if not stat.S_ISDIR(os.stat(prefix).st_mode):
                return prefix
        except OSError:
            return None
    return None


def path_problem(path: str | os.PathLike) -> str | None:
    """Why the file system refuses to look at ``path`` (``os.stat``, symbolic links followed), as a clause for a
    message ("one part of it is 300 bytes long, more than the 255 a file name may have here", "a symbolic link on
    it loops", ...), or None when it can: ``path`` exists, or it is simply not there (ENOENT, a dangling symbolic
    link)."""
    return _stat(os.fsencode(path))[1]


def _stat(raw: bytes) -> tuple[os.stat_result | None, str | None]:
    """(``os.stat(raw)`` or None when nothing is there, the reason it cannot be looked at or None). A path that
    is not there but could never be created either (a part longer than the file system's name limit below a
    folder that does not exist yet, which ``stat`` does not reach) has that as its reason: a command would
    otherwise create the folders above it and then fail."""
    if b"\0" in raw:
        return None, "it holds a NUL character, which no file name may hold"
    try:
        return os.stat(raw), None
    except FileNotFoundError:
        return None, _too_long(raw)
    except OSError as exc:
        return None, _reason(raw, exc)


def _too_long(raw: bytes) -> str | None:
    """Why ``raw`` is too long for the file system (a part over its name limit, the whole over its path limit),
    or None."""
    longest = max(len(part) for part in raw.split(b"/"))
    name_max = _limit(raw, "PC_NAME_MAX", NAME_MAX)
    if longest > name_max:
        return f"one part of it is {longest} bytes long, more than the {name_max} a file name may have here"
    path_max = _limit(raw, "PC_PATH_MAX", PATH_MAX)
    if len(raw) >= path_max:
        return f"it is {len(raw)} bytes long, more than the {path_max - 1} a path may have here"
    return None


def _reason(raw: bytes, exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return _too_long(raw) or "its name is too long for the file system"
    if exc.errno == errno.ELOOP:
        return "a symbolic link on it loops (it never reaches a file)"
    if exc.errno == errno.ENOTDIR:
        where = _file_on_the_way(raw)
        return f"'{shown_path(where)}' on it is a file, not a folder" if where else "a part of it is not a folder"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied: a folder on it may not be searched"
    return exc.strerror or type(exc).__name__


def check_path(path: str | os.PathLike, what: str, error: type[UserError] = UsageError,
               fix: str = "") -> os.stat_result | None:
    """``os.stat(path)`` (symbolic links followed) of a path the user named, or None when nothing is there (ENOENT,
    also a dangling symbolic link: the caller says what that means for it).

    Args:
        path: the path as the user gave it.
        what: how the message names it, e.g. ``"--out"`` or ``"config file"``.
        error: the UserError class raised (UsageError for options, InputError for inputs, ConfigError, ...).
        fix: what to do, appended after ``; `` (default: "give another path").

    Raises:
        ``error`` (exit 2), one line: ``{what} '{path}' cannot be used: {reason}; {fix}`` for every other reason
        the file system gives (:func:`path_problem`): a name too long (ENAMETOOLONG), a symbolic link loop
        (ELOOP), a file where a folder should be (ENOTDIR), permission denied (EACCES), a NUL character.
    """
    st, why = _stat(os.fsencode(path))
    if why is not None:
        raise error(f"{what} '{shown_path(path)}' cannot be used: {why}; {fix or 'give another path'}")
    return st
