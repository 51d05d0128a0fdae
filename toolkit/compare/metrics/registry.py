"""The metric registry, in the column order of the Ascend compare CSV, and the default abnormal lines."""

from __future__ import annotations

from . import absolute, distribution, exact, relative, similarity
from .spec import INFORMATIONAL, MetricSpec

#: Ascend result-CSV column order; StandardDeviation is split into GoldenStd and DeviceStd;
#: ExactMatchRate (integer tensors) is ours.
_ORDER = (
    "CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError", "RelativeEuclideanDistance",
    "KullbackLeiblerDivergence", "GoldenStd", "DeviceStd", "MeanAbsoluteError", "RootMeanSquareError",
    "MaxRelativeError", "MeanRelativeError", "ExactMatchRate",
)

_BY_NAME = {spec.name: spec for module in (similarity, absolute, relative, distribution, exact)
            for spec in module.SPECS}
assert set(_BY_NAME) == set(_ORDER), "every registered metric needs a place in _ORDER"

#: name → :class:`MetricSpec`, in CSV column order.
METRICS: dict[str, MetricSpec] = {name: _BY_NAME[name] for name in _ORDER}

#: The Ascend compare tool's default abnormal lines (cosine < 0.99, RED > 0.05, KLD > 0.005,
#: RMSE > 1.0, MeanRelativeError > 1.0) plus ours for integer tensors (ExactMatchRate < 1.0).
#: The comparison direction comes from each metric's ``direction``.
DEFAULT_THRESHOLDS: dict[str, float] = {
    name: spec.default_threshold for name, spec in METRICS.items() if spec.default_threshold is not None
}

#: Metrics that can carry an abnormal line.
THRESHOLDABLE = tuple(name for name, spec in METRICS.items() if spec.direction != INFORMATIONAL)
