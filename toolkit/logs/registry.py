"""The parser registry of ``parse-log``: one small unit per input format.

A parser is ``detect(path, head) -> bool`` (``head``: the first :data:`HEAD_BYTES` bytes of the file, BOM
removed, decoded as UTF-8 or GB18030 with replacement: toolkit.logs.head.head_text) and ``parse(path) -> ParseResult``. Parsers are tried in registration
order (the order of imports in :mod:`toolkit.logs.parsers`); the first whose ``detect`` says yes reads the file.

Each parser module ends with ``register_parser(Parser(NAME, DESCRIPTION, detect, parse))``.

Contract of ``parse``: malformed records (lines, rows, events) are counted in ``ParseResult.malformed`` and
skipped; it never raises for bad content it can skip. ``op_summary`` always has exactly the columns of
:data:`toolkit.profile.optable.OP_SUMMARY_COLUMNS` (via ``op_summary_frame``), possibly with no rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from toolkit.core.records import Finding
from toolkit.profile.optable import op_summary_frame

HEAD_BYTES = 64 * 1024


@dataclass
class ParseResult:
    """What one parser read from one file.

    Attributes:
        path: the file read.
        format: the parser's name (e.g. ``ort_profile``).
        op_summary: per-task rows in the op_summary schema (toolkit.profile.optable); times in µs.
        tables: other tables by name (e.g. ``log_levels``, ``fusion_counts``, ``compile_passes``), each a
            DataFrame whose columns the parser's docstring lists.
        records: records read successfully (lines, rows or events, as the parser counts them).
        malformed: records that could not be read and were skipped.
        notes: human-readable remarks (what was ignored, recovered, assumed).
        findings: what the parser itself can tell (log errors, failed passes, ...).
    """

    path: str
    format: str
    op_summary: pd.DataFrame = field(default_factory=lambda: op_summary_frame([]))
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    records: int = 0
    malformed: int = 0
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class Parser:
    """A registered format: name, one-line description, detect(path, head) and parse(path)."""

    name: str
    description: str
    detect: Callable[[Path, str], bool]
    parse: Callable[[Path], ParseResult]

    @property
    def module(self) -> str:
        """The last part of the module that defines ``parse`` (e.g. ``plog_lines``)."""
        return self.parse.__module__.rsplit(".", 1)[-1]


_PARSERS: dict[str, Parser] = {}


def register_parser(parser: Parser) -> Parser:
    """Add ``parser`` (a later registration under the same name replaces it in place)."""
    _PARSERS[parser.name] = parser
    return parser


#: The detection order of the built-in formats (modules of toolkit.logs.parsers, which imports them): onnxruntime
#: profiles are Chrome traces too, so ort_profile comes before chrome_trace; fusion_result before the CSVs;
#: compare results (msaccucmp, msprobe) before the profiler CSVs; op_summary CSVs before op_statistic and kernel_times; compile.log before plog lines.
ORDER = ("ort_profile", "chrome_trace", "fusion_result", "msaccucmp_csv", "msprobe_compare_csv", "op_summary_csv",
         "kernel_details_csv", "task_time_csv", "api_statistic_csv", "fusion_op_csv", "op_statistic_csv",
         "kernel_times_csv", "compile_log", "plog_lines")


def parsers() -> list[Parser]:
    """All registered parsers in detection order: the built-in ones in ORDER (by module),
    then any others in registration order."""
    rank = {name: i for i, name in enumerate(ORDER)}
    found = list(_PARSERS.values())
    return sorted(found, key=lambda p: (rank.get(p.module, len(rank)), found.index(p)))


def format_names() -> list[str]:
    return [p.name for p in parsers()]
