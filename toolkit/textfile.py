"""Read a text file the user gives us (config, policy, lengths, keep_dtype, mixlist and fusion switch files).

Files are decoded as UTF-8 with an optional byte-order mark (Python's ``utf-8-sig`` codec): editors such as
Windows Notepad write ``EF BB BF`` at the start of a UTF-8 file, which plain ``utf-8`` keeps as a U+FEFF
character that then breaks the first TOML statement, the first JSON token or the first line's name.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolkit.errors import UserError


def read_user_text(path: str | os.PathLike, what: str, error: type[UserError], hint: str = "") -> str:
    """The text of ``path``, decoded as UTF-8 with or without a BOM (``utf-8-sig``); newlines as in the file.

    Args:
        path: the file (a regular file, pipe or device; folders are refused).
        what: how messages name it, e.g. ``"config file"`` or ``"lengths file"``.
        error: the UserError subclass to raise (ConfigError for options, InputError for data).
        hint: appended to the messages after ``; `` (how to fix), e.g. ``"give one length per line"``.

    Raises:
        ``error``: the file cannot be read (e.g. it is a folder or not readable) or is not UTF-8 text (the
            message gives the offset of the first bad byte).
    """
    p = Path(path)
    tail = f"; {hint}" if hint else ""
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise error(f"{what} '{p}' cannot be read ({exc.strerror or type(exc).__name__}){tail}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{what} '{p}' is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it "
                    "as UTF-8 (a byte-order mark is fine)") from None
