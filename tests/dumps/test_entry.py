"""Dump entries (toolkit/dumps/entry.py): truncated and foreign .npy files raise DumpReadError."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.dumps.entry import DumpReadError, read_npy

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_truncated_and_foreign_npy_files_raise_dump_read_errors(tmp_path):
    good = tmp_path / "a.npy"
    np.save(good, np.arange(100, dtype=np.float32))
    assert np.array_equal(read_npy(good), np.arange(100, dtype=np.float32))
    data = good.read_bytes()
    cases = {"trunc.npy": data[:200], "header.npy": data[:30], "text.npy": b"not numpy", "empty.npy": b""}
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "zip.npz", a=np.zeros(3))
    cases["zip.npy"] = (tmp_path / "zip.npz").read_bytes()
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
    for name in list(cases) + ["obj.npy"]:
        with pytest.raises(DumpReadError):
            read_npy(tmp_path / name)
    with pytest.raises(DumpReadError, match="truncated"):
        read_npy(tmp_path / "trunc.npy")
