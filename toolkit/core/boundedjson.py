"""Read the JSON and TOML files users give us with limits: regular files only, a size limit, a nesting limit.

Every reader of a user's JSON or TOML file (``--config``, ``modify_mixlist``, ``fusion_switch_file``, device
files, ``signoff --policy``, a report folder's JSON, compare-dumps' ``index.json`` and mapping file,
``memcheck --plan``, parse-log's JSON inputs) goes through here, so that:

- a device, socket or folder is refused at once, before any byte is read (``--config /dev/zero``); FIFOs too,
  unless the caller reads pipes (``--config <(echo ...)``: then at most the size limit is read);
- a file over its size limit (:data:`LIMITS`) is refused naming its size, before it is read
  (:func:`read_limited`);
- text nested deeper than ``max_depth`` (default :data:`MAX_DEPTH`) is refused before it is parsed: the
  brackets outside strings (and, for TOML, comments) are counted in one pass (:func:`nesting_depth`), so
  neither json's nor tomllib's recursive parser ever raises RecursionError; TOML's dotted keys
  (``a.b.c = 1``) nest without brackets, so a parsed TOML document's depth is checked as well.

Errors are raised as the caller's :class:`~toolkit.core.errors.UserError` class, one line, naming the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from toolkit.core.textfile import NotRegularFile, open_regular

#: Default nesting limit (brackets, or TOML tables): real configs and reports nest < 10 deep.
MAX_DEPTH = 200
#: Size limits (bytes) by kind of file, looked up when a file is read: "config" for files users write
#: (configs, policies, device, mixlist, mapping files), "artifact" for files npuscope writes and reads back
#: (plan.json, a dump folder's index.json, report JSON, profiler traces), which grow with the model.
LIMITS = {"config": 16 << 20, "artifact": 1 << 30}

_JSON_ESCAPE = re.compile(rb"\\.", re.S)
_JSON_DELETE = bytes(i for i in range(256) if i not in b'[]{}"')
_TOML_SKIP = re.compile(rb'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*', re.S)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_CHUNK = 1 << 20


# ----------------------------------------------------------------------------------------------- reading
def read_limited_bytes(path: str | os.PathLike, what: str, error: type[Exception], hint: str = "", *,
                       limit: str = "config", pipes: bool = False) -> bytes:
    """The bytes of ``path``, when it is a regular file (or, with ``pipes``, a FIFO) within the size limit.

    Args:
        path: the file.
        what: how messages name it, e.g. ``"config file"``.
        error: the exception class raised (a UserError subclass such as ConfigError or InputError).
        hint: appended to messages after ``; `` (how to fix).
        limit: the kind of file, a key of :data:`LIMITS` (the most bytes read); a regular file's size is checked
            before reading (fstat).
        pipes: also read a FIFO (e.g. bash's ``<(echo ...)``), at most the limit of it.

    Raises:
        ``error``: not a regular file (a device, socket, folder, broken link; a FIFO unless ``pipes``: named,
            e.g. "is not a regular file but a character device"), not readable, or larger than the limit.
    """
    p = Path(path)
    tail = f"; {hint}" if hint else ""
    max_bytes = LIMITS[limit]
    try:
        if pipes and _is_fifo(p):
            fh = open(p, "rb")  # noqa: SIM115 (closed below); blocks until the writer opens it, as a shell pipe
        else:
            fh = open_regular(p)
        with fh:
            st = os.fstat(fh.fileno())
            size = st.st_size if stat.S_ISREG(st.st_mode) else 0
            if size > max_bytes:
                raise error(f"{what} '{p}' is {size} bytes, more than the {max_bytes} read{tail}")
            data = fh.read(max_bytes + 1)
    except NotRegularFile as exc:
        raise error(f"{what} '{p}' is {exc}{tail}") from None
    except OSError as exc:
        raise error(f"{what} '{p}' cannot be read ({exc.strerror or type(exc).__name__}){tail}") from None
    if len(data) > max_bytes:
        raise error(f"{what} '{p}' holds more than the {max_bytes} bytes read{tail}")
    return data


def read_limited(path: str | os.PathLike, what: str, error: type[Exception], hint: str = "", *,
                 limit: str = "config", pipes: bool = False) -> str:
    """:func:`read_limited_bytes` decoded as UTF-8 with or without a byte-order mark (as
    toolkit.core.textfile.read_user_text). Raises ``error`` as it does, or when the bytes are not UTF-8."""
    data = read_limited_bytes(path, what, error, hint, limit=limit, pipes=pipes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{what} '{path}' is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save "
                    "it as UTF-8 (a byte-order mark is fine)") from None


def _is_fifo(p: Path) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(p).st_mode)
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------- nesting
def nesting_depth(text: str | bytes, kind: str = "json") -> int:
    """The deepest bracket nesting (``[`` / ``{``) of ``text`` outside strings (and, for ``kind="toml"``,
    outside comments), without parsing. Unbalanced closing brackets count as closing; an unterminated
    string's brackets do not count.

    JSON is scanned at C speed: escape pairs (``\\x``) are removed, then everything but brackets and quotes
    (bytes.translate), and a bracket is outside strings when an even number of quotes precedes it (numpy).
    TOML (four string forms, comments; config files, small) strips strings and comments with one
    regular expression first."""
    import numpy as np

    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if kind == "toml":
        raw = _NOT_BRACKET.sub(b"", _TOML_SKIP.sub(b" ", raw))
    elif b"\\" in raw:
        raw = _JSON_ESCAPE.sub(b"", raw)
    kept = np.frombuffer(raw.translate(None, _JSON_DELETE), np.uint8)
    depth = peak = quotes = 0
    for i in range(0, len(kept), _CHUNK):
        part = kept[i:i + _CHUNK]
        is_quote = part == ord('"')
        seen = np.cumsum(is_quote, dtype=np.int64) + quotes  # quotes up to and including each byte
        outside = part[(seen % 2 == 0) & ~is_quote]
        quotes = int(seen[-1])
        if outside.size:
            running = np.cumsum(np.where((outside == ord("[")) | (outside == ord("{")), 1, -1)) + depth
            peak, depth = max(peak, int(running.max())), int(running[-1])
    return peak


def check_depth(text: str | bytes, what: str, error: type[Exception], kind: str = "json",
                max_depth: int | None = None) -> None:
    """``error`` when ``text`` nests deeper than ``max_depth`` (default :data:`MAX_DEPTH`; :func:`nesting_depth`)."""
    max_depth = MAX_DEPTH if max_depth is None else max_depth
    depth = nesting_depth(text, kind)
    if depth > max_depth:
        raise error(f"{what} nests {depth} levels deep, more than the {max_depth} read; it is not a file npuscope "
                    "wrote or expects: flatten it")


def value_depth(value: Any, stop: int) -> int:
    """Nesting depth of parsed lists and dicts (a scalar is 0), found without recursion; stops counting past
    ``stop``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if deepest > stop:
                return deepest
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


# ----------------------------------------------------------------------------------------------- parsing
def json_loads(text: str | bytes, what: str, error: type[Exception], *, max_depth: int | None = None,
               **kwargs) -> Any:
    """``json.loads(text, **kwargs)`` after :func:`check_depth`. json.JSONDecodeError is left to the caller
    (each phrases "not valid JSON" its own way); ``error`` for text nested too deep, and for an object that
    names a key twice (json.loads keeps the last one silently; RFC 8259 §4: names SHOULD be unique)."""
    check_depth(text, what, error, "json", max_depth)

    def unique(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise error(f"{what} names the key '{k}' twice in one object; keep one of them")
            out[k] = v
        return out

    kwargs.setdefault("object_pairs_hook", unique)
    try:
        return json.loads(text, **kwargs)
    except RecursionError:  # not reached after check_depth; kept so that no RecursionError ever escapes
        raise error(f"{what} nests too deeply to be read; flatten it") from None


def toml_loads(text: str, what: str, error: type[Exception], *, max_depth: int | None = None) -> dict:
    """``tomllib.loads(text)`` after :func:`check_depth`, then the parsed document's own depth (dotted keys
    nest without brackets). tomllib.TOMLDecodeError is left to the caller; ``error`` for nesting too deep."""
    max_depth = MAX_DEPTH if max_depth is None else max_depth
    check_depth(text, what, error, "toml", max_depth)
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise error(f"{what} nests too deeply to be read; flatten it") from None
    depth = value_depth(data, max_depth)
    if depth > max_depth:
        raise error(f"{what} nests more than {max_depth} tables deep (dotted keys); it is not a file npuscope "
                    "expects: flatten it")
    return data
