"""Abnormal lines: parse user overrides and validate threshold mappings.

The text of :func:`parse_thresholds` follows the one condition grammar of toolkit.compare.metrics.grammar
(comma separated, whitespace ignored)::

    CosineSimilarity<0.999        abnormal when the value is below 0.999 (the compare tool's form)
    CosineSimilarity>=0.999       the same line, written as the requirement (tune's form)
    MaxAbsoluteError>1e-2         abnormal when the value is above 0.01 (= MaxAbsoluteError<=1e-2)
    logits:CosineSimilarity<0.9   a line for the tensor 'logits' only (Thresholds.per_tensor)
    RootMeanSquareError=off       remove that line

The metric's direction decides which side of a line is abnormal, so a line cannot silently mean its opposite.
"""

from __future__ import annotations

import difflib
from typing import Mapping

from toolkit.core.errors import UsageError
from toolkit.core.text import suggest

from .grammar import RANGES, in_range, number, parse_conditions
from .registry import DEFAULT_THRESHOLDS, METRICS, THRESHOLDABLE
from .spec import HIGHER_IS_BETTER, INFORMATIONAL

_OPERATOR = {HIGHER_IS_BETTER: "<"}


def operator_for(name: str) -> str:
    """``"<"`` for higher-is-better metrics, ``">"`` for lower-is-better ones (the abnormal side)."""
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
        text: comma-separated items of the condition grammar (module docstring, toolkit.compare.metrics.grammar):
            ``[TENSOR:]METRIC OP VALUE`` or ``METRIC=off``; each item sets, adds or removes one line, and an item
            with a TENSOR prefix does so for that tensor only (:attr:`Thresholds.per_tensor`, over the lines
            every tensor gets).
        base: lines to start from; default :data:`DEFAULT_THRESHOLDS`. Not modified.

    Returns:
        A new :class:`Thresholds` (a dict metric name → line value) whose ``explicit`` names the lines ``text``
        sets (plus those of ``base``).

    Raises:
        UsageError: unknown or informational metric (closest valid name suggested), malformed item, value not a
            number or out of the metric's range; each message holds a corrected item that parses.
    """
    lines = dict(DEFAULT_THRESHOLDS if base is None else base)
    named = set(getattr(base, "explicit", ()))
    base_per = dict(getattr(base, "per_tensor", {}) or {})
    conditions = parse_conditions(text, "threshold")
    for c in conditions:
        if c.output is None:
            _apply(lines, named, c)
    per: dict[str, Thresholds] = {}
    for tensor in dict.fromkeys([*base_per, *(c.output for c in conditions if c.output)]):
        t_lines, t_named = dict(base_per.get(tensor, lines)), set(getattr(base_per.get(tensor), "explicit", named))
        if tensor in base_per:  # the new lines for every tensor reach it too
            for c in conditions:
                if c.output is None:
                    _apply(t_lines, t_named, c)
        for c in conditions:
            if c.output == tensor:
                _apply(t_lines, t_named, c)
        per[tensor] = Thresholds(t_lines, explicit=t_named)
    return Thresholds(lines, explicit=named, per_tensor=per)


def _apply(lines: dict, named: set, c) -> None:
    if c.off:
        lines.pop(c.metric, None)
        named.discard(c.metric)
        return
    lines[c.metric] = c.line
    named.add(c.metric)


#: Values a line can take: CosineSimilarity and ExactMatchRate within [-1, 1] / [0, 1]; errors are >= 0.
_RANGES = RANGES


def _in_range(name: str, value: float, context: str) -> float:
    return in_range(name, value, context, f"{name}{operator_for(name)}")


class Thresholds(dict):
    """Abnormal lines ``{metric: line}`` that remember which ones the user set: ``explicit`` (frozenset of names)
    holds every line named in a ``--thresholds`` text (:func:`parse_thresholds`), even at the default value,
    and every line whose value is not the default (:data:`DEFAULT_THRESHOLDS`). A plain dict, JSON and
    ``dict(lines)`` keep the lines but not the naming: a line is then explicit when its value is not the default.
    ``per_tensor`` ({tensor name: Thresholds}) holds the lines of the tensors an item named (``logits:...``):
    :meth:`for_tensor` gives a tensor its lines. Pickles with ``explicit`` and ``per_tensor`` (dataset workers)."""

    def __init__(self, lines: Mapping[str, float] = (), explicit=(), per_tensor: Mapping | None = None):
        super().__init__(lines)
        self.explicit = frozenset(explicit) | frozenset(n for n, v in self.items() if DEFAULT_THRESHOLDS.get(n) != v)
        self.per_tensor = {str(k): v if isinstance(v, Thresholds) else Thresholds(v)
                           for k, v in (per_tensor or {}).items()}

    def for_tensor(self, name: str | None) -> "Thresholds":
        """The lines of tensor ``name``: its own when an item named it, else these."""
        return self.per_tensor.get(name, self) if name is not None else self

    def to_json(self) -> dict:
        """The lines as plain JSON ({metric: line}), plus ``"per_tensor"`` ({tensor: {metric: line}}) when some
        tensor has its own lines (so the lines of a run without them are recorded as before)."""
        out = {k: float(v) for k, v in self.items()}
        if self.per_tensor:
            out["per_tensor"] = {t: {k: float(v) for k, v in lines.items()} for t, lines in self.per_tensor.items()}
        return out

    def __reduce__(self):
        return Thresholds, (dict(self), sorted(self.explicit), dict(self.per_tensor) or None)


def check_tensors(lines, names, what: str = "tensor of the model") -> None:
    """Refuse lines set for a tensor (``NAME:METRIC<VALUE``, :attr:`Thresholds.per_tensor`) that ``names`` does
    not hold, naming the closest name. Raises UsageError."""
    known = list(dict.fromkeys(str(n) for n in names))
    for tensor in getattr(lines, "per_tensor", None) or {}:
        if tensor not in set(known):
            raise UsageError(f"a line is set for '{tensor}' (the '{tensor}:' prefix of a --thresholds, --atol or "
                             f"--rtol item), which is no {what}{suggest(tensor, known)}; name a tensor of the model "
                             f"before ':' or drop the '{tensor}:' prefix")


def thresholds_text(lines) -> str:
    """``lines`` (a :class:`Thresholds`) as ``--thresholds`` text that :func:`resolve_thresholds` reads back to
    the same lines, the same user-set (``explicit``) ones and the same per-tensor lines: each user-set line as
    ``METRIC<VALUE`` (higher is better: abnormal below) or ``METRIC>VALUE``, a default line it lacks as
    ``METRIC=off``, a tensor's own as ``TENSOR:...``; values in their shortest exact form (repr). Default lines
    are left out (named, they would count as set by the user and lose the FP16 noise allowance). "" for the
    defaults. A reproducer's command carries it, so that it judges with the lines the diagnosis used."""
    def items(own: Mapping[str, float], prefix: str = "", removed_above=frozenset()) -> list[str]:
        out = [f"{prefix}{name}=off" for name in DEFAULT_THRESHOLDS if name not in own and name not in removed_above]
        for name, value in own.items():
            if name in getattr(own, "explicit", own):
                op = "<" if METRICS[name].direction == HIGHER_IS_BETTER else ">"
                out.append(f"{prefix}{name}{op}{float(value)!r}")
        return out

    parts = items(lines)
    gone = frozenset(n for n in DEFAULT_THRESHOLDS if n not in lines)
    for tensor, own in (getattr(lines, "per_tensor", None) or {}).items():
        parts += items(own, f"{tensor}:", gone)
    return ",".join(parts)


def unjudged_lines(lines, table) -> list[str]:
    """What keeps the lines set for a tensor (``NAME:METRIC<VALUE``, :attr:`Thresholds.per_tensor`) from
    judging anything in ``table`` (a comparison's rows: TensorName, CompareFailReason, DataType and the metric
    columns), one text per fault: the tensor has no compared row (fused inside a kernel, left out by a subset,
    not comparable: "'h1' was not compared (fused into 'mm')"), or a metric named for it has no value there
    (a float metric on an integer output: "MaxAbsoluteError does not apply to 'cls' (int64)"). Only metrics
    named for that tensor count (a global line that does not apply to an integer output is simply not used).
    Empty when every such line judged its tensor."""
    per = getattr(lines, "per_tensor", None) or {}
    if not per or table is None or not len(table):
        return []
    rows = {str(r["TensorName"]): r for r in table.to_dict("records")}
    common = getattr(lines, "explicit", frozenset())
    out = []
    for tensor, own in per.items():
        row = rows.get(tensor)
        reason = "" if row is None else str(row.get("CompareFailReason") or "")
        if row is None or reason:
            out.append(f"'{tensor}' was not compared ({reason or 'it has no row in the comparison'})")
            continue
        for metric in sorted(set(getattr(own, "explicit", own)) - set(common)):
            v = row.get(metric)
            if v is None or (isinstance(v, float) and v != v):
                out.append(f"{metric} does not apply to '{tensor}' ({row.get('DataType') or 'its dtype'})")
    return out


#: Metrics the expected-noise allowance does not excuse on a graph output: KullbackLeiblerDivergence is invariant
#: to offset and scale (it compares the min-max normalised shapes), while the allowance grows with each value's
#: magnitude. FP16 rounding of outputs on a large common offset (logits 1000 ± 0.3: a rounding step of 0.5) is
#: within that allowance and still erases the differences a consumer of the output reads (its argmax), which is
#: what the KL line measures. Inside the graph the same storage noise is judged by what it does to the outputs.
OUTPUT_SHAPE_METRICS = ("KullbackLeiblerDivergence",)


def noise_covers(name: str, lines: Mapping[str, float], output: bool = False) -> bool:
    """True when the expected-noise allowance (``compare_tensors(expected_noise=...)``, the FP16 noise of the
    numerics contract) may excuse a crossing of ``name``'s line in ``lines``: only a default line is covered —
    the default metric at the default value (:data:`DEFAULT_THRESHOLDS`), not named by the user (``explicit`` of
    a :class:`Thresholds`), and on a graph output (``output``) not a metric of :data:`OUTPUT_SHAPE_METRICS`. A
    line the user set (``--thresholds``, a mapping with another value, another metric) is applied as given, FP16
    rounding or not. ``"OverFlow"`` (no line) is never covered."""
    if output and name in OUTPUT_SHAPE_METRICS:
        return False
    return _default_line(name, lines)


def _default_line(name: str, lines: Mapping[str, float]) -> bool:
    """``name``'s line in ``lines`` is the tool's: the default metric at its default value, not named by the user."""
    if name not in lines or name in getattr(lines, "explicit", ()):
        return False
    default = DEFAULT_THRESHOLDS.get(name)
    return default is not None and float(lines[name]) == default


def line_origins(lines: Mapping[str, float] | None) -> dict[str, str]:
    """Who set each abnormal line, for summary.json: ``{metric: "default" | "user" | "removed"}`` — ``"default"``
    for the tool's line at its default value, not named by the user (a line :func:`noise_covers` may excuse),
    ``"user"`` for every other line of ``lines`` (named in ``--thresholds``, another
    value, another metric), ``"removed"`` for a default line ``lines`` lacks (``NAME=off``). ``lines`` None: the
    defaults. In :data:`~.registry.METRICS` order."""
    lines = resolve_thresholds(None) if lines is None else lines
    out = {name: ("default" if _default_line(name, lines) else "user") for name in lines}
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
    per = {t: resolve_thresholds(v) for t, v in (getattr(thresholds, "per_tensor", None) or {}).items()}
    return Thresholds(lines, explicit=getattr(thresholds, "explicit", ()), per_tensor=per)


def _number(raw, context: str) -> float:
    return number(raw, context)
