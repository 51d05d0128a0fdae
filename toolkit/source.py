"""Resolve what the user named (a sample, a zoo model, a file) and the inputs to feed it.

A model argument is: nothing (the default sample), a sample name (toolkit.samples), a zoo name
(toolkit.zoo, fetched and verified), or a path. Inputs are: an ``.npz`` file (checked against the model),
a directory of ``.npz`` files (diagnose / compare / signoff run all of them as a dataset run, see
toolkit.dataset; other single-run commands use the first), or — without ``--inputs`` — the
model's registered realistic input (rendered text for the OCR models, the sample's own generator), else
seeded random data whose range is set per input with ``--val-range``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from toolkit import samples, zoo
from toolkit.errors import InputError, UserError
from toolkit.inputs import input_specs, load_npz, parse_val_range, random_inputs, realistic_inputs
from toolkit.inputs.synthetic import ALL_INPUTS


@dataclass
class ModelSource:
    path: Path
    name: str  # short display name (sample/zoo name or file stem)
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
    try:
        path = zoo.resolve(arg)
    except UserError as exc:
        raise UserError(f"{exc}; bundled samples: {', '.join(samples.SAMPLES)}") from None
    zname = _zoo_name_of(path)  # a zoo model given by its path: its zoo name finds its realistic input
    return ModelSource(path, zname or path.stem, "zoo" if zname else "file")


def _zoo_name_of(path: Path) -> str | None:
    """The zoo name whose sha256 this file has (so a downloaded PP-OCR model gets its realistic input)."""
    size = path.stat().st_size
    if size > 64 * 2**20:
        return None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    for name, info in zoo.MODELS.items():
        if info.sha256 == digest:
            return name
    return None


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


def _generated_dims(specs, input_shapes: dict) -> dict:
    """{input name: full shape} for generated data; dynamic dims must be bound by input_shape."""
    dims = {}
    for spec in specs:
        if spec.name in input_shapes:
            dims[spec.name] = tuple(input_shapes[spec.name])
            continue
        shape = spec.shape or ()
        if spec.shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
            example = ",".join(str(d) if isinstance(d, int) and d >= 0 else "1" for d in shape)
            raise InputError(f"input '{spec.name}' has dynamic dims {list(shape) if shape else '(unknown rank)'}; "
                             f"give its shape with --input-shape \"{spec.name}:{example}\" (replace the 1s with your "
                             "sizes) or pass --inputs")
        dims[spec.name] = tuple(shape)
    for name, shape in dims.items():
        nbytes = int(np.prod(shape, dtype=np.float64)) * 8
        if nbytes > MAX_GENERATED_BYTES:
            raise InputError(f"input '{name}' of shape {shape} would need {nbytes / 2**30:.1f} GiB of generated "
                             f"data (limit {MAX_GENERATED_BYTES // 2**30} GiB); give a smaller --input-shape")
    return dims


def prepare_inputs(model: onnx.ModelProto, src: ModelSource, inputs: str | None = None, seed: int = 0,
                   val_range: str | None = None, input_shapes: dict | None = None) -> Feed:
    """The feed for one run (see module docstring). ``input_shapes`` ({name: dims}, the converter's
    input_shape) sets the shapes of generated data and must agree with given data. Raises InputError."""
    feed = _prepare(model, src, inputs, seed, val_range, input_shapes or {})
    feed.arrays = {k: (np.asarray(v) if v is not None and not isinstance(v, list) else v)
                   for k, v in feed.arrays.items()}
    _check_shapes(feed.arrays, input_shapes or {}, feed.origin)
    return feed


def _val_ranges(text: str) -> dict:
    """parse_val_range with usage-error semantics and finite float32 bounds."""
    from toolkit.errors import UsageError

    try:
        ranges = parse_val_range(text)
    except InputError as exc:
        raise UsageError(f"--val-range: {exc}") from None
    big = float(np.finfo(np.float32).max)
    for name, (lo, hi) in ranges.items():
        if not (np.isfinite(lo) and np.isfinite(hi)) or max(abs(lo), abs(hi)) > big:
            raise UsageError(f"--val-range for '{name}' is [{lo}, {hi}]; bounds must be finite and within the "
                             f"float32 range (|x| <= {big:.3g})")
    return ranges


def _check_options(model, specs, val_range, input_shapes) -> None:
    """--input-shape and --val-range are options: a name or shape the model cannot take is a usage error
    (exit 2), found before any data is read or generated."""
    from toolkit.compiler.passes.bind_shapes import check_input_shapes
    from toolkit.config import suggest
    from toolkit.errors import UsageError

    if input_shapes:
        check_input_shapes(model, dict(input_shapes))
    if val_range:
        names = [s.name for s in specs]
        for name in _val_ranges(val_range):
            if name != ALL_INPUTS and name not in names:
                raise UsageError(f"--val-range names '{name}', which is not an input of the model{suggest(name, names)}")


def _prepare(model, src, inputs, seed, val_range, input_shapes) -> Feed:
    specs = input_specs(model)
    _check_options(model, specs, val_range, input_shapes)
    if inputs is not None and not str(inputs).strip():
        raise InputError("--inputs is empty; give an .npz file or a folder of .npz files")
    if inputs:
        p = Path(inputs)
        if p.is_dir():
            files = sorted(p.glob("*.npz"))
            if not files:
                raise InputError(f"--inputs directory '{p}' holds no .npz files; write one per input set")
            p = files[0]
        return Feed(load_npz(p, specs), f"file {p}")
    zname = src.name if src.kind == "zoo" else _zoo_name_of(src.path)
    if zname and not val_range and not input_shapes:
        return Feed(realistic_inputs(zname), f"rendered text image ({zname})")
    if src.kind == "sample" and not val_range and not input_shapes:
        return Feed(samples.sample(src.name).make_inputs(seed), f"sample generator seed={seed}", seed)
    ranges = _val_ranges(val_range) if val_range else None
    dims = _generated_dims(specs, input_shapes)
    return Feed(random_inputs(specs, seed=seed, val_ranges=ranges, dim_values=dims),
                f"random seed={seed} range={val_range or '[0,1)'}", seed)
