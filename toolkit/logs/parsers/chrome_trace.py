"""Chrome-trace JSON (Trace Event Format; opens in Perfetto and chrome://tracing): a JSON array of events,
or an object with a ``traceEvents`` array. Times ``ts``/``dur`` are in microseconds.

Events read: ``ph: "X"`` complete events (``ts``, ``dur``) and ``B``/``E`` pairs (matched per pid/tid, last
opened first closed). ``M`` metadata events name processes (used as Model Name, except a device profiler's processes, which name a kind
of event: toolkit.logs.timeline.model_name) and threads; flow (``s``,
``t``, ``f``), instant, counter and other phases are skipped without counting as malformed.

Each complete event becomes one op-summary task. An ``args`` key equal to an op_summary column name (``OP
Type``, ``Task Type``, ``Stream ID``, ``Time Kind``, ``Input Shapes``, ...) sets that column. Otherwise: Op
Name = event name; Task Type = the event's ``cat`` when it is one of toolkit.profile.optable.TASK_TYPES;
OP Type = args ``op_type`` or ``op_name``, else the ``cat`` when it is not a task type (``npuscope profile``'s
trace.json puts the op type there); Stream ID = ``tid`` (a non-numeric tid gets a running number); Task ID =
event order (a profiler timeline's events, whose process or name gives their kind, take their ids from their
args only: left empty where the source gives none, e.g. host API spans); Time Kind = args ``time_kind`` (as trace.json writes it), else the top-level object's
``otherData["Time Kind"]``, else ``measured``; Source = the file name.

Timelines of the device profilers (msprof's ``msprof_*.json``, torch_npu's ``trace_view.json``;
toolkit.logs.timeline): events are classified by their process (``M`` process_name) and args. Device tasks
get Time Kind ``device`` (Task ID from args ``Task Id``, Stream ID from ``Physic Stream Id``, else ``Stream Id``;
Task Type from args ``Task Type``); communication tasks (HCCL: by name, args ``Task Type`` or process) are device
time of Task Type ``COMMUNICATION`` (a class of their own, not an op type; as op_summary / kernel_details give them); host API spans (CANN, AscendCL, Python, ``aten::``)
get Time Kind ``host``, so they are never summed with device time; overlap-analysis spans are no tasks: table
``overlap_spans`` (Name, Count, Total Time(us)). An explicit Time Kind (args ``Time Kind`` / ``time_kind``)
always wins.

Files of at least :data:`STREAM_MIN_BYTES` are streamed with ijson (toolkit.logs.streamjson): bounded memory
(text columns are pandas Categoricals); a cut or corrupt file then ends at the damage (one malformed record, a
note) instead of being recovered event by event as smaller files are (toolkit.logs.jsonio).

Malformed (counted, skipped): an event that is not an object, a complete event whose ts/dur is not a number,
not finite or beyond 1e18 (toolkit.logs.numbers), or whose dur is negative; an args value for a numeric
op_summary column (Task Duration(us), Stream ID, ...) that is such a number; an ``E`` with no open ``B``, a ``B`` never closed, unreadable JSON fragments.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.logs import timeline
from toolkit.logs.jsonio import load_events, number
from toolkit.logs.numbers import insane_number
from toolkit.logs.registry import Parser, ParseResult, register_parser
from toolkit.logs.streamjson import Columns, Stream, iter_events
from toolkit.profile.optable import (
    NUMERIC_COLUMNS,
    OP_SUMMARY_COLUMNS,
    TASK_TYPES,
)

NAME = "chrome_trace"
DESCRIPTION = "Chrome-trace JSON (array or {\"traceEvents\": [...]}, ph X / B-E events; Perfetto)"
_DETECT_RE = re.compile(r'^\s*(?:\[\s*\{|\{)')
_ARG_COLUMNS = [c for c in OP_SUMMARY_COLUMNS if c not in ("Op Name",)]
_ARG_SET, _NUMERIC = frozenset(_ARG_COLUMNS), frozenset(NUMERIC_COLUMNS)
#: files at least this large are streamed (toolkit.logs.streamjson) instead of loaded whole
STREAM_MIN_BYTES = 64 * 2 ** 20


def detect(path: Path, head: str) -> bool:
    """A JSON array or object whose head mentions "ph" or "traceEvents"."""
    return _DETECT_RE.match(head) is not None and ('"ph"' in head or '"traceEvents"' in head)


#: internal columns: the event's pid, the kind its name/args give, an explicit Time Kind from args, and the ids a
#: plain trace gives it (event order, tid), kept until its kind is known
_PID, _KIND, _HINT, _TASK_N, _STREAM_N = "_pid", "_kind", "_hint", "_task_n", "_stream_n"
_COLUMNS = OP_SUMMARY_COLUMNS + [_PID, _KIND, _HINT, _TASK_N, _STREAM_N]


class _Builder:
    """Collects op-summary rows from complete events, column by column (toolkit.logs.streamjson.Columns)."""

    def __init__(self, source: str, time_kind: str):
        self.cols = Columns(_COLUMNS, set(NUMERIC_COLUMNS) | {_TASK_N, _STREAM_N})
        self.source, self.time_kind = source, time_kind
        self.process, self.streams, self.overlap = {}, {}, {}

    def stream(self, pid, tid) -> float:
        n = number(tid)
        if n is not None:
            return n
        return float(self.streams.setdefault((pid, tid), len(self.streams)))

    def add(self, ev: dict, ts: float, dur: float, args: dict) -> bool:
        """Add one task; False (nothing added: malformed) when a numeric op_summary column in ``args`` holds a
        non-finite or absurd number, or its Task Duration(us) is negative."""
        present = args.keys() & _ARG_SET if args else ()
        if any(insane_number(args[col]) for col in present if col in _NUMERIC):
            return False
        pid, tid = ev.get("pid"), ev.get("tid")
        cat = ev.get("cat") if isinstance(ev.get("cat"), str) else ""
        task_type = cat if cat in TASK_TYPES else str(args.get("Task Type", ""))
        name = str(args.get("Op Name", ev.get("name", "")))
        kind = timeline.event_kind(name, args)
        row = {"Op Name": name, "OP Type": str(args.get("op_type", args.get("op_name", "" if task_type else cat))),
               "Task Type": task_type, "Task Start Time(us)": ts, "Task Duration(us)": dur}
        ids = {"Task ID": number(args.get("Task Id")),
               "Stream ID": number(args.get("Physic Stream Id", args.get("Stream Id")))}
        row.update({col: v for col, v in ids.items() if v is not None})
        for col in present:
            if args[col] is not None:
                row[col] = args[col] if col in _NUMERIC else str(args[col])
        if (number(row["Task Duration(us)"]) or 0.0) < 0:
            return False
        hint = str(args.get("time_kind", ""))
        process = self.process.get(str(pid))
        if process is None:  # its process_name comes later (or never): resolved in frame()
            row.update({_PID: str(pid), _KIND: kind, _HINT: hint, _TASK_N: self.cols.n,
                        _STREAM_N: self.stream(pid, tid)})
        else:  # resolved now: no per-row pid / kind storage (msprof writes the metadata first)
            kind = kind or timeline.process_kind(process)
            if not kind:  # a plain trace: ids from event order and tid where its args give none
                row.setdefault("Task ID", self.cols.n)
                row.setdefault("Stream ID", self.stream(pid, tid))
            if kind == timeline.OVERLAP:
                span = self.overlap.setdefault(name, [0, 0.0])
                span[0], span[1] = span[0] + 1, span[1] + dur
                return True
            row["Time Kind"] = row.get("Time Kind") or hint or timeline.TIME_KIND.get(kind, "") or self.time_kind
            if kind == timeline.COMMUNICATION:
                row["Task Type"] = timeline.COMMUNICATION_TASK_TYPE
            row["Model Name"] = row.get("Model Name") or timeline.model_name(process)
        self.cols.append(row)
        return True

    def frame(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(op summary, overlap spans: Name, Count, Total Time(us)) — kinds resolved (module docstring). The column
        store is released as the frame is built."""
        deferred = self.cols.holds(_PID)
        df = self.cols.frame()
        self.cols = None
        df["Source"] = pd.Categorical.from_codes(np.zeros(len(df), np.int8), [self.source])
        overlap = None
        if deferred:  # rows read before their process_name: resolved now, once per distinct combination
            df, overlap = timeline.resolve(df, self.process, self.time_kind, _PID, _KIND, _HINT)
            plain = np.asarray(timeline.kinds(df, self.process, _PID, _KIND) == "")
            for col, own in (("Task ID", _TASK_N), ("Stream ID", _STREAM_N)):  # a plain trace's ids, as above
                fill = plain & df[col].isna().to_numpy()
                if fill.any():
                    df.loc[fill, col] = df.loc[fill, own]
        rows = dict(self.overlap)
        if overlap is not None and overlap.any():
            for name, d in zip(df["Op Name"][overlap].astype(str), df["Task Duration(us)"][overlap]):
                span = rows.setdefault(name, [0, 0.0])
                span[0], span[1] = span[0] + 1, span[1] + d
            df = df[~overlap]
        spans = pd.DataFrame([(n, c, t) for n, (c, t) in sorted(rows.items())],
                             columns=["Name", "Count", "Total Time(us)"])
        for col in (_PID, _KIND, _HINT, _TASK_N, _STREAM_N):
            del df[col]
        for col in df.columns:  # a category no row holds (e.g. the "" of a column resolved later) is not a value
            if isinstance(df[col].dtype, pd.CategoricalDtype):
                df[col] = df[col].cat.remove_unused_categories()
        return df.reset_index(drop=True), spans


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
        b.process[str(ev.get("pid"))] = str(args["name"])


def read_events(events: Iterable, b: _Builder) -> tuple[int, Counter]:
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
    if path.stat().st_size >= STREAM_MIN_BYTES:
        return _parse_stream(path)
    loaded = load_events(path)
    other = loaded.top.get("otherData") if isinstance(loaded.top.get("otherData"), dict) else {}
    b = _Builder(path.name, str(other.get("Time Kind", "measured")))
    bad, skipped = read_events(loaded.events, b)
    return _result(path, b, bad + loaded.malformed, skipped, list(loaded.notes))


def _parse_stream(path: Path) -> ParseResult:
    """The streaming read (toolkit.logs.streamjson): bounded memory; a corrupt file ends the stream there."""
    state = Stream()
    try:
        events = iter_events(path, state)
        b = _Builder(path.name, "measured")
        first = next(events, None)  # the head (and otherData) is read with the first event
        b.time_kind = str(state.other_data.get("Time Kind", "measured"))
        bad, skipped = read_events(_chain(first, events) if first is not None else [], b)
    except OSError as exc:
        return ParseResult(str(path), NAME, malformed=1, notes=[f"cannot be read: {exc}"])
    notes = [f"streamed ({path.stat().st_size / 2 ** 20:.0f} MiB, read with ijson in bounded memory)"]
    if state.error:
        notes.append(state.error)
    notes += state.notes
    return _result(path, b, bad + bool(state.error), skipped, notes)


def _chain(first, rest):
    yield first
    yield from rest


def _result(path: Path, b: _Builder, bad: int, skipped: Counter, notes: list[str]) -> ParseResult:
    if skipped:
        notes.append("skipped events by phase: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    summary, spans = b.frame()
    tables = {"overlap_spans": spans} if len(spans) else {}
    if len(spans):
        notes.append(f"{int(spans['Count'].sum())} overlap-analysis span(s) kept apart (table overlap_spans)")
    return ParseResult(str(path), NAME, op_summary=summary, tables=tables, records=len(summary), malformed=bad,
                       notes=notes)


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
