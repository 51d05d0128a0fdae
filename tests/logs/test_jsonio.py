"""The JSON number helper (toolkit/logs/jsonio.py) refuses non-finite and huge values."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _restore_logger():
    logger = logging.getLogger("npuscope")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    for h in list(logger.handlers):
        if getattr(h, "_npuscope", False):
            logger.removeHandler(h)
            h.close()
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def test_number_helper_rejects_non_finite_and_huge_values():
    from toolkit.logs.jsonio import number
    from toolkit.logs.numbers import MAX_ABS

    assert number(3) == 3.0 and number("2.5") == 2.5 and number(-MAX_ABS) == -MAX_ABS
    for v in (float("inf"), float("-inf"), float("nan"), "1e309", "NaN", "Infinity", 10 ** 400, 1e19, True, None):
        assert number(v) is None, v
