"""Read one side of a dump comparison: a folder of .npy dumps or a Polygraphy RunResults JSON → :class:`DumpSet`.

Formats (``SideSpec.format``; ``"auto"`` picks one as listed):

``polygraphy`` a file: Polygraphy's RunResults JSON (``polygraphy run model.onnx --onnxrt --save-outputs
               out.json``, with ``--onnx-outputs mark all`` for every tensor), read with polygraphy's own
               decoder ``polygraphy.comparator.RunResults.from_json`` (optional dependency: ``pip install
               'npuscope[dumps]'``) from the file's UTF-8 text (a byte-order mark is fine). Tensor-keyed. One
               runner and one iteration are used: the first of each unless ``runner`` (exact name, unique prefix,
               or 0-based index) / ``iteration`` say otherwise. A file is taken for RunResults only when it looks
               like one before polygraphy is needed (:func:`run_results_kind`): Polygraphy's JSON encoder
               (polygraphy/json/serde.py, comparator/struct.py) writes a top-level object ``{"lst": [[runner,
               [iteration, ...]], ...], "polygraphy_class": "RunResults"}`` (older Polygraphy wrote the class key as
               ``"__polygraphy_encoded_RunResults": "polygraphy_serialized_json_type"``, which it still decodes);
               any other file is a one-line InputError naming the formats compare-dumps reads.
``npuscope``   a folder with ``index.json`` (written by ``npuscope run --dump``): ``{file: {"tensor", "kernel",
               ...}}``; tensor-keyed, in index order. Files the index lists but that are missing become
               unreadable dumps (reported rows), not errors.
``onnx`` / ``device``  a folder of ``.npy`` files named by one convention of :mod:`toolkit.dumps.names`
               (chosen per folder by :func:`~toolkit.dumps.names.choose_convention`), and for ``device`` also
               raw device dump files (:mod:`toolkit.dumps.raw`; one entry per output, keyed by the output's
               ``original_op`` when recorded: :mod:`toolkit.dumps.raw_entries`); node-keyed. A ``.npy`` (or
               raw-dump-like) name the chosen convention cannot read becomes an unreadable entry whose reason
               says why (``file name not understood: ...``); other files are listed in ``DumpSet.ignored``;
               device ``.input.{i}`` dumps and the inputs inside raw dumps are skipped (counted); a raw dump
               output and its ``.npy`` conversion in the same folder are one dump (:func:`use_conversions`); a
               (name, output index) dumped several times is taken at its latest timestamp (on equal timestamps the
               higher task id, which ran later, then the later file name).

A folder that holds no dump itself (no file, or only files that are no dumps, such as the ``{time}_summary.json``
some tools write beside the tree) is searched for the device's nested layout
``{time}/{device_id}/{om_model}/{model_id}/{iteration}/`` (:mod:`toolkit.dumps.nested`): the one folder below
it that holds files is read (the files beside it are listed as ignored); several such folders are an
InputError that lists them.

Only regular files are read (toolkit.core.textfile.open_regular, never blocking): a folder entry that is a FIFO,
socket, device or a symbolic link to one (``/dev/zero``) becomes an unreadable dump row ("<side> dump unreadable
(<file>): not a regular file but a FIFO (named pipe)") when the format names it as a dump, else it is listed in
``DumpSet.ignored``; a side path or ``index.json`` that is not a regular file is an InputError.

Every user mistake (missing/empty folder, nothing recognised, bad JSON, unknown runner) raises
:class:`toolkit.core.errors.InputError`, one line; polygraphy missing raises :class:`toolkit.core.errors.UserError`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from toolkit.core.boundedjson import check_depth, json_loads, read_limited
from toolkit.core.dtypes import dtype_named, is_ml_dtype
from toolkit.core.errors import InputError, UsageError, UserError
from toolkit.core.textfile import UTF8_BOM, not_regular_reason, open_regular, open_regular_text
from toolkit.core.userpaths import check_path

from .entry import NODE, TENSOR, DumpEntry, DumpReadError, DumpSet, read_npy
from .names import CONVENTIONS, choose_convention, dump_like, name_problem
from .nested import nested_dump_folder
from .raw_entries import dump_id, raw_dump_entries, unparsed_entry

FORMATS = ("auto", "npuscope", "onnx", "device", "polygraphy")
INDEX_FILE = "index.json"
_PREFER = {"golden": "onnx", "target": "device"}
_EXPECTED = ("expected {node}.{output_index}.{timestamp}.npy (ONNX golden), "
             "{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}[.output.{i}].npy (device; or the raw "
             "device dump files themselves), "
             "an `npuscope run --dump` folder (index.json) or a Polygraphy RunResults JSON")


@dataclass(frozen=True)
class SideSpec:
    """How to read one side. ``role``: "golden" or "target" (names the side in errors, breaks ties)."""

    path: str
    role: str
    format: str = "auto"
    runner: str | None = None
    iteration: int = 0

    @property
    def label(self) -> str:
        return f"{self.role.upper()} '{self.path}'"


def read_side(spec: SideSpec) -> DumpSet:
    """Read ``spec`` into a :class:`DumpSet` (see module docstring). Raises InputError / UsageError / UserError;
    InputError also for a path the file system refuses (toolkit.core.userpaths.check_path: a name too long, a
    symbolic link loop, a file on the way, permission denied)."""
    if spec.format not in FORMATS:
        raise UsageError(f"{spec.role} format '{spec.format}': expected one of {', '.join(FORMATS)}")
    path = Path(spec.path)
    check_path(path, spec.role.upper(), InputError,
               "give a folder of .npy dumps or a Polygraphy RunResults JSON")
    if not path.exists():
        raise InputError(f"{spec.label} does not exist; give a folder of .npy dumps or a Polygraphy RunResults JSON")
    if not path.is_dir() and not_regular_reason(path):
        raise InputError(f"{spec.label} is {not_regular_reason(path)}; give a folder of .npy dumps or a Polygraphy "
                         "RunResults JSON file")
    if path.is_file():
        if spec.format not in ("auto", "polygraphy"):
            raise InputError(f"{spec.label} is a file but --{spec.role}-format is {spec.format}; give the dump folder")
        return read_polygraphy(path, spec)
    if spec.format == "polygraphy":
        raise InputError(f"{spec.label} is a folder; --{spec.role}-format polygraphy needs the RunResults JSON file")
    files, nested = folder_members(path), None
    beside = [] if holds_dumps(files) else files  # e.g. the {time}_summary.json next to the {time}/ tree
    if beside or not files:
        nested = nested_dump_folder(path, spec.label, holds_dumps)
        if nested is None and not files:
            raise InputError(f"{spec.label} is an empty folder; {_EXPECTED}")
        if nested is not None:
            path, files = nested, folder_members(nested)
    if spec.format == "npuscope" or (spec.format == "auto" and INDEX_FILE in files):
        ds = read_npuscope(path, spec, files)
    else:
        ds = read_named(path, spec, files)
    if nested is not None:
        ds.detail = f"nested folder '{nested.relative_to(spec.path).as_posix()}': {ds.detail}"
        if beside:
            ds.ignored = [*beside, *ds.ignored]
            ds.detail += f" ({len(beside)} file(s) beside the nested tree ignored, e.g. '{beside[0]}')"
    return ds


def holds_dumps(files: list[str]) -> bool:
    """True when the folder member names ``files`` hold an ``index.json``, a ``.npy`` or a raw device dump name
    (a folder read as it is); False for a folder of other files only, whose dumps may be in a nested tree."""
    return INDEX_FILE in files or any(f.endswith(".npy") or CONVENTIONS["device"](f) is not None for f in files)


def folder_members(path: Path) -> list[str]:
    """Names of the entries directly in ``path`` that are not folders, sorted: regular files and also FIFOs,
    sockets, devices and (broken) symbolic links, so that such an entry named like a dump becomes an unreadable
    row ("not a regular file but a FIFO (named pipe)", never read: toolkit.core.textfile.open_regular) and any other
    is listed as ignored, instead of vanishing."""
    return sorted(p.name for p in path.iterdir() if not p.is_dir())


# ------------------------------------------------------------------------------------------ named .npy files
def read_named(path: Path, spec: SideSpec, files: list[str]) -> DumpSet:
    """A folder of ``.npy`` dumps named by the ONNX golden or the device convention, or of raw device dumps."""
    npy = [f for f in files if f.endswith(".npy")]
    raw = [f for f in files if not f.endswith(".npy") and CONVENTIONS["device"](f) is not None]
    if not npy and not raw:
        held = f" (it holds {len(files)} other file(s), e.g. '{files[0]}')" if files else ""
        logs = any(f.lower().endswith((".csv", ".log", ".json")) for f in files)
        hint = ("; compare-result CSVs, profiler exports and logs are read by `npuscope parse-log`" if logs else "")
        raise InputError(f"{spec.label} holds no .npy file and no raw device dump{held}; {_EXPECTED}{hint}")
    if not npy and spec.format == "onnx":
        raise InputError(f"{spec.label} holds raw device dumps only ({len(raw)}, e.g. '{raw[0]}') but "
                         f"--{spec.role}-format is onnx; use --{spec.role}-format device (or auto)")
    if spec.format == "auto":
        convention, counts = choose_convention(npy + raw, _PREFER.get(spec.role, "onnx"))
    else:
        convention = spec.format
        counts = {convention: sum(CONVENTIONS[convention](f) is not None for f in npy + raw)}
    if convention is None or counts.get(convention, 0) == 0:
        raise InputError(f"{spec.label}: no dump recognised among {len(npy)} .npy file(s) (e.g. '{npy[0]}'); "
                         f"{_EXPECTED}")
    return _named_set(path, spec, files, convention, counts)


def _named_set(path: Path, spec: SideSpec, files: list[str], convention: str, counts: dict) -> DumpSet:
    parse = CONVENTIONS[convention]
    latest: dict[tuple[str, int], DumpEntry] = {}
    ignored, inputs, superseded, raw_files = [], 0, 0, 0
    raw: list[DumpEntry] = []
    npy: list[DumpEntry] = []
    for order, fname in enumerate(files):
        parsed = parse(fname)
        if parsed is None:
            if dump_like(convention, fname):
                latest[(fname, -1)] = unparsed_entry(fname, name_problem(convention, fname), order)
            else:
                ignored.append(fname)
            continue
        if parsed.role == "input":
            inputs += 1
            continue
        if parsed.raw:
            raw_files += 1
            entries, raw_inputs = raw_dump_entries(path, fname, parsed, order)
            inputs += raw_inputs
            raw += entries
        else:
            npy.append(DumpEntry(parsed.name, parsed.index, NODE, fname, _npy_loader(path / fname, parsed.dtype),
                                 op_type=parsed.op_type, timestamp=parsed.timestamp, order=order,
                                 dump_id=dump_id(parsed, parsed.index), task_id=parsed.task_id))
    kept, converted = use_conversions(raw, npy)
    ties = 0  # dumps of one op output with one timestamp: the higher task id ran later
    for entry in sorted(kept, key=lambda e: e.order):
        key = (entry.name, entry.index)
        if key in latest:
            superseded += 1
            ties += latest[key].timestamp == entry.timestamp
            if (latest[key].timestamp, latest[key].task_id, latest[key].order) > \
                    (entry.timestamp, entry.task_id, entry.order):
                continue
        latest[key] = entry
    if not latest:
        raise InputError(f"{spec.label}: only device input dumps (.input.{{i}}.npy) found; convert the op outputs too "
                         f"(msaccucmp.py convert without -i)")
    detail = f"{convention} file names ({', '.join(f'{k}: {v}' for k, v in counts.items())} of {len(files)} files)"
    if raw_files:
        detail += f", {raw_files} raw device dump file(s) read without the vendor toolchain"
    if ties:
        detail += (f"; {ties} dump(s) of an op output share its timestamp with another: the one of the higher task "
                   "id (it ran later) is used")
    if converted:
        detail += (f"; {converted} raw dump output(s) also converted to .npy in the folder: the .npy conversion is "
                   "used (the vendor tool's reading of the same dump; the raw output counts as superseded)")
    return DumpSet(path, convention, NODE, list(latest.values()), ignored, inputs, superseded + converted, detail)


def use_conversions(raw: list[DumpEntry], npy: list[DumpEntry]) -> tuple[list[DumpEntry], int]:
    """(the entries to use, the number of raw outputs dropped). A ``.npy`` whose ``dump_id`` (op name in the
    file name, output index, timestamp) is that of a raw dump output is that output converted (``msaccucmp.py
    convert`` writes ``<raw file name>.output.{i}.npy`` beside it): the same dump, used once. The ``.npy`` gives
    the values (the vendor tool's reading, which the user converted the dump to have read); the raw header keeps
    the identity it records (original op and output index, device op), which the file name cannot carry."""
    by_id = {e.dump_id: e for e in raw if e.dump_id is not None}
    out, dropped = list(raw), set()
    for e in npy:
        r = by_id.get(e.dump_id)
        if r is None or id(r) in dropped:
            out.append(e)
            continue
        dropped.add(id(r))
        out.append(replace(r, source=e.source, load=e.load, order=e.order))
    return [e for e in out if id(e) not in dropped], len(dropped)


def _npy_loader(path: Path, dtype_name: str = ""):
    """Loader of a named ``.npy`` dump. ``dtype_name``: the dtype its file name gives (MindSpore's
    ``.output.{i}.{format}.{dtype}.npy``), which restores an ml_dtypes tensor np.save wrote as raw bytes (void
    ``|V2`` for bfloat16): :func:`restore_dtype` for void arrays only; any other array is returned as read."""
    def load():
        arr = read_npy(path)
        return restore_dtype(arr, dtype_name) if dtype_name and arr.dtype.kind == "V" else arr
    return load


# ------------------------------------------------------------------------------------------ npuscope folders
def read_npuscope(path: Path, spec: SideSpec, files: list[str]) -> DumpSet:
    """An ``npuscope run --dump`` folder: ``index.json`` maps each ``.npy`` file to its tensor and kernel."""
    index = _load_index(path / INDEX_FILE, spec)
    entries, seen = [], set()
    for order, (fname, info) in enumerate(index.items()):
        tensor = info["tensor"]
        if tensor in seen:
            raise InputError(f"{spec.label}/{INDEX_FILE}: tensor '{tensor}' is listed twice; re-run npuscope run --dump")
        seen.add(tensor)
        entries.append(DumpEntry(tensor, 0, TENSOR, fname, _npuscope_loader(path / fname, info.get("dtype")),
                                 kernel=str(info.get("kernel") or ""), order=order))
    if not entries:
        raise InputError(f"{spec.label}/{INDEX_FILE} lists no dump; re-run npuscope run --dump")
    ignored = [f for f in files if f != INDEX_FILE and f not in index]
    return DumpSet(path, "npuscope", TENSOR, entries, ignored, detail=f"npuscope dump folder ({len(entries)} tensors)")


def _npuscope_loader(path: Path, dtype_name):
    return lambda: restore_dtype(read_npy(path), dtype_name)


def restore_dtype(arr: np.ndarray, dtype_name) -> np.ndarray:
    """``arr`` (a dump file's array) in the tensor's own dtype recorded in index.json (``dtype``), when that is an
    ml_dtypes dtype (bfloat16, float8_*, int4, uint2, ...): npuscope stores those in an exact standard dtype
    (float32 / int8 / uint8: toolkit.core.artifacts.storable), older npuscope wrote their raw bytes (void ``|V2`` /
    ``|V1``); both come back exactly. Anything else (strings stored as ``<U``, numpy dtypes, an unknown or
    missing name) is returned as read. Raises DumpReadError when the file cannot hold the recorded dtype."""
    want = dtype_named(dtype_name)
    if want is None or not is_ml_dtype(want) or arr.dtype == want:
        return arr
    if arr.dtype.kind == "V" and arr.dtype.itemsize == want.itemsize:
        return arr.view(want)
    restored = arr.astype(want)
    if not np.array_equal(restored.astype(arr.dtype), arr, equal_nan=arr.dtype.kind == "f"):
        raise DumpReadError(f"holds {arr.dtype} values that are not all {want} values (index.json records {want})")
    return restored


def _load_index(path: Path, spec: SideSpec) -> dict:
    where = f"{spec.label}/{INDEX_FILE}"
    text = read_limited(path, f"{spec.role} index file", InputError, "re-run npuscope run --dump",
                        limit="artifact")  # a regular file only, nested at most MAX_DEPTH
    try:
        index = json_loads(text, where, InputError)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} is not valid JSON ({exc.msg} at line {exc.lineno}); re-run npuscope run --dump") from None
    if not isinstance(index, dict):
        raise InputError(f"{where}: expected an object {{file: {{\"tensor\": ..., \"kernel\": ...}}}}, got "
                         f"{type(index).__name__}")
    for fname, info in index.items():
        if not isinstance(info, dict) or not isinstance(info.get("tensor"), str) or not info["tensor"]:
            raise InputError(f"{where}: entry '{fname}' needs a non-empty \"tensor\" name")
        if "/" in fname or "\\" in fname or fname in (".", "..") or not fname.endswith(".npy"):
            raise InputError(f"{where}: entry '{fname}' must be a .npy file name inside the folder")
    return index


# ------------------------------------------------------------------------------------------ Polygraphy JSON
#: Bytes read from each end of a JSON file to tell whether it is a RunResults (its class key is the top-level
#: object's last key, after every tensor, or its first in a re-ordered file).
RUN_RESULTS_PEEK = 4096
_CLASS_KEY = (rb'"(?:polygraphy_class"\s*:\s*"(?P<cls>[^"\\]*)"'
              rb'|__polygraphy_encoded_(?P<legacy>\w+)"\s*:\s*"polygraphy_serialized_json_type")')
_CLASS_LAST = re.compile(_CLASS_KEY + rb"\s*\}\s*\Z")
_CLASS_FIRST = re.compile(rb"\A\{\s*" + _CLASS_KEY + rb"\s*,")
_LST_FIRST = re.compile(rb'\A\{\s*(?:"[^"\\]*"\s*:\s*"[^"\\]*"\s*,\s*)?"lst"\s*:\s*\[')


def run_results_kind(head: bytes, tail: bytes) -> str:
    """What a file given as a dump side is, from its first and last :data:`RUN_RESULTS_PEEK` bytes (the same
    bytes twice for a short file): ``"empty"``, ``"not JSON"`` (it starts with neither ``{`` nor ``[``),
    ``"RunResults"`` (module docstring: a top-level object whose first key, or first after the class key, is
    ``"lst"`` holding an array, and whose class key, first or last, names RunResults), the name of another
    Polygraphy class at its top level (``"polygraphy Foo"``), or ``"other"`` (it starts like JSON but is none of
    these). A UTF-8 BOM and white space around the JSON are ignored."""
    head = head[len(UTF8_BOM):] if head.startswith(UTF8_BOM) else head
    head = head.lstrip()
    if not head:
        return "empty"
    if not head.startswith((b"{", b"[")):
        return "not JSON"
    found = _CLASS_LAST.search(tail) or _CLASS_FIRST.match(head)
    cls = (found["cls"] or found["legacy"]).decode("ascii", "replace") if found else ""
    if cls == "RunResults" and _LST_FIRST.match(head):
        return "RunResults"
    return f"polygraphy {cls}" if cls and cls != "RunResults" else "other"


def _peek_ends(path: Path) -> tuple[bytes, bytes]:
    """(the first, the last :data:`RUN_RESULTS_PEEK` bytes) of a regular file."""
    with open_regular(path) as fh:  # read_side refused anything but a regular file already
        head = fh.read(RUN_RESULTS_PEEK)
        size = os.fstat(fh.fileno()).st_size
        if size <= len(head):
            return head, head
        fh.seek(max(size - RUN_RESULTS_PEEK, 0))
        return head, fh.read(RUN_RESULTS_PEEK)


def read_polygraphy(path: Path, spec: SideSpec) -> DumpSet:
    """A Polygraphy RunResults JSON, decoded with ``polygraphy.comparator.RunResults.from_json``.

    Raises:
        InputError: the file is empty, not JSON, JSON of another kind (:func:`run_results_kind`: the message
            names the formats compare-dumps reads), nested too deep, not UTF-8, not a RunResults polygraphy can
            decode, or the runner / iteration asked for is not in it.
        UserError: it is a RunResults but polygraphy is not installed.
    """
    kind = run_results_kind(*_peek_ends(path))
    save = "polygraphy run ... --save-outputs FILE"
    if kind in ("empty", "not JSON"):
        what = "an empty file" if kind == "empty" else "not JSON"
        raise InputError(f"{spec.label} is {what}; give a folder of .npy dumps or a Polygraphy RunResults JSON "
                         f"({save})")
    if kind != "RunResults":
        what = (f"a Polygraphy {kind.split(' ', 1)[1]} JSON, not RunResults" if kind.startswith("polygraphy ")
                else 'not a Polygraphy RunResults JSON (a top-level object {"lst": [...], '
                     '"polygraphy_class": "RunResults"})')
        raise InputError(f"{spec.label} is {what}; {_EXPECTED} ({save})")
    try:
        from polygraphy.comparator import RunResults
        from polygraphy.exception import PolygraphyException
        from polygraphy.logger import G_LOGGER
    except ImportError:
        raise UserError(f"{spec.label} is a Polygraphy RunResults JSON; reading it needs polygraphy: "
                        "pip install 'npuscope[dumps]' (or pip install polygraphy)") from None
    with open_regular(path) as fh:  # json nested 100,000 deep would stop polygraphy's parser with RecursionError
        check_depth(fh.read(), spec.label, InputError)
    try:
        with open_regular_text(path, errors="strict") as fh:  # UTF-8; a byte-order mark dropped
            text = fh.read()
        with G_LOGGER.verbosity(G_LOGGER.CRITICAL + 1):  # polygraphy logs loading progress to stdout
            results = RunResults.from_json(text)
    except PolygraphyException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "not a RunResults"
        raise InputError(f"{spec.label}: {first} Save it with `{save}`") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{spec.label} is not valid JSON ({exc.msg} at line {exc.lineno}); "
                         f"give a Polygraphy RunResults JSON ({save})") from None
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        raise InputError(f"{spec.label} cannot be read as a Polygraphy RunResults JSON "
                         f"({type(exc).__name__}: {exc}); save it with {save}") from None
    runner = _pick_runner(list(results.keys()), spec)
    iterations = results[runner]
    if not 0 <= spec.iteration < len(iterations):
        raise InputError(f"{spec.label}: runner '{runner}' has {len(iterations)} iteration(s); "
                         f"--{spec.role}-iteration {spec.iteration} must be 0..{len(iterations) - 1}")
    outputs = iterations[spec.iteration]
    if not list(outputs.keys()):
        raise InputError(f"{spec.label}: runner '{runner}' iteration {spec.iteration} holds no outputs; "
                         "save them with polygraphy run ... --onnx-outputs mark all --save-outputs FILE")
    entries = [DumpEntry(name, 0, TENSOR, f"{runner}[{spec.iteration}]:{name}", _polygraphy_loader(outputs, name),
                         order=order) for order, name in enumerate(outputs.keys())]
    detail = f"Polygraphy RunResults: runner '{runner}', iteration {spec.iteration} of {len(iterations)}"
    return DumpSet(path, "polygraphy", TENSOR, entries, detail=detail)


def _pick_runner(names: list[str], spec: SideSpec) -> str:
    """First runner by default; else an exact name, a unique prefix, or a 0-based index."""
    if not names:
        raise InputError(f"{spec.label} holds no runner results; save them with polygraphy run ... --save-outputs FILE")
    want = spec.runner
    if want is None:
        return names[0]
    if want in names:
        return want
    prefixed = [n for n in names if n.startswith(want)]
    if len(prefixed) == 1:
        return prefixed[0]
    if want.isdigit() and int(want) < len(names):
        return names[int(want)]
    why = "matches several runners" if prefixed else "matches no runner"
    raise InputError(f"{spec.label}: --{spec.role}-runner '{want}' {why}; runners: {', '.join(names)}")


def _polygraphy_loader(outputs, name: str):
    def load() -> np.ndarray:
        try:
            arr = outputs[name]
        except Exception as exc:  # polygraphy swaps big arrays to temporary files; any failure is a bad dump
            raise DumpReadError(f"polygraphy could not load it ({type(exc).__name__}: {exc})") from None
        if not isinstance(arr, np.ndarray):
            raise DumpReadError(f"holds a {type(arr).__name__}, not a NumPy array")
        return arr

    return load
