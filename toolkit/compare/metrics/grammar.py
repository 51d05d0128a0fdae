"""One grammar for accuracy conditions: ``--thresholds``, ``tune --target``, ``regress --tolerance``, the
``--atol`` / ``--rtol`` shorthands and the condition strings of a signoff policy all read it.

Syntax (comma separated, blanks ignored)::

    [OUTPUT:]METRIC OP VALUE        OP one of  <  <=  >  >=  =      VALUE a number, or off (with =)

    CosineSimilarity>=0.999         a requirement: the value must be at least 0.999
    CosineSimilarity<0.999          the same line, written as the abnormal side (the compare tool's form)
    logits:MaxAbsoluteError<=1e-3   for the tensor (graph output) 'logits' only
    RootMeanSquareError=off         no line on this metric
    CosineSimilarity=0.999          a bound in the metric's own direction (at least 0.999), as a policy writes it
    MaxAbsoluteError<=0.01|fp16     element-wise: each |x - y| within 0.01 or the FP16 rounding of its value,
                                    whichever is larger (tune's target only; :data:`FP16_NOISE`)

METRIC is a name of :data:`~.registry.METRICS` or one of its short forms (:data:`SHORT_FORMS`: Cosine, RED,
RMSE, ...). Every metric has a good and a bad direction (CosineSimilarity higher is better, the errors lower),
so an operator names either the side that passes (``>=``, ``>`` for CosineSimilarity) or the side that is
abnormal (``<``, ``<=``); both spellings of one line mean the same, and a line can never mean its opposite.
``<=`` / ``>`` on the abnormal side and ``>`` / ``<`` on the passing side are the strict forms: a value exactly
on the line then fails. OUTPUT is everything before the last ``:`` in front of the metric, so names holding
``:`` (``input:0``) work; ``*:`` is the same as no prefix.

Each item parses to one :class:`Condition`; what the consumer makes of it:

- abnormal lines (``--thresholds``, :func:`toolkit.compare.metrics.parse_thresholds`): :attr:`Condition.line`,
  with the strict forms stored at the neighbouring double (``CosineSimilarity>0.999`` is the line
  0.9990000000000001: a cosine of exactly 0.999 is abnormal, as asked);
- tune's target (:func:`toolkit.tuning.tune.parse_target`) and policy limits: :meth:`Condition.required`;
- regress tolerances (:func:`toolkit.signoff.regress.parse_tolerance`): ``METRIC=VALUE`` is the allowed
  worsening (a change, not a value), any other operator an absolute bound the new run must keep.

The ``|fp16`` suffix (:data:`FP16_NOISE`) is accepted only where the caller asks for it (``fp16_ok``: tune's
target and the default target diagnose verifies advice against, toolkit.tuning.tune); elsewhere (compare
--thresholds, policies, regress) it is refused, since those consumers judge the plain metric value.

Every error is one line naming the item, what was expected and a corrected item that this grammar accepts.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

from toolkit.core.errors import UsageError

from .registry import METRICS, THRESHOLDABLE
from .spec import HIGHER_IS_BETTER, INFORMATIONAL

#: Short forms accepted for metric names (the Ascend tools' abbreviations and usual acronyms), case as written.
SHORT_FORMS: dict[str, str] = {
    "Cosine": "CosineSimilarity", "cos": "CosineSimilarity",
    "MaxAbsErr": "MaxAbsoluteError", "MaxAbsError": "MaxAbsoluteError",
    "MeanAbsErr": "MeanAbsoluteError", "MeanAbsError": "MeanAbsoluteError",
    "MaxRelErr": "MaxRelativeError", "MaxRelativeErr": "MaxRelativeError",
    "MeanRelErr": "MeanRelativeError", "MeanRelativeErr": "MeanRelativeError",
    "AccRelErr": "AccumulatedRelativeError", "ARE": "AccumulatedRelativeError",
    "RED": "RelativeEuclideanDistance", "KLD": "KullbackLeiblerDivergence", "RMSE": "RootMeanSquareError",
    "EMR": "ExactMatchRate",
}
#: Operators, longest first (so ``<=`` is never read as ``<`` followed by ``=VALUE``).
OPERATORS = ("<=", ">=", "<", ">", "=")
#: The metric the ``--atol`` / ``--rtol`` shorthands bound (``--atol 1e-3`` = ``MaxAbsoluteError<=1e-3``).
SHORTHANDS = {"--atol": "MaxAbsoluteError", "--rtol": "MaxRelativeError"}
#: Suffix of a MaxAbsoluteError value that makes the bound element-wise and noise-aware: each element may differ by
#: max(VALUE, FP16 rounding of its reference value); see toolkit.tuning.allowance for the allowance.
FP16_NOISE = "|fp16"
#: Values a metric can take: CosineSimilarity in [-1, 1], ExactMatchRate in [0, 1], every error >= 0.
RANGES = {"CosineSimilarity": (-1.0, 1.0), "ExactMatchRate": (0.0, 1.0)}

_ITEM = re.compile(r"^(?:(?P<output>.*?\S)\s*:)??\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*"
                   r"(?P<op><=|>=|<|>|=)\s*(?P<value>\S+)$")
_SPACED = re.compile(r"^(?:(?P<output>.*?\S)\s*:)??\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s+(?P<value>\S+)$")


def higher_is_better(metric: str) -> bool:
    return METRICS[metric].direction == HIGHER_IS_BETTER


def good_op(metric: str, strict: bool = False) -> str:
    """The operator of a requirement on ``metric``: ``>=`` (``>`` strict) for higher-is-better, else ``<=``
    (``<``)."""
    if higher_is_better(metric):
        return ">" if strict else ">="
    return "<" if strict else "<="


def example_value(metric: str) -> str:
    """A plausible value of ``metric`` for an example in a message."""
    return "0.999" if higher_is_better(metric) else "0.01"


@dataclass(frozen=True)
class Condition:
    """One parsed item.

    Attributes:
        metric: the canonical metric name (a short form resolved).
        op: the operator as written (``<``, ``<=``, ``>``, ``>=``, ``=``).
        value: the number, or None for ``=off``.
        output: the tensor / graph output named before ``:``; None for every one.
        text: the item as written (stripped), for messages.
        fp16: the value carried the :data:`FP16_NOISE` suffix (MaxAbsoluteError only): the bound is judged per
            element, each allowed max(value, the FP16 rounding of its reference value).
    """

    metric: str
    op: str
    value: float | None
    output: str | None = None
    text: str = ""
    fp16: bool = False

    @property
    def off(self) -> bool:
        return self.value is None

    def required(self) -> tuple[str, float]:
        """The condition a passing value meets, ``(op, value)`` with op on the metric's good side:
        ``CosineSimilarity<0.999`` → (">=", 0.999), ``CosineSimilarity<=0.999`` → (">", 0.999),
        ``MaxAbsoluteError>1e-2`` → ("<=", 0.01), ``X=v`` → the inclusive bound (">=" or "<=", v)."""
        if self.off:
            raise ValueError(f"{self.text}: '=off' has no value")
        higher = higher_is_better(self.metric)
        if self.op == "=":
            return good_op(self.metric), self.value
        good_side = self.op.startswith(">") == higher
        inclusive = self.op.endswith("=")
        strict = not inclusive if good_side else inclusive
        return good_op(self.metric, strict), self.value

    @property
    def line(self) -> float:
        """The value of an inclusive bound equivalent to :meth:`required` (a passing value is >= it for a
        higher-is-better metric, <= it otherwise), i.e. the abnormal line of toolkit.compare.metrics (abnormal
        strictly beyond it): the value itself, or for a strict requirement the next double towards the good
        side, which is exactly equivalent on float64 values."""
        op, value = self.required()
        if len(op) == 2:
            return value
        return float(math.nextafter(value, math.inf if op == ">" else -math.inf))

    def holds(self, value) -> bool:
        """True when ``value`` meets :meth:`required` (NaN never does)."""
        try:
            v = float(value)
        except (TypeError, ValueError):
            return False
        if math.isnan(v):
            return False
        op, t = self.required()
        return {">=": v >= t, ">": v > t, "<=": v <= t, "<": v < t}[op]

    def canonical(self) -> str:
        """The requirement form, ``[OUTPUT:]METRIC(>=|>|<=|<)VALUE`` (value as repr of the float, every digit),
        or ``[OUTPUT:]METRIC=off``."""
        prefix = f"{self.output}:" if self.output else ""
        if self.off:
            return f"{prefix}{self.metric}=off"
        op, value = self.required()
        return f"{prefix}{self.metric}{op}{float(value)!r}{FP16_NOISE if self.fp16 else ''}"


def items(text: str | None) -> list[str]:
    """The comma-separated items of ``text``, stripped, empty ones dropped."""
    return [p.strip() for p in str(text or "").split(",") if p.strip()]


def metric_name(name: str, context: str, allowed=THRESHOLDABLE) -> str:
    """The canonical name of ``name`` (a metric of ``allowed`` or a short form of one). Raises UsageError
    naming ``context``: an informational metric (no line possible), or an unknown name with the closest valid
    spelling."""
    canonical = SHORT_FORMS.get(name, name)
    if canonical in METRICS and METRICS[canonical].direction == INFORMATIONAL:
        raise UsageError(f"{context}: {name} is informational and has no abnormal line; "
                         f"choose one of {', '.join(allowed)}")
    if canonical in allowed:
        return canonical
    raise UsageError(f"{context}: unknown metric '{name}'; {_did_you_mean(name, allowed)}valid names: "
                     f"{', '.join(allowed)} (short forms: {', '.join(SHORT_FORMS)})")


def closest_metric(name: str, allowed=THRESHOLDABLE) -> str | None:
    """The valid name closest to ``name`` (case-insensitive difflib over names and short forms), or None."""
    spellings = {n.lower(): n for n in allowed}
    spellings.update({s.lower(): c for s, c in SHORT_FORMS.items() if c in allowed})
    close = difflib.get_close_matches(name.lower(), list(spellings), n=1, cutoff=0.4)
    return spellings[close[0]] if close else None


def acronym_matches(name: str, allowed=THRESHOLDABLE) -> list[str]:
    """The names of ``allowed`` whose capitals spell ``name`` (case-insensitive): "MRE" → MaxRelativeError and
    MeanRelativeError, "MAE" → MaxAbsoluteError and MeanAbsoluteError; [] for a name that is not such an
    acronym."""
    if not name.isalpha() or len(name) < 2:
        return []
    return [n for n in allowed if "".join(c for c in n if c.isupper()).lower() == name.lower()]


def _did_you_mean(name: str, allowed) -> str:
    spelled = acronym_matches(name, allowed)  # an acronym of several names: all of them, not one look-alike
    if spelled:
        return "did you mean " + " or ".join(f"'{n}'" for n in spelled) + "? "
    close = closest_metric(name, allowed)
    return f"did you mean '{close}'? " if close else ""


def parse_conditions(text: str | None, label: str = "threshold", *, allowed=THRESHOLDABLE,
                     ranged: bool = True, fp16_ok: bool = False) -> list[Condition]:
    """Parse ``text`` (module docstring) into conditions, in order.

    Args:
        text: comma-separated items.
        label: how messages name an item: ``f"{label} '{item}'"`` ("threshold", "target", "tolerance", ...).
        allowed: the metric names accepted.
        ranged: check comparison values against :data:`RANGES` (off for callers that check ``=VALUE`` as
            something else than a metric value, e.g. regress's allowed change).
        fp16_ok: accept the :data:`FP16_NOISE` suffix on MaxAbsoluteError (tune's targets only).

    Raises:
        UsageError: one line per bad item, with a corrected item this function accepts; a ``text`` given but
            empty, an empty item (``a,,b``, a trailing comma); two items on the same metric of the same
            output (which one holds would depend on their order).
    """
    if text is not None and not str(text).strip():
        plural = label[:-1] + "ies" if label.endswith("y") else label + "s"
        raise UsageError(f"the {plural} are empty; give at least one condition, or leave the option out for the "
                         "defaults")
    raw = str(text or "").split(",")
    if text is not None and any(not r.strip() for r in raw):
        raise UsageError(f"{label}s '{text}': an empty item between commas; remove the extra comma")
    out, seen = [], {}
    for item in items(text):
        c = parse_item(item, label, allowed=allowed, ranged=ranged, fp16_ok=fp16_ok)
        key = (c.output, c.metric)
        if key in seen:
            whom = f"output '{c.output}'" if c.output else "every output"
            raise UsageError(f"{label} '{seen[key]}' and {label} '{item}' both set {c.metric} for {whom}; "
                             "keep one of them")
        seen[key] = item
        out.append(c)
    return out


def parse_item(item: str, label: str = "threshold", *, allowed=THRESHOLDABLE, ranged: bool = True,
               fp16_ok: bool = False) -> Condition:
    """One item of :func:`parse_conditions`."""
    context = f"{label} '{item}'"
    match = _ITEM.match(item)
    if not match:
        raise UsageError(f"{context}: expected NAME<VALUE (or <=, >, >=, =; VALUE a number, or off after =), "
                         f"optionally after OUTPUT:, e.g. '{_example_for(item, allowed)}'")
    output, name, op, raw = match.group("output"), match.group("metric"), match.group("op"), match.group("value")
    output = None if output in (None, "*") else output
    prefix = f"{output}:" if output else ""
    metric = _metric_or_hint(name, op, raw, prefix, context, allowed)
    if raw.lower() == "off":
        if op != "=":
            raise UsageError(f"{context}: 'off' goes with '='; write '{prefix}{metric}=off' to remove the line")
        return Condition(metric, op, None, output, item)
    fp16 = raw.lower().endswith(FP16_NOISE)
    if fp16:
        raw = raw[:-len(FP16_NOISE)]
        if not fp16_ok:
            raise UsageError(f"{context}: '{FP16_NOISE}' (element-wise allowance for FP16 rounding) applies only in "
                             f"tune's --target, not here, where the metric value itself is judged; write "
                             f"'{prefix}{metric}{op}{raw}'")
        if metric != "MaxAbsoluteError":
            raise UsageError(f"{context}: '{FP16_NOISE}' (element-wise allowance for FP16 rounding) applies only to "
                             f"MaxAbsoluteError, e.g. '{prefix}MaxAbsoluteError<=0.01{FP16_NOISE}'")
    # without ranges, '=VALUE' is the caller's own quantity (regress: an allowed change), not a metric value
    value = number(raw, context, f"{prefix}{metric}{op}", "1e-3" if not ranged and op == "=" else None)
    if ranged:
        in_range(metric, value, context, f"{prefix}{metric}{op}")
    return Condition(metric, op, value, output, item, fp16)


def _metric_or_hint(name: str, op: str, raw: str, prefix: str, context: str, allowed) -> str:
    """:func:`metric_name`, with the corrected whole item in the message of an unknown name."""
    try:
        return metric_name(name, context, allowed)
    except UsageError as exc:
        close = acronym_matches(name, allowed) or [c for c in [closest_metric(name, allowed)] if c]
        if not close or "informational" in str(exc):
            raise
        fixed = " or ".join(f"'{prefix}{c}{op}{_valid_value(c, op, raw)}'" for c in close)
        raise UsageError(f"{context}: unknown metric '{name}'; did you mean "
                         f"{' or '.join(repr(c) for c in close)}? (write {fixed}); valid names: "
                         f"{', '.join(allowed)}") from None


def _valid_value(metric: str, op: str, raw: str) -> str:
    """``raw`` when ``metric``, ``op`` and it make a valid item, else an example value (so a corrected item
    always parses)."""
    if raw.lower() == "off":
        return raw if op == "=" else example_value(metric)
    lo, hi = RANGES.get(metric, (0.0, math.inf))
    return raw if _is_number(raw) and lo <= float(raw) <= hi else example_value(metric)


def _example_for(item: str, allowed) -> str:
    """A corrected example for a malformed item: ``CosineSimilarity 0.9`` → ``CosineSimilarity>=0.9``."""
    spaced = _SPACED.match(item)
    if spaced:
        name = SHORT_FORMS.get(spaced.group("metric"), spaced.group("metric"))
        name = name if name in allowed else closest_metric(name, allowed)
        value = spaced.group("value")
        if name and _is_number(value):
            prefix = f"{spaced.group('output')}:" if spaced.group("output") not in (None, "*") else ""
            return f"{prefix}{name}{good_op(name)}{value}"
    name = SHORT_FORMS.get(item.strip(), item.strip())
    if name in allowed:
        return f"{name}{good_op(name)}{example_value(name)}"
    return "CosineSimilarity>=0.999"


def _is_number(raw: str) -> bool:
    try:
        return not math.isnan(float(raw))
    except ValueError:
        return False


def number(raw, context: str, head: str = "", example_raw: str | None = None) -> float:
    """``raw`` as a float; UsageError for text that is not a number and for NaN (``head``: the item up to the
    value, for the corrected example; ``example_raw``: the example's value, default a line value of the metric)."""
    example = f"'{head}{example_raw or example_value(_metric_of(head))}'" if head else "0.99 or 1e-2"
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise UsageError(f"{context}: '{raw}' is not a number; write e.g. {example}") from None
    if math.isnan(value):
        off = f", or '{head.rstrip('<>=')}=off' for no line" if head else ""
        raise UsageError(f"{context}: NaN cannot be a line; write a number, e.g. {example}{off}")
    return value


def _metric_of(head: str) -> str:
    name = re.sub(r"[<>=]+$", "", head).rsplit(":", 1)[-1]
    return name if name in METRICS else "CosineSimilarity"


def in_range(metric: str, value: float, context: str, head: str = "") -> float:
    """``value`` when it lies in ``metric``'s range (:data:`RANGES`); else UsageError with an example in range."""
    lo, hi = RANGES.get(metric, (0.0, math.inf))
    if not lo <= value <= hi:
        example = f", e.g. '{head}{example_value(metric)}'" if head else ""
        raise UsageError(f"{context}: {metric} takes values in [{lo:g}, {hi:g}], so a line at {value:g} can never "
                         f"(or always) be crossed; choose a value in range{example}")
    return value


def shorthand_items(option: str, values) -> list[str]:
    """The grammar items an ``--atol`` / ``--rtol`` option stands for: each value ``[OUTPUT:]NUMBER`` (several
    per value with commas, the option repeatable) → ``[OUTPUT:]MaxAbsoluteError<=NUMBER`` (``--rtol``:
    MaxRelativeError). Raises UsageError naming the option for a value that is not a number >= 0."""
    metric = SHORTHANDS[option]
    out = []
    for value in ([values] if isinstance(values, str) else list(values or ())):
        if not items(value):
            raise UsageError(f"{option} {value!r} names no bound; give [OUTPUT:]VALUE with VALUE a number >= 0, "
                             f"e.g. {option} 1e-3, or leave {option} out")
        for part in items(value):
            output, sep, raw = part.rpartition(":")
            head = f"{output.strip()}:" if sep and output.strip() not in ("", "*") else ""
            try:
                v = float(raw)
            except ValueError:
                v = math.nan
            if not (v >= 0 and math.isfinite(v)) or (sep and not output.strip()):
                raise UsageError(f"{option} '{part}': expected [OUTPUT:]VALUE with VALUE a number >= 0 (a bound on "
                                 f"{metric}), e.g. {option} 1e-3 or {option} logits:1e-3")
            out.append(f"{head}{metric}<={raw.strip()}")
    return out


def with_shorthands(text: str | None, atol=(), rtol=(), default: bool = False) -> str | None:
    """``text`` with the items of ``--atol`` / ``--rtol`` appended; ``text`` unchanged (None stays None) when
    neither is given. ``default``: ``text`` is a default (not the user's), whose items on a metric and output a
    shorthand sets are dropped: the shorthand replaces them. A user's item on the same metric and output as a
    shorthand is a conflict that :func:`parse_conditions` refuses."""
    extra = shorthand_items("--atol", atol) + shorthand_items("--rtol", rtol)
    if not extra:
        return text
    if default:
        return overridden(text, ",".join(extra))
    return ",".join(items(text) + extra)


def overridden(base: str | None, over: str | None) -> str | None:
    """The items of ``base`` (valid items: a default, a policy's lines) whose metric and output ``over`` does
    not set, then ``over``'s items: ``over`` replaces ``base`` line by line. None when both are empty."""
    if not items(over):
        return base if items(base) else None
    keys = {_line_key(i) for i in items(over)}
    kept = [i for i in items(base) if _line_key(i) not in keys]
    return ",".join(kept + items(over))


def _line_key(item: str) -> tuple[str | None, str]:
    """(output or None, canonical metric) of a valid item: what two items must not share."""
    c = parse_item(item, fp16_ok=True)
    return c.output, c.metric


def named_outputs(conditions) -> list[str]:
    """The OUTPUT prefixes used in ``conditions``, in first-seen order."""
    return list(dict.fromkeys(c.output for c in conditions if c.output))


def check_names(conditions, names, label: str, what: str = "tensor") -> None:
    """Refuse a condition whose OUTPUT is not in ``names`` (the model's tensors or graph outputs), naming the
    closest one. Raises UsageError."""
    known = set(names)
    for c in conditions:
        if c.output and c.output not in known:
            close = difflib.get_close_matches(c.output, list(names), n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}' ('{close[0]}:{c.text.rsplit(':', 1)[-1]}')? " if close else ""
            shown = ", ".join(list(names)[:6]) + (", ..." if len(names) > 6 else "")
            raise UsageError(f"{label} '{c.text}': the model has no {what} '{c.output}'; {hint}"
                             f"{what}s: {shown}; or drop the '{c.output}:' prefix to apply it to every {what}")
