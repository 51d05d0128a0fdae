"""The syntax of a keep_dtype entry (the converter's ``--keep_dtype`` file, see toolkit.precision.options):
``name``, ``OpName::name`` or ``OpType::TypeName``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeepEntry:
    """One keep_dtype entry: ``text`` as written, ``kind`` ``"name"`` or ``"type"``, ``value`` the node name
    or the op type."""

    text: str
    kind: str
    value: str


def parse_keep_entry(text: str) -> KeepEntry:
    """The :class:`KeepEntry` of one keep_dtype entry (see the module docstring).

    A prefixed entry ignores the spaces around the prefix and the name (``" OpType:: Conv "``). A plain
    node name is taken exactly as given, because ONNX node names may begin or end with whitespace (a name
    ending in ``"\\r"`` is kept by the advice it appears in); a keep_dtype *file* strips each line when
    it is read (toolkit.config.schema), as the converter does.

    Raises:
        ValueError: an empty or all-whitespace entry, or a prefix with nothing after it (``"OpType::"``).
    """
    s = text.strip()
    for prefix, kind in ((OP_TYPE_PREFIX, "type"), (OP_NAME_PREFIX, "name")):
        if s.startswith(prefix):
            value = s[len(prefix):].strip()
            if not value:
                raise ValueError(f"keep_dtype entry {text!r} has nothing after '{prefix}'")
            return KeepEntry(s, kind, value)
    if not s:
        raise ValueError(f"keep_dtype has an empty entry {text!r}")
    return KeepEntry(text, "name", text)


def normalise_keep_dtype(entries: list[str]) -> list[str]:
    """keep_dtype entries in the form the compiler reads: ``OpName::x`` → ``x``, ``OpType::X`` kept, spaces
    stripped around a prefix, plain names exact, repeats dropped (first kept). Raises ValueError as
    :func:`parse_keep_entry`."""
    out: list[str] = []
    for text in entries:
        e = parse_keep_entry(text)
        norm = f"{OP_TYPE_PREFIX}{e.value}" if e.kind == "type" else e.value
        if norm not in out:
            out.append(norm)
    return out


#: Prefix of an op-type keep_dtype entry.
OP_TYPE_PREFIX = "OpType::"

#: Prefix of an explicit node-name keep_dtype entry (dropped when read).
OP_NAME_PREFIX = "OpName::"


def _one_line(entry: str) -> bool:
    """Whether ``entry`` survives as one line of a keep_dtype file: no line break inside (``str.splitlines``
    would split it) and no whitespace at an end (the file's reader strips each line: toolkit.config.schema)."""
    return len(entry.splitlines()) == 1 and entry == entry.strip()


def unwritable_entry(entries) -> str | None:
    """The first of ``entries`` that cannot be a line of a keep_dtype file (:func:`_one_line`), or None."""
    return next((str(e) for e in entries if not _one_line(str(e))), None)


def keep_file_text(entries) -> str | None:
    """The text of a keep_dtype file (one entry per line, the converter's format) holding ``entries``, or None
    when one of them cannot be a line of it (:func:`unwritable_entry`); such entries fit only a JSON config's
    ``keep_dtype`` list. A node name starting with ``#`` is written ``OpName::#...`` (the reader skips a line
    starting with ``#`` as a comment; the prefix is the converter's explicit node-name form)."""
    if unwritable_entry(entries) is not None:
        return None
    return "".join(f"{OP_NAME_PREFIX}{e}\n" if str(e).startswith("#") else f"{e}\n" for e in entries)
