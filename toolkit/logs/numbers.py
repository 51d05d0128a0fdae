"""Which numbers read from a log or profile are data.

A time, duration or count is kept only when it is finite and its magnitude is at most :data:`MAX_ABS`
(1e18 — in µs that is ~31,700 years, far above any absolute timestamp, so sums of up to 1e290 such values
cannot overflow a float). Anything else (``1e309`` and other overflows to ±inf, ``NaN``/``Infinity`` in
JSON, absurd magnitudes) makes its record *malformed*: counted and skipped by every parser, never turned into
``inf`` totals or numpy RuntimeWarnings.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

MAX_ABS = 1e18


def sane(v: float | None) -> bool:
    """True for a float that is finite with ``|v| <= MAX_ABS`` (None → False)."""
    return v is not None and math.isfinite(v) and abs(v) <= MAX_ABS


def sane_mask(values: pd.Series) -> pd.Series:
    """Element-wise :func:`sane` of a float Series (NaN → False)."""
    arr = values.to_numpy(dtype=float, na_value=np.nan)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(arr) & (np.abs(arr) <= MAX_ABS)
    return pd.Series(ok, index=values.index)


def missing_or_sane(values: pd.Series) -> pd.Series:
    """True where a float Series is NaN (missing, not a number: the column is optional) or sane; False for
    a number that is present but non-finite or too large."""
    return values.isna() | sane_mask(values)


def insane_number(v) -> bool:
    """True when ``v`` is a number (or numeric string, not a bool) that is not :func:`sane`: such a value is a
    malformed record rather than a missing one."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return False
    try:
        return not sane(float(v))
    except OverflowError:
        return True
    except ValueError:
        return False
