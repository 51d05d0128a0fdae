"""The CANN compare tool's result CSV (``msaccucmp.py compare`` → ``result_{timestamp}.csv``).

Format (CANN "Model Accuracy Analyzer", "Parameters in a Complete Model Comparison Result"): Index,
[OpSequence,] OpType, NPUDump (the NPU op name), DataType, Address, GroundTruth (the golden op name), DataType,
[Address,] TensorIndex (``{op}:output:{i}`` / ``{op}:input:{i}``), Shape, [OverFlow (YES / NO / NaN),]
CosineSimilarity, MaxAbsoluteError, AccumulatedRelativeError, RelativeEuclideanDistance,
KullbackLeiblerDivergence, StandardDeviation, MeanAbsoluteError, RootMeanSquareError, MaxRelativeError,
MeanRelativeError, CompareFailReason; columns depend on the options (-overflow_detection, -r / -s, the
algorithms chosen). DataType and Address appear twice: the ones before GroundTruth are the NPU side's, the
ones after it the golden side's (read by position, so the repeated names are no ambiguity). Metric cells may be
``NaN``; a ``*`` GroundTruth marks an NPU op with no golden op (its row is kept, with no metrics). Our own
result.csv uses the same meanings (NPUDump, DataType, GroundTruth, GroundTruthDataType) and is read here too.

Rows go to table ``compare_results`` (toolkit.logs.compare_results.COLUMNS), the advisor's rows on top; the
findings are the advisor's (overflow first, then inconsistent inputs, then the first op over the lines).
Detected by a header holding NPUDump and GroundTruth. Malformed rows (counted, skipped): a field count other
than the header's, no NPUDump and no GroundTruth.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from toolkit.logs import compare_results as cr
from toolkit.logs.csvread import header, malformed_mask, read_counted
from toolkit.logs.registry import Parser, ParseResult, register_parser

NAME = "msaccucmp_csv"
DESCRIPTION = "compare tool result CSV (msaccucmp: Index, OpType, NPUDump, DataType, GroundTruth, ..., metrics)"
USED = ["NPUDump", "GroundTruth", "TensorIndex", "Shape", "OverFlow", *cr.METRIC_COLUMNS]


def detect(path: Path, head: str) -> bool:
    return {"NPUDump", "GroundTruth"} <= set(header(head))


def sides(head: list[str]) -> list[str]:
    """``head`` with the golden side's DataType / Address (those after GroundTruth) renamed GroundTruthDataType /
    GroundTruthAddress."""
    out, golden = [], False
    for name in head:
        golden = golden or name == "GroundTruth"
        out.append(f"GroundTruth{name}" if golden and name in ("DataType", "Address") else name)
    return out


def parse(path: Path) -> ParseResult:
    """Read a compare result CSV (module docstring)."""
    read = read_counted(Path(path), USED, rename=sides)
    df = read.frame
    ok, why = malformed_mask({"no NPUDump and no GroundTruth": _blank(df, "NPUDump") & _blank(df, "GroundTruth")})
    table = cr.frame(df[ok.to_numpy()], "msaccucmp")
    findings = cr.advise(table)
    return ParseResult(str(path), NAME, tables={"compare_results": cr.advisor_first(table, findings)},
                       records=len(table), malformed=read.malformed + int((~ok).sum()),
                       notes=[cr.summary_note(table)] + read.notes + why, findings=findings)


def _blank(df, column: str):
    """True where ``column`` is empty (every row when the file has no such column)."""
    return df[column].astype(str).str.strip() == "" if column in df else pd.Series(True, index=df.index)


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
