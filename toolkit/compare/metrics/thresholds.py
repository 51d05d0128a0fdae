"""Abnormal lines: parse user overrides and validate threshold mappings.

Syntax of :func:`parse_thresholds` (comma separated, whitespace ignored)::

    CosineSimilarity<0.999        abnormal when the value is below 0.999 (higher-is-better metrics)
    MaxAbsoluteError>1e-2         abnormal when the value is above 0.01  (lower-is-better metrics)
    RootMeanSquareError=off       remove that line

The operator must match the metric's direction, so a line cannot silently mean its opposite.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Mapping

from toolkit.core.errors import UsageError

from .registry import DEFAULT_THRESHOLDS, METRICS, THRESHOLDABLE
from .spec import HIGHER_IS_BETTER, INFORMATIONAL

_ITEM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*([<>=])\s*(\S+)\s*$")
_OPERATOR = {HIGHER_IS_BETTER: "<"}


def operator_for(name: str) -> str:
    """``"<"`` for higher-is-better metrics, ``">"`` for lower-is-better ones."""
    return _OPERATOR.get(METRICS[name].direction, ">")


def check_metric_name(name: str, context: str) -> None:
    """Raise :class:`UsageError` unless ``name`` is a metric that can carry an abnormal line.

    The message suggests the closest valid name (difflib, case-insensitive).
    """
    if name in METRICS and METRICS[name].direction == INFORMATIONAL:
        raise UsageError(f"{context}: {name} is informational and has no abnormal line; "
                         f"choose one of {', '.join(THRESHOLDABLE)}")
    if name in METRICS:
        return
    lowered = {n.lower(): n for n in THRESHOLDABLE}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.4)
    hint = f"did you mean '{lowered[close[0]]}'? " if close else ""
    raise UsageError(f"{context}: unknown metric '{name}'; {hint}valid names: {', '.join(THRESHOLDABLE)}")


def parse_thresholds(text: str, base: Mapping[str, float] | None = None) -> dict[str, float]:
    """Apply overrides like ``"CosineSimilarity<0.999,MaxAbsoluteError>1e-2"`` to ``base``.

    Args:
        text: comma-separated items ``NAME<VALUE``, ``NAME>VALUE`` or ``NAME=off`` (see module docstring).
        base: lines to start from; default :data:`DEFAULT_THRESHOLDS`. Not modified.

    Returns:
        A new :class:`Thresholds` (a dict metric name → line value) whose ``explicit`` names the lines ``text``
        sets (plus those of ``base``).

    Raises:
        UsageError: unknown or informational metric (closest valid name suggested), operator against the
            metric's direction, malformed item, value not a number.
    """
    lines = dict(DEFAULT_THRESHOLDS if base is None else base)
    named = set(getattr(base, "explicit", ()))
    for item in filter(str.strip, text.split(",")):
        match = _ITEM.match(item)
        if not match:
            raise UsageError(f"threshold '{item.strip()}': expected NAME<VALUE, NAME>VALUE or NAME=off, "
                             f"e.g. 'CosineSimilarity<0.999'")
        name, op, raw = match.groups()
        context = f"threshold '{item.strip()}'"
        check_metric_name(name, context)
        if op == "=":
            if raw.lower() != "off":
                raise UsageError(f"{context}: '=' only takes 'off'; write {name}{operator_for(name)}{raw}")
            lines.pop(name, None)
            continue
        if op != operator_for(name):
            raise UsageError(f"{context}: {name} is {METRICS[name].direction.replace('_', '-')}, so its abnormal "
                             f"line is written '{name}{operator_for(name)}{raw}'")
        lines[name] = _in_range(name, _number(raw, context), context)
        named.add(name)
    return Thresholds(lines, explicit=named)


#: Values a line can take: CosineSimilarity and ExactMatchRate within [-1, 1] / [0, 1]; errors are >= 0.
_RANGES = {"CosineSimilarity": (-1.0, 1.0), "ExactMatchRate": (0.0, 1.0)}


def _in_range(name: str, value: float, context: str) -> float:
    lo, hi = _RANGES.get(name, (0.0, float("inf")))
    if not lo <= value <= hi:
        raise UsageError(f"{context}: {name} takes values in [{lo:g}, {hi:g}], so a line at {value:g} can never "
                         "(or always) be crossed; choose a value in range")
    return value


class Thresholds(dict):
    """Abnormal lines ``{metric: line}`` that remember which ones the user set: ``explicit`` (frozenset of names)
    holds every line named in a ``--thresholds`` text (:func:`parse_thresholds`), even at the default value,
    and every line whose value is not the default (:data:`DEFAULT_THRESHOLDS`). A plain dict, JSON and
    ``dict(lines)`` keep the lines but not the naming: a line is then explicit when its value is not the default.
    Pickles with ``explicit`` (dataset workers)."""

    def __init__(self, lines: Mapping[str, float] = (), explicit=()):
        super().__init__(lines)
        self.explicit = frozenset(explicit) | frozenset(n for n, v in self.items() if DEFAULT_THRESHOLDS.get(n) != v)

    def __reduce__(self):
        return Thresholds, (dict(self), sorted(self.explicit))


def noise_covers(name: str, lines: Mapping[str, float]) -> bool:
    """True when the expected-noise allowance (``compare_tensors(expected_noise=...)``, the FP16 noise of the
    numerics contract) may excuse a crossing of ``name``'s line in ``lines``: only a default line is covered —
    the default metric at the default value (:data:`DEFAULT_THRESHOLDS`), not named by the user (``explicit`` of
    a :class:`Thresholds`). A line the user set (``--thresholds``, a mapping with another value, another
    metric) is applied as given, FP16 rounding or not. ``"OverFlow"`` (no line) is never covered."""
    if name not in lines or name in getattr(lines, "explicit", ()):
        return False
    default = DEFAULT_THRESHOLDS.get(name)
    return default is not None and float(lines[name]) == default


def line_origins(lines: Mapping[str, float] | None) -> dict[str, str]:
    """Who set each abnormal line, for summary.json: ``{metric: "default" | "user" | "removed"}`` — ``"default"``
    for a line the expected FP16 noise may excuse (:func:`noise_covers`: the tool's line at its default value,
    not named by the user), ``"user"`` for every other line of ``lines`` (named in ``--thresholds``, another
    value, another metric), ``"removed"`` for a default line ``lines`` lacks (``NAME=off``). ``lines`` None: the
    defaults. In :data:`~.registry.METRICS` order."""
    lines = resolve_thresholds(None) if lines is None else lines
    out = {name: ("default" if noise_covers(name, lines) else "user") for name in lines}
    out.update({name: "removed" for name in DEFAULT_THRESHOLDS if name not in lines})
    return {name: out[name] for name in METRICS if name in out}


def resolve_thresholds(thresholds: Mapping[str, float] | str | None) -> Thresholds:
    """None → defaults; str → :func:`parse_thresholds`; mapping → validated copy (replaces the defaults), as a
    :class:`Thresholds` (``explicit`` kept from a :class:`Thresholds`, else the lines not at their default).

    Raises:
        UsageError: as :func:`parse_thresholds`, or a non-numeric value in the mapping.
    """
    if thresholds is None:
        return Thresholds(DEFAULT_THRESHOLDS)
    if isinstance(thresholds, str):
        return parse_thresholds(thresholds)
    lines = {}
    for name, value in thresholds.items():
        context = f"thresholds[{name!r}]"
        check_metric_name(name, context)
        lines[name] = _in_range(name, _number(value, context), context)
    return Thresholds(lines, explicit=getattr(thresholds, "explicit", ()))


def _number(raw, context: str) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise UsageError(f"{context}: '{raw}' is not a number; write e.g. 0.99 or 1e-2") from None
    if math.isnan(value):
        raise UsageError(f"{context}: NaN cannot be a line; use a number or NAME=off")
    return value
