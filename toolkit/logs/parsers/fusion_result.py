"""fusion_result.json, the converter's fusion statistics (GUIDE §4)::

    {"<session_and_graph_id>": {"graph_fusion": {"<Pass>": {"match_times": "1", "effect_times": "1"}},
                                "ub_fusion": {...}}}

Counts are strings in the converter's files (integers are accepted too); newer converters add
``repository_hit_times`` (passes applied from the fusion repository). Older toolchains append one such object
per graph to the same file with no separator (``{...}{...}``): every object is read, in file order. Table
``fusion_counts``: Graph, Level (graph_fusion / ub_fusion), Pass, MatchTimes, EffectTimes, RepositoryHitTimes
(integers; RepositoryHitTimes empty where the file has none). A pass entry that is not an object
or whose counts are not whole numbers is malformed; a file that is not valid JSON is one malformed record.
No per-op times, so ``op_summary`` is empty.

Records are the graph entries (a graph key whose value is an object) and the pass counts read. A graph whose
graph_fusion and ub_fusion are empty is valid (a model no fusion pass matched; npuscope's own compile of such a
model writes ``{"session_and_graph_id_0_0": {"graph_fusion": {}, "ub_fusion": {}}}``): its graph is counted and a
note says no fusion pass fired. The text is decoded by toolkit.logs.jsonio.read_text (a UTF-8 BOM dropped; UTF-8
or GB18030; other bytes replaced and counted in a note).

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
COLUMNS = ["Graph", "Level", "Pass", "MatchTimes", "EffectTimes", "RepositoryHitTimes"]
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


def _rows(obj: dict) -> tuple[list[dict], int, int]:
    """(pass-count rows, malformed entries, graph entries) of one top-level object."""
    rows, bad, graphs = [], 0, 0
    for graph, levels in obj.items():
        if not isinstance(levels, dict):
            bad += 1
            continue
        graphs += 1
        for level in LEVELS:
            entries = levels.get(level, {})
            if not isinstance(entries, dict):
                bad += 1
                continue
            for name, counts in entries.items():
                match = _count(counts.get("match_times")) if isinstance(counts, dict) else None
                effect = _count(counts.get("effect_times")) if isinstance(counts, dict) else None
                hits = counts.get("repository_hit_times") if isinstance(counts, dict) else None
                hit = _count(hits) if hits is not None else None
                if match is None or effect is None or (hits is not None and hit is None):
                    bad += 1
                    continue
                rows.append({"Graph": graph, "Level": level, "Pass": name, "MatchTimes": match, "EffectTimes": effect,
                             "RepositoryHitTimes": hit})
    return rows, bad, graphs


def _objects(text: str) -> tuple[list, int, str]:
    """(every top-level JSON value of ``text``, in order — one, or several appended with no separator;
    1 when the text after the last one is not JSON, else 0; why the first could not be read)."""
    dec, out, i, n = json.JSONDecoder(), [], 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            return out, 0, ""
        try:
            obj, i = dec.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError) as exc:
            return out, 1 if out else 0, exc.msg if hasattr(exc, "msg") else str(exc)
        out.append(obj)


def parse(path: Path) -> ParseResult:
    """Read a fusion_result.json (module docstring). Never raises for bad content (OSError for a file that
    cannot be read: toolkit.logs.jsonio.read_text)."""
    text, decoded = read_text(Path(path))
    empty = {"fusion_counts": pd.DataFrame(columns=COLUMNS)}
    deep = too_deep(text)
    if deep:
        return ParseResult(str(path), NAME, tables=empty, malformed=1, notes=[deep] + decoded)
    objects, bad, why = _objects(text)
    if not objects:
        return ParseResult(str(path), NAME, tables=empty, malformed=1,
                           notes=[f"not valid JSON ({why}); nothing read"] + decoded)
    rows, graphs = [], 0
    for obj in objects:
        got, n_bad, n_graphs = _rows(obj) if isinstance(obj, dict) else ([], 1, 0)
        rows += got
        bad += n_bad
        graphs += n_graphs
    table = pd.DataFrame(rows, columns=COLUMNS).astype({"RepositoryHitTimes": "Int64"})
    findings = [Finding("info", "fusion_not_applied", str(r.Pass),
                        {"graph": r.Graph, "level": r.Level, "match_times": int(r.MatchTimes),
                         "effect_times": int(r.EffectTimes)},
                        "the pattern matched but the rewrite was refused; see the compile log for the reason")
                for r in table.itertuples() if r.MatchTimes > r.EffectTimes]
    notes = [f"{len(rows)} fusion pass count(s) in {graphs} graph(s)"
             + (f", {len(objects)} appended objects" if len(objects) > 1 else "")]
    if graphs and table.empty:
        notes.append("no fusion pass fired: graph_fusion and ub_fusion are empty in every graph")
    elif graphs and not (table["EffectTimes"] > 0).any():
        notes.append("no fusion pass fired: every pass has effect_times 0")
    return ParseResult(str(path), NAME, tables={"fusion_counts": table}, records=graphs + len(rows), malformed=bad,
                       notes=notes + decoded, findings=findings)


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
