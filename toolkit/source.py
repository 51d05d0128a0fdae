"""Resolve what the user named (a sample, a zoo model, a file) and the inputs to feed it.

A model argument is: nothing (the default sample), a sample name (toolkit.samples), a zoo name
(toolkit.zoo, fetched and verified), or a path.

``--inputs`` takes the same three forms on every command (:func:`input_kind`):

- an ``.npz`` file (checked against the model): one input set;
- a folder of ``.npz`` files, or a loader script ``file.py[:function]`` returning or yielding feed dicts
  (toolkit.inputs.loader): several input sets. diagnose / compare / signoff run all of them as a dataset run
  (toolkit.dataset), tune uses all of them, profile feeds them to its requests in turn
  (:func:`input_sets`); the single-run commands — run, memcheck — take a folder holding exactly one file or a
  loader giving exactly one set, and refuse more, naming the count.

Without ``--inputs``: the model's registered realistic input (rendered text for the OCR models, the sample's
own generator), else seeded random data (``--seed``), whose range is set per input with ``--val-range`` and
whose dynamic dims are bound by ``--input-shape``.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from toolkit import samples, zoo
from toolkit.compiler.passes.bind_shapes import check_input_shapes, dynamic_dims_message
from toolkit.core.errors import InputError, ModelError, UsageError, UserError
from toolkit.core.text import escape_surrogates, suggest
from toolkit.core.userpaths import check_path, path_problem, shown_path
from toolkit.inputs import (
    input_specs,
    load_npz,
    parse_val_range,
    random_inputs,
    realistic_inputs,
)
from toolkit.inputs.loader import is_loader, load_sets, split_spec
from toolkit.inputs.npz import npz_files
from toolkit.inputs.synthetic import ALL_INPUTS, check_val_range
from toolkit.ir.load import file_sha256


@dataclass
class ModelSource:
    path: Path
    name: str  # short display name (sample/zoo name or file stem; bytes that are not UTF-8 escaped: "m\xff")
    kind: str  # "sample" | "zoo" | "file"


def resolve_model(arg: str | None) -> ModelSource:
    """ModelSource for a CLI model argument (see module docstring). Raises UserError."""
    if arg is None:
        name = samples.default_sample()
        return ModelSource(samples.sample_path(name), name, "sample")
    if arg in samples.SAMPLES:
        return ModelSource(samples.sample_path(arg), arg, "sample")
    if arg in zoo.MODELS:
        return ModelSource(zoo.fetch(arg), arg, "zoo")
    _check_model_path(arg)
    try:
        path = zoo.resolve(arg)
    except UserError as exc:
        raise UserError(f"{exc}; bundled samples: {', '.join(samples.SAMPLES)}") from None
    zname = _zoo_name_of(path)  # a zoo model given by its path: its zoo name finds its realistic input
    return ModelSource(path, zname or escape_surrogates(path.stem), "zoo" if zname else "file")


_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
#: Bytes read from a file whose size reads as 0 (procfs/sysfs report 0 for files that hold text).
_PROBE_BYTES = 1 << 20


def _check_model_path(arg: str) -> None:
    """Refuse a MODEL path that exists but is no regular file with readable ONNX bytes, saying what it is:
    a directory (its .onnx files listed), a FIFO / socket / device, a symlink loop or a dangling symlink, an
    unreadable file, or a file whose size reads as 0 but that holds bytes (``/proc/self/status``: procfs
    reports size 0), which is not an ONNX model. A path that does not exist is left to
    :func:`toolkit.zoo.resolve`. Raises UserError / ModelError (exit 2)."""
    p = Path(arg).expanduser()
    fix = "pass the .onnx file itself, a bundled sample or a zoo name"
    try:
        st = p.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"model path '{arg}' is a symlink loop (it never reaches a file); {fix}") from None
        if isinstance(exc, FileNotFoundError):
            if p.is_symlink():
                raise UserError(f"model path '{arg}' is a symlink to '{os.readlink(p)}', which does not exist; "
                                f"{fix}") from None
            return
        why = path_problem(p) or exc.strerror or str(exc)  # a name too long, a file on the way, permission denied
        raise UserError(f"model path '{shown_path(arg)}' cannot be used: {why}; {fix}") from None
    if stat.S_ISDIR(st.st_mode):
        found = sorted(q.name for q in p.glob("*.onnx"))[:3]
        inside = f" (it holds {', '.join(found)})" if found else " (it holds no .onnx file)"
        raise UserError(f"model path '{arg}' is a directory{inside}; {fix}")
    if not stat.S_ISREG(st.st_mode):
        what = next((name for test, name in _FILE_KINDS if test(st.st_mode)), "a special file")
        raise UserError(f"model path '{arg}' is not a regular file but {what}; save the model to an .onnx file "
                        "and pass that")
    if st.st_size == 0:
        data = _read(p, _PROBE_BYTES)
        if data:
            raise ModelError(f"model file '{arg}' is not an ONNX model: its size reads as 0 but it holds "
                             f"{'over ' if len(data) >= _PROBE_BYTES else ''}{len(data)} bytes (a /proc or /sys "
                             "file?); pass an .onnx file")


def _read(path: Path, limit: int | None = None) -> bytes:
    """The bytes of ``path`` (at most ``limit``); ModelError (one line) when the file cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read() if limit is None else fh.read(limit)
    except OSError as exc:
        raise ModelError(f"model file '{path}' cannot be read ({exc.strerror or exc}); pass a readable .onnx "
                         "file") from None


def _zoo_name_of(path: Path) -> str | None:
    """The zoo name whose sha256 this file has (so a downloaded PP-OCR model gets its realistic input)."""
    size = path.stat().st_size
    if size > 64 * 2**20:
        return None
    digest = file_sha256(path)
    for name, info in zoo.MODELS.items():
        if info.sha256 == digest:
            return name
    return None


def default_input_shapes(src: ModelSource, model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """{input name: shape} binding ``model``'s dynamic inputs to the shapes the other commands feed by default
    (:func:`prepare_inputs` without --inputs): a zoo model's registered input shape
    (:attr:`toolkit.zoo.ZooModel.input_shape`, e.g. ppocr_cls x (1, 3, 48, 192)), a bundled sample's generator
    shapes (seed 0). Only inputs with a dynamic dim are listed; {} for a plain file."""
    dynamic = [s.name for s in input_specs(model) if not s.is_static]
    if not dynamic:
        return {}
    if src.kind == "zoo":
        info = zoo.model_info(src.name)
        shapes = {info.input_name: tuple(info.input_shape)}
    elif src.kind == "sample":
        shapes = {k: tuple(np.shape(v)) for k, v in samples.sample(src.name).make_inputs(0).items()}
    else:
        return {}
    return {k: v for k, v in shapes.items() if k in dynamic}


@dataclass
class Feed:
    arrays: dict[str, np.ndarray]
    origin: str  # human-readable description: "file x.npz", "rendered text", "random seed=0 ..."
    seed: int | None = None


#: Largest generated input, in bytes (declared sizes are checked before anything is allocated).
MAX_GENERATED_BYTES = 4 * 2**30


def _check_shapes(feed: dict, input_shapes: dict, origin: str) -> None:
    for name, want in (input_shapes or {}).items():
        if name in feed and tuple(np.shape(feed[name])) != tuple(want):
            raise InputError(f"input '{name}' from {origin} has shape {tuple(np.shape(feed[name]))} but "
                             f"--input-shape / input_shape says {tuple(want)}; make them agree or drop one")


#: What a command's message says to do about unbound dynamic dims (``{example}``: ``name:d0,d1,...``); a command
#: without --input-shape (memcheck) passes its own to :func:`prepare_inputs`.
BIND_FIX = 'give its shape with --input-shape "{example}" (N: your sizes) or pass --inputs'
#: The same for commands that take input_shape from the config file only.
CONFIG_BIND_FIX = 'give its shape with input_shape = "{example}" (N: your sizes) in a --config file, or pass --inputs'


def _generated_dims(specs, input_shapes: dict, bind_fix: str = BIND_FIX) -> dict:
    """{input name: full shape} for generated data; dynamic dims must be bound by input_shape."""
    dims = {}
    for spec in specs:
        if spec.name in input_shapes:
            dims[spec.name] = tuple(input_shapes[spec.name])
            continue
        shape = spec.shape or ()
        if spec.shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
            raise InputError(dynamic_dims_message(spec.name, spec.shape, bind_fix))
        dims[spec.name] = tuple(shape)
    for name, shape in dims.items():
        nbytes = int(np.prod(shape, dtype=np.float64)) * 8
        if nbytes > MAX_GENERATED_BYTES:
            raise InputError(f"input '{name}' of shape {shape} would need {nbytes / 2**30:.1f} GiB of generated "
                             f"data (limit {MAX_GENERATED_BYTES // 2**30} GiB); give a smaller --input-shape")
    return dims


def prepare_inputs(model: onnx.ModelProto, src: ModelSource, inputs: str | None = None, seed: int = 0,
                   val_range: str | None = None, input_shapes: dict | None = None, *,
                   bind_fix: str = BIND_FIX) -> Feed:
    """The feed for one run (see module docstring). ``input_shapes`` ({name: dims}, the converter's
    input_shape) sets the shapes of generated data and must agree with given data. ``bind_fix``: what the
    message for an unbound dynamic dim suggests (:data:`BIND_FIX`, :data:`CONFIG_BIND_FIX`). Raises
    InputError; UsageError (exit 2) for a bad --val-range / --input-shape, or --seed / --val-range with
    ``inputs`` (:func:`check_generation_options`)."""
    check_generation_options(inputs, seed, val_range)
    feed = _prepare(model, src, inputs, seed, val_range, input_shapes or {}, bind_fix)
    feed.arrays = {k: (np.asarray(v) if v is not None and not isinstance(v, list) else v)
                   for k, v in feed.arrays.items()}
    _check_shapes(feed.arrays, input_shapes or {}, feed.origin)
    return feed


def check_generation_options(inputs, seed: int, val_range: str | None) -> None:
    """--seed (other than 0, its default) and --val-range shape the data generated when ``--inputs`` is not
    given; with ``inputs`` they would do nothing: UsageError (exit 2) naming them."""
    if input_kind(inputs) is None:
        return
    given = [o for o, v in (("--seed", seed), ("--val-range", val_range)) if v]
    if given:
        raise UsageError(f"{' and '.join(given)} shape{'s' if len(given) == 1 else ''} the inputs generated without "
                         f"--inputs, and --inputs '{inputs}' gives them: drop {' and '.join(given)} or --inputs")


def _val_ranges(text: str, specs=None) -> dict:
    """parse_val_range with usage-error semantics (finite bounds, lo <= hi); with ``specs`` each input's range
    must also lie within its dtype's finite values (toolkit.inputs.synthetic.check_val_range: float16 ±65504,
    integer min/max, ...), else UsageError naming the input, its dtype and the range."""
    try:
        ranges = parse_val_range(text)
        for spec in specs or ():
            if spec.name in ranges or ALL_INPUTS in ranges:
                check_val_range(spec, ranges.get(spec.name, ranges.get(ALL_INPUTS)))
    except InputError as exc:
        raise UsageError(f"--val-range: {exc}") from None
    return ranges


def _check_options(model, specs, val_range, input_shapes) -> None:
    """--input-shape and --val-range are options: a name or shape the model cannot take is a usage error
    (exit 2), found before any data is read or generated."""
    if input_shapes:
        check_input_shapes(model, dict(input_shapes))
    if val_range:
        names = [s.name for s in specs]
        for name in _val_ranges(val_range):
            if name != ALL_INPUTS and name not in names:
                raise UsageError(f"--val-range names '{name}', which is not an input of the model{suggest(name, names)}")
        _val_ranges(val_range, specs)


#: What a single-run command (run, memcheck) says about a folder or loader with more than one input set.
SINGLE_RUN_FIX = ("this command runs one input set; pass one file, make the loader give one set, or run them "
                  "with compare, diagnose, signoff, tune or profile, which use every set")
#: Most input sets a loader may give to a command that holds them all in memory (tune, profile), by default.
MAX_SETS = 1000


def input_kind(inputs) -> str | None:
    """What an ``--inputs`` value names: ``"loader"`` (``file.py[:function]``), ``"folder"`` (a directory of
    .npz files), ``"file"`` (anything else: an .npz), None when not given. Every command looks at ``--inputs``
    here first.

    Raises:
        InputError (exit 2): a path the file system refuses to look at (toolkit.core.userpaths.check_path: a name
            too long, a symbolic link loop, a file on the way, permission denied).
    """
    if inputs is None or not str(inputs).strip():
        return None
    if is_loader(inputs):
        check_path(split_spec(str(inputs))[0], "--inputs loader script", InputError, INPUTS_FIX)
        return "loader"
    st = check_path(inputs, "--inputs", InputError, INPUTS_FIX)
    return "folder" if st is not None and stat.S_ISDIR(st.st_mode) else "file"


#: What a message about an --inputs path that cannot be used says to do.
INPUTS_FIX = "give an .npz file, a folder of .npz files or a loader file.py:function"


def several_sets(inputs) -> bool:
    """True when ``--inputs`` names a folder or a loader: input sets that diagnose / compare / signoff run as a
    dataset run."""
    return input_kind(inputs) in ("folder", "loader")


def input_sets(model: onnx.ModelProto, src: ModelSource, inputs: str | None, seed: int = 0,
               val_range: str | None = None, input_shapes: dict | None = None, max_sets: int = MAX_SETS,
               too_many: str | None = None) -> list[tuple[str, dict]]:
    """[(label, feed)] of every input set ``inputs`` names: each file of a folder (sorted by name), each set a
    loader gives, one .npz, or the model's default input (:func:`prepare_inputs` without --inputs: realistic,
    sample generator or seeded random data shaped by ``input_shapes``). More than ``max_sets`` sets is refused,
    never cut; ``too_many`` says what to do about it (after the count and the limit).

    Raises:
        InputError: a bad file, loader or feed; too many sets. UsageError: a bad --val-range / --input-shape.
    """
    too_many = too_many or f"the limit of this command ({max_sets})"
    check_generation_options(inputs, seed, val_range)
    if input_kind(inputs) not in ("folder", "loader"):
        feed = prepare_inputs(model, src, inputs, seed, val_range, input_shapes)
        return [(Path(inputs).name if inputs else feed.origin, feed.arrays)]
    specs = input_specs(model)
    _check_options(model, specs, val_range, input_shapes)
    if input_kind(inputs) == "loader":
        return load_sets(inputs, specs, max_sets, too_many)
    p = Path(inputs)
    files = npz_files(p)
    if not files:
        raise InputError(f"--inputs directory '{p}' holds no .npz files; write one per input set")
    if len(files) > max_sets:
        raise InputError(f"--inputs directory '{p}' holds {len(files)} .npz files, more than {too_many}")
    return [(f.name, load_npz(f, specs)) for f in files]


def _prepare(model, src, inputs, seed, val_range, input_shapes, bind_fix=BIND_FIX) -> Feed:
    specs = input_specs(model)
    _check_options(model, specs, val_range, input_shapes)
    if inputs is not None and not str(inputs).strip():
        raise InputError("--inputs is empty; give an .npz file, a folder of .npz files or a loader file.py:function")
    if inputs and is_loader(inputs):
        (label, arrays), = load_sets(str(inputs), specs, 1, SINGLE_RUN_FIX)
        return Feed(arrays, f"loader {inputs} ({label})")
    if inputs:
        p = Path(inputs)
        if p.is_dir():
            files = npz_files(p)
            if not files:
                raise InputError(f"--inputs directory '{p}' holds no .npz files; write one per input set")
            if len(files) > 1:  # never a silent choice of one set among many
                raise InputError(f"--inputs directory '{p}' holds {len(files)} .npz files but this command runs "
                                 f"one input set; pass one file (e.g. '{files[0]}'), or run the folder with "
                                 "compare, diagnose, signoff, tune or profile, which use every file")
            p = files[0]
        return Feed(load_npz(p, specs), f"file {p}")
    zname = src.name if src.kind == "zoo" else _zoo_name_of(src.path)
    if zname and not val_range and not input_shapes:
        return Feed(realistic_inputs(zname), f"rendered text image ({zname})")
    if src.kind == "sample" and not val_range and not input_shapes:
        return Feed(samples.sample(src.name).make_inputs(seed), f"sample generator seed={seed}", seed)
    ranges = _val_ranges(val_range) if val_range else None
    dims = _generated_dims(specs, input_shapes, bind_fix)
    return Feed(random_inputs(specs, seed=seed, val_ranges=ranges, dim_values=dims),
                f"random seed={seed} range={val_range or '[0,1)'}", seed)
