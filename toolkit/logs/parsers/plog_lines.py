"""plog lines: ``[LEVEL] MODULE(PID,PROCESS):YYYY-MM-DD-HH:MM:SS.mmm.uuu [file:line]message`` (GUIDE §4).

Written by npuscope's own logger (toolkit.logs.plog) and by the device toolchain, whose lines vary (CANN
"Log Reference", plog and device-side logs): host lines put the thread id after the source position
(``[graph.cc:275]26183 message``); some modules write no source position at all (TEFUSION:
``...:12:00:00.000.000 message``); device logs carry a negative PID and no process (``TSCH(-1,null)``) and
AICPU lines write the function and thread after the source position, ``[file:line][func][tid:N]message``, or
without it, ``[func][tid:N]message`` (also ``[file:line][tid:N]``). All of these are records: File and Line are
the source position when there is one (none gives empty cells, never another field), Function the ``[func]``
before a ``[tid:N]``, TID the thread id (``[tid:N]``, or the leading number of a host line with a source
position; empty otherwise and for npuscope's own lines, which carry none); Message is what follows them.

Console captures are read too (the output of ``atc`` or a training script saved to a file: tool text such as
"ATC start working now..." around plog lines, and the toolchain's error-code blocks): a file is one when a line
of its head is a plog record or an error-code line, but most of its first 5 lines are not plog records. There,
lines that are neither a record nor in an error-code block are console text, counted in a note and ignored (in
a plog file they are malformed). An error-code block is a line ``E19999: Inner Error!`` (CANN error codes:
``E`` + a digit or letter + 4 digits: E19999, EZ3002, E10001, EE9999) and the indented lines under it; each block
is one record of table ``log_error_codes`` (in a plog file too).

Lines carry no per-op times, so ``op_summary`` is empty. Tables:

- ``log_levels``: Level, Module, Count (every well-formed line, most frequent first);
- ``log_messages``: Level, Module, PID, Process, TID, Time, File, Line, Function, Message of the first
  :data:`MAX_MESSAGES` WARNING / ERROR lines (in file order). Each field longer than 2,000 characters is
  truncated with a marker giving its original length (toolkit.logs.textcap);
- ``log_error_codes`` (when there is an error-code block): Code, Op (the first op the block names: ``Op[Resize_3]``,
  ``node:Resize_3(Resize)``; empty when none), Message (the text after the code), Detail (the indented lines,
  stripped, joined with `` | ``), for the first :data:`MAX_MESSAGES` blocks.

Blank lines are ignored; any other line that is not one plog record is malformed. The file is read in
blocks of :data:`BLOCK_CHARS` bytes with one multi-line regular expression per block (no per-line
Python loop), so memory stays bounded for logs of millions of lines. It is decoded by
toolkit.core.textfile.TextReader: a leading UTF-8 BOM is dropped (the first line is a record like any other);
UTF-8, or GB18030 for a log that is not UTF-8 but GB18030 (note "decoded as GB18030 (not UTF-8)"); bytes
neither decodes become U+FFFD, counted in a note that says to re-save the file as UTF-8.

Findings: ``log_errors`` (error) per error code (subject the code; evidence its count, first block and op),
first; then ``log_errors`` (error) and ``log_warnings`` (info) per module, with the count and first message,
modules in the order of their first such message in the file (the first error first).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from toolkit.core.records import Finding
from toolkit.core.textfile import TextReader
from toolkit.logs.head import head_lines
from toolkit.logs.plog import ROOT
from toolkit.logs.registry import HEAD_BYTES, Parser, ParseResult, register_parser
from toolkit.logs.textcap import clip

NAME = "plog"
DESCRIPTION = "plog lines ([LEVEL] MODULE(PID,PROCESS):time [file:line]message), ours and the toolchain's"
MAX_MESSAGES = 1000
BLOCK_CHARS = 32 * 1024 * 1024  # bytes decoded per block (the name is older than the decoding)
MESSAGE_COLUMNS = ["Level", "Module", "PID", "Process", "TID", "Time", "File", "Line", "Function", "Message"]
_TIME = r"\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d\.\d{3}\.\d{3}"
#: one record of any of the forms in the module docstring; groups level, module, pid, process, time, file, line,
#: func, tid, message (a ``[func]`` alone before ``[tid:N]`` is matched as file: :func:`_record` moves it)
RECORD_PATTERN = (r"\[(?P<level>[A-Z]+)\] (?P<module>[^(\n]+?)\((?P<pid>-?\d+),(?P<process>[^)\n]*)\):"
                  r"(?P<time>" + _TIME + r")(?: ?\[(?P<file>[^\]\n:\[]*)(?::(?P<line>\d+))?\])?"
                  r"(?: ?\[(?P<func>[^\]\n\[]*)\](?=\[tid:\d+\]))?"
                  r"(?:\[tid:(?P<tid>\d+)\])?(?P<message>[^\n]*)")
RECORD_RE = re.compile(RECORD_PATTERN + r"$")
_HOST_TID = re.compile(r"(\d+) (.*)", re.DOTALL)
DETECT_LINES = 5

# one match per non-blank line: (level, module, "") for a plog record, ("", "", line) for anything else; the
# rest of a record is validated, not captured
_COUNT_RE = re.compile(
    r"^(?:\[([A-Z]+)\] ([^(\n]+?)\(-?\d+,[^)\n]*\):" + _TIME + r"[^\n]*"
    r"|([^\n]*\S[^\n]*))$", re.MULTILINE)
_NOTABLE_RE = re.compile(r"^(?=\[(?:ERROR|WARNING)\] )" + RECORD_PATTERN + r"$", re.MULTILINE)
#: The line opening an error-code block of the toolchain's console output (CANN error codes: E19999, EZ3002,
#: E10001, EE9999, ...), followed by its indented lines.
ERROR_CODE_RE = re.compile(r"(?P<code>E[0-9A-Z]\d{4}): ?(?P<message>.*)")
_ERROR_BLOCK_RE = re.compile(r"^(?P<code>E[0-9A-Z]\d{4}): ?(?P<message>[^\n]*)(?P<more>(?:\n[ \t]+\S[^\n]*)*)",
                             re.MULTILINE)
#: The op an error names: ``Op[Resize_3]`` / ``OP[...]`` / ``op[...]``, else ``node:Resize_3(Resize)``.
_OP_RES = (re.compile(r"\bop\[([^\]\n]+)\]", re.IGNORECASE), re.compile(r"\bnode[: ]\s*([^\s(\[,:;]+)", re.IGNORECASE))
ERROR_CODE_COLUMNS = ["Code", "Op", "Message", "Detail"]


def detect(path: Path, head: str) -> bool:
    """True for a plog file (:func:`mostly_plog`) or a console capture: a line of the head (64 KiB) is a plog
    record or opens an error-code block (``E19999: ...``)."""
    return mostly_plog(head) or any(RECORD_RE.match(ln) or ERROR_CODE_RE.match(ln) for ln in head_lines(head, 10**6))


def mostly_plog(head: str) -> bool:
    """True when most of the first non-blank lines (up to 5) of ``head`` are plog records: a plog file, whose
    other lines are malformed records (else a console capture, whose other lines are console text)."""
    lines = head_lines(head, DETECT_LINES)
    good = sum(1 for ln in lines if RECORD_RE.match(ln))
    return bool(lines) and good * 2 > len(lines)


def _blocks(text: TextReader):
    """The file's text in blocks ending at a line end (the last block may end without one)."""
    rest = ""
    for chunk in text.chunks(BLOCK_CHARS):
        chunk = rest + chunk
        cut = _block_end(chunk)
        if cut < 0:
            rest = chunk
            continue
        rest = chunk[cut + 1:]
        yield chunk[:cut + 1]
    if rest:
        yield rest


def _block_end(chunk: str, reach: int = 1 << 16) -> int:
    """Where a block of ``chunk`` may end (the index of a newline, -1 for none): before a line that is not
    indented, so an error-code block and its indented lines stay in one block; the last line is kept for the next
    chunk (its continuation may be there). Looks back at most ``reach`` characters: with no such place there, -1
    (read on) for a chunk shorter than ``reach``, else the last newline (bounded memory)."""
    last = chunk.rfind("\n")
    at, floor = last, max(0, len(chunk) - reach)
    while at >= floor:
        if chunk[at + 1:at + 2] not in ("", " ", "\t"):
            return at
        at = chunk.rfind("\n", 0, at)
    return -1 if floor == 0 else last


@dataclass
class _Scan:
    """What one pass over a log found (counts of well-formed lines, the first notable records, error-code blocks)."""

    counts: Counter = field(default_factory=Counter)
    notable: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    error_count: int = 0
    other: int = 0
    console: bool | None = None
    notes: list = field(default_factory=list)


def _scan(path: Path) -> _Scan:
    """Scan the file in blocks (:func:`_scan_blocks`); its encoding notes in ``notes``."""
    with TextReader(path) as text:  # never a FIFO or /dev/zero
        found = _scan_blocks(_blocks(text))
        found.notes = text.notes()
        return found


def _scan_blocks(blocks) -> _Scan:
    """``console`` is decided by the first block (:func:`mostly_plog`); ``other`` counts the non-blank lines that
    are neither a plog record nor in an error-code block."""
    out = _Scan()
    for block in blocks:
        block = block.replace("\r\n", "\n") if "\r" in block else block
        if out.console is None:
            out.console = not mostly_plog(block[:HEAD_BYTES])
        for (level, module, other), n in Counter(_COUNT_RE.findall(block)).items():
            if other:
                out.other += n
            else:
                out.counts[(level, clip(module))] += n
        if len(out.notable) < MAX_MESSAGES and ("[ERROR] " in block or "[WARNING] " in block):
            for m in _NOTABLE_RE.finditer(block):
                out.notable.append(tuple(clip(g) for g in _record(m)))  # one 30 MB record stays 2,000 chars
                if len(out.notable) >= MAX_MESSAGES:
                    break
        if block.startswith("E") or "\nE" in block:  # (plog lines start with '[')
            for m in _ERROR_BLOCK_RE.finditer(block):
                more = [ln.strip() for ln in m["more"].split("\n") if ln.strip()]
                out.other -= 1 + len(more)  # its lines are a record, no other text
                out.error_count += 1
                if len(out.errors) < MAX_MESSAGES:
                    out.errors.append(_error_record(m["code"], m["message"].strip(), more))
    return out


def _error_record(code: str, message: str, more: list[str]) -> tuple[str, ...]:
    """The :data:`ERROR_CODE_COLUMNS` cells of one error-code block: Op the first op it names (its first line,
    then the indented ones), Detail the indented lines joined with `` | ``."""
    op = next((m.group(1).strip() for text in (message, *more) for r in _OP_RES for m in [r.search(text)] if m), "")
    return tuple(clip(x) for x in (code, op, message, " | ".join(more)))


def _record(m: re.Match) -> tuple[str, ...]:
    """The :data:`MESSAGE_COLUMNS` cells of one matched record (module docstring: File, Line, Function, TID)."""
    g = m.groupdict()
    tid, message = g["tid"] or "", g["message"]
    file, func = g["file"] or "", g["func"] or ""
    if tid and file and not g["line"] and not func:  # [func][tid:N]: a function, not a source file
        file, func = "", file
    if not tid and g["line"] and g["process"] != ROOT:
        host = _HOST_TID.match(message)
        if host:
            tid, message = host.group(1), host.group(2)
    return (g["level"], g["module"], g["pid"], g["process"], tid, g["time"], file, g["line"] or "", func, message)


def _findings(levels: pd.DataFrame, messages: pd.DataFrame, name: str) -> list[Finding]:
    out = []
    for level, kind, sev in (("ERROR", "log_errors", "error"), ("WARNING", "log_warnings", "info")):
        at = messages[messages["Level"] == level].reset_index(drop=True)
        first_at = {m: i for i, m in reversed(list(enumerate(at["Module"])))}  # a module's first line in the file
        rows = levels[levels["Level"] == level]
        rows = rows.iloc[sorted(range(len(rows)), key=lambda j: first_at.get(rows.iloc[j]["Module"], len(at)))]
        for _, row in rows.iterrows():  # the module that logged first comes first (then the rest by count)
            first = messages[(messages["Level"] == level) & (messages["Module"] == row["Module"])]
            ev = {"count": int(row["Count"]), "file": name}
            if len(first):
                where = ":".join(x for x in (first.iloc[0]["File"], first.iloc[0]["Line"]) if x)
                where = "][".join(x for x in (where, first.iloc[0]["Function"]) if x)
                ev["first"] = (f"{first.iloc[0]['Time']} " + (f"[{where}]" if where else "")
                               + f"{first.iloc[0]['Message']}")[:300]
            out.append(Finding(sev, kind, str(row["Module"]), ev,
                               "read the first message and the lines before it in the log" if sev == "error"
                               else "check whether the warnings matter for this run"))
    return out


def parse(path: Path) -> ParseResult:
    """Read a plog file or a console capture holding plog lines (module docstring). Never raises for bad lines."""
    scan = _scan(Path(path))
    good = sum(scan.counts.values())
    levels = pd.DataFrame([{"Level": lv, "Module": mod.strip(), "Count": n} for (lv, mod), n in scan.counts.items()],
                          columns=["Level", "Module", "Count"])
    levels = levels.sort_values("Count", ascending=False, kind="stable").reset_index(drop=True)
    messages = pd.DataFrame(scan.notable, columns=MESSAGE_COLUMNS)
    messages["Module"] = messages["Module"].str.strip()
    messages["Message"] = messages["Message"].str.rstrip("\r")
    codes = pd.DataFrame(scan.errors, columns=ERROR_CODE_COLUMNS)
    notes = [f"{good} log line(s): " + ", ".join(f"{lv} {n}" for lv, n in
                                                  levels.groupby("Level", sort=False)["Count"].sum().items())]
    if scan.error_count:
        notes.append(f"{scan.error_count} error-code block(s): " + ", ".join(dict.fromkeys(codes["Code"])))
    if len(scan.notable) >= MAX_MESSAGES:
        notes.append(f"log_messages keeps the first {MAX_MESSAGES} WARNING/ERROR lines")
    if scan.error_count > MAX_MESSAGES:
        notes.append(f"log_error_codes keeps the first {MAX_MESSAGES} error-code blocks")
    bad = 0 if scan.console else scan.other
    if scan.console and scan.other:
        notes.append(f"{scan.other} console line(s) that are no log record (tool output around the log lines) "
                     "ignored")
    notes += scan.notes
    tables = {"log_levels": levels, "log_messages": messages}
    if len(codes):
        tables["log_error_codes"] = codes
    return ParseResult(str(path), NAME, tables=tables, records=good + scan.error_count, malformed=bad, notes=notes,
                       findings=_code_findings(codes, Path(path).name) + _findings(levels, messages, Path(path).name))


def _code_findings(codes: pd.DataFrame, name: str) -> list[Finding]:
    """One ``log_errors`` finding per error code (first-seen order), naming its first block's op when it has one."""
    out = []
    for code, rows in codes.groupby("Code", sort=False):
        first = rows.iloc[0]
        ev = {"count": len(rows), "file": name, "first": f"{code}: {first['Message']} {first['Detail']}"[:300]}
        if first["Op"]:
            ev["op"] = first["Op"]
        fix = (f"error {code} names op '{first['Op']}': check that op first (its input shapes, attributes, support "
               "on the device), then the lines before the block" if first["Op"] else
               f"look up error {code} in the toolchain's error-code reference and read the lines before the block")
        out.append(Finding("error", "log_errors", code, ev, fix))
    return out


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
