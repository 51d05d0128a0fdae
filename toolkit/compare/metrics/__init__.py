"""Tensor comparison metrics of the Ascend compare tool (x = device/NPU tensor, y = golden/FP32 reference).

Public API::

    compare_tensors(x, y, *, thresholds=None, expected_noise=None, rel_eps=1e-6) -> dict   # one CSV row
    tolerance_that_would_pass(x, y, *, rel_eps=1e-6) -> dict[str, float]
    parse_thresholds(text, base=None) -> dict[str, float]      # "CosineSimilarity<0.999,MaxAbsoluteError>1e-2"
    parse_conditions(text, label) -> [Condition]                # the one condition grammar (grammar.py)
    noise_covers(name, lines) -> bool                           # may expected noise excuse this line? (defaults only)
    line_origins(lines) -> {metric: "default"|"user"|"removed"} # who set each line (summary.json)
    Thresholds                                                  # dict of lines + .explicit (names the user set)
    dtype_class(dtype) / value_kind(dtype) / standard(array)    # "float" | "integer" (exact match, text too); numpy form
    METRICS: dict[str, MetricSpec]                              # name, fn(x, y), direction, line, formula, source
    DEFAULT_THRESHOLDS: dict[str, float]                        # the tool's abnormal lines (+ ExactMatchRate)

One module per metric family (similarity, absolute, relative, distribution, exact); every float metric is
a formula over the sums :func:`reduce_pair` computes once (see ``reductions.py`` for the memory budget).
Definitions follow Ascend CANN msaccucmp (tools/operator_cmp/compare/algorithm_manager/builtin_algorithm,
CANN 8.1.RC1); each module docstring states where we depart from it and why.
"""

from toolkit.core.dtypes import dtype_class, standard, value_kind

from .compare import ROW_KEYS, compare_tensors, tolerance_that_would_pass
from .grammar import Condition, overridden, parse_conditions, with_shorthands
from .reductions import DEFAULT_REL_EPS, FP16_MAX, KL_EPS, PairSums, reduce_pair
from .registry import DEFAULT_THRESHOLDS, METRICS, THRESHOLDABLE
from .spec import HIGHER_IS_BETTER, INFORMATIONAL, LOWER_IS_BETTER, MetricSpec
from .thresholds import (
    Thresholds,
    line_origins,
    noise_covers,
    parse_thresholds,
    resolve_thresholds,
)

__all__ = [
    "Condition", "DEFAULT_REL_EPS", "DEFAULT_THRESHOLDS", "FP16_MAX", "HIGHER_IS_BETTER", "INFORMATIONAL", "KL_EPS",
    "LOWER_IS_BETTER", "METRICS", "MetricSpec", "PairSums", "ROW_KEYS", "THRESHOLDABLE", "Thresholds",
    "compare_tensors", "dtype_class", "line_origins", "noise_covers", "parse_conditions", "parse_thresholds", "reduce_pair",
    "resolve_thresholds", "standard", "tolerance_that_would_pass", "value_kind", "with_shorthands", "overridden",
]
