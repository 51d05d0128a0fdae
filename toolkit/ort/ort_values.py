"""Exchange tensors whose element type onnxruntime's Python API cannot convert to or from numpy.

onnxruntime's CPU provider computes on bfloat16, the float8 types (FLOAT8E4M3FN/FNUZ, FLOAT8E5M2/FNUZ,
FLOAT8E8M0), INT4/UINT4 and INT2/UINT2 (opset 25), but ``InferenceSession.run`` refuses them as feeds or
fetches ("No corresponding Numpy type for Tensor Type"). numpy holds them as ``ml_dtypes`` dtypes (what
``onnx.helper.tensor_dtype_to_np_dtype`` returns): one element per item, sub-byte types unpacked to one byte
each. Here they cross the boundary as ``OrtValue`` s built from raw bytes (:func:`to_ortvalue`) and read back
the same way (:func:`to_numpy`); sub-byte types are packed / unpacked in ONNX's layout (first element in the
low bits of the first byte: https://onnx.ai/onnx/technical/int4.html). Sparse tensors a graph returns
(a Constant with ``sparse_value`` as graph output) are densified.
"""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
from onnx import TensorProto

from toolkit.core.errors import ModelError
from toolkit.ort.terminate import run_options

#: bits per element of ONNX's packed sub-byte types
_BITS = {getattr(TensorProto, n): b for n, b in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2),
                                                  ("UINT2", 2)) if hasattr(TensorProto, n)}


def _exotic_codes() -> dict[np.dtype, int]:
    """{numpy dtype: ONNX element type} for every ONNX type numpy represents only through ml_dtypes."""
    out = {}
    for code in TensorProto.DataType.values():
        if code == TensorProto.UNDEFINED:
            continue
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))
        if dt.type.__module__.split(".")[0] == "ml_dtypes":
            out[dt] = code
    return out


_CODES = _exotic_codes()


def exotic_code(dtype) -> int | None:
    """The ONNX element type of ``dtype`` (numpy dtype or its name, e.g. "bfloat16") when onnxruntime's Python
    API cannot exchange it as a numpy array; None for ordinary dtypes (and names numpy does not know)."""
    try:
        return _CODES.get(np.dtype(dtype))
    except TypeError:
        return None


def is_exotic_elem(elem_type: int) -> bool:
    """Whether ONNX element type ``elem_type`` must cross onnxruntime's Python boundary through OrtValues."""
    return elem_type in _CODES.values()


def _pack(raw: np.ndarray, bits: int) -> np.ndarray:
    """Pack one-byte-per-element ``raw`` (uint8, flat) into ``8 // bits`` elements per byte, first lowest."""
    per = 8 // bits
    mask = (1 << bits) - 1
    padded = np.zeros(-(-raw.size // per) * per, np.uint8)
    padded[:raw.size] = raw & mask
    lanes = padded.reshape(-1, per).astype(np.uint8)
    out = np.zeros(lanes.shape[0], np.uint8)
    for k in range(per):
        out |= (lanes[:, k] << (k * bits)).astype(np.uint8)
    return out


def _unpack(packed: np.ndarray, bits: int, count: int, signed: bool) -> np.ndarray:
    """Inverse of :func:`_pack`: ``count`` elements, one per byte (sign-extended when ``signed``, which is how
    ml_dtypes stores int4/int2)."""
    per = 8 // bits
    mask = (1 << bits) - 1
    lanes = np.stack([(packed >> (k * bits)) & mask for k in range(per)], axis=1).reshape(-1)[:count]
    lanes = lanes.astype(np.uint8)
    if signed:
        neg = lanes >= (1 << (bits - 1))
        lanes = np.where(neg, lanes | np.uint8((0xFF << bits) & 0xFF), lanes).astype(np.uint8)
    return lanes


def to_ortvalue(arr: np.ndarray, code: int):
    """An onnxruntime OrtValue of ONNX element type ``code`` holding ``arr`` (an ml_dtypes array, shape kept)."""
    import onnxruntime as ort

    arr = np.ascontiguousarray(arr)
    raw = arr.reshape(-1).view(np.uint8)
    if code in _BITS:
        raw = _pack(raw, _BITS[code])
    ov = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), code)
    if raw.size:
        if ov.tensor_size_in_bytes() != raw.size:
            raise ModelError(f"cannot hand a {arr.dtype}{list(arr.shape)} tensor to onnxruntime "
                             f"({raw.size} bytes, onnxruntime expects {ov.tensor_size_in_bytes()})")
        ctypes.memmove(ov.data_ptr(), raw.ctypes.data, raw.size)
    return ov


def to_numpy(value):
    """A numpy array from an onnxruntime result: OrtValues of exotic element types become ml_dtypes arrays,
    other OrtValues ``.numpy()``, sparse tensors dense arrays; anything else is returned unchanged."""
    import onnxruntime as ort

    if _is_sparse(value):
        return _densify(value)
    if not isinstance(value, ort.OrtValue):
        return value
    if not value.is_tensor():
        return value.numpy()
    code = value.element_type()
    if not is_exotic_elem(code):
        return value.numpy()
    dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))
    shape = tuple(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    size = value.tensor_size_in_bytes()
    raw = np.frombuffer((ctypes.c_uint8 * size).from_address(value.data_ptr()), np.uint8).copy() if size else \
        np.zeros(0, np.uint8)
    if code in _BITS:
        raw = _unpack(raw, _BITS[code], count, signed=np.dtype(dt).name.startswith("int"))
    return raw.view(dt).reshape(shape)


def _is_sparse(value) -> bool:
    return type(value).__name__ == "SparseTensor"  # onnxruntime's Python wrapper or its C++ binding


def _densify(st) -> np.ndarray:
    """Dense array of an onnxruntime SparseTensor in COO format (flat or per-axis indices), what onnxruntime
    returns for a Constant's ``sparse_value``.

    Raises:
        ModelError: another sparse format (CSR, block-sparse)."""
    st = getattr(st, "_tensor", st)  # the binding object behind onnxruntime.SparseTensor
    if "COO" not in str(st.format):
        raise ModelError(f"onnxruntime returned a sparse tensor in {st.format} format; npuscope reads COO only: "
                         "make the model return a dense tensor")
    shape = tuple(st.dense_shape())
    values = np.asarray(st.values())
    out = np.zeros(shape, values.dtype)
    idx = np.asarray(st.get_coo_data().indices()).astype(np.int64)
    if idx.ndim == 1:
        out.reshape(-1)[idx] = values
    else:
        out[tuple(idx.T)] = values
    return out


def needs_ortvalues(values) -> bool:
    """Whether any of ``values`` (arrays fed to a session) has an exotic dtype."""
    return any(isinstance(v, np.ndarray) and exotic_code(v.dtype) is not None for v in values)


def run(session, fetch_names: list[str], feeds: dict, where: str = "the model", options=None) -> list:
    """``session.run`` for feeds or fetches of exotic element types: feeds go in as OrtValues, results come
    back as numpy arrays (ml_dtypes for exotic types). ``where`` names the kernel/model in errors; ``options``:
    the RunOptions (default toolkit.ort.terminate.run_options()).

    Raises:
        ModelError: a string tensor among the feeds (onnxruntime builds OrtValues from numeric arrays only).
    """
    import onnxruntime as ort

    values = {}
    for name, v in feeds.items():
        arr = np.asarray(v)
        code = exotic_code(arr.dtype)
        if code is not None:
            values[name] = to_ortvalue(arr, code)
        elif arr.dtype.kind in "OSU":
            raise ModelError(f"{where} mixes string tensors ('{name}') with {sorted(d.name for d in _CODES)}-class "
                             "tensors, which npuscope cannot hand to onnxruntime together; cast one side "
                             "in the model")
        else:
            values[name] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr))
    return [to_numpy(o) for o in session.run_with_ort_values(fetch_names, values,
                                                               run_options() if options is None else options)]
