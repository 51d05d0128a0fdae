"""Element kinds of compared tensors and their standard numpy form (the one conversion metrics and files share).

Kinds (:func:`value_kind`):

``float``    numpy floats (float16/32/64) and the ml_dtypes floats ONNX uses (bfloat16, float8_e4m3fn/fnuz,
             float8_e5m2/fnuz, float8_e8m0fnu, float4_e2m1fn; float6 too).
``integer``  numpy ints, uints and bool, and the ml_dtypes sub-byte integers (int4, uint4, int2, uint2).
``text``     numpy str (``<U``) and bytes (``S``) arrays, and object arrays — what onnxruntime returns for an
             ONNX STRING tensor (object arrays of str; ``onnx.helper.tensor_dtype_to_np_dtype(STRING)`` is
             object). An object array whose elements are not all str/bytes cannot be standardised.
``other``    complex, datetime, structured and raw void arrays.

:func:`dtype_class` folds ``text`` into ``integer``: both are compared by exact match (ExactMatchRate).

:func:`standard` returns the same values in a dtype numpy itself knows (so ``np.save`` writes a header that any
numpy reads back, and ufuncs behave): ml_dtypes floats → float32, ml_dtypes signed integers → int8, unsigned
→ uint8 (ml_dtypes complex32 → complex64), text → numpy unicode ``<U``. Every conversion is exact: float32 holds
every bfloat16/float8/float6/float4 value (float8_e8m0fnu's 2^-127 as a float32 subnormal, NaN as NaN) and
int8/uint8 every 4-bit and 2-bit value; bytes are decoded as UTF-8 with ``surrogateescape`` (undecodable bytes
stay distinct). One loss numpy's ``<U`` imposes: trailing NUL characters of a string are dropped.
"""

from __future__ import annotations

import numpy as np

#: Standard numpy dtype of an ml_dtypes dtype, by the start of its name (first match wins).
_ML_STANDARD = (("uint", np.uint8), ("int", np.int8), ("complex", np.complex64), ("bcomplex", np.complex64),
                ("", np.float32))


def is_ml_dtype(dtype) -> bool:
    """True for a dtype that comes from ml_dtypes (bfloat16, float8_*, float4_e2m1fn, int4, uint2, ...)."""
    return np.dtype(dtype).type.__module__.split(".")[0] == "ml_dtypes"


def dtype_named(name) -> np.dtype | None:
    """The numpy dtype called ``name`` ("float32", "<U5", "bfloat16", "int4": ml_dtypes names registered by
    importing ml_dtypes), or None when ``name`` is not a string naming a dtype."""
    import ml_dtypes  # noqa: F401 - registers bfloat16, float8_*, int4, ... with numpy

    try:
        return np.dtype(name) if isinstance(name, str) else None
    except TypeError:
        return None


def ml_standard_dtype(dtype) -> np.dtype | None:
    """The standard numpy dtype an ml_dtypes ``dtype`` converts to exactly (module docstring); None for others."""
    if not is_ml_dtype(dtype):
        return None
    name = np.dtype(dtype).name
    return next(np.dtype(std) for prefix, std in _ML_STANDARD if name.startswith(prefix))


def value_kind(dtype) -> str:
    """``"float"``, ``"integer"``, ``"text"`` or ``"other"`` (module docstring) of a numpy dtype."""
    dtype = np.dtype(dtype)
    std = ml_standard_dtype(dtype)
    if std is not None:
        dtype = std
    if dtype.kind == "f":
        return "float"
    if dtype.kind in "iub":
        return "integer"
    return "text" if dtype.kind in "USO" else "other"


def dtype_class(dtype) -> str:
    """``"float"`` (numpy floats and ml_dtypes floats), ``"integer"`` (compared by exact match: ints, uints, bool,
    ml_dtypes int4/uint4/int2/uint2, and text: str/bytes/object arrays of ONNX STRING tensors) or ``"other"``."""
    kind = value_kind(dtype)
    return "integer" if kind == "text" else kind


def standard(a) -> np.ndarray:
    """``a`` as an array of a standard numpy dtype holding the same values (module docstring); arrays that need
    no conversion are returned as they are (no copy).

    Raises:
        TypeError: an object array holding something else than str/bytes (it has no standard form).
    """
    a = np.asarray(a)
    std = ml_standard_dtype(a.dtype)
    if std is not None:
        return a.astype(std)
    if a.dtype.kind == "S":
        return np.char.decode(a, "utf-8", "surrogateescape") if a.size else a.astype(np.str_)
    if a.dtype.kind == "O":
        return _text_of_objects(a)
    return a


def _text_of_objects(a: np.ndarray) -> np.ndarray:
    flat = a.reshape(-1)
    odd = [v for v in flat if not isinstance(v, (str, bytes))][:1]
    if odd:
        raise TypeError(f"object array holding {type(odd[0]).__name__} values; only str/bytes (ONNX STRING) have "
                        "a standard form")
    text = [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v for v in flat]
    return np.array(text, dtype=np.str_).reshape(a.shape) if text else np.zeros(a.shape, np.str_)
