"""Dump folders (toolkit/dumps/readers.py): legacy void dumps restored, and special entries in a folder."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from tests.core.special_files import TIMEOUT, SAID, make_special, run, py


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_legacy_void_dumps_are_restored(tmp_path):
    """Older npuscope wrote ml_dtypes arrays as raw |V2 / |V1 bytes: the recorded dtype restores them."""
    from toolkit.dumps.readers import SideSpec, read_side

    bf = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    np.save(tmp_path / "t.npy", bf)  # numpy writes '|V2'
    (tmp_path / "index.json").write_text(json.dumps({"t.npy": {"tensor": "t", "kernel": "k", "dtype": "bfloat16"}}))
    back = read_side(SideSpec(str(tmp_path), "golden")).entries[0].load()
    assert back.dtype == bf.dtype and back.tobytes() == bf.tobytes()


KINDS = ["fifo", "devzero", "socket", "broken"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("kind", KINDS)
def test_device_folder_member_is_a_row_when_named_like_a_dump_and_ignored_otherwise(tmp_path, kind):
    """Node-keyed (ONNX golden naming) folders: a special entry named like a dump becomes an unreadable row; one
    named like nothing is counted in ignored_files, never silently dropped."""
    from toolkit.dumps.readers import SideSpec, read_side

    for side in ("G", "T"):
        (tmp_path / side).mkdir()
        np.save(tmp_path / side / "add.0.100.npy", np.ones(4, np.float32))
    keep = make_special(tmp_path / "T" / "mul.0.100.npy", kind)
    keep += make_special(tmp_path / "T" / "notes.bin", "fifo" if kind == "socket" else kind)
    t = read_side(SideSpec(str(tmp_path / "T"), "target", "onnx"))  # listing only: nothing is opened
    assert sorted(e.source for e in t.entries) == ["add.0.100.npy", "mul.0.100.npy"]
    assert t.ignored == ["notes.bin"]
    code = ("from toolkit.dumps.readers import SideSpec, read_side\nfrom toolkit.dumps.entry import DumpReadError\n"
            f"t = read_side(SideSpec({str(tmp_path / 'T')!r}, 'target', 'onnx'))\n"
            "e = next(e for e in t.entries if e.source == 'mul.0.100.npy')\n"
            "try:\n    e.load()\nexcept DumpReadError as exc:\n    print('REASON', exc)\n")
    if kind == "socket":  # a fresh bound socket for the reading process
        (tmp_path / "T" / "mul.0.100.npy").unlink()
        keep = make_special(tmp_path / "T" / "mul.0.100.npy", kind)
    proc = py(code, tmp_path)
    for obj in keep:
        obj.close()
    assert f"REASON {SAID[kind]}" in proc.stdout, proc.stdout + proc.stderr
