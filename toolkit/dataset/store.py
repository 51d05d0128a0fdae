"""The result store of a dataset run: one file per input, written atomically, and the run manifest.

Layout of the output folder::

    manifest.json          what the results depend on (see KEYED): model sha256, resolved config, thresholds,
                           task checks, record columns, tensor order; written once when the run starts
    results/<key>.npz      one per input: ``meta`` (0-d str, the Record.meta JSON), ``rows`` (int32),
                           ``values`` (float64 rows x COLUMNS); written to a temporary file and renamed, so a
                           result file exists only when complete (the rename is the "done" marker)
    log.jsonl              one line per evaluated input ({"input", "sha256", "status", "pid", "time"}),
                           appended after its result file is in place; a "start" line per run

Resume (the one exception to toolkit.core.artifacts.output_dir's "new or empty" rule): an existing ``--out``
folder whose manifest.json matches this run (same KEYED values) is continued: inputs whose result file exists
and records the sha256 of the current input file are not evaluated again. A folder holding a non-matching
manifest of ours is refused with a one-line UsageError naming what differs; any other non-empty folder (no
manifest.json, or one that is not ours: unreadable, not JSON, without ``tool`` = TOOL and every KEYED key) is
refused before anything is created or read in it but that manifest, except a folder holding only the store of
a run of ours that produced no successful result (every input failed, e.g. on a config mistake): it is emptied
and the run starts afresh. A new folder is removed again
if the run fails before any input was evaluated successfully; once such a result exists the folder is kept
(that is what makes a killed run resumable). A stored result that cannot be read or is not a valid record
(truncated, empty, foreign, a folder in its place) counts as missing: removed, logged and evaluated again.
Report files are (re)written at the end, and replace the report of an earlier run of the folder whole
(:func:`staged_report`: written into ``.npuscope-report.tmp/``, moved in, the entries of the earlier report
this one does not hold removed; ``.npuscope-report.json`` lists the report's entries). Nothing else in the
folder is touched.

One run at a time: a run holds an exclusive lock on ``.npuscope-run.lock`` in the folder (``fcntl.flock``,
taken before the folder's contents are inspected, released and removed at exit; the kernel releases it when
the process dies, so a crashed run leaves no stale lock and can be resumed). A second run on the same folder is
refused with a one-line UserError (exit 2) naming the holder's pid.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import shutil
from pathlib import Path

from toolkit.core.artifacts import out_path

try:
    import fcntl
except ImportError:  # not POSIX: no lock (documented in docs/datasets.md)
    fcntl = None

import numpy as np

from toolkit.core.artifacts import new_run_dir, safe_filename, save_npz
from toolkit.core.boundedjson import json_loads, read_limited
from toolkit.core.csvjson import _dumps, atomic_write_text, json_safe
from toolkit.core.errors import UsageError, UserError
from toolkit.dataset.source import InputRef, sha256_file
from toolkit.dataset.worker import COLUMNS, Record
from toolkit.inputs.npzread import read_npz

MANIFEST = "manifest.json"
RESULTS = "results"
LOG = "log.jsonl"
LOCK = ".npuscope-run.lock"
#: Record format; 2: records hold the single-input analysis (toolkit.diagnose.layer_analysis), so a folder of
#: format 1 (layer table only) is not resumed into the same aggregate.
FORMAT = 2
#: Manifest keys that must match for a folder to be resumed.
KEYED = ("format", "command", "model_sha256", "config", "thresholds", "task_metrics", "columns", "tensors_sha256")
#: The manifest's "tool" value: a manifest.json without it (or without every KEYED key) is not ours.
TOOL = "npuscope dataset run"


def make_manifest(command: str, *, model_path: str, model_sha256: str, config: dict, thresholds: dict | None,
                  task_metrics, tensors, inputs: str) -> dict:
    """The manifest of a run (KEYED values plus the model path and the inputs folder, for information)."""
    tsha = hashlib.sha256("\n".join(tensors).encode()).hexdigest()
    return json_safe({"tool": TOOL, "format": FORMAT, "command": command, "model_sha256": model_sha256, "config": config,
                      "thresholds": thresholds, "task_metrics": list(task_metrics), "columns": list(COLUMNS),
                      "tensors_sha256": tsha, "n_tensors": len(tensors), "model": model_path,
                      "inputs": str(inputs)})


def result_key(name: str) -> str:
    """File-system-safe, collision-free key of an input name: the safe stem, plus an 8-hex hash of the name's
    UTF-8 bytes when the safe stem differs from it (a lone surrogate, a byte that is not UTF-8, is hashed as
    its code point: "surrogatepass"; never raises)."""
    stem = name.removesuffix(".npz")
    safe = safe_filename(stem)
    return safe if safe == stem else \
        f"{safe[:100]}-{hashlib.sha1(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


class Store:
    """The results of one run folder (see module docstring)."""

    def __init__(self, folder: Path, resumed: bool = False, n_tensors: int | None = None, create: bool = True):
        self.folder = Path(folder)
        self.results = self.folder / RESULTS
        self.resumed = resumed
        self.n_tensors = n_tensors
        #: (input name, reason) of the stored results :meth:`pending` found invalid and removed.
        self.redone: list[tuple[str, str]] = []
        #: True when the folder held a run with other settings and no successful result, and was emptied.
        self.restarted = False
        if not create:  # only read (a folder not yet known to be resumed)
            return
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
                save_npz(fh, {"meta": np.array(meta), "rows": np.asarray(rec.rows, np.int32),
                              "values": np.asarray(rec.values, np.float64)})  # no pickle: meta is <U
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self.log({"input": rec.meta["input"], "sha256": rec.meta.get("sha256", ""), "status": rec.meta["status"]})
        return path

    def log(self, entry: dict) -> None:
        entry = {**entry, "pid": os.getpid(), "time": _dt.datetime.now().isoformat(timespec="milliseconds")}
        with open(self.folder / LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(json_safe(entry)) + "\n")

    def load(self, name: str) -> tuple[Record | None, str]:
        """(the stored record of input ``name``, '') when it is there and valid; (None, '') when there is none;
        (None, why) when something is in its place that is not a valid result: unreadable (truncated, empty,
        not an .npz), missing or malformed members or meta (:func:`invalid_reason`), or not a file."""
        path = self.path_of(name)
        if not os.path.lexists(path):
            return None, ""
        if not path.is_file():
            return None, "not a regular file"
        try:
            z = read_npz(path, f"stored result '{path.name}'")  # bounded: a planted zip bomb is refused
            meta = json.loads(str(z["meta"]))
            rows, values = z["rows"], z["values"]
        except Exception as exc:  # noqa: BLE001 (any failure to read it means: evaluate the input again)
            lines = str(exc).strip().splitlines()
            return None, f"unreadable ({type(exc).__name__}{': ' + lines[0][:160] if lines else ''})"
        why = invalid_reason(name, meta, rows, values, self.n_tensors)
        if why:
            return None, why
        return Record(meta, rows.astype(np.int32), values.astype(np.float64)), ""

    def read(self, name: str) -> Record | None:
        """The stored record of input ``name``, or None when there is none (or it is not valid)."""
        return self.load(name)[0]

    def read_meta(self, name: str) -> dict | None:
        rec = self.read(name)
        return None if rec is None else rec.meta

    def has_ok_result(self) -> bool:
        """True when some stored result is the record of an input that was evaluated (status "ok")."""
        for path in self.results.glob("*.npz"):
            try:
                if json.loads(str(read_npz(path, f"stored result '{path.name}'")["meta"])).get("status") == "ok":
                    return True
            except Exception:  # noqa: BLE001, S112 (not a valid result: does not count)
                continue
        return False

    def pending(self, refs: list[InputRef]) -> list[InputRef]:
        """The inputs still to evaluate: no valid result, or a result of a file with another sha256 (or an
        input that is not a readable file: evaluated again, into an error row). Invalid results are removed,
        logged (``{"event": "invalid_result", "name", "reason"}``) and listed in :attr:`redone`."""
        self.redone = []
        if not any(self.results.glob("*.npz")):
            return list(refs)
        todo = []
        for ref in refs:
            rec, why = self.load(ref.name)
            if why:
                self._discard(ref.name, why)
            if rec is None or rec.meta["sha256"] != _sha256_or_none(ref.path):
                todo.append(ref)
        return todo

    def _discard(self, name: str, why: str) -> None:
        path = self.path_of(name)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            raise UsageError(f"stored result '{path}' is invalid ({why}) and cannot be removed ({exc.strerror}); "
                             "delete it, then re-run") from None
        self.redone.append((name, why))
        self.log({"event": "invalid_result", "name": name, "reason": why})

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
        out = []
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json_loads(line, "log line", ValueError)  # ValueError also when nested too deep
            except ValueError:  # a line cut short by a kill
                continue
            if isinstance(entry, dict):
                out.append(entry)
        return out


def _sha256_or_none(path: str) -> str | None:
    try:
        return sha256_file(path) if os.path.isfile(path) else None
    except OSError:
        return None


_VERDICTS = ("PASS", "WARN", "FAIL", "ERROR")


def invalid_reason(name: str, meta, rows: np.ndarray, values: np.ndarray, n_tensors: int | None = None) -> str:
    """Why a stored result of input ``name`` is not a valid Record ('' when it is): the meta must be a dict
    for this input (status ok/error, a verdict, sha256 string; for "ok" the outputs / tasks / counts /
    first_divergence / run_ms types the report reads); rows int (n,) in [0, n_tensors); values float
    (n, len(COLUMNS))."""
    if not isinstance(meta, dict):
        return "meta is not a JSON object"
    if meta.get("input") != name:
        return f"meta names input {str(meta.get('input'))[:80]!r}"
    if meta.get("status") not in ("ok", "error") or meta.get("verdict") not in _VERDICTS:
        return "meta has no valid status / verdict"
    if not isinstance(meta.get("sha256"), str) or not isinstance(meta.get("reasons", []), list):
        return "meta has no valid sha256 / reasons"
    if meta["status"] == "ok" and not _ok_meta(meta):
        return "meta of an evaluated input lacks outputs / tasks / counts / run_ms"
    if rows.ndim != 1 or rows.dtype.kind not in "iu" or values.ndim != 2 or values.dtype.kind != "f":
        return "rows / values have the wrong rank or dtype"
    if values.shape != (len(rows), len(COLUMNS)):
        return f"values have shape {values.shape}, expected ({len(rows)}, {len(COLUMNS)})"
    if len(rows) and (rows.min() < 0 or (n_tensors is not None and rows.max() >= n_tensors)):
        return "rows point outside the model's tensors"
    return ""


def _ok_meta(meta: dict) -> bool:
    outputs, tasks, fd = meta.get("outputs"), meta.get("tasks"), meta.get("first_divergence")
    return (isinstance(outputs, dict) and all(isinstance(v, dict) for v in outputs.values())
            and isinstance(tasks, list) and all(isinstance(t, dict) and "passed" in t for t in tasks)
            and isinstance(meta.get("counts"), dict) and (fd is None or isinstance(fd, dict))
            and isinstance(meta.get("run_ms"), (int, float)) and not isinstance(meta.get("run_ms"), bool))


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


def _not_ours(path: Path) -> str | None:
    """Why the folder ``path`` (not empty) is not the store of a dataset run of ours, or None when it is: its
    manifest.json must be a regular file holding a JSON object with ``tool`` = :data:`TOOL` and every KEYED
    key (written by :func:`make_manifest`), ``results`` (when present) a real folder and ``log.jsonl`` a regular
    file. Reads only the manifest (bounded: toolkit.core.boundedjson)."""
    mpath = path / MANIFEST
    if mpath.is_symlink() or not mpath.is_file():
        return f"no {MANIFEST} of a dataset run to resume" if not (mpath.exists() or mpath.is_symlink()) else \
            f"its {MANIFEST} is not a regular file"
    try:
        old = json_loads(read_limited(mpath, MANIFEST, ValueError, limit="artifact"), MANIFEST, ValueError)
    except (ValueError, OSError) as exc:  # also json.JSONDecodeError
        return f"its {MANIFEST} is not a manifest of npuscope ({' '.join(str(exc).split())[:120]})"
    legacy = ("n_tensors", "model", "inputs")  # written before the "tool" key, with every other key of make_manifest
    if not isinstance(old, dict) or any(k not in old for k in KEYED) or \
            old.get("tool", TOOL if all(k in old for k in legacy) else None) != TOOL:
        return f"its {MANIFEST} is not a manifest of an npuscope dataset run"
    for name, is_kind in ((RESULTS, Path.is_dir), (LOG, Path.is_file)):
        entry = path / name
        if (entry.exists() or entry.is_symlink()) and (entry.is_symlink() or not is_kind(entry)):
            return f"its {name} is not what a dataset run writes"
    return None


def refuse_unless_ours(path: Path) -> None:
    """Raise UsageError (exit 2) when the non-empty folder ``path`` is not a dataset run of ours (:func:`_not_ours`);
    nothing in it is read but its manifest, nothing is written or removed."""
    why = _not_ours(path)
    if why is not None:
        raise UsageError(f"output folder '{path}' already exists and is not empty ({why}); npuscope resumes only a "
                         "dataset run of its own with the same settings and touches nothing else: choose a new --out")


def _resume_or_restart(path: Path, manifest: dict) -> bool:
    """True: resume ``path`` (its manifest is ours and matches). False: the folder held only the store of a run
    of ours with other settings that produced no successful result (e.g. every input failed on a config
    mistake); it was emptied so this run starts afresh. Raises UsageError otherwise (module docstring)."""
    refuse_unless_ours(path)
    mpath = path / MANIFEST
    old = json_loads(read_limited(mpath, MANIFEST, ValueError, limit="artifact"), MANIFEST, ValueError)
    diff = _differences(old, manifest)
    if not diff:
        return True
    if _only_store_files(path) and not Store(path, create=False).has_ok_result():
        for entry in (path / RESULTS, path / LOG, mpath):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
        return False
    raise UsageError(f"output folder '{path}' holds a dataset run with a different {', '.join(diff)}; "
                     f"choose a new --out, or re-run with the settings recorded in {mpath}")


def _remove_entries(path: Path, keep: str) -> None:
    for entry in path.iterdir():
        if entry.name != keep:
            _remove(entry, ignore_errors=True)


def _only_store_files(path: Path) -> bool:
    return all(p.name in (MANIFEST, LOG, RESULTS, LOCK) or p.name.startswith(".aggregate-") for p in path.iterdir())


def _has_content(path: Path) -> bool:
    """True when ``path`` holds anything besides the run lock."""
    return any(p.name != LOCK for p in path.iterdir())


def _lock_owner(path: Path) -> str:
    try:
        pid = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "another process"


def acquire_lock(folder: Path) -> int | None:
    """Take the exclusive run lock of ``folder`` (``folder/LOCK``, the holder's pid written in it) and return
    its file descriptor (None where fcntl does not exist). Raises UserError when another process holds it."""
    if fcntl is None:
        return None
    path = folder / LOCK
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise UserError(f"output folder '{folder}' is in use by another dataset run ({_lock_owner(path)}, "
                            f"lock {LOCK}); wait for it to finish or choose another --out") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:  # not a file its previous holder removed between our open and our flock
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
            return fd
        os.close(fd)
    raise UserError(f"could not lock output folder '{folder}' ({LOCK} keeps changing); retry or choose another --out")


def release_lock(folder: Path, fd: int | None) -> None:
    """Remove ``folder/LOCK`` (when it is still the file ``fd`` locks) and release the lock."""
    if fd is None:
        return
    path = folder / LOCK
    try:
        if os.path.samestat(os.fstat(fd), os.stat(path)):
            path.unlink()
    except FileNotFoundError:
        pass
    os.close(fd)


def check_store_out(explicit: str | Path | None) -> Path | None:
    """The checks of an explicit dataset ``--out`` that need no manifest, made before any work (the dataset
    workflows call it first thing; :func:`open_store` again): toolkit.core.artifacts.check_out's rules, except that
    a folder holding a ``manifest.json`` may be resumed (module docstring; whether its manifest matches is
    decided by :func:`open_store`). Returns ``Path(explicit)``, or None without ``explicit``. Nothing is created.

    Raises:
        UsageError (exit 2): an empty string, an existing file, a non-empty folder that is not a dataset run of
            ours (:func:`refuse_unless_ours`).
    """
    path = out_path(explicit)
    if path is None:
        return None
    if path.is_dir() and _has_content(path):
        refuse_unless_ours(path)
    return path


@contextlib.contextmanager
def open_store(explicit: str | None, base: str | Path, stem: str, manifest: dict):
    """Yield the :class:`Store` of a new run folder, or of an existing one to resume (module docstring).

    A folder holding only the store of a run with other settings and no successful result is emptied and
    started afresh (``Store.restarted``). When the body raises, a folder this call created (or emptied) is
    removed again unless it holds a successful result.

    Raises:
        UsageError: empty ``--out``, an existing file, a non-empty folder without a matching manifest.
    """
    path = check_store_out(explicit) or new_run_dir(base, stem)
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder '{path}' ({exc.strerror}); choose a writable --out") from None
    was_empty = created or not _has_content(path)
    lock = acquire_lock(path)  # before the folder's contents decide new / resume / restart
    store = None
    try:
        resumed = restarted = False
        if _has_content(path):
            resumed = _resume_or_restart(path, manifest)
            restarted = not resumed
        if not resumed:
            atomic_write_text(path / MANIFEST, _dumps(manifest))
        store = Store(path, resumed, manifest.get("n_tensors"))
        store.restarted = restarted
        yield store
    except BaseException:
        ours = created or was_empty or (store is not None and store.restarted)
        if ours and (store is None or not store.has_ok_result()):
            if created:
                shutil.rmtree(path, ignore_errors=True)
            else:  # the user's empty folder (or one we emptied): remove what this run put in it, keep the folder
                _remove_entries(path, keep=LOCK)
        raise
    finally:
        release_lock(path, lock)


#: The list of report files (names in the run folder) the last report of this folder consists of.
REPORT_RECORD = ".npuscope-report.json"
#: Where a report is written before it replaces the previous one (:func:`staged_report`).
REPORT_STAGE = ".npuscope-report.tmp"
#: Entries of a run folder that belong to the store, never to a report (never removed as a stale report file).
_NOT_REPORT = (MANIFEST, RESULTS, LOG, LOCK, REPORT_RECORD, REPORT_STAGE)


def _report_name(name) -> str | None:
    """``name`` as a report entry of the run folder ("repro/" -> "repro"), or None when it is no plain name of
    the folder's own (a path, '.', '..', an entry of the store, not text)."""
    if not isinstance(name, str):
        return None
    name = name.rstrip("/")
    if not name or name in (".", "..") or "/" in name or "\\" in name or name in _NOT_REPORT \
            or name.startswith(".aggregate-"):
        return None
    return name


def previous_report(folder: Path) -> set[str]:
    """The report entries an earlier run of ours wrote into ``folder``: the names in :data:`REPORT_RECORD`;
    for a folder written before that record existed, the files its summary.json names (``artifacts``, the fix's
    ``files``, ``repro``). Store entries (manifest, results, log) are never among them; unreadable records give
    an empty set."""
    names: list = []
    for path, pick in ((folder / REPORT_RECORD, lambda d: d.get("files", [])),
                       (folder / "summary.json", _summary_files)):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            data = json_loads(read_limited(path, path.name, ValueError, limit="artifact"), path.name, ValueError)
            names = list(pick(data)) if isinstance(data, dict) else []
        except (ValueError, OSError, TypeError, AttributeError):
            names = []
        break
    return {n for n in map(_report_name, names) if n is not None}


def _summary_files(summary: dict) -> list:
    """The files a summary.json written before :data:`REPORT_RECORD` existed says the run wrote."""
    files = list((summary.get("artifacts") or {}).values()) if isinstance(summary.get("artifacts"), dict) else []
    fix = summary.get("fix")
    if isinstance(fix, dict) and isinstance(fix.get("files"), dict):
        files += list(fix["files"].values())
    if summary.get("repro") == "repro/model.onnx":
        files.append("repro")
    return files


def _remove(path: Path, ignore_errors: bool = False) -> None:
    """Remove a file, a symlink (not what it points to) or a folder tree; ``ignore_errors``: as shutil.rmtree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=ignore_errors)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def staged_report(folder: Path):
    """Yield a fresh, empty folder inside the run folder ``folder`` to write a run's report into; when the body
    returns, that report replaces the previous one: its entries are moved into ``folder`` and every entry an
    earlier report of ours wrote there (:func:`previous_report`) that this report does not hold is removed
    (a resumed run that needs no fix leaves no keep_dtype.txt, fixed_config.json or repro/ of an earlier
    verdict; a run without HTML no index.html). Files the user put into the folder are never touched. The
    entries written are recorded in :data:`REPORT_RECORD`, first together with the previous ones (so a run
    killed while the report is moved in still knows every file to remove), then alone. When the body raises, the
    staged files are removed and the previous report is left as it was."""
    stage = folder / REPORT_STAGE
    if stage.exists() or stage.is_symlink():
        _remove(stage)
    stage.mkdir()
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    new = {n for n in (p.name for p in stage.iterdir()) if _report_name(n) is not None}
    old = previous_report(folder)
    atomic_write_text(folder / REPORT_RECORD, _dumps({"files": sorted(old | new)}))
    for name in sorted(old - new):
        _remove(folder / name)
    for name in sorted(new):
        target = folder / name
        if (target.exists() or target.is_symlink()) and \
                ((target.is_dir() and not target.is_symlink()) or (stage / name).is_dir()):
            _remove(target)  # os.replace cannot put a folder over an entry or anything over a folder
        os.replace(stage / name, target)
    atomic_write_text(folder / REPORT_RECORD, _dumps({"files": sorted(new)}))
    shutil.rmtree(stage, ignore_errors=True)
