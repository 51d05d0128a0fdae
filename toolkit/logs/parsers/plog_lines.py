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

Lines carry no per-op times, so ``op_summary`` is empty. Tables:

- ``log_levels``: Level, Module, Count (every well-formed line, most frequent first);
- ``log_messages``: Level, Module, PID, Process, TID, Time, File, Line, Function, Message of the first
  :data:`MAX_MESSAGES` WARNING / ERROR lines (in file order). Each field longer than 2,000 characters is
  truncated with a marker giving its original length (toolkit.logs.textcap).

Blank lines are ignored; any other line that is not one plog record is malformed. The file is read in
blocks of :data:`BLOCK_CHARS` bytes with one multi-line regular expression per block (no per-line
Python loop), so memory stays bounded for logs of millions of lines. It is decoded by
toolkit.core.textfile.TextReader: a leading UTF-8 BOM is dropped (the first line is a record like any other);
UTF-8, or GB18030 for a log that is not UTF-8 but GB18030 (note "decoded as GB18030 (not UTF-8)"); bytes
neither decodes become U+FFFD, counted in a note that says to re-save the file as UTF-8.

Findings: ``log_errors`` (error) and ``log_warnings`` (info) per module, with the count and first message,
modules in the order of their first such message in the file (the first error first).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pandas as pd

from toolkit.core.records import Finding
from toolkit.core.textfile import TextReader
from toolkit.logs.detect import head_lines
from toolkit.logs.plog import ROOT
from toolkit.logs.registry import Parser, ParseResult, register_parser
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


def detect(path: Path, head: str) -> bool:
    """True when most of the first non-blank lines (up to 5) are plog records."""
    lines = head_lines(head, DETECT_LINES)
    good = sum(1 for ln in lines if RECORD_RE.match(ln))
    return bool(lines) and good * 2 > len(lines)


def _blocks(text: TextReader):
    """The file's text in blocks ending at a line end (the last block may end without one)."""
    rest = ""
    for chunk in text.chunks(BLOCK_CHARS):
        chunk = rest + chunk
        cut = chunk.rfind("\n")
        if cut < 0:
            rest = chunk
            continue
        rest = chunk[cut + 1:]
        yield chunk[:cut + 1]
    if rest:
        yield rest


def _scan(path: Path) -> tuple[Counter, list[tuple], int, list[str]]:
    """(Counter of (level, module), the first WARNING/ERROR records, malformed line count, encoding notes)."""
    with TextReader(path) as text:  # never a FIFO or /dev/zero
        counts, notable, bad = _scan_blocks(_blocks(text))
        return counts, notable, bad, text.notes()


def _scan_blocks(blocks) -> tuple[Counter, list[tuple], int]:
    counts, notable, bad = Counter(), [], 0
    for block in blocks:
        block = block.replace("\r\n", "\n") if "\r" in block else block
        found = Counter(_COUNT_RE.findall(block))
        for (level, module, other), n in found.items():
            if other:
                bad += n
            else:
                counts[(level, clip(module))] += n
        if len(notable) < MAX_MESSAGES and ("[ERROR] " in block or "[WARNING] " in block):
            for m in _NOTABLE_RE.finditer(block):
                notable.append(tuple(clip(g) for g in _record(m)))  # one 30 MB record stays 2,000 chars
                if len(notable) >= MAX_MESSAGES:
                    break
    return counts, notable, bad


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
    """Read a plog file (module docstring). Never raises for bad lines."""
    counts, notable, bad, decoded = _scan(Path(path))
    good = sum(counts.values())
    levels = pd.DataFrame([{"Level": lv, "Module": mod.strip(), "Count": n} for (lv, mod), n in counts.items()],
                          columns=["Level", "Module", "Count"])
    levels = levels.sort_values("Count", ascending=False, kind="stable").reset_index(drop=True)
    messages = pd.DataFrame(notable, columns=MESSAGE_COLUMNS)
    messages["Module"] = messages["Module"].str.strip()
    messages["Message"] = messages["Message"].str.rstrip("\r")
    notes = [f"{good} log line(s): " + ", ".join(f"{lv} {n}" for lv, n in
                                                  levels.groupby("Level", sort=False)["Count"].sum().items())]
    if len(notable) >= MAX_MESSAGES:
        notes.append(f"log_messages keeps the first {MAX_MESSAGES} WARNING/ERROR lines")
    notes += decoded
    return ParseResult(str(path), NAME, tables={"log_levels": levels, "log_messages": messages}, records=good,
                       malformed=bad, notes=notes,
                       findings=_findings(levels, messages, Path(path).name))


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
