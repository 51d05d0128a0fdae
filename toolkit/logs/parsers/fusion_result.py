"""fusion_result.json, the converter's fusion statistics (GUIDE §4)::

    {"<session_and_graph_id>": {"graph_fusion": {"<Pass>": {"match_times": "1", "effect_times": "1"}},
                                "ub_fusion": {...}}}

Counts are strings in the converter's files (integers are accepted too). Table ``fusion_counts``: Graph,
Level (graph_fusion / ub_fusion), Pass, MatchTimes, EffectTimes (integers). A pass entry that is not an object
or whose counts are not whole numbers is malformed; a file that is not valid JSON is one malformed record.
No per-op times, so ``op_summary`` is empty.

Findings: ``fusion_not_applied`` (info) for a pass matched more often than applied.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from toolkit.core.records import Finding
from toolkit.logs.jsonio import read_text, too_deep
from toolkit.logs.registry import Parser, ParseResult, register_parser

NAME = "fusion_result"
DESCRIPTION = "the converter's fusion_result.json (graph_fusion / ub_fusion match and effect counts)"
COLUMNS = ["Graph", "Level", "Pass", "MatchTimes", "EffectTimes"]
LEVELS = ("graph_fusion", "ub_fusion")
_DETECT_RE = re.compile(r'^\s*\{\s*"[^"]*"\s*:\s*\{\s*"(?:graph_fusion|ub_fusion)"\s*:')


def detect(path: Path, head: str) -> bool:
    """True when the JSON object's first value starts with a graph_fusion or ub_fusion key."""
    return _DETECT_RE.match(head) is not None


def _count(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v >= 0 else None
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def _rows(obj: dict) -> tuple[list[dict], int]:
    rows, bad = [], 0
    for graph, levels in obj.items():
        if not isinstance(levels, dict):
            bad += 1
            continue
        for level in LEVELS:
            entries = levels.get(level, {})
            if not isinstance(entries, dict):
                bad += 1
                continue
            for name, counts in entries.items():
                match = _count(counts.get("match_times")) if isinstance(counts, dict) else None
                effect = _count(counts.get("effect_times")) if isinstance(counts, dict) else None
                if match is None or effect is None:
                    bad += 1
                    continue
                rows.append({"Graph": graph, "Level": level, "Pass": name, "MatchTimes": match, "EffectTimes": effect})
    return rows, bad


def parse(path: Path) -> ParseResult:
    """Read a fusion_result.json (module docstring). Never raises for bad content."""
    text = read_text(Path(path))
    deep = too_deep(text)
    if deep:
        return ParseResult(str(path), NAME, tables={"fusion_counts": pd.DataFrame(columns=COLUMNS)}, malformed=1,
                           notes=[deep])
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return ParseResult(str(path), NAME, tables={"fusion_counts": pd.DataFrame(columns=COLUMNS)}, malformed=1,
                           notes=[f"not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc}); nothing read"])
    rows, bad = _rows(obj) if isinstance(obj, dict) else ([], 1)
    table = pd.DataFrame(rows, columns=COLUMNS)
    findings = [Finding("info", "fusion_not_applied", str(r.Pass),
                        {"graph": r.Graph, "level": r.Level, "match_times": int(r.MatchTimes),
                         "effect_times": int(r.EffectTimes)},
                        "the pattern matched but the rewrite was refused; see the compile log for the reason")
                for r in table.itertuples() if r.MatchTimes > r.EffectTimes]
    return ParseResult(str(path), NAME, tables={"fusion_counts": table}, records=len(rows), malformed=bad,
                       notes=[f"{len(rows)} fusion pass count(s) in {table['Graph'].nunique()} graph(s)"],
                       findings=findings)


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
