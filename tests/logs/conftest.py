"""Settings of the logs tests: every test leaves the npuscope logger as it found it (the tests install plog's
handlers and levels)."""

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

