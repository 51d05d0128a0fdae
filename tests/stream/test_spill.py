"""toolkit.stream.spill: arrays past the memory budget go to disk and come back bit for bit; names never reach the
file system; the folder goes with the store."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.stream.spill import SpillStore

DTYPES = [np.float32, np.float16, np.int64, np.int8, np.bool_, np.uint16, np.float64]


@pytest.mark.parametrize("memory_bytes", [0, 100, 1 << 20])
@pytest.mark.parametrize("dtype", DTYPES)
def test_values_come_back_bit_for_bit_in_memory_or_on_disk(memory_bytes, dtype):
    rng = np.random.default_rng(0)
    shapes = [(), (0,), (3,), (4, 5), (2, 3, 7)]
    values = {f"t{i}": np.asarray(rng.standard_normal(s) * 100).astype(dtype) for i, s in enumerate(shapes)}
    values["nan"] = np.array([np.nan, np.inf, -0.0], np.float32)
    values["strided"] = np.arange(60, dtype=np.float32).reshape(6, 10)[:, ::3]  # not contiguous
    store = SpillStore(memory_bytes)
    for k, v in values.items():
        store[k] = v
    for k, v in values.items():
        got = store[k]
        assert got.dtype == v.dtype and got.shape == v.shape
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(v).tobytes(), k
    assert store.nbytes() == sum(v.nbytes for v in values.values())
    if memory_bytes == 0:  # all but the 0-d array
        assert store.spilled_bytes() == store.nbytes() - values["t0"].nbytes
    if memory_bytes == 1 << 20:
        assert store.spilled_bytes() == 0
    store.close()


def test_a_stored_value_is_a_copy():
    """The arena view the pass hands over is overwritten later: the store must not see that."""
    for budget in (0, 1 << 20):
        store = SpillStore(budget)
        a = np.arange(10, dtype=np.float32)
        store["a"] = a
        a[:] = -1
        np.testing.assert_array_equal(store["a"], np.arange(10, dtype=np.float32))


def test_names_from_the_model_never_become_paths(tmp_path, monkeypatch):
    """Tensor names are untrusted: '../x', '/etc/passwd' or a name with a NUL are keys, never file names."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    store = SpillStore(0)
    bad = ["../escape", "/etc/passwd", "a\0b", "x" * 5000, (3, "../y")]
    for i, k in enumerate(bad):
        store[k] = np.full(4, i, np.int32)
    for i, k in enumerate(bad):
        assert store[k].tolist() == [i] * 4
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == len(bad) and all(p.parent.parent == tmp_path for p in files)
    assert not (tmp_path.parent / "escape").exists()


def test_sequences_and_none_stay_in_memory_and_replacing_frees_the_old_value():
    store = SpillStore(0)
    seq = [np.ones(3, np.float32), np.zeros(2, np.int64)]
    store["seq"] = seq
    store["none"] = None
    assert store.spilled_bytes() == 0 and store["none"] is None
    assert [x.tolist() for x in store["seq"]] == [[1, 1, 1], [0, 0]]
    store["t"] = np.ones(8, np.float64)
    store["t"] = np.zeros(2, np.float64)
    assert store.nbytes() == 3 * 4 + 2 * 8 + 2 * 8 and store["t"].tolist() == [0, 0]
    del store["t"]
    assert "t" not in store and len(store) == 2


def test_close_removes_the_folder(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = SpillStore(0)
    store["a"] = np.ones(1000, np.float32)
    assert any(tmp_path.iterdir())
    store.close()
    assert not any(tmp_path.iterdir()) and len(store) == 0
    other = SpillStore(0)
    other["b"] = np.ones(10, np.float32)
    del other  # garbage-collected: its folder goes too
    import gc

    gc.collect()
    assert not any(tmp_path.iterdir())


def test_folders_of_processes_that_are_gone_are_swept(tmp_path, monkeypatch):
    """A run killed with SIGKILL leaves its spill folder: the next store removes it, and nothing that belongs to a
    live process, or is no spill folder of ours, or a link."""
    import os
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f"npuscope-reference-{dead}-abc"
        kept = [tmp_path / f"npuscope-reference-{live.pid}-abc", tmp_path / "npuscope-reference-xyz",
                tmp_path / f"npuscope-device-{dead}-abc", tmp_path / "unrelated"]
        for p in [stale, *kept]:
            p.mkdir()
            (p / "1.npy").write_bytes(b"x")
        target = tmp_path / "elsewhere"
        target.mkdir()
        (tmp_path / f"npuscope-reference-{dead}-link").symlink_to(target)
        store = SpillStore(0, "npuscope-reference-")
        store["a"] = np.ones(100, np.float32)
        assert not stale.exists() and all(p.exists() for p in kept) and target.exists()
        assert store._folder.name.startswith(f"npuscope-reference-{os.getpid()}-")
        store.close()
    finally:
        live.kill()
