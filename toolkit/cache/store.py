"""A directory of content-addressed entries: ``<root>/v2/<namespace>/<key>``.

Entry file format (little-endian)::

    magic b"NPUSCC2\\n" (8 bytes) | CRC-32 (zlib.crc32) of meta+payload u32 | len(meta) u32 |
    len(payload) u64 | meta (UTF-8 JSON object) | payload (bytes)

The key (the file name) is a sha256 digest of what the entry was built from; the CRC-32 in the file only
detects truncated or altered bytes, and costs ~1.4 ms per 10 MB read against ~5.4 ms for a second sha256
(layout v1 used sha256 here; its folder is ignored).

- Writes are atomic: a temporary file in the same folder, then ``os.replace`` (readers never see a partial
  entry; two writers of one key leave one whole entry, both being the same content). They run on one
  background thread, off the compile's critical path (on PP-OCRv4 det a compile writes ~10 MB); until an
  entry is on disk this process reads it from memory, :func:`flush` waits for all of them, and the
  interpreter waits for them at exit.
- Every read checks the size and the checksum before the meta JSON is parsed, and that the entry is the one
  asked for: the meta records ``"__entry": "<namespace>/<key>"``, so an intact entry copied, renamed or swapped
  under another key is refused. A truncated, altered or misplaced entry is logged as a warning on logger
  ``npuscope.cache``, deleted and reported as a miss (the caller rebuilds it). Only a regular file is read
  (no symbolic link is followed, a FIFO or device is a warned miss, never waited on), and never more than the
  size its header declares.
- A hit sets the file's modification time to now: eviction removes the least-recently-used entries (oldest
  mtime first) until the store is under its size limit, tolerating files that other processes remove. A
  ``bundle`` is only reached through the ``compile`` entry of the same key: evicting ``compile/<key>`` also
  removes ``bundle/<key>``, and bundles whose compile entry is already gone are evicted before anything else.
No locks: readers only ever open whole files, and a file removed under a reader is a miss.
- Only files named like entries (:data:`ENTRY_NAME`, :data:`TMP_NAME`) directly inside the :data:`KINDS`
  folders are ever counted, evicted or deleted; anything else a user put under the folder is left alone.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
import struct
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LOG = logging.getLogger("npuscope.cache")
MAGIC = b"NPUSCC2\n"
_HEAD = struct.Struct("<8sIIQ")
LAYOUT = "v2"
#: the namespaces (kinds) of entries npuscope writes; ``recipes`` was written by earlier versions
KINDS = ("compile", "family", "kernel", "bundle", "recipes")
#: an entry file's name: a sha256 key in hex; a temporary file of :meth:`EntryStore._write` (tempfile.mkstemp
#: with prefix ``.tmp-``). Nothing else in the folder is ever counted, evicted or deleted.
ENTRY_NAME = re.compile(r"[0-9a-f]{64}")
#: the weight data file digests remembered across runs (toolkit.cache.file_digests), in ``<root>/<LAYOUT>``
DIGESTS_FILE = "file_digests.json"
TMP_NAME = re.compile(r"\.tmp-[a-z0-9_]{8}")
#: temporary files older than this (seconds) belong to a writer that died; eviction removes them
STALE_TMP_S = 3600.0


_WRITER: dict = {"pool": None, "pending": {}, "futures": []}
_LOCK = threading.Lock()
#: Cache folders already reported as not writable in this process (the warning is logged once per folder,
#: however many stores a command opens: compile, kernel and bundle caches each have one).
_UNWRITABLE_WARNED: set[str] = set()


def _pool() -> ThreadPoolExecutor:
    with _LOCK:
        if _WRITER["pool"] is None:
            _WRITER["pool"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="npuscope-cache-writer")
        return _WRITER["pool"]


def flush() -> None:
    """Wait until every entry this process queued is written (or failed)."""
    while True:
        with _LOCK:
            futures, _WRITER["futures"] = _WRITER["futures"], []
        if not futures:
            return
        for f in futures:
            f.result()


def close() -> None:
    """Wait for every queued entry (:func:`flush`), then stop the writer thread; a later write starts a new one.
    The CLI calls this before it ends the process without finalising the interpreter (toolkit.cli)."""
    flush()
    with _LOCK:
        pool, _WRITER["pool"] = _WRITER["pool"], None
    if pool is not None:
        pool.shutdown(wait=True)
    flush()  # entries queued by a write that was running while the pool shut down


class LazyPayload:
    """A payload made on first use, once (thread-safe): :meth:`EntryStore.put` accepts one so that costly
    bytes (a compiled model's serialisation, ~4 ms on PP-OCRv4 det) are made on the writer thread while the
    caller goes on (onnxruntime releases the GIL while it builds sessions), or by a read that needs them first.
    ``make`` must only read objects nobody changes afterwards."""

    def __init__(self, make):
        self._make, self._value, self._lock = make, None, threading.Lock()

    def __call__(self) -> bytes:
        with self._lock:
            if self._value is None:
                self._value, self._make = self._make(), None
            return self._value


def _bytes(payload) -> bytes:
    return payload() if isinstance(payload, LazyPayload) else payload


class CorruptEntry(ValueError):
    """An entry file whose size, magic or checksum is wrong, or that is stored under another key."""


class NotRegular(OSError):
    """An entry path that is a symbolic link, FIFO, device or socket (never read)."""


#: meta field naming the entry itself ("<namespace>/<key>"), checked on every read
ENTRY_FIELD = "__entry"


def _read_entry(p: Path) -> bytes:
    """The bytes of entry file ``p``: a regular file opened without following a symbolic link and without
    blocking (a FIFO), read up to the size its header declares (a longer file is corrupt: unpack says so).
    Raises NotRegular, FileNotFoundError and other OSErrors."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular("a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular("a FIFO, device or socket")
        head = fh.read(_HEAD.size)
        if len(head) < _HEAD.size:
            return head
        _, _, n_meta, n_pay = _HEAD.unpack_from(head)
        want = _HEAD.size + n_meta + n_pay
        if want != st.st_size:  # truncated or padded: unpack reports the length without reading a declared size
            return head + fh.read(min(st.st_size, want) - _HEAD.size + 1)
        return head + fh.read(want - _HEAD.size)


def encode_meta(meta: dict) -> bytes:
    return json.dumps(meta, separators=(",", ":"), allow_nan=False).encode("utf-8")


def pack_parts(meta: bytes, payload: bytes) -> tuple[bytes, bytes, bytes]:
    """(header, meta, payload): the entry file in three pieces, written one after the other (no joined copy of
    a large payload on the writer thread, which would hold the GIL for the copy)."""
    crc = zlib.crc32(payload, zlib.crc32(meta))
    return _HEAD.pack(MAGIC, crc, len(meta), len(payload)), meta, payload


def pack(meta: dict | bytes, payload: bytes = b"") -> bytes:
    """The entry file bytes for ``meta`` (JSON-serialisable dict, or its encode_meta bytes) and ``payload``."""
    mb = meta if isinstance(meta, bytes) else encode_meta(meta)
    crc = zlib.crc32(payload, zlib.crc32(mb))
    return b"".join((_HEAD.pack(MAGIC, crc, len(mb), len(payload)), mb, payload))


def unpack(data: bytes) -> tuple[dict, bytes]:
    """(meta, payload) of entry file bytes. Raises CorruptEntry (what is wrong, one line)."""
    if len(data) < _HEAD.size:
        raise CorruptEntry(f"{len(data)} bytes, shorter than the {_HEAD.size}-byte header (truncated)")
    magic, crc, n_meta, n_pay = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise CorruptEntry("bad magic (not an npuscope cache entry)")
    if len(data) != _HEAD.size + n_meta + n_pay:
        raise CorruptEntry(f"{len(data)} bytes but the header says {_HEAD.size + n_meta + n_pay} (truncated)")
    body = memoryview(data)[_HEAD.size:]
    if zlib.crc32(body) != crc:
        raise CorruptEntry("checksum mismatch (altered bytes)")
    try:
        meta = json.loads(bytes(body[:n_meta]))
    except ValueError:
        raise CorruptEntry("meta is not JSON") from None
    return meta, bytes(body[n_meta:])


class EntryStore:
    """Entries under ``root`` (see module docstring); ``limit`` is the size limit in bytes."""

    def __init__(self, root: Path, limit: int):
        self.root = Path(root)
        self.base = self.root / LAYOUT
        self.limit = limit
        self._write_failed = False

    def path(self, ns: str, key: str) -> Path:
        return self.base / ns / key

    # ------------------------------------------------------------------ read
    def queued(self, ns: str, key: str) -> bool:
        """Whether this process queued entry ``ns/key`` and its write has not finished yet."""
        with _LOCK:
            return self.path(ns, key) in _WRITER["pending"]

    def get(self, ns: str, key: str) -> tuple[dict, bytes] | None:
        """(meta, payload) of entry ``ns/key``, or None if absent or corrupted (then deleted, warned)."""
        p = self.path(ns, key)
        with _LOCK:
            queued = _WRITER["pending"].get(p)
        if queued is not None:
            meta = json.loads(queued[0])
            meta.pop(ENTRY_FIELD, None)
            return meta, _bytes(queued[1])
        try:
            data = _read_entry(p)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except NotRegular as exc:
            LOG.warning("compile cache entry %s is not a regular file (%s); ignoring it and compiling without it",
                        p, exc)
            return None
        except OSError as exc:
            LOG.warning("compile cache entry %s cannot be read (%s); rebuilding it", p, exc.strerror)
            return None
        try:
            meta, payload = unpack(data)
            if meta.pop(ENTRY_FIELD, None) != f"{ns}/{key}":
                raise CorruptEntry("it is not the entry of this key (copied, renamed or swapped)")
        except CorruptEntry as exc:
            LOG.warning("compile cache entry %s is corrupted (%s); deleting and rebuilding it", p, exc)
            self._unlink(p)
            return None
        try:
            os.utime(p)  # least-recently-used order: a hit is a use
        except OSError:
            pass
        return meta, payload

    # ------------------------------------------------------------------ write
    def put(self, ns: str, key: str, meta: dict, payload: "bytes | LazyPayload" = b"", evict: bool = False) -> None:
        """Queue entry ``ns/key`` for an atomic write on the writer thread (then evict when ``evict``); a
        folder that is not writable is logged as a warning once per process (per folder) and the compile goes on.
        ``meta`` is encoded now; a :class:`LazyPayload` is made on the writer thread (or by the first read)."""
        p = self.path(ns, key)
        try:
            mb = encode_meta({**meta, ENTRY_FIELD: f"{ns}/{key}"})  # now: ``meta``'s objects may change later
        except (TypeError, ValueError) as exc:
            LOG.warning("compile cache entry %s/%s not stored: %s", ns, key[:16], exc)
            return
        with _LOCK:
            _WRITER["pending"][p] = (mb, payload)
        future = _pool().submit(self._write, p, mb, payload, evict)
        with _LOCK:
            _WRITER["futures"].append(future)

    def evict_later(self) -> None:
        """Queue :meth:`evict` on the writer thread (after the writes queued before it)."""
        future = _pool().submit(self.evict)
        with _LOCK:
            _WRITER["futures"].append(future)

    def _write(self, p: Path, meta: bytes, payload, evict: bool) -> None:
        try:
            if str(self.root) in _UNWRITABLE_WARNED:  # a write here failed: store nothing more this process (no
                return                                # kernel or bundle entry without the compile entry above it)
            parts = pack_parts(meta, _bytes(payload))
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=p.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    for part in parts:
                        fh.write(part)
                os.replace(tmp, p)
            except BaseException:
                self._unlink(Path(tmp))
                raise
        except (OSError, ValueError, TypeError) as exc:
            with _LOCK:
                first = str(self.root) not in _UNWRITABLE_WARNED
                _UNWRITABLE_WARNED.add(str(self.root))
            if first:
                LOG.warning("compile cache %s is not writable (%s); compiling without storing entries",
                            self.root, getattr(exc, "strerror", None) or exc)
            self._write_failed = True
        finally:
            with _LOCK:
                if _WRITER["pending"].get(p, (None, None))[0] is meta:
                    del _WRITER["pending"][p]
        if evict:
            self.evict()

    @staticmethod
    def _unlink(p: Path) -> None:
        try:
            p.unlink()
        except OSError:
            pass

    # ------------------------------------------------------------------ size
    def _files(self):
        """(path, size, mtime, is_tmp) of every entry and temporary file of the store (regular files named
        :data:`ENTRY_NAME` / :data:`TMP_NAME` directly in a :data:`KINDS` folder); files vanishing meanwhile
        are skipped. A KINDS folder that is a symbolic link is never entered (clear and eviction stay inside
        the cache folder); it counts as a foreign file."""
        for kind in KINDS:
            if (self.base / kind).is_symlink():
                continue
            try:
                found = list(os.scandir(self.base / kind))
            except OSError:  # missing, not a folder, unreadable
                continue
            for f in found:
                is_tmp = TMP_NAME.fullmatch(f.name) is not None
                if not (is_tmp or ENTRY_NAME.fullmatch(f.name)):
                    continue
                try:
                    if not f.is_file(follow_symlinks=False):
                        continue
                    st = f.stat(follow_symlinks=False)
                except OSError:
                    continue
                yield Path(f.path), st.st_size, st.st_mtime, is_tmp

    def foreign_files(self) -> int:
        """Files under ``<root>/<LAYOUT>`` that are not entries or temporary files of the store (left alone)."""
        if not self.base.is_dir():
            return 0
        ours = {p for p, *_ in self._files()} | {self.base / DIGESTS_FILE}
        n = 0
        for folder, dirs, names in os.walk(self.base):
            n += sum(1 for name in names if Path(folder, name) not in ours)
            n += sum(1 for d in dirs if os.path.islink(os.path.join(folder, d)))  # linked folders: not entered
        return n

    def evict(self) -> int:
        """Remove stale temporary files, then, while the total is above the limit: ``bundle`` entries whose
        ``compile`` entry (same key) is gone (nothing reaches them), then least-recently-used entries; a
        ``compile`` entry takes its ``bundle`` with it. Returns the number of entries removed."""
        now, files, total = time.time(), [], 0
        for p, size, mtime, is_tmp in self._files():
            if is_tmp:
                if now - mtime > STALE_TMP_S:
                    self._unlink(p)
                else:
                    total += size
                continue
            files.append((mtime, size, p))
            total += size
        sizes = {p: size for _, size, p in files}
        removed = 0
        for p in self._eviction_order(files):
            if total <= self.limit:
                break
            for q in (p, self.path("bundle", p.name)) if p.parent.name == "compile" else (p,):
                if q in sizes:
                    self._unlink(q)
                    total -= sizes.pop(q)
                    removed += 1
        if removed:
            LOG.info("compile cache over %d bytes: evicted %d least-recently-used entries", self.limit, removed)
        return removed

    def _eviction_order(self, files) -> list[Path]:
        """Entry paths of ``files`` ((mtime, size, path)) in eviction order: orphan bundles (no ``compile``
        entry of the same key on disk or queued by this process), oldest first, then every other entry,
        least recently used first."""
        compiled = {p.name for _, _, p in files if p.parent.name == "compile"}
        ordered = sorted(files)

        def orphan(p: Path) -> bool:
            return p.parent.name == "bundle" and p.name not in compiled and not self.queued("compile", p.name)

        return [p for _, _, p in ordered if orphan(p)] + [p for _, _, p in ordered if not orphan(p)]

    def info(self) -> dict:
        """{"dir", "entries": {namespace: count}, "bytes" (entries and temporary files), "limit_bytes",
        "foreign_files" (other files under <root>/<LAYOUT>, never counted in bytes, never deleted)} of the store."""
        flush()
        entries, total = {}, 0
        for p, size, _, is_tmp in self._files():
            total += size
            if not is_tmp:
                entries[p.parent.name] = entries.get(p.parent.name, 0) + 1
        return {"dir": str(self.root), "entries": entries, "bytes": total, "limit_bytes": self.limit,
                "foreign_files": self.foreign_files()}

    def clear(self) -> int:
        """Delete every entry and temporary file and the weight file digests (:data:`DIGESTS_FILE`; only those:
        other files stay), then the folders left empty; returns the number of bytes freed."""
        flush()
        freed = 0
        for p, size, _, _ in list(self._files()):
            try:
                p.unlink()
                freed += size
            except FileNotFoundError:
                continue
            except OSError as exc:
                LOG.warning("compile cache entry %s cannot be deleted (%s)", p, exc.strerror)
        digests = self.base / DIGESTS_FILE
        if digests.is_file() and not digests.is_symlink():
            try:
                freed += digests.stat().st_size
                digests.unlink()
            except OSError:
                pass
        for folder in [self.base / k for k in KINDS] + [self.base]:
            try:
                folder.rmdir()  # only when empty
            except OSError:
                pass
        return freed
