"""Weight data file digests remembered across runs (toolkit/cache/file_digests.py): a record serves only while
the file's identity (device, inode, size, mtime, ctime) is unchanged; every digest equals hashlib's sha256 of
the file's bytes."""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

from toolkit.cache import file_digests as fdm
from toolkit.cache.file_digests import FileDigests


@pytest.fixture
def counted(monkeypatch):
    """Paths hashed by streaming, in order; changes made less than RACY_NS ago are recorded (tests write and
    read files within milliseconds)."""
    monkeypatch.setattr(fdm, "RACY_NS", 0)
    seen = []
    real = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest", lambda fh, d: seen.append(fh.name) or real(fh, d))
    return seen


def _sha(p) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_digest_is_hashed_once_and_served_to_later_runs(tmp_path, counted):
    data = tmp_path / "w.bin"
    data.write_bytes(os.urandom(1 << 16))
    path = str(data.resolve())
    assert FileDigests(tmp_path / "cache").digest(path) == _sha(data)
    assert FileDigests(tmp_path / "cache").digest(path) == _sha(data)  # a new run: read from the record
    assert counted == [path]
    rec = json.loads((tmp_path / "cache" / "v2" / fdm.FILE).read_text())["files"][path]
    assert rec["sha256"] == _sha(data) and rec["size"] == 1 << 16


@pytest.mark.parametrize("how", ["same_size_mtime_restored", "replaced", "grown"])
def test_an_edited_file_is_hashed_again(tmp_path, counted, how):
    data = tmp_path / "w.bin"
    data.write_bytes(b"\0" * 4096)
    path = str(data.resolve())
    FileDigests(tmp_path / "c").digest(path)
    st = os.stat(path)
    time.sleep(0.05)  # past the coarse clock tick of the first write: the edit's ctime differs
    if how == "same_size_mtime_restored":
        with open(path, "r+b") as fh:
            fh.write(b"\1")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif how == "replaced":
        other = tmp_path / "new.bin"
        other.write_bytes(b"\2" * 4096)
        os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(other, path)
    else:
        with open(path, "ab") as fh:
            fh.write(b"\3")
    assert FileDigests(tmp_path / "c").digest(path) == _sha(data)
    assert counted == [path, path]


def test_a_file_changed_just_before_it_was_hashed_is_not_recorded(tmp_path, monkeypatch, counted):
    monkeypatch.setattr(fdm, "RACY_NS", 3600 * 10**9)
    data = tmp_path / "w.bin"
    data.write_bytes(b"x" * 100)
    path = str(data.resolve())
    FileDigests(tmp_path / "c").digest(path)
    FileDigests(tmp_path / "c").digest(path)
    assert counted == [path, path] and not (tmp_path / "c" / "v2" / fdm.FILE).exists()


@pytest.mark.parametrize("content", ["not json", '{"version": 1, "files": {"P": {"sha256": "00"}}}', "[1, 2]",
                                     '{"version": 99, "files": {}}', "fifo", "folder"])
def test_a_bad_record_file_counts_as_empty(tmp_path, counted, content):
    data = tmp_path / "w.bin"
    data.write_bytes(b"y" * 100)
    path = str(data.resolve())
    root = tmp_path / "c"
    (root / "v2").mkdir(parents=True)
    rec = root / "v2" / fdm.FILE
    if content == "fifo":
        os.mkfifo(rec)
    elif content == "folder":
        rec.mkdir()
    else:
        rec.write_text(content.replace("P", path))
    assert FileDigests(root).digest(path) == _sha(data)  # no hang on the FIFO, no error
    assert counted == [path]


def test_force_mode_hashes_every_time(tmp_path, counted):
    data = tmp_path / "w.bin"
    data.write_bytes(b"z" * 100)
    path = str(data.resolve())
    FileDigests(tmp_path / "c").digest(path)
    assert FileDigests(tmp_path / "c", reads=False).digest(path) == _sha(data)
    assert counted == [path, path]


def test_cache_clear_deletes_the_digests_and_info_does_not_call_them_foreign(tmp_path, counted):
    from toolkit.commands.cache import cache_command

    data = tmp_path / "w.bin"
    data.write_bytes(b"q" * 100)
    FileDigests(tmp_path / "c").digest(str(data.resolve()))
    rec = tmp_path / "c" / "v2" / fdm.FILE
    assert rec.is_file()
    assert cache_command("info", str(tmp_path / "c"))["info"]["foreign_files"] == 0
    cache_command("clear", str(tmp_path / "c"))
    assert not rec.exists() and data.is_file()
