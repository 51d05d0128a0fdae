"""The head of a file, as format detection and the parsers read it: its first bytes, binary or text, decoded.

Below :mod:`toolkit.logs.detect` and the parsers (both use it), so that detection can import the parsers it
asks without a cycle.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.core.textfile import UTF8_BOM, choose_encoding, open_regular
from toolkit.logs.registry import HEAD_BYTES

#: A head with a NUL byte, or with more than this share of control characters, is binary.
BINARY_CONTROL_SHARE = 0.10
_TEXT_CONTROLS = {9, 10, 12, 13}


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of ``path`` (a regular file: toolkit.core.textfile.open_regular). Raises OSError
    (NotRegularFile for a FIFO, socket, device or a link to one)."""
    with open_regular(path) as fh:
        return fh.read(size)


def is_binary(head: bytes) -> bool:
    """True for a NUL byte or > 10% control characters (other than tab, newlines, form feed)."""
    if b"\x00" in head:
        return True
    if not head:
        return False
    controls = sum(1 for b in head if b < 32 and b not in _TEXT_CONTROLS)
    return controls / len(head) > BINARY_CONTROL_SHARE


def head_text(head: bytes, whole: bool = False) -> str:
    """``head`` (the first bytes of a file; all of them when ``whole``) as text: a leading UTF-8 BOM removed,
    decoded as UTF-8, or as GB18030 when it is not UTF-8 but GB18030 (toolkit.core.textfile.choose_encoding);
    bytes neither decodes replaced with U+FFFD."""
    if head.startswith(UTF8_BOM):
        head = head[len(UTF8_BOM):]
    return head.decode(choose_encoding(head, whole), errors="replace")


def head_lines(head: str, n: int) -> list[str]:
    """The first ``n`` non-blank complete lines of a file head (a last line cut by the head size is dropped)."""
    lines = head.splitlines()
    if len(lines) > 1 and not head.endswith(("\n", "\r")):
        lines = lines[:-1]
    return [ln for ln in lines if ln.strip()][:n]
