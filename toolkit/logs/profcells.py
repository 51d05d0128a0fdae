"""Cells of the device profilers' CSVs brought to one form (op_summary, kernel_details, task_time): exact start
times, shape cells without their quoting, communication rows as their own class.

Sources: msprof's export reference (op_summary: ``Task Start Time(us)`` with the decimals of the ns clock, the
older unit-less ``Task Start Time`` in ns, ``Device_id``, ``Block Num`` / ``Mix Block Num`` of newer versions;
shape cells written as ``"1,3,224,224"`` and, by some exports, with tripled quotes) and torch_npu's
kernel_details.csv.
"""

from __future__ import annotations

import re

import pandas as pd

from toolkit.logs.csvread import numeric

_DECIMAL = re.compile(r"^\s*(\d+)(?:\.(\d*))?\s*$")
_QUOTES = "\"'"
#: Task Type of communication rows (HCCL): a class of its own (toolkit.profile.optable.TASK_TYPES).
COMMUNICATION = "COMMUNICATION"
_COMM_RE = re.compile(r"^(?:hcom|hccl|allreduce|allgather|reducescatter|broadcast|alltoall)", re.IGNORECASE)
_COMM_TASK_RE = re.compile(r"HCCL|COMMUNICATION", re.IGNORECASE)


#: What the profilers write in a Model Name cell when there is no model (op_summary of a single-op / aclnn run):
#: no name, read as "" (as a timeline's process names are: toolkit.logs.timeline.model_name).
NO_MODEL = frozenset({"n/a", "na", "none", "null"})


def model_names(cells: pd.Series) -> pd.Series:
    """Model Name cells as text, stripped; the profilers' "no model" placeholders (:data:`NO_MODEL`: ``N/A``, ...)
    and missing cells as ""."""
    text = cells.fillna("").astype(str).str.strip()
    return text.where(~text.str.lower().isin(NO_MODEL), "")


def is_communication(task_type: str = "", *names: str) -> bool:
    """One task's :func:`communication_rows` rule: a Task Type naming HCCL / communication, or a name (Op Name,
    OP Type, a timeline event's name) of the HCCL ops (hcom_*, Hccl*, AllReduce, ...)."""
    return bool(_COMM_TASK_RE.search(str(task_type))) or any(_COMM_RE.match(str(n).strip()) for n in names)


def us_text_to_ns(text) -> str:
    """The exact integer nanoseconds of a decimal microseconds cell ("1700000000000000.123" → "1700000000000000123",
    digits beyond ns dropped); "" when the cell is not a non-negative decimal number."""
    m = _DECIMAL.match(str(text))
    if not m:
        return ""
    frac = (m.group(2) or "")[:3].ljust(3, "0")
    return str(int(m.group(1) + frac))


def ns_text(text) -> str:
    """An integer nanoseconds cell as its digits ("" when it is not a non-negative integer)."""
    m = _DECIMAL.match(str(text))
    return str(int(m.group(1))) if m and not (m.group(2) or "").strip("0") else ""


def start_columns(src: pd.DataFrame, us_col: str, ns_col: str | None = None) -> tuple[pd.Series, pd.Series]:
    """(Task Start Time(us) as float, Task Start Time(ns) as exact integer text) of ``src``: from the µs column
    ``us_col`` when present, else from the unit-less ns column ``ns_col`` (older exports). The float keeps any
    value (negative ones too, for the parser's checks); the ns text only a non-negative decimal."""
    if us_col in src.columns:
        return numeric(src[us_col]), src[us_col].map(us_text_to_ns)
    if ns_col and ns_col in src.columns:
        return numeric(src[ns_col]) / 1000.0, src[ns_col].map(ns_text)
    return pd.Series(float("nan"), index=src.index), pd.Series("", index=src.index)


def unquote(cell) -> str:
    """A cell without the quote characters around it (tripled quotes too): '\"\"\"1,3\"\"\"' → '1,3'."""
    text = str(cell).strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in _QUOTES:
        text = text[1:-1].strip()
    return text.strip(_QUOTES) if text in ('"', "'") else text


def communication_rows(df: pd.DataFrame) -> pd.Series:
    """Rows that are collective communication (HCCL): Task Type naming HCCL / communication, or an OP Type / Op
    Name of the HCCL ops (hcom_*, Hccl*, AllReduce, ...)."""
    tt = df.get("Task Type", pd.Series("", index=df.index)).astype(str).str.upper()
    names = [df.get(c, pd.Series("", index=df.index)).astype(str).str.strip() for c in ("OP Type", "Op Name")]
    return tt.str.contains(_COMM_TASK_RE) | names[0].str.match(_COMM_RE) | names[1].str.match(_COMM_RE)
