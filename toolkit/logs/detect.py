"""Which registered format a file is in: read its head once, ask each parser's ``detect`` in order.

``detect_format(path) -> Detection``: ``parser`` is the first registered parser whose ``detect(path, head)``
is true, or None with ``reason`` one of "not found", "not a file" (a folder), "not a regular file but a FIFO
(named pipe)" (or a socket, device; toolkit.core.textfile.not_regular_reason: never opened), "a broken symbolic link (...)",
"unreadable: ...", "empty", "binary", "UTF-16 text (a byte-order mark): re-save it as UTF-8" or "unknown format".

The head given to ``detect`` is decoded as the parsers decode the file (toolkit.logs.head.head_text): a leading
UTF-8 byte-order mark removed, UTF-8, or GB18030 when the head is not UTF-8 but GB18030
(toolkit.core.textfile.choose_encoding).

Importing this module registers the built-in parsers (it imports :mod:`toolkit.logs.parsers`, which sits below
it: the parsers read heads with :mod:`toolkit.logs.head`), so ``detect_format(path).parser.parse(path)`` works
on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolkit.core.textfile import UTF8_BOM, NotRegularFile, not_regular_reason
# importing the parsers registers the built-in formats, so detect_format works on its own
from toolkit.logs import parsers as built_in
from toolkit.logs.head import BINARY_CONTROL_SHARE, head_lines, head_text, is_binary, read_head
from toolkit.logs.registry import HEAD_BYTES, Parser, parsers

__all__ = ["BINARY_CONTROL_SHARE", "Detection", "built_in", "detect_format", "head_lines", "head_text", "is_binary",
           "read_head"]


@dataclass
class Detection:
    """The parser of a file (None when no registered parser reads it) and, then, why (module docstring)."""

    path: Path
    parser: Parser | None
    reason: str = ""


def detect_format(path: str | Path) -> Detection:
    """The parser for ``path`` (see module docstring); never raises for a bad file."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return Detection(path, None, "not found")
    if path.is_dir():
        return Detection(path, None, "not a file")
    why = not_regular_reason(path)
    if why:
        return Detection(path, None, why)
    try:
        head = read_head(path)
    except NotRegularFile as exc:
        return Detection(path, None, str(exc))
    except OSError as exc:
        return Detection(path, None, f"unreadable: {exc.strerror or exc}")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return Detection(path, None, "UTF-16 text (a byte-order mark): re-save it as UTF-8")
    whole = len(head) < HEAD_BYTES
    head = head[len(UTF8_BOM):] if head.startswith(UTF8_BOM) else head  # a file of a BOM alone is empty
    # NUL padding after the last line (what a crash or a power loss leaves in a log) is not binary content
    head = head.rstrip(b"\x00")
    if not head.strip():
        return Detection(path, None, "empty")
    if is_binary(head):
        return Detection(path, None, "binary")
    text = head_text(head, whole)
    for parser in parsers():
        if parser.detect(path, text):
            return Detection(path, parser)
    return Detection(path, None, "unknown format" + _separator_hint(text))


def _separator_hint(text: str) -> str:
    """A hint for a table whose first line is split by ';' or tabs rather than commas (a spreadsheet's export in
    some locales): the profiler CSVs parse-log reads are comma-separated."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    for sep, name in ((";", "';'"), ("\t", "tabs")):
        if first.count(sep) >= 1 and first.count(sep) > first.count(","):
            return f" (its first line is separated by {name}, not commas: re-save it comma-separated if it is a profiler CSV)"
    return ""
