"""Format detection (toolkit/logs/detect.py) of empty, binary and unknown files."""

from __future__ import annotations

import json

import numpy as np

from toolkit.logs.detect import detect_format


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
