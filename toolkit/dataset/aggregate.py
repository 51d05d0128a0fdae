"""Per-layer statistics of a metric over the inputs of a dataset run, streamed from the result store.

For every tensor and every metric with a direction (toolkit.compare.metrics: CosineSimilarity and
ExactMatchRate are higher-is-better, the errors lower-is-better; GoldenStd/DeviceStd are informational and
left out) over the inputs where the tensor was compared (NaN = not compared, skipped):

- ``<Metric>_worst``: the minimum of a higher-is-better metric, the maximum of a lower-is-better one;
- ``<Metric>_worst_input``: the first input (in sorted name order) with that value;
- ``<Metric>_mean``: ``numpy.nanmean``;
- ``<Metric>_p<q>``: ``numpy.nanpercentile(..., q)`` with numpy's default "linear" method (Hyndman & Fan
  type 7), exact: computed from every input's value; ``<q>`` as :func:`percentile_label` writes it (a plain
  decimal: ``p50``, ``p99.5``, ``p0.0000001``).

Plus per tensor: ``Inputs`` (inputs where it was compared), ``AbnormalInputs``, ``OverFlowInputs``,
``DeviceNaNInputs`` / ``DeviceInfInputs`` (device NaN / Inf elements), ``GoldenAbsMax`` (max over inputs).

Memory: one pass over the store reads one record at a time; each metric's per-input values (8 bytes per input
per tensor) are appended to a spill file on disk, and the statistics are computed one metric at a time from
its spill file. So the run holds at most one metric's values: n_inputs x n_tensors x 8 bytes (6.9 MB for
1,000 inputs of PP-OCRv4 rec, 861 tensors), besides the counters above (a few floats per tensor).
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.compare.metrics import HIGHER_IS_BETTER, INFORMATIONAL, METRICS
from toolkit.core.errors import UsageError
from toolkit.dataset.worker import COLUMNS

#: Metrics aggregated (those with a direction), in CSV column order.
AGG_METRICS: tuple[str, ...] = tuple(n for n, s in METRICS.items() if s.direction != INFORMATIONAL)
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
#: Per-tensor counts of inputs where the flag was set.
FLAG_COLUMNS = ("AbnormalInputs", "OverFlowInputs", "DeviceNaNInputs", "DeviceInfInputs")
_C = {c: i for i, c in enumerate(COLUMNS)}


def parse_percentiles(text: str | None) -> tuple[float, ...]:
    """``"50,90,99"`` → (50.0, 90.0, 99.0) (duplicates dropped, order kept); None → :data:`DEFAULT_PERCENTILES`;
    ``"none"`` → () (no percentile columns). Any float syntax in [0, 100] is taken (``1e-7`` too); the column
    label is :func:`percentile_label`.

    Raises:
        UsageError: an empty value (``""``: write ``none`` for no percentiles), an empty entry, or an entry that
            is not a number in [0, 100].
    """
    if text is None:
        return DEFAULT_PERCENTILES
    if not text.strip():
        raise UsageError("--percentiles is empty; give a comma list in [0, 100] such as 50,90,99, or 'none' for "
                         "no percentile columns")
    if text.strip().lower() == "none":
        return ()
    out = []
    for part in (p.strip() for p in text.split(",")):
        try:
            q = float(part)
        except ValueError:
            q = float("nan")
        if not 0.0 <= q <= 100.0:
            raise UsageError(f"--percentiles entry '{part}' is not a number in [0, 100]; e.g. --percentiles 50,90,99")
        q += 0.0  # -0.0 → 0.0
        if q not in out:
            out.append(q)
    return tuple(out)


def worst_is_min(metric: str) -> bool:
    return METRICS[metric].direction == HIGHER_IS_BETTER


def percentile_label(q: float) -> str:
    """Column label of percentile ``q``: ``p`` + the shortest plain decimal that reads back as the same float
    (no exponent, no trailing zeros): 50 → ``p50``, 99.5 → ``p99.5``, 1e-7 → ``p0.0000001``. Distinct values
    give distinct labels (``{q:g}`` would print 1e-07 and merge 12.345671 with 12.345672)."""
    return "p" + np.format_float_positional(float(q) + 0.0, trim="-")


class Accumulator:
    """Streaming side of the aggregation: :meth:`add` one input's values at a time, then :meth:`finish`.

    Args:
        tensors: the canonical tensor order (rows of the records).
        percentiles: the q values (0–100) to report.
        spill_dir: where the per-metric spill files go (a temporary folder inside it, removed by finish).
    """

    def __init__(self, tensors, percentiles=DEFAULT_PERCENTILES, spill_dir: str | Path | None = None):
        self.tensors = list(tensors)
        self.percentiles = tuple(percentiles)
        n = len(self.tensors)
        self.names: list[str] = []
        self.inputs = np.zeros(n, np.int64)
        self.flags = {k: np.zeros(n, np.int64) for k in FLAG_COLUMNS}
        self.golden_absmax = np.full(n, np.nan)
        self._dir = Path(tempfile.mkdtemp(prefix=".aggregate-", dir=spill_dir))
        self._spill = {m: open(self._dir / f"{m}.f64", "wb") for m in AGG_METRICS}  # noqa: SIM115 (closed by finish/close)

    def add(self, name: str, rows: np.ndarray, values: np.ndarray) -> None:
        """Add one input: ``values`` (len(rows), len(COLUMNS)) float64 at tensor positions ``rows``."""
        full = np.full((len(self.tensors), len(COLUMNS)), np.nan)
        if len(rows):
            full[np.asarray(rows, np.int64)] = values
        self.names.append(name)
        self.inputs += ~np.isnan(full[:, :len(METRICS)]).all(axis=1)
        self.flags["AbnormalInputs"] += np.nan_to_num(full[:, _C["Abnormal"]]) > 0
        self.flags["OverFlowInputs"] += np.nan_to_num(full[:, _C["OverFlow"]]) > 0
        self.flags["DeviceNaNInputs"] += np.nan_to_num(full[:, _C["DeviceNaN"]]) > 0
        self.flags["DeviceInfInputs"] += np.nan_to_num(full[:, _C["DeviceInf"]]) > 0
        self.golden_absmax = np.fmax(self.golden_absmax, full[:, _C["GoldenAbsMax"]])
        for m, fh in self._spill.items():
            fh.write(np.ascontiguousarray(full[:, _C[m]]).tobytes())

    def _matrix(self, metric: str) -> np.ndarray:
        self._spill[metric].close()
        return np.fromfile(self._dir / f"{metric}.f64", dtype=np.float64).reshape(len(self.names), len(self.tensors))

    def _stats(self, metric: str) -> dict[str, np.ndarray]:
        a = self._matrix(metric)
        has = ~np.isnan(a).all(axis=0) if len(a) else np.zeros(len(self.tensors), bool)
        filled = np.where(np.isnan(a), np.inf if worst_is_min(metric) else -np.inf, a)
        at = (filled.argmin(axis=0) if worst_is_min(metric) else filled.argmax(axis=0)) if len(a) else np.zeros(len(has), int)
        worst = np.where(has, filled[at, np.arange(filled.shape[1])] if len(a) else np.nan, np.nan)
        out = {f"{metric}_worst": worst,
               f"{metric}_worst_input": np.array([self.names[i] if h else "" for i, h in zip(at, has)], dtype=object)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN tensors: NaN, as wanted
            out[f"{metric}_mean"] = np.nanmean(a, axis=0) if len(a) else np.full(len(has), np.nan)
            if self.percentiles and len(a):
                qs = np.nanpercentile(a, list(self.percentiles), axis=0)
                for q, row in zip(self.percentiles, qs):
                    out[f"{metric}_{percentile_label(q)}"] = row
        return out

    def finish(self) -> pd.DataFrame:
        """The aggregate table: one row per tensor compared in at least one input (or flagged), columns
        TensorName, Inputs, FLAG_COLUMNS, GoldenAbsMax and the statistics
        of every AGG_METRICS metric (module docstring). Removes the spill files."""
        try:
            cols: dict[str, np.ndarray] = {"TensorName": np.array(self.tensors, dtype=object), "Inputs": self.inputs}
            cols.update(self.flags)
            cols["GoldenAbsMax"] = self.golden_absmax
            for m in AGG_METRICS:
                cols.update(self._stats(m))
        finally:
            self.close()
        df = pd.DataFrame(cols)
        keep = (df["Inputs"] > 0) | (df["OverFlowInputs"] > 0) | (df["AbnormalInputs"] > 0)
        return df[keep].reset_index(drop=True)

    def close(self) -> None:
        for fh in self._spill.values():
            fh.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def aggregate(records, tensors, percentiles=DEFAULT_PERCENTILES, spill_dir=None) -> tuple[pd.DataFrame, list[str]]:
    """Aggregate ``records`` (an iterable of toolkit.dataset.worker.Record, consumed one at a time; records of
    inputs that failed are skipped). Returns (table, names of the inputs aggregated)."""
    acc = Accumulator(tensors, percentiles, spill_dir)
    try:
        for rec in records:
            if rec.meta.get("status") == "ok":
                acc.add(rec.meta["input"], rec.rows, rec.values)
    except BaseException:
        acc.close()
        raise
    return acc.finish(), list(acc.names)
