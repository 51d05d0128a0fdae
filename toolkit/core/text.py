"""Plain text for the terminal: summaries printed by the CLI (compile summary), the escaping of untrusted
text (:func:`printable`) and the number formats of messages (:func:`show`, :func:`show_crossed`, and
:func:`show_vs` / :func:`show_line` for a value printed next to its line or limit, :func:`show_pair` for two
measured values printed side by side)."""

from __future__ import annotations

import difflib
import math
import re
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal

#: Code points :func:`printable` escapes: C0 controls and DEL (U+0000-U+001F, U+007F: ESC starts ANSI/OSC
#: sequences, BEL ends OSC, CR/LF/backspace rewrite lines), C1 controls (U+0080-U+009F: CSI/OSC in one byte),
#: the line and paragraph separators (U+2028, U+2029), the Unicode bidirectional controls (U+061C, U+200E,
#: U+200F, U+202A-U+202E, U+2066-U+2069: "Trojan Source", CVE-2021-42574) and lone surrogates
#: (U+D800-U+DFFF: undecodable file-name bytes, which no terminal encoding can print; those of
#: :func:`escape_surrogates`' byte range read as that byte, ``\\xff``).
_UNPRINTABLE = ([*range(0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F),
                 *range(0x2066, 0x206A), *range(0xD800, 0xE000)])
_ESCAPES = {c: (f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}") for c in _UNPRINTABLE}
_ESCAPES.update({c: f"\\x{c - 0xDC00:02x}" for c in range(0xDC80, 0xDD00)})
_ESCAPES.update({ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})


def printable(text) -> str:
    """``text`` (``str(text)`` for other objects) safe to write to a terminal or a plain-text file: every
    character of :data:`_UNPRINTABLE` — controls (LF and CR included), bidirectional overrides, separators —
    becomes a visible Python-style escape (``\\x1b``, ``\\x07``, ``\\r``, ``\\n``, ``\\t``, ``\\u202e``), so names
    read from an untrusted model can neither send terminal escape sequences (colours, window title, OSC 52
    clipboard, OSC 8 links), nor forge or erase lines, nor reorder what is displayed; a lone surrogate (a file
    name byte that is not UTF-8) reads as :func:`escape_surrogates` writes it (``\\xff``). Everything else,
    backslashes and non-ASCII letters included, is kept. One line in, one line out."""
    return str(text).translate(_ESCAPES)


#: A lone surrogate: how Python carries bytes that are not UTF-8 in a str (os.fsdecode, os.listdir, sys.argv:
#: the ``surrogateescape`` error handler maps byte 0xNN to U+DCNN), which no UTF-8 file can hold.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_escape(match: re.Match) -> str:
    c = ord(match.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def escape_surrogates(text: str) -> str:
    """``text`` with every lone surrogate written as a visible escape, so that it can be encoded as UTF-8 (a JSON,
    CSV, HTML or log file; UTF-8 has no form for a surrogate and ``str.encode`` raises UnicodeEncodeError):
    U+DC80-U+DCFF, the form of an undecodable byte 0xNN of a file name (``os.fsdecode``, surrogateescape),
    becomes ``\\xNN`` — a file name reads as ``os.fsencode(name).decode("utf-8", "backslashreplace")`` shows
    it: ``b"\\xff\\xfe.npz"`` as ``\\xff\\xfe.npz`` — and any other as ``\\udNNN``. Everything else is kept;
    text without a surrogate is returned as it is (ASCII text is not even scanned). Never raises."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(_surrogate_escape, text)


def show(value, *limits, digits: int = 6) -> str:
    """``value`` with ``digits`` significant digits (nearest), or more (up to 17, then exact) until the text
    reads like the value against each of ``limits`` and against ±1 (:func:`_reads_right`): on the same side of
    each (below, equal, above) and about as far from it (within a factor of 2). A cosine of 0.9999999999999998
    prints so, not "1" nor "0.999999"; a latency of 0.2000004 ms over a 0.2 ms budget does not read "0.2". The
    limits are compared exactly, as :func:`show_line` prints them; print a value next to its line with
    :func:`show_vs`. NaN / inf as 'nan' / 'inf'; None as 'none'. The rule of toolkit.report.context.fmt,
    extended to the limits a message prints."""
    if value is None:
        return "none"
    f = float(value) + 0.0  # -0.0 prints as 0
    if not math.isfinite(f):
        return str(f)
    marks = _marks(limits)
    for d in range(digits, 18):
        text = f"{f:.{d}g}"
        if _reads_right(float(text), f, marks):
            return text
    return repr(f)


def show_line(line, digits: int = 6) -> str:
    """A line or limit (a threshold, a policy limit, a budget) as written: ``digits`` significant digits, or more
    until the text reads back as exactly ``line`` (0.9999999749 prints "0.9999999749", never "0.99999997";
    0.99 prints "0.99"; 65504 prints "65504"). NaN / inf as 'nan' / 'inf'; None as 'none'; -0.0 as '0' (so
    do :func:`show`, :func:`show_pair` and :func:`show_crossed`)."""
    if line is None:
        return "none"
    f = float(line) + 0.0  # -0.0 (a limit written -0.0) prints as 0, not -0
    if not math.isfinite(f):
        return str(f)
    for d in range(digits, 18):
        text = f"{f:.{d}g}"
        if float(text) == f:
            return text
    return repr(f)


def show_vs(value, line, *, digits: int = 6) -> tuple[str, str]:
    """``(value text, line text)`` for a message that prints a measured value next to the line it is judged by
    ("worst 0.99999997488 (needs >= 0.9999999749)", "CosineSimilarity 0.98999999 < 0.99"). The line is exact
    (:func:`show_line`); the value has ``digits`` significant digits or as many more as it takes to compare with
    the printed line as the value compares with the line, and to read right next to ±1 (:func:`show`). So the two
    texts never contradict the verdict: equal only when the numbers are equal. The one formatting function for a
    value next to its limit (signoff criteria, compare/diagnose verdict reasons, tune)."""
    return show(value, line, digits=digits), show_line(line, digits=digits)


def show_pair(a, b, *, digits: int = 6) -> tuple[str, str]:
    """``(a text, b text)`` for two measured values printed side by side ("baseline 0.12345649 -> new 0.12345651"):
    both with the same number of significant digits, ``digits`` or as many more as it takes for the two texts
    to compare as the numbers do (equal texts only for equal numbers, the smaller number's text the smaller),
    for each text to read like its number against the other number (:func:`_reads_right`: on the same side of
    it and about as far from it) and against ±1 (never "1" unless it is 1). Formatting each value against the
    other separately (:func:`show`) can print two different numbers alike: 0.12345649 and 0.12345651 both
    read "0.1234565" so. Non-finite values and None print as :func:`show` prints them (the other value then
    with :func:`show` too); NaN never prints like a number."""
    fa, fb = _finite_or_none(a), _finite_or_none(b)
    if fa is None or fb is None:
        return show(a, digits=digits), show(b, digits=digits)
    for d in range(digits, 18):
        ta, tb = _g(fa, d), _g(fb, d)
        sa, sb = float(ta), float(tb)
        if _side(sa, sb) == _side(fa, fb) and _reads_right(sa, fa, [fb]) and _reads_right(sb, fb, [fa]):
            return ta, tb
    return repr(fa), repr(fb)


def _g(f: float, d: int) -> str:
    """``f`` with ``d`` significant digits, or its shortest exact form (``repr``, without a trailing ".0") when
    ``d`` digits already read back as exactly ``f`` (0.3 at 17 digits prints "0.3", not "0.29999999999999999")."""
    text = f"{f:.{d}g}"
    if float(text) != f:
        return text
    exact = repr(f)
    return exact.removesuffix(".0")


def _finite_or_none(value) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f + 0.0 if math.isfinite(f) else None  # -0.0 prints as 0


def show_crossed(value, below: bool, *limits, digits: int = 6) -> str:
    """A metric value that crossed an abnormal line, as text that reads as crossing it: ``value`` rounded to
    ``digits`` significant digits *away from the line* — down when the metric is abnormal below its line
    (``below``: CosineSimilarity), up when abnormal above it (errors, |x| over the FP16 max) — so the printed
    number lies beyond every line the value crossed, known or not (lines are strict: a value equal to the line
    does not cross it), and never reads as the line itself. The rounding starts from the shortest decimal
    that reads back as ``value`` (``repr``: 0.95 stays "0.95"); a shorter text rounded from it reads back as
    ``value`` itself or lies beyond it, since a decimal between the two would be a shorter round-trip form.
    More digits (up to 15, then the exact shortest round-trip form) until the text reads like the value against
    ``limits`` (compared as :func:`show_line` prints them) and ±1 (:func:`_reads_right`): 0.9999999364 below the
    line 0.99999999 prints "0.9999999", never "1" nor "0.999999" (which would claim 1 − 1e-6);
    0.9999999999999998 prints so; |x| = 65504.3 over the FP16 max 65504 prints "65504.3", not "6.551e+04".
    NaN / inf as 'nan' / 'inf'; None as 'none'."""
    if value is None:
        return "none"
    f = float(value) + 0.0  # -0.0 prints as 0
    if not math.isfinite(f):
        return str(f)
    marks = _marks(limits)
    rounding = ROUND_FLOOR if below else ROUND_CEILING
    for d in range(digits, 16):
        text = f"{float(Context(prec=d, rounding=rounding).plus(Decimal(repr(f)))):.{d}g}"
        if _reads_right(float(text), f, marks):
            return text
    return repr(f)


#: Values a printed number is read against besides its limits: a cosine (or a share) near ±1 is read as its
#: distance from ±1, as a value next to its limit is read as its distance from it.
_ANCHORS = (1.0, -1.0)


def _marks(limits) -> list[float]:
    """The finite limits (None / NaN dropped) a number is compared with."""
    out = []
    for lim in limits:
        try:
            v = float(lim)
        except (TypeError, ValueError):
            continue
        if not math.isnan(v):
            out.append(v)
    return out


def _side(a: float, b: float) -> int:
    return (a > b) - (a < b)


def _reads_right(shown: float, f: float, limits: list[float]) -> bool:
    """True when the printed number ``shown`` stands for ``f`` next to each limit and ±1: on the same side as
    ``f`` (below, equal, above) and no more than twice as far from it as ``f`` is (0.9999999748911 under the
    limit 0.9999999749 prints "0.99999997489", not "0.99999997", which would claim a miss 4000 times larger)."""
    return all(_side(shown, m) == _side(f, m) and abs(shown - m) <= 2.0 * abs(f - m) for m in (*limits, *_ANCHORS))


def join_present(*parts, sep: str = ", ") -> str:
    """The non-empty ``parts`` (as text) joined with ``sep``: a message never shows an empty field as
    "(, tensor s)" when a part, such as the op type of a dump read without its model, is unknown."""
    return sep.join(str(p) for p in parts if p is not None and str(p) != "")


def shape_text(shape) -> str:
    """A tensor shape as the result tables write it: ``(1, 3, 8)`` → ``"1x3x8"``, a 0-d shape → ``"scalar"``."""
    return "x".join(str(d) for d in shape) or "scalar"


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def compile_summary(compiled) -> list[str]:
    """Lines: passes (ops before/after), fusions, precision counts, memory plan vs lower bound, findings."""
    plan = compiled.plan
    lines = [f"compiled in {compiled.compile_ms:.0f} ms"]
    for p in compiled.passes:
        state = f"{p.changed:>4} change(s)" if p.ran else f"skipped: {p.reason}"
        lines.append(f"  {p.name:<17} ops {p.ops_before:>5} -> {p.ops_after:<5} {state}")
    fused = [k for k in plan.kernels if len(k.nodes) > 1]
    by_rule: dict[str, int] = {}
    for k in fused:
        by_rule[k.rule or "?"] = by_rule.get(k.rule or "?", 0) + 1
    lines.append(f"kernels: {len(plan.kernels)} ({len(fused)} fused: "
                 + (", ".join(f"{r} x{n}" for r, n in sorted(by_rule.items())) or "none") + ")")
    counts = plan.precision_counts()
    lines.append(f"precision ({plan.config.get('precision_mode')}): {counts.get('fp16', 0)} FP16, "
                 f"{counts.get('fp32', 0)} FP32 kernels, {counts.get('cast', 0)} Casts")
    place = plan.placement_counts()
    lines.append(f"placement: {place['NPU']} NPU, {place['CPU']} CPU kernels; copies: {place['MemcpyH2D']} "
                 f"MemcpyH2D, {place['MemcpyD2H']} MemcpyD2H")
    ratio = plan.arena_bytes / plan.lower_bound_bytes if plan.lower_bound_bytes else 1.0
    lines.append(f"memory: arena {human_bytes(plan.arena_bytes)} vs lower bound "
                 f"{human_bytes(plan.lower_bound_bytes)} ({ratio:.3f}x)")
    dyn = [t.name for t in plan.tensors.values() if t.storage != "arena"]
    if dyn:
        lines.append(f"  {len(dyn)} tensor(s) outside the arena (data-dependent shape, host memory or non-tensor)")
    for f in compiled.findings:
        lines.append(f"{f.severity.upper()}: {f.kind} '{f.subject}': {f.recommendation}")
    return lines


#: At most this many valid names are listed when no close match exists (e.g. ~200 ONNX op types).
SUGGEST_MAX_NAMES = 10


def suggest(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest of ``choices`` (difflib ratio >= 0.5; a case-insensitive
    equal name first), else ' (valid: a, b, ...)' with at most :data:`SUGGEST_MAX_NAMES` names sorted, then
    '... (N more)'."""
    names = [str(c) for c in choices]
    same_case = [n for n in names if n.lower() == str(word).lower()]
    close = same_case[:1] or difflib.get_close_matches(str(word), names, n=1, cutoff=0.5)
    if close:
        return f" (did you mean '{close[0]}'?)"
    shown = sorted(names)
    more = len(shown) - SUGGEST_MAX_NAMES
    if more > 0:
        return f" (valid: {', '.join(shown[:SUGGEST_MAX_NAMES])}, ... ({more} more))"
    return f" (valid: {', '.join(shown)})"
