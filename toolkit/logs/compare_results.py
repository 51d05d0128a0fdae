"""Compare results written by other tools, in one table, with our advisor's order on top.

The parsers ``msaccucmp_csv`` (the CANN compare tool's result CSV) and ``msprobe_compare_csv`` (msprobe's
compare_result CSV) bring their rows to :data:`COLUMNS`, named with the compare tool's column meanings:

Tool ("msaccucmp" / "msprobe"), Index, OpType, NPUDump (the NPU op name), DataType (its dtype), Address,
GroundTruth (the golden op name), GroundTruthDataType, GroundTruthAddress, TensorIndex, Shape, OverFlow (True /
False; NaN when not detected), the compare tool's metrics (:data:`METRIC_COLUMNS`; NaN where a tool gives none),
StandardDeviation (text, as written: "(mean;std),(mean;std)"), CompareFailReason, Accuracy (msprobe's
"Accuracy Reached or Not" / Result; "" for msaccucmp), Abnormal, AbnormalMetrics (';'-joined), Advice (the
finding kind that puts a row on top, else "").

:func:`judge` applies the compare tool's default abnormal lines (toolkit.compare.metrics.resolve_thresholds:
CosineSimilarity < 0.99, RelativeEuclideanDistance > 0.05, KullbackLeiblerDivergence > 0.005,
RootMeanSquareError > 1, MeanRelativeError > 1) to the metrics a row has; an msprobe row whose Accuracy is "No"
(or Result "Warning"/"Different") is abnormal too. :func:`advise` gives the findings in the compare tool's
advisor order, which is ours: FP16 overflow first (the first row with OverFlow YES), then inconsistent inputs
(an abnormal input-tensor row, TensorIndex ``{op}:input:{i}`` (:func:`is_input`), before any abnormal output row), then the first op over the lines;
:func:`advisor_first` puts the rows those findings name on top of the table (then every other row in file order).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from toolkit.compare.metrics import resolve_thresholds
from toolkit.compare.metrics.registry import METRICS
from toolkit.compare.metrics.spec import HIGHER_IS_BETTER
from toolkit.core.records import Finding
from toolkit.logs.csvread import map_distinct, numeric

METRIC_COLUMNS = ["CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance",
                  "KullbackLeiblerDivergence", "MeanAbsoluteError", "RootMeanSquareError", "MaxRelativeError",
                  "MeanRelativeError"]
COLUMNS = ["Tool", "Index", "OpType", "NPUDump", "DataType", "Address", "GroundTruth", "GroundTruthDataType",
           "GroundTruthAddress", "TensorIndex", "Shape", "OverFlow", *METRIC_COLUMNS, "StandardDeviation",
           "CompareFailReason", "Accuracy", "Abnormal", "AbnormalMetrics", "Advice"]
TEXT = ["Tool", "OpType", "NPUDump", "DataType", "Address", "GroundTruth", "GroundTruthDataType", "GroundTruthAddress",
        "TensorIndex", "Shape", "StandardDeviation", "CompareFailReason", "Accuracy"]
_BAD_ACCURACY = {"no", "warning", "different"}
_YES, _NO = {"yes", "true", "1"}, {"no", "false", "0"}


def overflow_flag(text) -> float | bool:
    """OverFlow cell → True / False; NaN when the tool did not detect (NaN, empty, anything else)."""
    t = str(text).strip().lower()
    return True if t in _YES else False if t in _NO else math.nan


def frame(rows: pd.DataFrame, tool: str) -> pd.DataFrame:
    """``rows`` (already renamed to :data:`COLUMNS` names, text cells) as the typed table, judged."""
    out = pd.DataFrame(index=rows.index)
    for col in COLUMNS:
        if col in TEXT:
            out[col] = _stripped(rows[col]) if col in rows else ""
        elif col in METRIC_COLUMNS:
            out[col] = numeric(rows[col]) if col in rows else math.nan
    out["Tool"] = tool
    index = numeric(rows["Index"]) if "Index" in rows else pd.Series(range(len(rows)), index=rows.index, dtype=float)
    out["Index"] = index.astype("Int64") if index.notna().all() and (index % 1 == 0).all() else index
    out["OverFlow"] = map_distinct(rows["OverFlow"], overflow_flag) if "OverFlow" in rows else math.nan
    out = out.reset_index(drop=True)
    return judge(out)[COLUMNS]


def _stripped(col: pd.Series) -> pd.Series:
    """``col.astype(str).str.strip()``, stripped in one list comprehension (the str accessor costs ~10x more)."""
    return pd.Series([str(v).strip() for v in col.to_numpy(dtype=object)], index=col.index, dtype=str)


def summary_note(table: pd.DataFrame) -> str:
    """The first note of a compare result file: its row and abnormal counts, or that it holds no compared row."""
    if not len(table):
        return ("only a header, no compared tensor row: the compare run wrote none; check the dump folders it was "
                "given and compare again")
    return f"{len(table)} compared tensor(s), {int(table['Abnormal'].sum())} abnormal"


def judge(df: pd.DataFrame, lines: dict | None = None) -> pd.DataFrame:
    """Abnormal / AbnormalMetrics per row (module docstring); Advice empty. Returns ``df`` (changed).

    ``lines``: {metric: line} (default: toolkit.compare.metrics.resolve_thresholds); a metric is over its line
    when its value is below it (CosineSimilarity: higher is better) or above it (the others); NaN never is, ±inf
    is compared as a number. AbnormalMetrics lists the metrics over their lines, ';'-joined in ``lines`` order.
    Column-wise over the whole table (numpy), not row by row."""
    lines = {m: v for m, v in (lines or resolve_thresholds(None)).items() if m in df.columns}
    names = np.full(len(df), "", dtype=object)
    for m, line in lines.items():
        v = _floats(df[m])
        with np.errstate(invalid="ignore"):
            over = (v < line) if METRICS[m].direction == HIGHER_IS_BETTER else (v > line)
        names = np.where(over, names + (m + ";"), names)
    acc = df["Accuracy"].astype(str).str.strip().str.lower().isin(_BAD_ACCURACY) if "Accuracy" in df else False
    crossed = pd.Series([n[:-1] for n in names], index=df.index)  # without the last ';' (dtype inferred: text)
    df["AbnormalMetrics"] = crossed
    df["Abnormal"] = (crossed != "") | acc
    df["Advice"] = ""
    return df


def _floats(col: pd.Series) -> np.ndarray:
    """A metric column as float64 (a cell that is no float, e.g. text, is NaN: never over a line)."""
    if pd.api.types.is_float_dtype(col):
        return col.to_numpy(dtype=float, na_value=np.nan)
    return np.array([v if isinstance(v, float) else math.nan for v in col], dtype=float)


#: NPU dump data types (the compare tool's names) that are FP32 or wider: an overflow there is no FP16 overflow.
_WIDE_FLOATS = frozenset({"DT_FLOAT", "DT_DOUBLE", "FLOAT", "FLOAT32", "DOUBLE", "FLOAT64"})


#: An input-tensor TensorIndex: the compare tool's ``{op}:input:{i}`` (msprobe's ``input.{i}`` is read as
#: ``input:{i}``). An op's own name never counts (``input_proj:output:0`` is an output of op input_proj).
_INPUT_TENSOR = r"(?:^|:)input:\d+\s*$"


def is_input(tensor_index: pd.Series) -> pd.Series:
    """True for the rows whose TensorIndex (text) names an input tensor of its op (``conv1:input:0``, msprobe's
    ``input:0``); False for outputs (``input_proj:output:0``, ``input:output:0``) and empty cells."""
    return tensor_index.astype(str).str.contains(_INPUT_TENSOR, case=False, regex=True, na=False)


def advise(df: pd.DataFrame) -> list[Finding]:
    """Findings in the advisor's order (module docstring); each names its row's Index in evidence["Index"]."""
    out = []
    over = df[df["OverFlow"].map(lambda v: v is True)]
    if len(over):
        r = over.iloc[0]
        dtype = str(r.get("DataType", "") or "").strip().upper()
        if dtype in _WIDE_FLOATS:  # the NPU side already computed in FP32 (or wider): keep_dtype cannot help
            out.append(Finding("error", "fp32_overflow", r["NPUDump"] or r["GroundTruth"], _ev(r),
                               f"overflow at '{r['NPUDump']}', whose NPU dump is {dtype} (the compare tool's OverFlow = "
                               f"YES; {len(over)} row(s) in all): it already runs in FP32, so keep_dtype cannot help; "
                               "check its inputs and their scale (a value beyond the float range)"))
        else:
            out.append(Finding("error", "fp16_overflow", r["NPUDump"] or r["GroundTruth"], _ev(r),
                               f"FP16 overflow at '{r['NPUDump']}' (the compare tool's OverFlow = YES; {len(over)} "
                               "row(s) in all): keep it in FP32 (keep_dtype) or scale its inputs, then compare again"))
    bad, inp = df["Abnormal"].astype(bool).to_numpy(), is_input(df["TensorIndex"]).to_numpy()
    outs, ins = np.flatnonzero(bad & ~inp), np.flatnonzero(bad & inp)
    if len(ins) and (not len(outs) or ins[0] < outs[0]):
        r = df.iloc[ins[0]]
        out.append(Finding("error", "inconsistent_input", r["NPUDump"] or r["GroundTruth"], _ev(r),
                           f"the input '{r['TensorIndex']}' of '{r['NPUDump']}' differs from the golden's before any "
                           "output does: the two runs were not fed the same data; compare with the same inputs"))
    if len(outs):
        r = df.iloc[outs[0]]
        out.append(Finding("error", "first_divergence", r["NPUDump"] or r["GroundTruth"], _ev(r),
                           f"'{r['NPUDump']}' ({r['OpType'] or 'op'}, golden '{r['GroundTruth']}') is the first op "
                           f"over the lines ({r['AbnormalMetrics'] or 'Accuracy ' + r['Accuracy']}): isolate it "
                           "(npuscope diagnose MODEL --device-dumps) or keep it in FP32 (keep_dtype)"))
    return out


def _ev(r) -> dict:
    ev = {"Index": r["Index"], "TensorIndex": r["TensorIndex"], "GroundTruth": r["GroundTruth"], "Tool": r["Tool"]}
    ev.update({m: r[m] for m in METRIC_COLUMNS if isinstance(r[m], float) and not math.isnan(r[m])})
    return ev


def advisor_first(df: pd.DataFrame, findings: list[Finding]) -> pd.DataFrame:
    """``df`` with the rows ``findings`` name first (in their order, Advice = the finding's kind), then the
    others in file order."""
    df = df.copy()
    top = []
    for f in findings:
        hit = df.index[df["Index"] == f.evidence.get("Index")]
        if len(hit) and hit[0] not in top:
            top.append(hit[0])
            df.at[hit[0], "Advice"] = f.kind
    rest = [i for i in df.index if i not in top]
    return df.loc[top + rest].reset_index(drop=True)
