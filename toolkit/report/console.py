"""Plain text for the terminal: summaries printed by the CLI (compile summary), the escaping of untrusted
text (:func:`printable`) and the number formats of messages (:func:`show`, :func:`show_crossed`)."""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal

#: Code points :func:`printable` escapes: C0 controls and DEL (U+0000-U+001F, U+007F: ESC starts ANSI/OSC
#: sequences, BEL ends OSC, CR/LF/backspace rewrite lines), C1 controls (U+0080-U+009F: CSI/OSC in one byte),
#: the line and paragraph separators (U+2028, U+2029), the Unicode bidirectional controls (U+061C, U+200E,
#: U+200F, U+202A-U+202E, U+2066-U+2069: "Trojan Source", CVE-2021-42574) and lone surrogates
#: (U+D800-U+DFFF: undecodable file-name bytes, which no terminal encoding can print).
_UNPRINTABLE = ([*range(0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F),
                 *range(0x2066, 0x206A), *range(0xD800, 0xE000)])
_ESCAPES = {c: (f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}") for c in _UNPRINTABLE}
_ESCAPES.update({ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})


def printable(text) -> str:
    """``text`` (``str(text)`` for other objects) safe to write to a terminal or a plain-text file: every
    character of :data:`_UNPRINTABLE` — controls (LF and CR included), bidirectional overrides, separators —
    becomes a visible Python-style escape (``\\x1b``, ``\\x07``, ``\\r``, ``\\n``, ``\\t``, ``\\u202e``), so names
    read from an untrusted model can neither send terminal escape sequences (colours, window title, OSC 52
    clipboard, OSC 8 links), nor forge or erase lines, nor reorder what is displayed. Everything else,
    backslashes and non-ASCII letters included, is kept. One line in, one line out."""
    return str(text).translate(_ESCAPES)


def show(value, *limits, digits: int = 6) -> str:
    """``value`` with ``digits`` significant digits, or more (up to 17) when that would print it as ±1 or as one of
    ``limits`` (as ``show(limit)`` prints it) although it differs: a cosine of 0.9999998 is not 1, and a
    latency of 0.2000004 ms over a 0.2 ms budget must not read "0.2". The rule of toolkit.report.context.fmt,
    extended to the limits a message prints. NaN / inf as 'nan' / 'inf'; None as 'none'."""
    if value is None:
        return "none"
    f = float(value)
    if not math.isfinite(f):
        return str(f)
    avoid = _avoid(limits)
    text = f"{f:.{digits}g}"
    for d in range(digits, 18):
        text = f"{f:.{d}g}"
        if not any(text == t and f != v for t, v in avoid):
            break
    return text


def show_crossed(value, below: bool, *limits, digits: int = 6) -> str:
    """A metric value that crossed an abnormal line, as text that reads as crossing it: ``value`` rounded to
    ``digits`` significant digits *away from the line* — down when the metric is abnormal below its line
    (``below``: CosineSimilarity), up when abnormal above it (errors, |x| over the FP16 max) — so the printed
    number lies beyond every line the value crossed, known or not (lines are strict: a value equal to the line
    does not cross it), and never reads as the line itself. The rounding starts from the shortest decimal
    that reads back as ``value`` (``repr``: 0.95 stays "0.95"); a shorter text rounded from it reads back as
    ``value`` itself or lies beyond it, since a decimal between the two would be a shorter round-trip form.
    More digits (up to 15, then the exact shortest round-trip form) when the text would read ±1 or one of
    ``limits`` (as :func:`show` prints them) although the value differs. Example: 0.9999999364 below the line 0.99999999 prints "0.999999", never "1".
    NaN / inf as 'nan' / 'inf'; None as 'none'."""
    if value is None:
        return "none"
    f = float(value)
    if not math.isfinite(f):
        return str(f)
    avoid = _avoid(limits)
    rounding = ROUND_FLOOR if below else ROUND_CEILING
    for d in range(digits, 16):
        text = f"{float(Context(prec=d, rounding=rounding).plus(Decimal(repr(f)))):.{d}g}"
        if not any(text == t and f != v for t, v in avoid):
            return text
    return repr(f)


def _avoid(limits) -> set[tuple[str, float]]:
    """(text, value) pairs a number must not print as unless it equals the value: ±1 and each limit."""
    return {(t, float(t)) for t in ("1", "-1")} | {(show(lim), float(lim)) for lim in limits}


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
