"""The sha256 of weight data files, remembered in the compile cache folder across runs.

A compile key names the contents of every data file a model's mapped weights live in
(toolkit.ir.weights.data_digest), and hashing them is the largest cost of keying a big model: ~0.85 s for the
0.87 GiB of a 2-layer Llama-style decoder, ~3.5 s for 3.6 GiB. ``<cache folder>/v2/file_digests.json`` keeps,
per resolved path, the digest with the file's identity when it was hashed: device, inode, size, mtime and
ctime in ns (``os.stat``). A record is used only while all five still match; any write to the file changes its
ctime, which no user call can set back, so an edited file is hashed again (the rule git's index uses for its
stat data, with ctime added). As git does for "racily clean" entries, a file whose mtime or ctime lies within
:data:`RACY_NS` of the moment it was hashed is not recorded: file times come from a coarse clock (a few ms),
and an edit in the same tick would leave them unchanged.

The file is JSON ``{"version": 1, "files": {path: {"dev", "ino", "size", "mtime_ns", "ctime_ns",
"sha256"}}}``, at most :data:`MAX_RECORDS` records (the oldest dropped), rewritten atomically; a missing,
unreadable or malformed file counts as empty (the digests are recomputed, never trusted from a bad file).
``npuscope cache clear`` deletes it with the entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from toolkit.cache.store import DIGESTS_FILE, LAYOUT
from toolkit.core.boundedjson import read_limited_bytes
from toolkit.core.csvjson import atomic_write_text

FILE = DIGESTS_FILE
VERSION = 1
#: records kept (a record is ~250 bytes; the file stays far below the config read limit)
MAX_RECORDS = 2000
_FIELDS = ("dev", "ino", "size", "mtime_ns", "ctime_ns")
#: a file changed less than this long (ns) before it was hashed is hashed again next time, not recorded
RACY_NS = 2_000_000_000


class _Unreadable(Exception):
    pass


def _identity(st: os.stat_result) -> dict[str, int]:
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns}


class FileDigests:
    """sha256 of data files, read from and recorded in ``<root>/v2/file_digests.json``.

    Args:
        root: the compile cache folder (toolkit.cache.settings.Settings.root); the record file is
            ``<root>/v2/file_digests.json``.
        reads: use the records found (False: hash every file, as ``op_compiler_cache_mode = force``).
        writes: record new digests in the file.
    """

    def __init__(self, root: Path, reads: bool = True, writes: bool = True):
        self.path = Path(root) / LAYOUT / FILE
        self.reads, self.writes = reads, writes
        self._records: dict | None = None

    def _load(self) -> dict:
        if self._records is None:
            self._records = {}
            try:
                data = json.loads(read_limited_bytes(self.path, "file digest record", _Unreadable))
                files = data.get("files") if isinstance(data, dict) and data.get("version") == VERSION else None
                if isinstance(files, dict):
                    self._records = {p: r for p, r in files.items() if isinstance(r, dict)
                                     and all(isinstance(r.get(f), int) for f in _FIELDS)
                                     and isinstance(r.get("sha256"), str) and len(r["sha256"]) == 64}
            except (_Unreadable, ValueError, UnicodeDecodeError, RecursionError):
                pass
        return self._records

    def digest(self, path: str) -> str:
        """sha256 (hex) of file ``path`` (resolved), from its record when its identity still matches, else
        hashed by streaming and recorded. Raises OSError when the file cannot be read."""
        st = os.stat(path)
        ident = _identity(st)
        records = self._load()
        rec = records.get(path) if self.reads else None
        if rec is not None and all(rec[f] == ident[f] for f in _FIELDS):
            return rec["sha256"]
        with open(path, "rb") as fh:
            if _identity(os.fstat(fh.fileno())) != ident:  # changed between the stat and the open: hash, no record
                return hashlib.file_digest(fh, "sha256").hexdigest()
            hexdigest = hashlib.file_digest(fh, "sha256").hexdigest()
        if self.writes and time.time_ns() - max(ident["mtime_ns"], ident["ctime_ns"]) >= RACY_NS:
            records.pop(path, None)
            records[path] = {**ident, "sha256": hexdigest}
            while len(records) > MAX_RECORDS:
                records.pop(next(iter(records)))
            self._save()
        return hexdigest

    def _save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps({"version": VERSION, "files": self._records}) + "\n")
        except OSError:  # a read-only or full cache folder: the digest is still right, only not remembered
            pass
