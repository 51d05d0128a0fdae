"""Format detection (toolkit/logs/detect.py) of empty, binary and unknown files."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from toolkit.logs.detect import detect_format


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


# ------------------------------------------------------------------------------------------ detection faults
def test_detection_of_empty_binary_and_unknown_files(tmp_path):
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "blank.log").write_text("\n \n")
    (tmp_path / "blob.bin").write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)))
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    (tmp_path / "other.json").write_text(json.dumps({"a": 1}))
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    reasons = {p.name: detect_format(p).reason for p in tmp_path.iterdir()}
    assert reasons == {"empty.log": "empty", "blank.log": "empty", "blob.bin": "binary", "notes.txt": "unknown format",
                       "other.json": "unknown format", "other.csv": "unknown format"}
    assert detect_format(tmp_path / "missing.log").reason == "not found"
    assert detect_format(tmp_path).reason == "not a file"
