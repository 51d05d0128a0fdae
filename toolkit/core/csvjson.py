"""CSV and JSON written safely (atomic, formula-safe, strict JSON); the files of a diagnosis (toolkit.report.tables):

Files (all written atomically: a temporary file in the same folder, then ``os.replace``):

- ``result.csv``: ``Diagnosis.table`` (one row per tensor; list cells such as AbnormalMetrics joined with ';';
  missing values empty);
- ``summary.json``: the keys of ``Diagnosis.summary`` at top level plus ``findings``, ``tasks``, ``triage``,
  ``environment`` and ``memory``, and ``compile_cache`` (toolkit.cache.settings.compile_cache: the compile cache folder, mode
  and size limit used, resolved from the config and the environment) when the config is a compile config;
  strict JSON (NaN and ±inf become null, numpy scalars become numbers, DataFrames become lists of records);
- ``findings.json``: the findings as a list of {severity, kind, subject, evidence, recommendation};
- ``kernel_times.csv``: ``Diagnosis.kernel_times`` (Kernel, OpType, Precision, Nodes, HostMs in ms).

Every CSV npuscope writes goes through :func:`to_csv_safe` (:func:`csv_text` uses it): a text cell (or header)
starting with ``=``, ``+``, ``-``, ``@``, TAB or CR — which a spreadsheet would run as a formula, e.g. a node named
``=HYPERLINK("http://evil","x")`` — gets a leading ``'`` (:func:`formula_safe`; OWASP, "CSV Injection"), and when
a text cell holds a CR every cell is quoted (Python 3.11's csv writer leaves a lone CR unquoted with ``\n``
line ends, and a spreadsheet would start a new row, and a formula, there; quoted numbers still read as numbers).
Numeric columns are never touched: a negative number stays a number.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.core.text import escape_surrogates


def json_safe(obj):
    """``obj`` with only JSON types: NaN/±inf → None, numpy → Python, sets/tuples → lists, DataFrame →
    records, objects with ``to_dict()`` → dicts, paths → their text, anything else → str. Every text (values
    and keys) goes through :func:`toolkit.core.text.escape_surrogates`: a file name holding bytes that are not
    UTF-8 (``os.fsdecode``'s lone surrogates) is written ``\\xff\\xfe.npz``, never a surrogate no UTF-8 file
    (and no strict JSON parser) takes. Never raises."""
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, str):
        return escape_surrogates(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {escape_surrogates(str(k)): json_safe(v) for k, v in obj.items()}
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
        return escape_surrogates(str(os.fspath(obj)))
    return escape_surrogates(str(obj))


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file next to ``path``, then os.replace it into place. A lone
    surrogate in ``text`` (a file name whose bytes are not UTF-8) is written as its escape
    (:func:`toolkit.core.text.escape_surrogates`), never raised as UnicodeEncodeError. Raises OSError (the
    file cannot be written); the temporary file is removed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(escape_surrogates(text))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def json_text(data) -> str:
    """``data`` as strict JSON text (:func:`json_safe`: NaN and ±inf become null, numpy scalars and arrays
    plain numbers and lists), indented, UTF-8 characters kept, one trailing newline. Every JSON file we write
    goes through it, so that any JSON parser (not only Python's) reads them."""
    return json.dumps(json_safe(data), indent=1, allow_nan=False, ensure_ascii=False) + "\n"


_dumps = json_text


#: First characters that make a spreadsheet read a cell as a formula (OWASP "CSV Injection": = + - @ TAB CR).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


#: A plain decimal number ("-1", "+3.5", "-2e-3"): a spreadsheet reads it as that number, never as a formula.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _defuse(value):
    """``'`` + value for a text value starting with a formula character or with ``'`` itself (so that
    :func:`undo_formula_safe` can tell our prefix from a name's own quote); a plain number such as ``-1`` (a
    process id a log writes) is left as it is."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS + ("'",)) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def _restore(value):
    return value[1:] if isinstance(value, str) and value.startswith("'") and value[1:].startswith(
        FORMULA_STARTS + ("'",)) else value


def _is_text(dtype) -> bool:
    return dtype == object or isinstance(dtype, pd.StringDtype)


def _is_text_or_category(dtype) -> bool:
    return _is_text(dtype) or isinstance(dtype, pd.CategoricalDtype)


def map_text_cells(df: pd.DataFrame, fn, is_text=_is_text, keep_dtype: bool = False) -> pd.DataFrame:
    """A new frame: ``fn`` applied to every cell of the columns whose dtype ``is_text`` (by position, so
    duplicate names are fine), the other columns as they are; column names unchanged.

    Built in one go, linear in the number of columns: the text columns are taken together as one 2-D object
    array, mapped, made one object block and joined with the other columns, then put back in their order.
    (Assigning column by column, ``out[i] = ...``, made a 200,000-column CSV take minutes: each assignment
    copies.) Text columns come back as object dtype, or in their own dtype with ``keep_dtype``."""
    vec = np.frompyfunc(fn, 1, 1)
    dtypes = list(df.dtypes)
    text = [i for i, dt in enumerate(dtypes) if is_text(dt)]
    if not text:
        out = df.copy()
    else:
        values = df.iloc[:, text].to_numpy(dtype=object)
        out = pd.DataFrame(vec(values) if values.size else values, index=df.index, columns=text, dtype=object)
        own = {i: dtypes[i] for i in text if dtypes[i] != object} if keep_dtype else {}
        if own:  # (astype with a dict visits every column: only when some need it)
            out = out.astype(own)
        if len(text) < len(dtypes):
            taken = set(text)
            others = [i for i in range(len(dtypes)) if i not in taken]
            rest = df.iloc[:, others].copy()
            rest.columns = others
            out = pd.concat([out, rest], axis=1)
            out = out.iloc[:, np.argsort(np.array(text + others), kind="stable")]
    out.columns = df.columns
    return out


def undo_formula_safe(df: pd.DataFrame) -> pd.DataFrame:
    """The inverse of :func:`formula_safe` for a CSV npuscope wrote and pandas read back (text cells and
    headers): the leading ``'`` before a formula character or a ``'`` is removed, every other cell is kept.
    Readers of our own CSVs (regress, parse-log) use it so that names compare as the model spells them.
    Linear in the number of columns (:func:`map_text_cells`)."""
    out = map_text_cells(df, _restore, keep_dtype=True)
    out.columns = [_restore(n) for n in df.columns]
    return out


def formula_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` safe to open in a spreadsheet: in text columns (object, string or categorical dtype)
    every ``str`` cell starting with one of :data:`FORMULA_STARTS` gets a leading ``'`` — ``=1+2`` becomes
    ``'=1+2``, shown as text by Excel / LibreOffice / Google Sheets — and so does such a column name (a cell
    starting with ``'`` gets one more, so :func:`undo_formula_safe` reads every name back exactly). Numbers
    (numeric columns, and non-``str`` cells of object columns) and every other cell are unchanged; the
    values in ``df`` are never modified. Columns are handled by position (duplicate names are fine); text
    columns come back as object dtype. Linear in the number of columns (:func:`map_text_cells`)."""
    out = map_text_cells(df, _defuse, is_text=_is_text_or_category)
    out.columns = [_defuse(n) for n in df.columns]
    return out


def _has_cr(value) -> bool:
    return isinstance(value, str) and "\r" in value


def to_csv_safe(df: pd.DataFrame, **to_csv) -> str:
    """``formula_safe(df).to_csv(**to_csv)`` as text; when a text cell or header holds a CR, ``quoting``
    defaults to ``csv.QUOTE_ALL`` so that the CR stays inside its cell (QUOTE_NONNUMERIC would make pandas
    write integer columns as floats; quoted numbers still parse as numbers in pandas and spreadsheets)."""
    safe = formula_safe(df)
    text = [i for i, dt in enumerate(safe.dtypes) if dt == object]
    cells = safe.iloc[:, text].to_numpy(dtype=object).ravel() if text else ()
    if any(map(_has_cr, cells)) or any("\r" in str(c) for c in safe.columns):
        to_csv.setdefault("quoting", csv.QUOTE_ALL)
    return safe.to_csv(**to_csv)


def _joined(value):
    return ";".join(map(str, value)) if isinstance(value, (list, tuple, set, np.ndarray)) else value


def csv_text(df: pd.DataFrame | None) -> str:
    """``df`` as CSV text (no index, ``\\n`` line ends): list cells of object columns joined with ';', missing
    values empty, text cells made :func:`formula_safe`. ``None`` gives an empty file."""
    if df is None:
        df = pd.DataFrame()
    joined = map_text_cells(df, _joined, is_text=lambda dt: dt == object)  # by position: duplicate names are fine
    return to_csv_safe(joined, index=False, lineterminator="\n")


_csv_text = csv_text  # the name other modules imported first


