"""Console text (toolkit/core/text.py): escaping untrusted names, printing values so they never read as the
line they cross, minus zero, joined parts, and the compile summary."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tests.graphs import N, make_model
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.core.text import compile_summary, escape_surrogates, printable, show, show_crossed, show_line, show_vs

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


BIDI_CHARS = set(BIDI) | {"\u061c", "\u200e", "\u200f", "\u2028", "\u2029"}


def _bad_chars(text: str) -> list[str]:
    """Characters that must not reach a terminal: C0 controls but LF, DEL and C1, bidi controls, separators."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F or c in BIDI_CHARS]


def test_printable_escapes_every_dangerous_character_and_keeps_the_rest():
    dangerous = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]] + sorted(BIDI_CHARS)
    for ch in dangerous:
        out = printable(f"a{ch}b")
        assert not _bad_chars(out) and out.startswith("a") and out.endswith("b") and len(out) > 3, repr(ch)
    assert printable("\x1b[31m") == r"\x1b[31m"
    assert printable("\u202e") == r"\u202e"
    assert printable("a\nb\rc\td") == r"a\nb\rc\td"
    assert printable("\udcff") == r"\xff"  # an undecodable file-name byte (surrogateescape): that byte
    assert printable("\ud800") == r"\ud800"  # any other lone surrogate
    kept = "relu_1/conv.weight:0 ноде 名前 é ü → C:\\path\\x"
    assert printable(kept) == kept
    assert printable(3.5) == "3.5"


def test_escape_surrogates_shows_a_file_names_bytes_as_backslashreplace_does():
    """Kind: a file name whose bytes are not UTF-8 (legal on Linux), which os.fsdecode gives as lone surrogates:
    escaped the way os.fsencode(name).decode("utf-8", "backslashreplace") shows it, so it encodes as UTF-8."""
    for raw in (b"\xff\xfe.npz", b"nu/\xff\xfe.npz", b"caf\xe9 \xc3\xa9.onnx", b"a\x80b", b"\xed\xa0\x80"):
        name = os.fsdecode(raw)
        out = escape_surrogates(name)
        assert out == raw.decode("utf-8", "backslashreplace"), raw
        out.encode("utf-8")  # never raises
        assert printable(name) == out
    assert escape_surrogates("a\ud800b") == r"a\ud800b" and escape_surrogates("a\udc00") == r"a\udc00"
    kept = "relu ноде 名前 é → C:\\x"
    assert escape_surrogates(kept) is kept and escape_surrogates("plain") == "plain"


def test_show_crossed_lies_beyond_the_line_and_never_reads_one():
    rng = np.random.default_rng(3)
    values = np.concatenate([1 - 10.0 ** rng.uniform(-16, -1, 300), rng.uniform(-1, 1, 100), [0.95, 0.1 + 0.2]])
    for v in values:
        v = float(v)
        line = float(f"{v:.10g}")
        text = show_crossed(v, True, *((line,) if v < line else ()))
        assert text != "1" and float(text) <= v, (v, text)  # rounded down: below every line above v
        if v < line:
            assert text != f"{line:g}" and float(text) < line
        up = show_crossed(-v, False)
        assert up != "-1" and float(up) >= -v, (v, up)
        assert abs(float(text) - v) <= 1e-5 * max(abs(v), 1e-300) or float(text) == v
    assert show_crossed(0.95, True) == "0.95" and show_crossed(0.9999999364, True) == "0.9999999"
    assert show_crossed(65504.3, False, 65504, digits=4) == "65504.3"
    assert show_crossed(0.99999996, False) == "0.99999996"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_show_pair_never_prints_two_numbers_alike():
    from toolkit.core.text import show, show_pair

    assert show(0.12345649, 0.12345651) == show(0.12345651, 0.12345649)  # the defect: each against the other
    rng = np.random.default_rng(0)
    base = rng.uniform(-2, 2, 400)
    pairs = [(a, np.nextafter(a, np.inf)) for a in base[:100]]
    pairs += [(a, a * (1 + s)) for a, s in zip(base[100:], rng.choice([1e-7, 1e-8, 1e-9, 2e-16, 1e-3], 300))]
    pairs += [(0.12345649, 0.12345651), (1.0, 0.9999999999999998), (0.3, 0.1 + 0.2), (2.0, 2.0)]
    for a, b in pairs:
        ta, tb = show_pair(a, b)
        assert (ta == tb) == (a == b), (a, b, ta, tb)
        assert np.sign(float(ta) - float(tb)) == np.sign(a - b), (a, b, ta, tb)
        assert (float(ta) == 1.0) == (a == 1.0) and (float(tb) == 1.0) == (b == 1.0)
    assert show_pair(0.3, 0.1 + 0.2) == ("0.3", "0.30000000000000004")
    assert show_pair(float("nan"), 0.5) == ("nan", "0.5")


def _near(line: float) -> list[float]:
    out = [line]
    v = lo = hi = line
    for _ in range(3):
        lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
        out += [lo, hi]
    for j in range(1, 16):
        out += [line * (1 + 10.0 ** -j), line * (1 - 10.0 ** -j), line + 10.0 ** -j, line - 10.0 ** -j]
    return [x for x in out if math.isfinite(x)] + [v * 0.5]


LIMITS = [0.99, 0.9999999749, 0.99999999, 1.0, 0.0059595, 1e-3, 0.0, 5.0, 65504.0, 1 / 3, 2e-9, 0.6667, 123456.789,
          -0.5]


@pytest.mark.parametrize("digits", [3, 4, 5, 6])
@pytest.mark.parametrize("line", LIMITS)
def test_value_and_limit_texts_compare_as_the_numbers_do(line, digits):
    for v in _near(line):
        tv, tl = show_vs(v, line, digits=digits)
        assert float(tl) == line, (line, tl)  # the limit exactly as written
        fv = float(tv)
        assert (fv > line) - (fv < line) == (v > line) - (v < line), (v, line, tv, tl)  # same side
        assert (tv == tl) == (v == line), (v, line, tv, tl)
        assert abs(fv - line) <= 2 * abs(v - line), (v, line, tv)  # not farther (no false "far miss")
        if v != 1.0:
            assert fv != 1.0 and (fv > 1) == (v > 1), (v, tv)


def test_limits_print_as_written():
    for text in ("0.99", "0.9999999749", "0.0059595", "0.001", "65504", "5", "1e-09", "123456.789", "100000"):
        assert show_line(float(text)) == text
    assert show_line(None) == "none" and show_line(float("inf")) == "inf"


def test_crossed_values_read_as_crossing_and_keep_their_distance_from_one():
    rng = np.random.default_rng(8)
    for v in np.concatenate([1 - 10.0 ** rng.uniform(-16, -1, 300), [0.9999999999999998, 0.9999999364]]):
        v = float(v)
        text = show_crossed(v, True)
        assert float(text) <= v and 1 - float(text) <= 2 * (1 - v), (v, text)
        w = 2 - v  # an error just above 1
        up = show_crossed(w, False)
        assert float(up) >= w and float(up) - 1 <= 2 * (w - 1), (w, up)
    assert show_crossed(0.9999999999999998, True) == "0.9999999999999998"
    assert show(0.9999999999999998) == "0.9999999999999998"


def test_minus_zero_prints_as_zero():
    from toolkit.core.text import show, show_crossed, show_line, show_pair, show_vs
    from toolkit.report.context import fmt

    assert show_line(-0.0) == "0" and show(-0.0) == "0" and fmt(-0.0) == "0"
    assert show_vs(0.5, -0.0) == ("0.5", "0") and show_pair(-0.0, 1.0)[0] == "0"
    assert show_crossed(-0.0, False) == "0"
    assert show_line(-1e-300) == "-1e-300"  # a real negative keeps its sign


def test_join_present_leaves_out_empty_parts():
    from toolkit.core.text import join_present

    assert join_present("", "tensor s", None, "device op add") == "tensor s, device op add"
    assert join_present("Add", "tensor s") == "Add, tensor s"
    assert join_present("", None) == ""


R = np.random.default_rng(11)
W = (R.standard_normal((16, 16)) * 0.3).astype(np.float32)


def mlp():
    """mm (MatMul, FP16) -> tanh -> mm2 (MatMul, FP16) -> tanh2 -> y."""
    return make_model([N("MatMul", ["x", "W"], ["a"], "mm"), N("Tanh", ["a"], ["t"], "tanh"),
                       N("MatMul", ["t", "W"], ["b"], "mm2"), N("Tanh", ["b"], ["y"], "tanh2")],
                      [("x", [4, 16])], ["y"], {"W": W})


def test_compile_summary_and_log_state_placement():
    res = compile_model(mlp(), Config(op_placement={"tanh": "CPU"}))
    assert "placement: 5 NPU, 1 CPU kernels; copies: 1 MemcpyH2D, 1 MemcpyD2H" in compile_summary(res)
    lines = res.log_lines()
    assert any(ln.startswith("[place_ops]") for ln in lines) and any(ln.startswith("[insert_copies]") for ln in lines)
    assert any("MemcpyH2D t -> t::h2d" in ln for ln in lines)


@pytest.mark.parametrize("shape", [(), (1,), (2, 3), (1, 3, 224, 224), (0, 4)])
def test_shape_text_writes_every_dim_and_names_a_0d_shape(shape):
    from toolkit.core.text import shape_text

    got = shape_text(shape)
    assert got == ("scalar" if not shape else "x".join(map(str, shape)))
    assert got == "scalar" or tuple(int(d) for d in got.split("x")) == shape
