"""Read a text file the user gives us (config, policy, lengths, keep_dtype, mixlist and fusion switch files).

Files are decoded as UTF-8 with an optional byte-order mark (Python's ``utf-8-sig`` codec): editors such as
Windows Notepad write ``EF BB BF`` at the start of a UTF-8 file, which plain ``utf-8`` keeps as a U+FEFF
character that then breaks the first TOML statement, the first JSON token or the first line's name.

:func:`open_regular` (and ``read_user_text(..., regular_only=True)``) reads only regular files: a FIFO, socket,
device or a symbolic link to one (``/dev/zero``) is refused with :class:`NotRegularFile` naming what it is,
without blocking (the file is opened ``O_NONBLOCK`` and checked with ``fstat`` before any byte is read).

Device files that parse-log reads (plogs, compile.log, profiler CSVs, JSON traces) are not refused for their
bytes: :class:`TextReader` (streamed) and :func:`decode_text` (whole) drop a leading UTF-8 byte-order mark and
decode them as UTF-8, or as GB18030 when they are not UTF-8 but are GB18030 (files saved on Chinese-locale
Windows, e.g. a profiler CSV re-saved by Excel: GBK is a subset of GB18030); bytes neither decodes are replaced
with U+FFFD and counted, and :meth:`TextReader.notes` says so (with the fix: re-save as UTF-8). Sources: the
Unicode Standard §23.8 (U+FEFF as a signature), GB 18030-2005 (Python's ``gb18030`` codec).
"""

from __future__ import annotations

import codecs
import io
import os
import stat
import threading
from collections.abc import Iterator
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
    """:func:`open_regular` as text (default UTF-8, invalid bytes replaced). A leading UTF-8 byte-order mark is
    dropped whenever ``encoding`` is UTF-8 in any spelling (``"utf-8"`` is read as ``"utf-8-sig"``), so the first
    line never starts with U+FEFF. Same errors as :func:`open_regular`; ``LookupError`` for an unknown encoding."""
    if codecs.lookup(encoding).name == "utf-8":
        encoding = "utf-8-sig"
    return io.TextIOWrapper(open_regular(path), encoding=encoding, errors=errors, newline=newline)


# ------------------------------------------------------------------------------------------ device text files
UTF8_BOM = codecs.BOM_UTF8
#: The head of a streamed file from which :class:`TextReader` decides its encoding (a smaller file is checked
#: whole); bytes past it are decoded with that encoding and any it cannot decode are counted.
SNIFF_BYTES = 4 << 20
#: Bytes read per decoded chunk by :meth:`TextReader.lines`.
LINE_CHUNK_BYTES = 1 << 20

_ERRORS = "npuscope.replace_counted"
_COUNTING = threading.local()  # the Decoder running in this thread (its decode() is the only caller of codecs)


def _replace_counted(exc: UnicodeError):
    """Codec error handler: U+FFFD for each undecodable run, counted on the :class:`Decoder` decoding."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    reader = getattr(_COUNTING, "reader", None)
    if reader is not None:
        reader.replaced_bytes += exc.end - exc.start
        reader.replaced_chars += 1
    return "\ufffd", exc.end


codecs.register_error(_ERRORS, _replace_counted)


def _decodes(data: bytes, encoding: str, final: bool) -> bool:
    """True when ``data`` decodes strictly as ``encoding`` (a multi-byte character cut at its end is fine unless
    ``final``)."""
    try:
        codecs.getincrementaldecoder(encoding)("strict").decode(data, final)
    except UnicodeDecodeError:
        return False
    return True


def choose_encoding(head: bytes, whole: bool) -> str:
    """``"utf-8"``, or ``"gb18030"`` when ``head`` (BOM already removed) is not UTF-8 but decodes as GB18030.

    Args:
        head: the file's first bytes, or all of them.
        whole: ``head`` is the whole file (a character cut at its end is then an error, not the head's edge).
    """
    if _decodes(head, "utf-8", whole) or not _decodes(head, "gb18030", whole):
        return "utf-8"
    return "gb18030"


def encoding_notes(encoding: str, replaced_bytes: int, replaced_chars: int) -> list[str]:
    """What a reader should tell about a file decoded as ``encoding`` with ``replaced_bytes`` undecodable bytes in
    ``replaced_chars`` runs (each now U+FFFD): nothing for clean UTF-8."""
    notes = ["decoded as GB18030 (not UTF-8)"] if encoding == "gb18030" else []
    if replaced_bytes:
        name = "GB18030" if encoding == "gb18030" else "UTF-8"
        notes.append(f"{replaced_bytes:,} byte(s) that are not {name} text were replaced by {replaced_chars:,} "
                     "U+FFFD character(s) (text in another encoding, or a damaged file); re-save it as UTF-8")
    return notes


class Decoder:
    """An incremental decoder of ``encoding`` that replaces undecodable bytes with U+FFFD and counts them:
    ``replaced_bytes`` bytes in ``replaced_chars`` runs (one U+FFFD each)."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        self.replaced_bytes = self.replaced_chars = 0
        self._decoder = codecs.getincrementaldecoder(encoding)(_ERRORS)

    def decode(self, data: bytes, final: bool = False) -> str:
        """The text of ``data`` (bytes of a character cut at its end are kept for the next call unless ``final``)."""
        _COUNTING.reader = self
        try:
            return self._decoder.decode(data, final)
        finally:
            _COUNTING.reader = None

    def notes(self) -> list[str]:
        """:func:`encoding_notes` for what was decoded so far."""
        return encoding_notes(self.encoding, self.replaced_bytes, self.replaced_chars)


def decode_text(data: bytes) -> tuple[str, list[str]]:
    """(``data`` as text, notes) by the rules of :class:`TextReader`, for bytes already read whole (a JSON file):
    a leading UTF-8 BOM dropped, UTF-8 or else GB18030 when all of ``data`` is GB18030, undecodable bytes
    replaced with U+FFFD and counted in the notes (:func:`encoding_notes`). Never raises."""
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    decoder = Decoder(choose_encoding(data, True))
    text = decoder.decode(data, True)
    return text, decoder.notes()


class TextReader:
    """A device text file (a plog, compile.log, profiler CSV) decoded as it is read, in bounded memory.

    Only a regular file is opened (:func:`open_regular`). A leading UTF-8 byte-order mark (``EF BB BF``, which
    Windows editors and Excel's "CSV UTF-8" write) is dropped. The encoding is decided from the first
    :data:`SNIFF_BYTES` (the whole file when smaller: :func:`choose_encoding`): UTF-8, or GB18030 when those bytes
    are not UTF-8 but are GB18030 (GBK / GB2312 files from Chinese-locale Windows). Bytes the chosen encoding
    cannot decode, anywhere in the file, become U+FFFD and are counted (:attr:`decoder`); :meth:`notes` reports
    the encoding and the count once the file is read. A UTF-16 file is not decoded as such (toolkit.logs.detect
    names it and how to re-save it).

    Use as a context manager; read once, with :meth:`chunks` (text blocks) or :meth:`lines` (lines with their
    endings, split at ``\\n``, ``\\r\\n`` and ``\\r`` as ``open(..., newline="")`` splits them).

    Attributes:
        encoding: ``"utf-8"`` or ``"gb18030"``.
        bom: the file started with a UTF-8 byte-order mark (dropped).
        decoder: the :class:`Decoder` (its replacement counts).

    Raises (on construction): NotRegularFile, OSError as :func:`open_regular`.
    """

    def __init__(self, path: str | os.PathLike, sniff: int = SNIFF_BYTES):
        self._fh = open_regular(path)
        try:
            head = self._fh.read(sniff)
            whole = len(head) < sniff or not self._fh.peek(1)
        except BaseException:
            self._fh.close()
            raise
        self.bom = head.startswith(UTF8_BOM)
        self._head = head[len(UTF8_BOM):] if self.bom else head
        self.encoding = choose_encoding(self._head, whole)
        self.decoder = Decoder(self.encoding)

    def __enter__(self) -> TextReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._fh.close()

    def chunks(self, size: int = LINE_CHUNK_BYTES) -> Iterator[str]:
        """The text in blocks decoded from about ``size`` bytes each (a block may end inside a line; never
        inside a character)."""
        head, self._head = self._head, b""
        for at in range(0, len(head), size):
            text = self.decoder.decode(head[at:at + size])
            if text:
                yield text
        while True:
            data = self._fh.read(size)
            text = self.decoder.decode(data, not data)
            if text:
                yield text
            if not data:
                return

    def lines(self, size: int = LINE_CHUNK_BYTES) -> Iterator[str]:
        """The lines of the text with their endings (class docstring), the last one possibly without; memory is
        bounded by the longest line."""
        pending: list[str] = []
        for text in self.chunks(size):
            cut = max(text.rfind("\n"), text.rfind("\r", 0, len(text) - 1))  # a final \r may start a \r\n
            if cut < 0:
                pending.append(text)
                continue
            block = "".join(pending) + text[:cut + 1] if pending else text[:cut + 1]
            pending = [text[cut + 1:]] if cut + 1 < len(text) else []
            yield from io.StringIO(block, newline="")
        if pending:
            yield from io.StringIO("".join(pending), newline="")

    def notes(self) -> list[str]:
        """:func:`encoding_notes` for what was read so far (complete once the text was read to its end)."""
        return self.decoder.notes()
