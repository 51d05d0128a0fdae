"""msprobe's compare result (``msprobe compare`` → ``compare_result_{timestamp}.csv``, saved as CSV).

Format (msprobe CompareConst headers): real-data mode NPU Name, Bench Name, NPU Dtype (older: NPU Tensor Dtype),
Bench Dtype, NPU Tensor Shape, Bench Tensor Shape, Cosine, [EucDist,] MaxAbsErr, MaxRelativeErr,
One Thousandth Err Ratio, Five Thousandths Err Ratio, NPU / Bench max, min, mean, l2norm, Accuracy Reached or
Not, Err_message, [NPU_Stack_Info, Data_name]; statistics mode has Max diff, Min diff, Mean diff, L2norm diff
(and relative errors) with Result instead; md5 mode NPU MD5, BENCH MD5, Result.

Mapped to toolkit.logs.compare_results.COLUMNS: NPU Name → NPUDump, Bench Name → GroundTruth, NPU Dtype →
DataType, Bench Dtype → GroundTruthDataType, NPU Tensor Shape → Shape, Cosine → CosineSimilarity, MaxAbsErr →
MaxAbsoluteError, MaxRelativeErr → MaxRelativeError, Err_message → CompareFailReason, Accuracy Reached or Not
(else Result) → Accuracy; OpType is the API name's second dotted field (``Functional.conv2d.0.forward.output.0``
→ conv2d) and TensorIndex its ``input.{i}`` / ``output.{i}`` part as ``input:{i}`` / ``output:{i}``. ``N/A`` /
``Nan`` metric cells are NaN. Table ``compare_results``, advisor's rows on top; the advisor's findings.
An .xlsx result is not read (save it as CSV). Detected by a header holding NPU Name and Bench Name. Malformed
rows (counted, skipped): a field count other than the header's, no NPU Name.
"""

from __future__ import annotations

import re
from pathlib import Path

from toolkit.logs import compare_results as cr
from toolkit.logs.csvread import header, malformed_mask, read_counted
from toolkit.logs.registry import Parser, ParseResult, register_parser

NAME = "msprobe_compare_csv"
DESCRIPTION = "msprobe compare result CSV (NPU Name, Bench Name, NPU Dtype, ..., Cosine, Accuracy Reached or Not)"
RENAME = {"NPU Name": "NPUDump", "Bench Name": "GroundTruth", "NPU Dtype": "DataType", "NPU Tensor Dtype": "DataType",
          "Bench Dtype": "GroundTruthDataType", "Bench Tensor Dtype": "GroundTruthDataType",
          "NPU Tensor Shape": "Shape", "Cosine": "CosineSimilarity", "MaxAbsErr": "MaxAbsoluteError",
          "MaxRelativeErr": "MaxRelativeError", "Err_message": "CompareFailReason",
          "Accuracy Reached or Not": "Accuracy"}
_TENSOR = re.compile(r"\.(input|output|parameters_grad|kwargs)\.([0-9]+)")


def detect(path: Path, head: str) -> bool:
    return {"NPU Name", "Bench Name"} <= set(header(head))


def renamed(head: list[str]) -> list[str]:
    """``head`` in compare_results names; a Result column stands for Accuracy when there is none."""
    has_acc = "Accuracy Reached or Not" in head
    return [RENAME.get(h, "Accuracy" if h == "Result" and not has_acc else h) for h in head]


def _tensor_index(name: str) -> str:
    m = _TENSOR.search(name)
    return f"{m.group(1)}:{m.group(2)}" if m else ""


def parse(path: Path) -> ParseResult:
    """Read an msprobe compare result CSV (module docstring)."""
    read = read_counted(Path(path), list(RENAME.values()), rename=renamed)
    df = read.frame.copy()
    if "NPUDump" not in df:
        df["NPUDump"] = ""
    ok, why = malformed_mask({"no NPU Name": df["NPUDump"].astype(str).str.strip() == ""})
    rows = df[ok.to_numpy()].copy()
    names = rows["NPUDump"].astype(str)
    rows["OpType"] = names.map(lambda n: n.split(".")[1] if n.count(".") >= 1 else "")
    rows["TensorIndex"] = names.map(_tensor_index)
    table = cr.frame(rows, "msprobe")
    findings = cr.advise(table)
    return ParseResult(str(path), NAME, tables={"compare_results": cr.advisor_first(table, findings)},
                       records=len(table), malformed=read.malformed + int((~ok).sum()),
                       notes=[cr.summary_note(table)] + read.notes + why, findings=findings)


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
