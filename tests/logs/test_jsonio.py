"""The JSON number helper (toolkit/logs/jsonio.py) refuses non-finite and huge values."""

from __future__ import annotations


def test_number_helper_rejects_non_finite_and_huge_values():
    from toolkit.logs.jsonio import number
    from toolkit.logs.numbers import MAX_ABS

    assert number(3) == 3.0 and number("2.5") == 2.5 and number(-MAX_ABS) == -MAX_ABS
    for v in (float("inf"), float("-inf"), float("nan"), "1e309", "NaN", "Infinity", 10 ** 400, 1e19, True, None):
        assert number(v) is None, v
