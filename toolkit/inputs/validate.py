"""Check an input feed (name -> array) against the model's declared inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from toolkit.errors import InputError
from toolkit.inputs.spec import InputSpec


def _shape_text(shape: Sequence) -> str:
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"


def check_keys(names: Sequence[str], specs: Sequence[InputSpec], source: str) -> None:
    """Raise InputError unless ``names`` are exactly the spec names (order free).

    The message names the missing and the unexpected keys and lists the expected names.
    """
    expected = [s.name for s in specs]
    missing = [n for n in expected if n not in names]
    extra = [n for n in names if n not in expected]
    if not missing and not extra:
        return
    parts = []
    if missing:
        parts.append(f"missing {missing}")
    if extra:
        parts.append(f"unexpected {extra}")
    raise InputError(
        f"{source}: {' and '.join(parts)}; the model's inputs are {expected}: "
        "name each array after a model input"
    )


def check_array(array: np.ndarray, spec: InputSpec, source: str) -> None:
    """Raise InputError if ``array`` has another dtype, rank or static dimension than ``spec`` declares.

    Dynamic dimensions (str or None in ``spec.shape``) accept any size; an unknown rank accepts any shape.
    """
    if array.dtype != spec.dtype:
        raise InputError(
            f"{source}: input {spec.name!r} has dtype {array.dtype} but the model declares {spec.describe()}; "
            f"cast it with .astype(np.{spec.dtype.name}) before saving"
        )
    if spec.shape is None:
        return
    if array.ndim != len(spec.shape):
        raise InputError(
            f"{source}: input {spec.name!r} has shape {_shape_text(array.shape)} (rank {array.ndim}) but the "
            f"model declares {spec.describe()} (rank {len(spec.shape)}); reshape the array to the declared rank"
        )
    for axis, (got, want) in enumerate(zip(array.shape, spec.shape)):
        if isinstance(want, int) and got != want:
            raise InputError(
                f"{source}: input {spec.name!r} has shape {_shape_text(array.shape)} but the model declares "
                f"{spec.describe()} (axis {axis} must be {want}, got {got}); resize the data to the static dims"
            )


def check_symbolic_dims(feed: Mapping[str, np.ndarray], specs: Sequence[InputSpec], source: str) -> None:
    """Raise InputError when one symbolic dim name (e.g. "batch") gets different sizes in different inputs."""
    seen: dict[str, tuple[int, str]] = {}
    for spec in specs:
        if spec.shape is None or spec.name not in feed:
            continue
        for got, want in zip(np.shape(feed[spec.name]), spec.shape):
            if not isinstance(want, str):
                continue
            if want in seen and seen[want][0] != got:
                size, other = seen[want]
                raise InputError(
                    f"{source}: dynamic dim {want!r} is {size} in input {other!r} but {got} in input {spec.name!r}; "
                    "give every input the same size for a shared dim"
                )
            seen.setdefault(want, (got, spec.name))


def check_feed(feed: Mapping[str, np.ndarray], specs: Sequence[InputSpec], source: str = "inputs") -> None:
    """Check names, dtypes, ranks, static dims and shared symbolic dims of ``feed``.

    Args:
        feed: input name -> numpy array.
        specs: the model's inputs, from :func:`toolkit.inputs.spec.input_specs`.
        source: what to call the feed in messages (e.g. the npz path).

    Raises:
        InputError: with a one-line message naming the input, the expected and the actual value.
    """
    check_keys(list(feed), specs, source)
    for spec in specs:
        check_array(np.asarray(feed[spec.name]), spec, source)
    check_symbolic_dims(feed, specs, source)
