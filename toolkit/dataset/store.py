"""The result store of a dataset run: one file per input, written atomically, and the run manifest.

Layout of the output folder::

    manifest.json          what the results depend on (see KEYED): model sha256, resolved config, thresholds,
                           task checks, record columns, tensor order; written once when the run starts
    results/<key>.npz      one per input: ``meta`` (0-d str, the Record.meta JSON), ``rows`` (int32),
                           ``values`` (float64 rows x COLUMNS); written to a temporary file and renamed, so a
                           result file exists only when complete (the rename is the "done" marker)
    log.jsonl              one line per evaluated input ({"input", "sha256", "status", "pid", "time"}),
                           appended after its result file is in place; a "start" line per run

Resume (the one exception to toolkit.artifacts.output_dir's "new or empty" rule): an existing ``--out``
folder whose manifest.json matches this run (same KEYED values) is continued: inputs whose result file exists
and records the sha256 of the current input file are not evaluated again. A folder holding a non-matching
manifest is refused with a one-line UsageError naming what differs; any other non-empty folder is refused as
output_dir does. A new folder is removed again if the run fails before any result was written; once results
exist they are kept (that is what makes a killed run resumable). Report files are (re)written at the end.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from toolkit.artifacts import new_run_dir, safe_filename
from toolkit.dataset.source import InputRef, sha256_file
from toolkit.dataset.worker import COLUMNS, Record
from toolkit.errors import UsageError
from toolkit.report.csvjson import _dumps, atomic_write_text, json_safe

MANIFEST = "manifest.json"
RESULTS = "results"
LOG = "log.jsonl"
FORMAT = 1
#: Manifest keys that must match for a folder to be resumed.
KEYED = ("format", "command", "model_sha256", "config", "thresholds", "task_metrics", "columns", "tensors_sha256")


def make_manifest(command: str, *, model_path: str, model_sha256: str, config: dict, thresholds: dict | None,
                  task_metrics, tensors, inputs: str) -> dict:
    """The manifest of a run (KEYED values plus the model path and the inputs folder, for information)."""
    tsha = hashlib.sha256("\n".join(tensors).encode()).hexdigest()
    return json_safe({"format": FORMAT, "command": command, "model_sha256": model_sha256, "config": config,
                      "thresholds": thresholds, "task_metrics": list(task_metrics), "columns": list(COLUMNS),
                      "tensors_sha256": tsha, "model": model_path, "inputs": str(inputs)})


def result_key(name: str) -> str:
    """File-system-safe, collision-free key of an input name: the safe stem, plus an 8-hex hash of the name
    when the safe stem differs from it."""
    stem = name.removesuffix(".npz")
    safe = safe_filename(stem)
    return safe if safe == stem else f"{safe[:100]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


class Store:
    """The results of one run folder (see module docstring)."""

    def __init__(self, folder: Path, resumed: bool = False):
        self.folder = Path(folder)
        self.results = self.folder / RESULTS
        self.resumed = resumed
        self.results.mkdir(parents=True, exist_ok=True)
        for tmp in self.results.glob(".*.tmp"):  # left by a killed writer
            tmp.unlink(missing_ok=True)

    def path_of(self, name: str) -> Path:
        return self.results / f"{result_key(name)}.npz"

    def write(self, rec: Record) -> Path:
        """Write ``rec`` atomically (temporary file, then os.replace), then append its log line."""
        path = self.path_of(rec.meta["input"])
        tmp = self.results / f".{path.stem}.{os.getpid()}.tmp"
        meta = json.dumps(json_safe(rec.meta), allow_nan=False, ensure_ascii=False)
        try:
            with open(tmp, "wb") as fh:
                np.savez(fh, meta=np.array(meta), rows=np.asarray(rec.rows, np.int32),
                         values=np.asarray(rec.values, np.float64))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self.log({"input": rec.meta["input"], "sha256": rec.meta.get("sha256", ""), "status": rec.meta["status"]})
        return path

    def log(self, entry: dict) -> None:
        entry = {**entry, "pid": os.getpid(), "time": _dt.datetime.now().isoformat(timespec="milliseconds")}
        with open(self.folder / LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")

    def read(self, name: str) -> Record | None:
        """The stored record of input ``name``, or None when there is none (or it cannot be read)."""
        path = self.path_of(name)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                return Record(meta, z["rows"].astype(np.int32), z["values"].astype(np.float64))
        except (OSError, ValueError, KeyError, EOFError):
            return None

    def read_meta(self, name: str) -> dict | None:
        path = self.path_of(name)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                return json.loads(str(z["meta"]))
        except (OSError, ValueError, KeyError, EOFError):
            return None

    def pending(self, refs: list[InputRef]) -> list[InputRef]:
        """The inputs still to evaluate: no readable result, or a result of a file with another sha256."""
        if not any(self.results.glob("*.npz")):
            return list(refs)
        todo = []
        for ref in refs:
            meta = self.read_meta(ref.name)
            if meta is None or meta.get("input") != ref.name or meta.get("sha256") != sha256_file(ref.path):
                todo.append(ref)
        return todo

    def records(self, refs: list[InputRef]):
        """Yield the stored Record of each of ``refs`` in order (one in memory at a time); missing ones skipped."""
        for ref in refs:
            rec = self.read(ref.name)
            if rec is not None:
                yield rec

    def metas(self, refs: list[InputRef]):
        for ref in refs:
            meta = self.read_meta(ref.name)
            if meta is not None:
                yield meta

    def log_entries(self) -> list[dict]:
        p = self.folder / LOG
        if not p.is_file():
            return []
        return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


def _differences(old: dict, new: dict) -> list[str]:
    out = []
    for k in KEYED:
        if old.get(k) == new.get(k):
            continue
        if isinstance(old.get(k), dict) and isinstance(new.get(k), dict):
            keys = sorted(x for x in set(old[k]) | set(new[k]) if old[k].get(x) != new[k].get(x))
            out.append(f"{k} ({', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''})")
        else:
            out.append(k.replace("_", " "))
    return out


def _check_resumable(path: Path, manifest: dict) -> None:
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise UsageError(f"output folder '{path}' already exists and is not empty (no {MANIFEST} of a dataset run "
                         "to resume); choose a new --out")
    try:
        old = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        old = {}
    diff = _differences(old if isinstance(old, dict) else {}, manifest)
    if diff:
        raise UsageError(f"output folder '{path}' holds a dataset run with a different {', '.join(diff)}; "
                         f"choose a new --out, or re-run with the settings recorded in {mpath}")


@contextlib.contextmanager
def open_store(explicit: str | None, base: str | Path, stem: str, manifest: dict):
    """Yield the :class:`Store` of a new run folder, or of an existing one to resume (module docstring).

    Raises:
        UsageError: empty ``--out``, an existing file, a non-empty folder without a matching manifest.
    """
    if explicit is not None and not str(explicit).strip():
        raise UsageError("--out is empty; give a new folder name")
    path = Path(explicit) if explicit else new_run_dir(base, stem)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out '{path}' is an existing file; give a new folder name")
    resumed = path.is_dir() and any(path.iterdir())
    if resumed:
        _check_resumable(path, manifest)
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder '{path}' ({exc.strerror}); choose a writable --out") from None
    if not resumed:
        atomic_write_text(path / MANIFEST, _dumps(manifest))
    store = Store(path, resumed)
    try:
        yield store
    except BaseException:
        if created and not any(store.results.glob("*.npz")):
            shutil.rmtree(path, ignore_errors=True)
        raise
