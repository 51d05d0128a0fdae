"""Check an input feed (name -> array) against the model's declared inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from toolkit.core import usercode
from toolkit.core.dtypes import value_kind
from toolkit.core.errors import InputError
from toolkit.inputs.spec import InputSpec


def _shape_text(shape: Sequence) -> str:
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"


def check_keys(names: Sequence[str], specs: Sequence[InputSpec], source: str) -> None:
    """Raise InputError unless ``names`` are exactly the spec names (order free).

    The message names the missing and the unexpected keys and lists the expected names; an unexpected key that is
    a graph input with an initializer (``specs.defaults``, :class:`toolkit.inputs.spec.InputSpecs`) is named as
    such.
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
    defaults = [n for n in extra if n in getattr(specs, "defaults", ())]
    if defaults:
        raise InputError(
            f"{source}: {' and '.join(parts)}; {defaults} "
            f"{'is a graph input' if len(defaults) == 1 else 'are graph inputs'} "
            f"with an initializer, which npuscope runs with the model's own value; the model's feedable inputs are "
            f"{expected}: leave {defaults} out of the feed, or remove the initializer from the model to feed it"
        )
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
            f"{cast_hint(spec.dtype)}"
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


def cast_hint(dtype: np.dtype) -> str:
    """How to give an array of ``dtype`` (a model input's), as advice that works with the installed numpy:
    ``.astype(np.float32)`` for numpy's own numeric dtypes (the name is looked up, never assumed); str
    arrays for ONNX STRING inputs (object dtype, which an .npz can only hold pickled, and pickle is refused);
    for dtypes numpy lacks (bfloat16, float8, int4: ml_dtypes) the standard dtype that holds their values
    exactly (toolkit.inputs.npz.restore_declared converts it back)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "O":
        return ("an ONNX string input takes a str array: save np.array(['text', ...]) (dtype <U), which npuscope "
                "passes as Python strings; object arrays need pickle and are refused")
    name = dtype.name
    if dtype_expr(dtype):
        return f"cast it with .astype({dtype_expr(dtype)})"

    std = "np.float32" if value_kind(dtype) == "float" else ("np.uint8" if name.startswith("uint") else "np.int8")
    return (f"numpy has no {name} dtype (it comes from ml_dtypes): save the values as {std} holding exactly "
            f"{name} values (e.g. x.astype(ml_dtypes.{name}).astype({std})); npuscope converts them back")


def dtype_expr(dtype: np.dtype) -> str | None:
    """``"np.float32"``: the numpy expression of a numeric ``dtype`` (bool, int, uint, float, complex), checked
    to exist in the installed numpy; None for object/str dtypes and dtypes numpy lacks (ml_dtypes bfloat16)."""
    dtype = np.dtype(dtype)
    ok = dtype.kind in "biufc" and isinstance(getattr(np, dtype.name, None), type)
    return f"np.{dtype.name}" if ok else None


STRING_KINDS = "US"  # numpy str (unicode) and bytes arrays


def conform_array(array, spec: InputSpec) -> np.ndarray:
    """``array`` as the model's input ``spec`` reads the same values: a non-native byte order (``>f4`` from a
    big-endian machine) becomes native (onnxruntime reads the raw bytes, so a swapped array would be read as
    other numbers); a str or bytes array for an ONNX STRING input (object dtype) becomes an object array of
    str (what onnxruntime takes). Anything else is returned as is (:func:`check_array` judges it)."""
    array = np.asarray(array)
    if array.dtype.byteorder not in ("=", "|") and array.dtype != array.dtype.newbyteorder("="):
        array = array.astype(array.dtype.newbyteorder("="))
    if spec.dtype.kind == "O" and array.dtype.kind in STRING_KINDS:
        array = np.vectorize(_text, otypes=[object])(array) if array.size else array.astype(object)
    return array


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def conform_feed(feed: Mapping[str, np.ndarray], specs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """``feed`` with each model input conformed (:func:`conform_array`); other keys unchanged (for
    :func:`check_feed` to refuse). Call it wherever a feed is read, before :func:`check_feed`."""
    by_name = {s.name: s for s in specs}
    return {k: (conform_array(v, by_name[k]) if k in by_name else v) for k, v in feed.items()}


def feed_arrays(feed: Mapping, source: str) -> dict:
    """``{key: np.asarray(value)}`` of a feed built by user code (a loader, --pre), every key kept.

    Raises:
        InputError: a value numpy cannot turn into an array (a ragged list, an object whose ``__array__``
            raises; sys.exit() there too: toolkit.core.usercode), naming ``source`` and the key.
    """
    out = {}
    for k, v in feed.items():
        arr, exc = usercode.capture(np.asarray, v, what=f"{source}: converting input {k!r} to an array",
                                    error=InputError)
        if exc is not None:
            raise InputError(f"{source}: input {k!r} is not an array ({type(exc).__name__}: "
                             f"{usercode.one_line(exc)}); give numpy arrays") from None
        out[k] = arr
    return out


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
