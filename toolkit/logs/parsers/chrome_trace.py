"""Chrome-trace JSON (Trace Event Format; opens in Perfetto and chrome://tracing): a JSON array of events,
or an object with a ``traceEvents`` array. Times ``ts``/``dur`` are in microseconds.

Events read: ``ph: "X"`` complete events (``ts``, ``dur``) and ``B``/``E`` pairs (matched per pid/tid, last
opened first closed). ``M`` metadata events name processes (used as Model Name) and threads; flow (``s``,
``t``, ``f``), instant, counter and other phases are skipped without counting as malformed.

Each complete event becomes one op-summary task. An ``args`` key equal to an op_summary column name (``OP
Type``, ``Task Type``, ``Stream ID``, ``Time Kind``, ``Input Shapes``, ...) sets that column. Otherwise: Op
Name = event name; Task Type = the event's ``cat`` when it is one of toolkit.profile.optable.TASK_TYPES;
OP Type = args ``op_type`` or ``op_name``, else the ``cat`` when it is not a task type (``npuscope profile``'s
trace.json puts the op type there); Stream ID = ``tid`` (a non-numeric tid gets a running number); Task ID =
event order; Time Kind = args ``time_kind`` (as trace.json writes it), else the top-level object's
``otherData["Time Kind"]``, else ``measured``; Source = the file name.

Malformed (counted, skipped): an event that is not an object, a complete event whose ts/dur is not a number,
not finite or beyond 1e18 (toolkit.logs.numbers), or whose dur is negative; an args value for a numeric
op_summary column (Task Duration(us), Stream ID, ...) that is such a number; an ``E`` with no open ``B``, a ``B`` never closed, unreadable JSON fragments.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

from toolkit.logs.jsonio import load_events, number
from toolkit.logs.numbers import insane_number
from toolkit.logs.registry import Parser, ParseResult, register_parser
from toolkit.profile.optable import (
    NUMERIC_COLUMNS,
    OP_SUMMARY_COLUMNS,
    TASK_TYPES,
    op_summary_frame,
)

NAME = "chrome_trace"
DESCRIPTION = "Chrome-trace JSON (array or {\"traceEvents\": [...]}, ph X / B-E events; Perfetto)"
_DETECT_RE = re.compile(r'^\s*(?:\[\s*\{|\{)')
_ARG_COLUMNS = [c for c in OP_SUMMARY_COLUMNS if c not in ("Op Name",)]


def detect(path: Path, head: str) -> bool:
    """A JSON array or object whose head mentions "ph" or "traceEvents"."""
    return _DETECT_RE.match(head) is not None and ('"ph"' in head or '"traceEvents"' in head)


class _Builder:
    """Collects op-summary rows from complete events."""

    def __init__(self, source: str, time_kind: str):
        self.rows, self.source, self.time_kind = [], source, time_kind
        self.process, self.streams = {}, {}

    def stream(self, pid, tid) -> float:
        n = number(tid)
        if n is not None:
            return n
        return float(self.streams.setdefault((pid, tid), len(self.streams)))

    def add(self, ev: dict, ts: float, dur: float, args: dict) -> bool:
        """Add one task; False (nothing added: malformed) when a numeric op_summary column in ``args`` holds a
        non-finite or absurd number, or its Task Duration(us) is negative."""
        if any(col in args and insane_number(args[col]) for col in NUMERIC_COLUMNS):
            return False
        pid, tid = ev.get("pid"), ev.get("tid")
        cat = ev.get("cat") if isinstance(ev.get("cat"), str) else ""
        task_type = cat if cat in TASK_TYPES else ""
        row = {"Op Name": str(args.get("Op Name", ev.get("name", ""))), "Task ID": len(self.rows),
               "Stream ID": self.stream(pid, tid), "Model Name": self.process.get(pid, ""),
               "OP Type": str(args.get("op_type", args.get("op_name", "" if task_type else cat))),
               "Task Type": task_type, "Task Start Time(us)": ts, "Task Duration(us)": dur,
               "Time Kind": str(args.get("time_kind", self.time_kind)), "Source": self.source}
        for col in _ARG_COLUMNS:
            if col in args and args[col] is not None:
                row[col] = args[col] if col in NUMERIC_COLUMNS else str(args[col])
        if (number(row["Task Duration(us)"]) or 0.0) < 0:
            return False
        self.rows.append(row)
        return True


def _complete(ev: dict, b: _Builder) -> bool:
    ts, dur = number(ev.get("ts")), number(ev.get("dur"))
    if ts is None or dur is None or dur < 0:
        return False
    return b.add(ev, ts, dur, ev.get("args") if isinstance(ev.get("args"), dict) else {})


def _end(ev: dict, stacks: dict, b: _Builder) -> bool:
    stack = stacks.get((ev.get("pid"), ev.get("tid")))
    ts = number(ev.get("ts"))
    if not stack:
        return False
    begin = stack.pop()  # a bad E closes its B: the pair is one malformed record
    if ts is None:
        return False
    t0 = number(begin.get("ts"))
    if t0 is None or ts < t0:
        return False
    args = dict(begin.get("args") or {}) if isinstance(begin.get("args"), dict) else {}
    if isinstance(ev.get("args"), dict):
        args.update(ev["args"])
    return b.add(begin, t0, ts - t0, args)


def _metadata(ev: dict, b: _Builder) -> None:
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    if ev.get("name") == "process_name" and "name" in args:
        b.process[ev.get("pid")] = str(args["name"])


def read_events(events: list, b: _Builder) -> tuple[int, Counter]:
    """Feed ``events`` into ``b``; returns (malformed, Counter of skipped phases)."""
    bad, skipped, stacks = 0, Counter(), defaultdict(list)
    for ev in events:
        if not isinstance(ev, dict):
            bad += 1
            continue
        ph = ev.get("ph")
        if ph == "X":
            bad += not _complete(ev, b)
        elif ph == "B":
            stacks[(ev.get("pid"), ev.get("tid"))].append(ev)
        elif ph == "E":
            bad += not _end(ev, stacks, b)
        elif ph == "M":
            _metadata(ev, b)
        else:
            skipped[str(ph)] += 1
    return bad + sum(len(s) for s in stacks.values()), skipped


def parse(path: Path) -> ParseResult:
    """Read a Chrome-trace JSON file (module docstring). Never raises for bad content."""
    path = Path(path)
    loaded = load_events(path)
    other = loaded.top.get("otherData") if isinstance(loaded.top.get("otherData"), dict) else {}
    b = _Builder(path.name, str(other.get("Time Kind", "measured")))
    bad, skipped = read_events(loaded.events, b)
    notes = list(loaded.notes)
    if skipped:
        notes.append("skipped events by phase: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    summary = op_summary_frame(b.rows)
    return ParseResult(str(path), NAME, op_summary=summary, records=len(summary), malformed=bad + loaded.malformed,
                       notes=notes)


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
