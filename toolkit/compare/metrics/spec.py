"""The metric record (:class:`MetricSpec`) and the helper that builds one from a formula over shared sums.

A metric's formula is written once, as a function of :class:`~.reductions.PairSums` (the reductions that
all metrics share). :func:`define` wraps it into the standalone ``fn(x, y) -> float`` the registry
exposes, so the one-metric call and the all-metrics call (:func:`~.compare.compare_tensors`) cannot
drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .reductions import DEFAULT_REL_EPS, PairSums, reduce_pair

HIGHER_IS_BETTER = "higher_is_better"
LOWER_IS_BETTER = "lower_is_better"
INFORMATIONAL = "informational"

ASCEND_TOOL = "Ascend CANN msaccucmp (tools/operator_cmp/compare/algorithm_manager/builtin_algorithm/alg_{}.py)"
ASCEND_DOC = ("https://www.hiascend.com/document/detail/en/canncommercial/800/devaids/modelaccuracy/"
              "atlasaccuracy_16_0064.html")


@dataclass(frozen=True)
class MetricSpec:
    """One registered metric.

    Attributes:
        name: column name, spelled as in the Ascend compare CSV where the tool has the column.
        fn: ``fn(x, y) -> float`` over flat float64 arrays of equal length (x = device, y = golden);
            expects finite values (``compare_tensors`` masks non-finite positions first).
        direction: ``"higher_is_better"`` (abnormal when value < line), ``"lower_is_better"``
            (abnormal when value > line) or ``"informational"`` (no abnormal line possible).
        default_threshold: the default abnormal line, or None.
        formula: the formula in plain text; unit: what the number is measured in.
        source: where the definition comes from.
        from_sums: the same formula over shared :class:`PairSums` (None for non-float metrics).
        family: the reduction family ``reduce_pair`` must compute for ``from_sums``.
        dtype_class: ``"float"`` or ``"integer"``: which tensors the metric applies to.
    """

    name: str
    fn: Callable[[np.ndarray, np.ndarray], float]
    direction: str
    default_threshold: float | None
    formula: str
    unit: str
    source: str
    from_sums: Callable[[PairSums], float] | None = None
    family: str = ""
    dtype_class: str = "float"

    def is_abnormal(self, value: float, line: float) -> bool:
        """True when ``value`` crosses ``line`` (strictly); NaN values (not computed) never cross."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        if self.direction == HIGHER_IS_BETTER:
            return value < line
        if self.direction == LOWER_IS_BETTER:
            return value > line
        return False


def define(name: str, from_sums: Callable[[PairSums], float], *, family: str, direction: str,
           formula: str, unit: str, source: str, default_threshold: float | None = None) -> MetricSpec:
    """Build a :class:`MetricSpec` whose standalone ``fn`` reduces only the family it needs."""

    def fn(x: np.ndarray, y: np.ndarray, *, rel_eps: float = DEFAULT_REL_EPS) -> float:
        return from_sums(reduce_pair(x, y, families=(family,), rel_eps=rel_eps))

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"{name}(x=device, y=golden) = {formula}  [{unit}]; source: {source}"
    return MetricSpec(name=name, fn=fn, direction=direction, default_threshold=default_threshold,
                      formula=formula, unit=unit, source=source, from_sums=from_sums, family=family)
