"""Read a text file the user gives us (config, policy, lengths, keep_dtype, mixlist and fusion switch files).

Files are decoded as UTF-8 with an optional byte-order mark (Python's ``utf-8-sig`` codec): editors such as
Windows Notepad write ``EF BB BF`` at the start of a UTF-8 file, which plain ``utf-8`` keeps as a U+FEFF
character that then breaks the first TOML statement, the first JSON token or the first line's name.

:func:`open_regular` (and ``read_user_text(..., regular_only=True)``) reads only regular files: a FIFO, socket,
device or a symbolic link to one (``/dev/zero``) is refused with :class:`NotRegularFile` naming what it is,
without blocking (the file is opened ``O_NONBLOCK`` and checked with ``fstat`` before any byte is read).
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from toolkit.core.errors import UserError


def read_user_text(path: str | os.PathLike, what: str, error: type[UserError], hint: str = "", *,
                   regular_only: bool = False) -> str:
    """The text of ``path``, decoded as UTF-8 with or without a BOM (``utf-8-sig``); newlines as in the file.

    Args:
        path: the file (a regular file, pipe or device; folders are refused).
        what: how messages name it, e.g. ``"config file"`` or ``"lengths file"``.
        error: the UserError subclass to raise (ConfigError for options, InputError for data).
        hint: appended to the messages after ``; `` (how to fix), e.g. ``"give one length per line"``.
        regular_only: refuse anything but a regular file (:func:`open_regular`), e.g. lengths or policy files.

    Raises:
        ``error``: the file cannot be read (e.g. it is a folder or not readable) or is not UTF-8 text (the
            message gives the offset of the first bad byte).
    """
    p = Path(path)
    tail = f"; {hint}" if hint else ""
    try:
        if regular_only:
            with open_regular(p) as fh:
                data = fh.read()
        else:
            data = p.read_bytes()
    except NotRegularFile as exc:
        raise error(f"{what} '{p}' is {exc}{tail}") from None
    except OSError as exc:
        raise error(f"{what} '{p}' cannot be read ({exc.strerror or type(exc).__name__}){tail}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{what} '{p}' is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it "
                    "as UTF-8 (a byte-order mark is fine)") from None


# ------------------------------------------------------------------------------------------- regular files
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class NotRegularFile(OSError):
    """A path that is not a regular file; ``str()`` says what it is, e.g. "not a regular file but a FIFO
    (named pipe)" or "a broken symbolic link (to 'x')"."""


def not_regular_reason(path: str | os.PathLike) -> str:
    """Why ``path`` (symbolic links followed) is not a regular file, '' when it is one. Checked with ``os.stat``,
    without opening it. E.g. "not a regular file but a FIFO (named pipe)", "a broken symbolic link (to 'x')",
    "not readable (Permission denied)"."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if os.path.islink(path):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            return f"a broken symbolic link (to '{target}': {exc.strerror})"
        return f"not readable ({exc.strerror or type(exc).__name__})"
    return _mode_reason(mode)


def _mode_reason(mode: int) -> str:
    if stat.S_ISREG(mode):
        return ""
    kind = next((what for test, what in _KINDS if test(mode)), "something else")
    return f"not a regular file but {kind}"


def open_regular(path: str | os.PathLike) -> io.BufferedReader:
    """``path`` opened for binary reading when it is a regular file (symbolic links followed).

    Opened with ``O_NONBLOCK`` (so a FIFO never blocks the open) and checked with ``fstat`` on the open
    descriptor (so a file swapped for a FIFO or a link to ``/dev/zero`` after a check is still refused).

    Raises:
        NotRegularFile: a FIFO, socket, device, folder or broken link (message: :func:`not_regular_reason`).
        OSError: any other failure to open it (permissions, ...).
    """
    why = not_regular_reason(path)
    if why:
        raise NotRegularFile(why)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        why = _mode_reason(os.fstat(fd).st_mode)
        if why:
            raise NotRegularFile(why)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_regular_text(path: str | os.PathLike, encoding: str = "utf-8-sig", errors: str = "replace",
                      newline: str | None = None) -> io.TextIOWrapper:
    """:func:`open_regular` as text (default UTF-8, optional BOM, invalid bytes replaced). Same errors."""
    return io.TextIOWrapper(open_regular(path), encoding=encoding, errors=errors, newline=newline)
