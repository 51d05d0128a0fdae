"""Resolve what the user named (a sample, a zoo model, a file) and the inputs to feed it.

A model argument is: nothing (the default sample), a sample name (toolkit.samples), a zoo name
(toolkit.zoo, fetched and verified), or a path. Inputs are: an ``.npz`` file (checked against the model),
a directory of ``.npz`` files (the first is used by single-run commands), or — without ``--inputs`` — the
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
from toolkit.errors import InputError
from toolkit.inputs import input_specs, load_npz, parse_val_range, random_inputs, realistic_inputs


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
    path = zoo.resolve(arg)
    return ModelSource(path, path.stem, _zoo_name_of(path) and "zoo" or "file")


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


def prepare_inputs(model: onnx.ModelProto, src: ModelSource, inputs: str | None = None, seed: int = 0,
                   val_range: str | None = None) -> Feed:
    """The feed for one run (see module docstring). Raises InputError."""
    specs = input_specs(model)
    if inputs:
        p = Path(inputs)
        if p.is_dir():
            files = sorted(p.glob("*.npz"))
            if not files:
                raise InputError(f"--inputs directory '{p}' holds no .npz files; write one per input set")
            p = files[0]
        return Feed(load_npz(p, specs), f"file {p}")
    zname = src.name if src.kind == "zoo" else _zoo_name_of(src.path)
    if zname and not val_range:
        return Feed(realistic_inputs(zname), f"rendered text image ({zname})")
    if src.kind == "sample" and not val_range:
        return Feed(samples.sample(src.name).make_inputs(seed), f"sample generator seed={seed}", seed)
    ranges = parse_val_range(val_range) if val_range else None
    return Feed(random_inputs(specs, seed=seed, val_ranges=ranges), f"random seed={seed} range={val_range or '[0,1)'}", seed)
