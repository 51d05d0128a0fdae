"""The compile cache's entry store (toolkit/cache/store.py): LRU eviction (a compile entry's bundle goes with it,
orphan bundles first), clear/info touch only cache entries, lazy payloads, an entry stored under another key
is refused, and an unwritable folder warns once per process."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from tests.cache.helpers import W1, _foreign_tree, build, cfg, fresh, make_model, run
from toolkit.cache import store
from toolkit.cache.store import LAYOUT, EntryStore, unpack


# ---------------------------------------------------------------------------------------------- store, modes
def test_lru_eviction_keeps_recently_used_entries(tmp_path):
    s = EntryStore(tmp_path, limit=10**9)
    a, b, c = (ch * 64 for ch in "abc")  # keys are sha256 hex digests
    for i, key in enumerate((a, b, c)):
        s.put("kernel", key, {"i": i}, bytes(1000))
    store.flush()
    for i, key in enumerate((a, b, c)):
        os.utime(s.path("kernel", key), (1000 + i, 1000 + i))
    assert s.get("kernel", a)[0] == {"i": 0}  # a hit makes "a" the most recently used
    size = s.path("kernel", a).stat().st_size
    s.limit = 2 * size
    assert s.evict() == 1
    assert not s.path("kernel", b).exists() and s.path("kernel", a).exists() and s.path("kernel", c).exists()


def test_clear_and_info_touch_only_cache_entries(tmp_path):
    s = EntryStore(tmp_path, limit=10**9)
    keys_ = [ch * 64 for ch in "0123"]
    for k, ns in zip(keys_, ("compile", "family", "kernel", "bundle")):
        s.put(ns, k, {"k": k}, bytes(100))
    store.flush()
    tmp = s.base / "kernel" / ".tmp-ab_12cd3"
    tmp.write_bytes(bytes(7))
    foreign = _foreign_tree(tmp_path)
    want_bytes = sum(s.path(ns, k).stat().st_size for k, ns in zip(keys_, ("compile", "family", "kernel", "bundle"))) + 7
    info = s.info()
    assert info["entries"] == {"compile": 1, "family": 1, "kernel": 1, "bundle": 1}
    assert info["bytes"] == want_bytes
    assert info["foreign_files"] == 8  # the 7 files under v1 + the symlink; outside.txt is not under v1
    assert s.clear() == want_bytes
    assert all(f.read_text() == "user data" for f in foreign) and (s.base / "bundle" / ("9" * 64)).is_symlink()
    assert not any(s.path(ns, k).exists() for k, ns in zip(keys_, ("compile", "family", "kernel", "bundle")))
    assert not tmp.exists()
    s.limit = 0
    assert s.evict() == 0 and all(f.exists() for f in foreign)


def test_lazy_payload_is_made_once_and_read_before_its_write(tmp_path):
    """A LazyPayload entry reads back (from memory before the writer thread ran, then from disk) as the bytes
    its maker returns, and the maker runs exactly once however many readers and the writer ask."""
    calls = []

    def make():
        calls.append(1)
        return b"payload-" + bytes(range(256)) * 100

    s = EntryStore(tmp_path, 10**9)
    key = "ab" * 32
    s.put("compile", key, {"k": 1}, store.LazyPayload(make))
    assert s.get("compile", key) == ({"k": 1}, b"payload-" + bytes(range(256)) * 100)
    store.flush()
    assert EntryStore(tmp_path, 10**9).get("compile", key) == ({"k": 1}, b"payload-" + bytes(range(256)) * 100)
    assert len(calls) == 1


def test_unwritable_cache_warns_once_per_process(tmp_path, caplog):
    from toolkit.cache import store

    blocker = tmp_path / "file"
    blocker.write_text("x")
    root = blocker / "cache"  # under a file: every write fails with NotADirectoryError
    store._UNWRITABLE_WARNED.discard(str(root))
    with caplog.at_level(logging.WARNING, logger="npuscope.cache"):
        logging.getLogger("npuscope").propagate = True
        try:
            for i in range(3):  # three stores, as compile, kernel and bundle caches open in one command
                s = store.EntryStore(root, limit=10**9)
                s.put("ns", f"{i:064x}", {"i": i}, b"payload")
                s.put("ns", f"{i + 10:064x}", {"i": i}, b"payload")
            store.flush()
        finally:
            logging.getLogger("npuscope").propagate = False
    hits = [r for r in caplog.records if "is not writable" in r.getMessage()]
    assert len(hits) == 1


def _put(s: EntryStore, ns: str, key: str, size: int, mtime: float):
    s.put(ns, key, {"ns": ns}, bytes(size))
    store.flush()
    os.utime(s.path(ns, key), (mtime, mtime))
    return s.path(ns, key).stat().st_size


def _reachable(root) -> bool:
    base = root / store.LAYOUT
    bundles = {p.name for p in (base / "bundle").glob("*")} if (base / "bundle").is_dir() else set()
    compiles = {p.name for p in (base / "compile").glob("*")} if (base / "compile").is_dir() else set()
    return bundles <= compiles


def test_eviction_takes_a_compile_entrys_bundle_with_it(tmp_path):
    s = EntryStore(tmp_path, limit=10**9)
    a, b, k1, k2 = (ch * 64 for ch in "abcd")
    sizes = {("compile", a): _put(s, "compile", a, 100, 1000), ("kernel", k1): _put(s, "kernel", k1, 100, 1001),
             ("bundle", a): _put(s, "bundle", a, 3000, 1005), ("compile", b): _put(s, "compile", b, 100, 1010),
             ("bundle", b): _put(s, "bundle", b, 3000, 1011), ("kernel", k2): _put(s, "kernel", k2, 100, 1012)}
    total = sum(sizes.values())
    s.limit = total - 1  # the oldest entry (compile/a) must go, and its bundle with it
    assert s.evict() == 2
    left = {k for k in sizes if s.path(*k).exists()}
    assert left == set(sizes) - {("compile", a), ("bundle", a)}
    assert _reachable(tmp_path)


def test_orphan_bundle_goes_first_then_lru(tmp_path):
    s = EntryStore(tmp_path, limit=10**9)
    a, c, k1 = (ch * 64 for ch in "ace")
    sizes = {("kernel", k1): _put(s, "kernel", k1, 100, 1000), ("compile", a): _put(s, "compile", a, 100, 1001),
             ("bundle", a): _put(s, "bundle", a, 100, 1002), ("bundle", c): _put(s, "bundle", c, 100, 1003)}
    s.limit = sum(sizes.values()) - 1  # one entry must go: the orphan (newest) instead of the LRU kernel
    assert s.evict() == 1
    assert not s.path("bundle", c).exists() and s.path("kernel", k1).exists() and _reachable(tmp_path)
    s.limit = sizes[("compile", a)] + sizes[("bundle", a)]  # now plain LRU: the kernel (oldest) goes
    assert s.evict() == 1 and not s.path("kernel", k1).exists() and s.path("compile", a).exists()


def _swap(a, b):
    tmp = a.with_name("swap.tmp")
    os.replace(a, tmp)
    os.replace(b, a)
    os.replace(tmp, b)


@pytest.mark.parametrize("ns", ["compile", "bundle", "kernel", "family"])
def test_an_entry_under_another_key_is_refused(tmp_path, caplog, ns):
    c = cfg(tmp_path)
    a, b = make_model(), make_model(w1=W1 * -2.0, alpha=0.4)  # two models of one structure
    sa, sb = (1, 3, 8, 8), ((1, 3, 16, 16) if ns == "family" else (1, 3, 8, 8))  # families differ by shape
    build(a, c, sa)
    build(b, c, sb)
    files = sorted((tmp_path / LAYOUT / ns).iterdir())
    assert len(files) >= 2
    # the namespace must be read: kernel entries are read when no bundle serves the compile, family entries when
    # the exact compile entry misses
    for gone in {"kernel": ["bundle"], "family": ["compile", "bundle"]}.get(ns, []):
        for f in (tmp_path / LAYOUT / gone).iterdir():
            f.unlink()
    for f in files:  # every entry names itself
        assert unpack(f.read_bytes())[0][store.ENTRY_FIELD] == f"{ns}/{f.name}"
    _swap(files[0], files[1])
    with caplog.at_level(logging.WARNING, logger="npuscope.cache"):
        got_a, rt_a = build(a, c, sa)
        got_b, rt_b = build(b, c, sb)
    assert any("not the entry of this key" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(run(rt_a, sa), run(fresh(a, c, sa)[1], sa))
    np.testing.assert_array_equal(run(rt_b, sb), run(fresh(b, c, sb)[1], sb))
