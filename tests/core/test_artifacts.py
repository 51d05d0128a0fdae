"""Artifacts (toolkit/core/artifacts.py): arrays of every dtype read back without pickle, values without an
array form refused, and safe file names."""

from __future__ import annotations

import unicodedata

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from toolkit.artifacts import safe_filename, save_npz, storable
from toolkit.errors import ModelError
from toolkit.runtime import ort_values

OPSET = 25
SHAPE = [2, 3]
FEED = np.linspace(0.1, 0.9, 6, dtype=np.float32).reshape(SHAPE)


def _graph_model(nodes, inputs, outputs) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=11)


def _cast_model(code: int, identity: bool) -> onnx.ModelProto:
    """x (float32) -> Cast(to=code) [-> Identity] -> y."""
    nodes = [helper.make_node("Cast", ["x"], ["c" if identity else "y"], to=code, name="cast")]
    if identity:
        nodes.append(helper.make_node("Identity", ["c"], ["y"], name="id"))
    return _graph_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                        [helper.make_tensor_value_info("y", code, SHAPE)])


def _const_model(code: int) -> onnx.ModelProto | None:
    """x -> Identity -> xo, and a Constant of type ``code`` as output y (for types no Cast produces)."""
    np_dt = helper.tensor_dtype_to_np_dtype(code)
    vals = [b"a", b"b", b"c", b"d", b"e", b"f"] if code == TensorProto.STRING else \
        np.array([0, 1, 0, 1, 1, 0], np.float32).astype(np_dt).tolist()
    try:
        value = helper.make_tensor("v", code, SHAPE, vals)
    except (TypeError, ValueError, OverflowError):
        return None
    nodes = [helper.make_node("Identity", ["x"], ["xo"], name="idx"),
             helper.make_node("Constant", [], ["y"], value=value, name="const")]
    return _graph_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                        [helper.make_tensor_value_info("xo", TensorProto.FLOAT, SHAPE),
                         helper.make_tensor_value_info("y", code, SHAPE)])


def _ort_runs(model: onnx.ModelProto):
    """onnxruntime's CPU provider (no graph optimisation) runs ``model``: its output y, else None."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return ort_values.run(sess, ["y"], {"x": FEED})[0]
    except Exception:  # noqa: BLE001 - this type is not supported by this chain
        return None


def _cpu_models() -> dict[str, onnx.ModelProto]:
    """{ONNX type name: the first model of Cast+Identity, Cast, Constant whose output y onnxruntime's CPU
    provider computes}: every element type it can output (complex and float6 have none in onnxruntime 1.32)."""
    out = {}
    for name, code in TensorProto.DataType.items():
        if code == TensorProto.UNDEFINED:
            continue
        for build in (lambda c: _cast_model(c, True), lambda c: _cast_model(c, False), _const_model):
            m = build(code)
            if m is not None and _ort_runs(m) is not None:
                out[name] = m
                break
    return out


CPU_MODELS = _cpu_models()
CPU_TYPES = sorted(CPU_MODELS)


def _reference_output(name: str) -> np.ndarray:
    return _ort_runs(CPU_MODELS[name])


def _expected_stored(arr: np.ndarray) -> np.ndarray:
    """What the file must hold, computed here: strings as <U, ml_dtypes floats as float32, ints as (u)int8."""
    if arr.dtype.kind == "O":
        return np.array([str(v) for v in arr.reshape(-1)]).reshape(arr.shape)
    if arr.dtype.type.__module__.startswith("ml_dtypes"):
        name = arr.dtype.name
        target = np.uint8 if name.startswith("uint") else np.int8 if name.startswith("int") else np.float32
        return arr.astype(target)
    return arr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", CPU_TYPES)
def test_npz_and_npy_of_every_cpu_dtype_read_back_without_pickle(name, tmp_path):
    from toolkit.artifacts import save_npy

    arr = _reference_output(name)
    want = _expected_stored(arr)
    save_npz(tmp_path / "a.npz", {"y": arr, "file": arr, "allow_pickle": arr})  # np.savez's own argument names
    with np.load(tmp_path / "a.npz", allow_pickle=False) as z:
        assert sorted(z.files) == ["allow_pickle", "file", "y"]
        for key in z.files:
            assert z[key].dtype == want.dtype and z[key].dtype.kind in "biufU"
            np.testing.assert_array_equal(z[key], want)
    save_npy(tmp_path / "a.npy", arr)
    back = np.load(tmp_path / "a.npy", allow_pickle=False)
    np.testing.assert_array_equal(back, want)
    if arr.dtype.type.__module__.startswith("ml_dtypes"):  # exact: converting back gives the same bits
        assert back.astype(arr.dtype).tobytes() == arr.tobytes()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_values_without_an_array_form_are_refused_in_one_line():
    with pytest.raises(ModelError, match="'seq' is a sequence of 2 tensors"):
        storable([np.zeros(2), np.zeros(3)], "seq")
    with pytest.raises(ModelError, match="empty optional"):
        storable(None, "opt")
    with pytest.raises(ModelError, match="dict"):
        storable(np.array([{}, {}], dtype=object), "objs")


@pytest.mark.parametrize("name,want", [
    ("模型 #1", "模型_1"), ("模型", "模型"), ("मॉडल", "मॉडल"), ("Straße.v2", "Straße.v2"),
    ("a/b\\c:d", "a_b_c_d"), ("a b?c", "a_b_c"), ("x\u202egnp.exe", "x_gnp.exe"), ("tab\there\x00", "tab_here"),
    ("..", "tensor"), ("", "tensor"), ("CON", "_CON"), ("nul.txt", "_nul.txt"), ("CONSOLE", "CONSOLE"),
])
def test_safe_filename_keeps_unicode_letters(name, want):
    assert safe_filename(name) == want


def test_safe_filename_normalises_and_caps_bytes():
    assert safe_filename("e\u0301") == "\u00e9"  # NFD input, NFC name (macOS hands out NFD)
    long = safe_filename("日本" * 100)
    assert len(long.encode("utf-8")) <= 120 and long == "日本" * 20  # 3 bytes each: whole characters only
    assert unicodedata.is_normalized("NFC", long)
