"""Seeded random input data for any model, with per-input value ranges and sizes for dynamic dims.

Value-range syntax follows Polygraphy's ``--val-range`` (``name:[lo,hi]``, several separated by ``;``; a bare
``[lo,hi]`` applies to every input). Defaults: floats uniform in [0, 1) (Polygraphy's default), integers
uniform in [0, 9] inclusive, bools fair coin flips.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from toolkit.core.errors import InputError
from toolkit.inputs.spec import InputSpec
from toolkit.inputs.validate import cast_hint

#: Key of a value range that applies to every input without its own range.
ALL_INPUTS = "*"
#: Default float range [lo, hi).
DEFAULT_FLOAT_RANGE = (0.0, 1.0)
#: Default integer range [lo, hi], both ends included.
DEFAULT_INT_RANGE = (0, 9)

ValRanges = Mapping[str, tuple[float, float]]
DimValues = Mapping[str, int | Sequence[int]]


def parse_val_range(text: str) -> dict[str, tuple[float, float]]:
    """Parse ``"x:[0,1];y:[-1,1]"`` into ``{"x": (0.0, 1.0), "y": (-1.0, 1.0)}``.

    A part without a name (``"[0,1]"``) is stored under :data:`ALL_INPUTS`. Names may contain ``:``
    (``"input:0:[0,1]"``): the name ends at the last ``:`` before ``[``; blanks around tokens are ignored.
    Bounds must be finite numbers with lo <= hi.

    Raises:
        InputError: empty text, a part not of the form ``name:[lo,hi]``, non-numeric or reversed bounds,
            or the same name twice.
    """
    ranges: dict[str, tuple[float, float]] = {}
    parts = [p.strip() for p in str(text).split(";") if p.strip()]
    if not parts:
        raise InputError(f"value range {text!r} is empty; expected e.g. 'x:[0,1];y:[-1,1]'")
    for part in parts:
        name, lo, hi = _parse_part(part)
        if name in ranges:
            raise InputError(f"value range {text!r} gives input {name!r} twice; give each input one range")
        ranges[name] = (lo, hi)
    return ranges


_PART = re.compile(r"^(?:(?P<name>.*\S)\s*:)?\s*\[(?P<lo>[^,\]]*),(?P<hi>[^,\]]*)\]$")


def _parse_part(part: str) -> tuple[str, float, float]:
    hint = "expected name:[lo,hi] with numbers lo <= hi, e.g. 'x:[0,1]'"
    match = _PART.match(part)
    if match is None or (match["name"] is None and not part.startswith("[")):
        raise InputError(f"value range part {part!r} is malformed; {hint}")
    try:
        lo, hi = float(match["lo"]), float(match["hi"])
    except ValueError:
        raise InputError(f"value range part {part!r} has a non-numeric bound; {hint}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise InputError(f"value range part {part!r} has bounds lo={lo}, hi={hi}; {hint}")
    return match["name"] or ALL_INPUTS, lo, hi


def resolve_shape(spec: InputSpec, dim_values: DimValues | None = None) -> tuple[int, ...]:
    """Concrete shape for ``spec``: static dims kept, dynamic dims from ``dim_values`` or 1.

    ``dim_values`` maps a symbolic dim name (e.g. ``"batch"``) to a size, or an input name to a full shape
    (checked against the static dims). Raises InputError for a non-positive size (a static one naming the
    model's declaration, which --input-shape cannot change), a full shape that does not fit, or an input of
    unknown rank without a full shape.
    """
    dim_values = dim_values or {}
    if spec.shape is not None and any(isinstance(d, int) and d <= 0 for d in spec.shape):
        raise InputError(
            f"input {spec.describe()} has a static dimension of size 0: generated data would hold no element, and "
            "no --input-shape can change a static dimension; give its data with --inputs, or re-export the model "
            "with that dimension dynamic or of size >= 1"
        )
    full = dim_values.get(spec.name)
    if full is not None and not isinstance(full, int | np.integer):
        shape = tuple(int(d) for d in full)
        if spec.shape is not None and not _fits(shape, spec.shape):
            raise InputError(
                f"--input-shape gives input {spec.name!r} shape {shape} but the model declares {spec.describe()}; "
                "keep the rank and the static dims, change only dynamic ones"
            )
        return _positive(shape, spec.name)
    if spec.shape is None:
        raise InputError(
            f"input {spec.name!r} has no declared rank; pass its full shape, "
            f"e.g. dim_values={{{spec.name!r}: (1, 3, 224, 224)}}"
        )
    shape = []
    for d in spec.shape:
        if isinstance(d, int):
            shape.append(d)
        elif isinstance(d, str) and d in dim_values:
            shape.append(int(dim_values[d]))
        else:
            shape.append(1)
    return _positive(tuple(shape), spec.name)


def _fits(shape: tuple[int, ...], declared: tuple) -> bool:
    return len(shape) == len(declared) and all(not isinstance(w, int) or g == w for g, w in zip(shape, declared))


def _positive(shape: tuple[int, ...], name: str) -> tuple[int, ...]:
    if any(d <= 0 for d in shape):
        raise InputError(
            f"input {name!r}: resolved shape {shape} has a dimension of size 0 or less; give sizes >= 1 with "
            "--input-shape"
        )
    return shape


def _rng(seed: int, name: str) -> np.random.Generator:
    """A generator per input, so one input's data does not depend on the others' order or presence."""
    return np.random.default_rng([int(seed), zlib.crc32(name.encode("utf-8"))])


def finite_limits(dtype) -> tuple[float, float] | None:
    """(lowest, highest) finite value of ``dtype``, or None when a range does not apply (bool: clipped to
    [0, 1]; string/object: not generated).

    Floats: ``numpy.finfo`` (float16 ±65504, float32 ±3.4028235e38, float64 ±1.797e308) or ``ml_dtypes.finfo``
    for the ml_dtypes types (bfloat16 ±3.3895314e38, float8 ...); complex: its real part's float; integers:
    ``numpy.iinfo`` / ``ml_dtypes.iinfo`` min and max (ints).
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "bOSU":
        return None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    if dtype.kind == "c":
        dtype = np.empty(0, dtype).real.dtype
    if dtype.kind == "f":
        info = np.finfo(dtype)
        return float(info.min), float(info.max)
    import ml_dtypes  # bfloat16, float8, int4: numpy kind 'V'

    for kind in (ml_dtypes.finfo, ml_dtypes.iinfo):
        try:
            info = kind(dtype)
        except (TypeError, ValueError):
            continue
        return (float(info.min), float(info.max)) if kind is ml_dtypes.finfo else (int(info.min), int(info.max))
    return None


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e16 else f"{v:.8g}"


def check_val_range(spec: InputSpec, val_range: tuple[float, float]) -> None:
    """Raise InputError when ``val_range`` (lo, hi) reaches outside the finite values of ``spec.dtype``
    (:func:`finite_limits`): generated data would overflow to inf in the cast (floats) or be clipped (integers).
    Integer inputs compare ceil(lo) and floor(hi), the values actually drawn. Bool inputs are not checked."""
    limits = finite_limits(spec.dtype)
    if limits is None:
        return
    lo, hi = val_range
    if np.dtype(spec.dtype).kind in "iu":
        lo, hi = math.ceil(lo), math.floor(hi)
    if lo < limits[0] or hi > limits[1]:
        raise InputError(
            f"value range [{_num(val_range[0])}, {_num(val_range[1])}] for input {spec.name!r} reaches outside its "
            f"dtype {np.dtype(spec.dtype).name} (finite values [{_num(limits[0])}, {_num(limits[1])}]); "
            "give bounds within that range"
        )


def random_array(spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator,
                 val_range: tuple[float, float] | None = None) -> np.ndarray:
    """Random data of ``spec.dtype`` and ``shape``.

    Floats (incl. float16 and ml_dtypes types): uniform in [lo, hi), default [0, 1). Integers: uniform in
    [ceil(lo), floor(hi)], default [0, 9]. Bools: coin flips, or the range clipped to
    [0, 1]. Complex: real and imaginary parts each uniform in the float range.

    Raises:
        InputError: string/object inputs, a range outside the dtype's finite values (:func:`check_val_range`),
            or an integer range containing no integer.
    """
    dtype = spec.dtype
    if val_range is not None:
        check_val_range(spec, val_range)
    if dtype.kind in "iub":
        lo, hi = DEFAULT_INT_RANGE if val_range is None else (math.ceil(val_range[0]), math.floor(val_range[1]))
        if dtype.kind == "b":
            if val_range is None:
                return rng.random(shape) < 0.5
            lo, hi = max(lo, 0), min(hi, 1)
        else:
            info = np.iinfo(dtype)
            lo, hi = max(lo, info.min), min(hi, info.max)
        if lo > hi:
            raise InputError(f"input {spec.name!r}: value range {val_range} holds no {dtype.name} value; widen it")
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    if dtype.kind in "OSU":
        raise InputError(f"input {spec.name!r} has dtype {dtype}; random data is numeric only: supply it with "
                         f"--inputs in an npz ({cast_hint(dtype)})")
    lo, hi = DEFAULT_FLOAT_RANGE if val_range is None else val_range
    values = rng.uniform(lo, hi, size=shape)
    if dtype.kind == "c":
        values = values + 1j * rng.uniform(lo, hi, size=shape)
    return values.astype(dtype)


def random_inputs(specs: Sequence[InputSpec], seed: int = 0, val_ranges: ValRanges | None = None,
                  dim_values: DimValues | None = None) -> dict[str, np.ndarray]:
    """Seeded random feed for ``specs`` (input name -> array, in spec order).

    Args:
        specs: the model's inputs (:func:`toolkit.inputs.spec.input_specs`).
        seed: base seed; each input gets its own numpy PCG64 generator seeded with (seed, crc32(name)), so
            the same seed gives the same arrays (for a given numpy version) whatever the other inputs are.
        val_ranges: input name (or :data:`ALL_INPUTS`) -> (lo, hi), e.g. from :func:`parse_val_range`.
        dim_values: symbolic dim name -> size, or input name -> full shape; other dynamic dims are 1.

    Raises:
        InputError: a range or dim value names no input of the model, or a shape/range cannot be satisfied.
    """
    val_ranges = dict(val_ranges or {})
    names = [s.name for s in specs]
    unknown = [k for k in val_ranges if k != ALL_INPUTS and k not in names]
    if unknown:
        raise InputError(f"value ranges name unknown inputs {unknown}; the model's inputs are {names}")
    dim_names = {d for s in specs for d in (s.shape or ()) if isinstance(d, str)}
    stray = [k for k in (dim_values or {}) if k not in names and k not in dim_names]
    if stray:
        raise InputError(
            f"dim_values names {stray}, which are neither inputs {names} nor dynamic dims {sorted(dim_names)}; "
            "use an input name (full shape) or a dim name (size)"
        )
    feed = {}
    for spec in specs:
        val_range = val_ranges.get(spec.name, val_ranges.get(ALL_INPUTS))
        feed[spec.name] = random_array(spec, resolve_shape(spec, dim_values), _rng(seed, spec.name), val_range)
    return feed
