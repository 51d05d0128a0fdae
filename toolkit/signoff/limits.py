"""Limits of a policy's ``[outputs]`` section per output and metric, and which bound a metric's limit is."""

from __future__ import annotations

from toolkit.compare.metrics import HIGHER_IS_BETTER, METRICS
from toolkit.compare.metrics.applies import metric_applies


def bound_of(metric: str) -> str:
    """'min' for higher-is-better metrics, 'max' for lower-is-better ones."""
    return "min" if METRICS[metric].direction == HIGHER_IS_BETTER else "max"


def output_limits(section: dict, outputs: list[str], classes: dict[str, str] | None = None) -> dict[str, dict]:
    """{output: {metric: limit}} of an ``[outputs]`` section: ``"*"`` gives its limits to every output in
    ``outputs`` whose dtype class (``classes``: {output: class}, unknown ones get all) the metric applies to
    (:func:`metric_applies`); an ``[outputs.NAME]`` table overrides "*" for the metrics it sets, the usual
    specific-over-wildcard rule, so each (output, metric) has exactly one limit. Outputs in policy order
    ("*" expanding to ``outputs`` in model order); a NAME not in ``outputs`` keeps its own limits only."""
    classes = classes or {}
    star = section.get("*", {})
    order: dict[str, None] = {}
    for target in section:
        order.update(dict.fromkeys(outputs if target == "*" else [target]))
    limits = {}
    for name in order:
        own = {m: v for m, v in star.items() if name in outputs and metric_applies(m, classes.get(name))}
        own.update(section.get(name, {}) if name != "*" else {})
        own = {m: v for m, v in own.items() if v is not None}  # METRIC=off removed a "*" limit for this output
        if own:
            limits[name] = own
    return limits
