"""Counting the rows of a layer table (toolkit.compare.diagnosis: result.csv's columns).

One rule for every command and report, so that a summary never says "compared 1, abnormal 2":

- **abnormal**: compare's rule (docs/thresholds.md): ``Abnormal`` or ``OverFlow``;
- **compared**: the comparator judged the row: it has metrics (``CompareFailReason`` empty), or it was found
  abnormal without metrics (a tensor that is NaN/Inf at every position, "no position where both tensors are
  finite", is compared and abnormal). Folded constants, fused-away and skipped tensors are not compared.
  So every abnormal row is a compared row.
"""

from __future__ import annotations

import pandas as pd


def _flag(df: pd.DataFrame, column: str) -> pd.Series:
    if column not in df.columns:
        return pd.Series(False, index=df.index)
    return df[column].fillna(False).astype(bool)


def abnormal_mask(df: pd.DataFrame) -> pd.Series:
    """Bool per layer-table row: abnormal under compare's rule (Abnormal, or OverFlow)."""
    return _flag(df, "Abnormal") | _flag(df, "OverFlow")


def has_metrics(df: pd.DataFrame) -> pd.Series:
    """Bool per row: CompareFailReason empty, so the row carries metrics (a table without the column: every
    row)."""
    if "CompareFailReason" not in df.columns:
        return pd.Series(True, index=df.index)
    return df["CompareFailReason"].fillna("").astype(str).str.strip() == ""


def compared_mask(df: pd.DataFrame) -> pd.Series:
    """Bool per row: judged by the comparator (module docstring): has metrics, or is abnormal."""
    return has_metrics(df) | abnormal_mask(df)


def layer_counts(df: pd.DataFrame) -> dict:
    """{"tensors", "compared" (:func:`compared_mask`), "abnormal" (:func:`abnormal_mask`), "overflow",
    "origins", "propagated"} of a layer table (ints); abnormal <= compared <= tensors."""
    role = df["Role"].fillna("").astype(str) if "Role" in df.columns else pd.Series("", index=df.index)
    return {"tensors": len(df), "compared": int(compared_mask(df).sum()), "abnormal": int(abnormal_mask(df).sum()),
            "overflow": int(_flag(df, "OverFlow").sum()), "origins": int((role == "origin").sum()),
            "propagated": int((role == "propagated").sum())}
