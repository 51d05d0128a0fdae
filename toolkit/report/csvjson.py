"""The machine-readable side of a diagnosis: CSV and JSON files next to the HTML report.

Files (all written atomically: a temporary file in the same folder, then ``os.replace``):

- ``result.csv``: ``Diagnosis.table`` (one row per tensor; list cells such as AbnormalMetrics joined with ';';
  missing values empty);
- ``summary.json``: the keys of ``Diagnosis.summary`` at top level plus ``findings``, ``tasks``, ``triage``,
  ``environment`` and ``memory``; strict JSON (NaN and ±inf become null, numpy scalars become numbers,
  DataFrames become lists of records);
- ``findings.json``: the findings as a list of {severity, kind, subject, evidence, recommendation};
- ``kernel_times.csv``: ``Diagnosis.kernel_times`` (Kernel, OpType, Precision, Nodes, HostMs in ms).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.compare.diagnosis import Diagnosis

FILES = {"result": "result.csv", "summary": "summary.json", "findings": "findings.json",
         "kernel_times": "kernel_times.csv"}


def json_safe(obj):
    """``obj`` with only JSON types: NaN/±inf → None, numpy → Python, sets/tuples → lists, DataFrame →
    records, objects with ``to_dict()`` → dicts, anything else → str."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [json_safe(v) for v in obj.tolist()]
    if isinstance(obj, pd.DataFrame):
        return [json_safe(r) for r in obj.to_dict(orient="records")]
    if isinstance(obj, pd.Series):
        return json_safe(obj.to_dict())
    if obj is pd.NA or obj is pd.NaT:
        return None
    if hasattr(obj, "to_dict"):
        return json_safe(obj.to_dict())
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return str(obj)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file next to ``path``, then os.replace it into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _dumps(data) -> str:
    return json.dumps(json_safe(data), indent=1, allow_nan=False, ensure_ascii=False) + "\n"


def _csv_text(df: pd.DataFrame | None) -> str:
    if df is None:
        df = pd.DataFrame()
    joined = df.copy()
    for col in joined.columns:
        if joined[col].dtype == object:
            joined[col] = [";".join(map(str, v)) if isinstance(v, (list, tuple, set, np.ndarray)) else v
                           for v in joined[col]]
    return joined.to_csv(index=False, lineterminator="\n")


def summary_data(diag: Diagnosis) -> dict:
    """The content of summary.json (see module docstring), already JSON-safe."""
    data = dict(diag.summary)
    data.update(findings=[f.to_dict() if hasattr(f, "to_dict") else f for f in diag.findings], tasks=diag.tasks,
                triage=diag.triage, environment=diag.environment, memory=diag.memory)
    return json_safe(data)


def write_tables(diag: Diagnosis, out_dir: Path) -> dict[str, str]:
    """Write result.csv, summary.json, findings.json and kernel_times.csv into ``out_dir`` (created if
    missing). Returns {label: file name relative to out_dir}, ready to merge into ``Diagnosis.artifacts``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / FILES["result"], _csv_text(diag.table))
    atomic_write_text(out_dir / FILES["summary"], _dumps(summary_data(diag)))
    atomic_write_text(out_dir / FILES["findings"], _dumps([f.to_dict() if hasattr(f, "to_dict") else f
                                                       for f in diag.findings]))
    atomic_write_text(out_dir / FILES["kernel_times"], _csv_text(diag.kernel_times))
    return dict(FILES)
