"""compile.log as written by ``npuscope compile/run/diagnose`` (toolkit.core.artifacts.write_compile_artifacts,
lines of ``CompileResult.log_lines()``).

Format: one header line per pass, then its detail lines indented by four spaces::

    [fold_batchnorm] ran, 8 change(s); ops 29 -> 21; kernels 0; 0.9 ms
        folded stem_bn into stem_conv
    [graph_fusion] skipped (fusion level 0); ops 21 -> 21; kernels 0; 0.0 ms

No per-op times, so ``op_summary`` is empty. Tables:

- ``compile_passes``: Pass, Ran, Reason, OpsBefore, OpsAfter, KernelsAfter, Changes, Ms (the columns of
  diagnose's passes table; Ms in milliseconds);
- ``fusion_decisions``: Pass, Rule, Kind ("match", "refused" or "fold"), Op, Nodes, Reason — one row per
  fusion match (``Rule: Op <- a, b`` or ``Rule: a, b``), refusal (``Rule refused at node: reason``) or BN
  fold (``folded bn into conv``);
- ``compile_memory``: Policy, ArenaBytes, Tensors, LowerBoundBytes (``policy P: arena N bytes for T tensors;
  lower bound M bytes``);
- ``compile_details``: Pass, Line (every other detail line).

A line that is neither a pass header (with a time that is a finite number, toolkit.logs.numbers), nor an
indented detail after one, nor blank is malformed. The file is streamed through toolkit.core.textfile.TextReader:
a leading UTF-8 BOM is dropped (the first pass header is read like the others); UTF-8, or GB18030 for a file that
is not UTF-8 but GB18030; other bytes become U+FFFD, counted in a note.
Findings: ``compile_pass_failed`` (warning) for a pass whose detail says FAILED, ``fusion_refused`` (info) per
rule with refusals.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from toolkit.core.records import Finding
from toolkit.core.textfile import TextReader
from toolkit.logs.head import head_lines
from toolkit.logs.jsonio import number
from toolkit.logs.numbers import sane
from toolkit.logs.registry import Parser, ParseResult, register_parser

NAME = "compile_log"
DESCRIPTION = "npuscope compile.log (pass headers with op counts, fusion matches, memory plan)"
PASS_COLUMNS = ["Pass", "Ran", "Reason", "OpsBefore", "OpsAfter", "KernelsAfter", "Changes", "Ms"]
FUSION_COLUMNS = ["Pass", "Rule", "Kind", "Op", "Nodes", "Reason"]
MEMORY_COLUMNS = ["Policy", "ArenaBytes", "Tensors", "LowerBoundBytes"]

HEADER_RE = re.compile(r"^\[(?P<pass>[A-Za-z0-9_.-]+)\] (?:ran, (?P<changed>\d+) change\(s\)|skipped \((?P<reason>.*)\));"
                       r" ops (?P<before>\d+) -> (?P<after>\d+); kernels (?P<kernels>\d+); (?P<ms>[0-9.]+) ms$")
_MATCH_RE = re.compile(r"^(?P<rule>\w+Pass): (?:(?P<op>[\w.]+) <- )?(?P<nodes>.+)$")
_REFUSED_RE = re.compile(r"^(?P<rule>\w+) refused at (?P<node>[^:]+): (?P<reason>.*)$")
_FOLD_RE = re.compile(r"^folded (?P<bn>\S+) into (?P<conv>\S+)$")
_MEMORY_RE = re.compile(r"policy (?P<policy>\w+): arena (?P<arena>\d+) bytes for (?P<tensors>\d+) tensors; "
                        r"lower bound (?P<lb>\d+) bytes")


def detect(path: Path, head: str) -> bool:
    """True when the first non-blank line is a compile.log pass header."""
    lines = head_lines(head, 1)
    return bool(lines) and HEADER_RE.match(lines[0].rstrip("\r")) is not None


def _header_row(m: re.Match) -> dict:
    ran = m["changed"] is not None
    return {"Pass": m["pass"], "Ran": ran, "Reason": "" if ran else m["reason"], "OpsBefore": int(m["before"]),
            "OpsAfter": int(m["after"]), "KernelsAfter": int(m["kernels"]), "Changes": int(m["changed"] or 0),
            "Ms": float(m["ms"])}


def _detail(pass_name: str, text: str, out: dict) -> None:
    """File one detail line into the fusion / memory / details lists of ``out``."""
    if m := _REFUSED_RE.match(text):
        out["fusion"].append({"Pass": pass_name, "Rule": m["rule"], "Kind": "refused", "Op": "",
                              "Nodes": m["node"].strip(), "Reason": m["reason"]})
    elif m := _FOLD_RE.match(text):
        out["fusion"].append({"Pass": pass_name, "Rule": pass_name, "Kind": "fold", "Op": "",
                              "Nodes": f"{m['bn']}, {m['conv']}", "Reason": ""})
    elif m := _MATCH_RE.match(text):
        out["fusion"].append({"Pass": pass_name, "Rule": m["rule"], "Kind": "match", "Op": m["op"] or "",
                              "Nodes": m["nodes"].strip(), "Reason": ""})
    elif m := _MEMORY_RE.search(text):
        out["memory"].append({"Policy": m["policy"], "ArenaBytes": int(m["arena"]), "Tensors": int(m["tensors"]),
                              "LowerBoundBytes": int(m["lb"])})
    else:
        out["details"].append({"Pass": pass_name, "Line": text})


def _read(path: Path) -> tuple[dict, int, list[str]]:
    """(the rows of each table by kind, malformed lines, encoding notes)."""
    out = {"passes": [], "fusion": [], "memory": [], "details": []}
    current, bad = None, 0
    with TextReader(path) as text:  # never a FIFO or /dev/zero
        for raw in text.lines():
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            if m := HEADER_RE.match(line):
                if not sane(number(m["ms"])):  # e.g. "1.2.3 ms" or a 400-digit time: its details go too
                    bad, current = bad + 1, None
                    continue
                out["passes"].append(_header_row(m))
                current = m["pass"]
            elif line.startswith("    ") and current is not None:
                _detail(current, line.strip(), out)
            else:
                bad += 1
    return out, bad, text.notes()


def _findings(passes: pd.DataFrame, fusion: pd.DataFrame, details: pd.DataFrame) -> list[Finding]:
    found = []
    for _, row in details[details["Line"].str.contains("FAILED", regex=False)].iterrows():
        found.append(Finding("warning", "compile_pass_failed", row["Pass"], {"log": row["Line"][:300]},
                             "the pass was rolled back and the model compiled without it; report the error"))
    refused = fusion[fusion["Kind"] == "refused"]
    for rule, grp in refused.groupby("Rule", sort=False):
        found.append(Finding("info", "fusion_refused", str(rule),
                             {"count": len(grp), "first_node": grp.iloc[0]["Nodes"],
                              "reason": grp.iloc[0]["Reason"][:300]},
                             "expected when the pattern does not hold; otherwise check the node's attributes"))
    return found


def parse(path: Path) -> ParseResult:
    """Read a compile.log (module docstring). Never raises for bad lines."""
    out, bad, decoded = _read(Path(path))
    passes = pd.DataFrame(out["passes"], columns=PASS_COLUMNS)
    fusion = pd.DataFrame(out["fusion"], columns=FUSION_COLUMNS)
    details = pd.DataFrame(out["details"], columns=["Pass", "Line"])
    tables = {"compile_passes": passes, "fusion_decisions": fusion,
              "compile_memory": pd.DataFrame(out["memory"], columns=MEMORY_COLUMNS), "compile_details": details}
    notes = []
    if len(passes):
        notes.append(f"{len(passes)} pass(es); ops {passes['OpsBefore'].iloc[0]} -> {passes['OpsAfter'].iloc[-1]}, "
                     f"kernels {passes['KernelsAfter'].iloc[-1]}; {int((fusion['Kind'] == 'match').sum())} fusion "
                     f"match(es), {int((fusion['Kind'] == 'refused').sum())} refusal(s)")
    notes += decoded
    records = len(passes) + len(fusion) + len(tables["compile_memory"]) + len(details)
    return ParseResult(str(path), NAME, tables=tables, records=records, malformed=bad, notes=notes,
                       findings=_findings(passes, fusion, details))


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
