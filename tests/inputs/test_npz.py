""".npz inputs (toolkit/inputs/npz.py): loading with dynamic dims, missing / extra / mis-typed arrays, pickled,
empty or non-zip files, ml_dtypes, strings and big-endian arrays."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.dtype_models import _bf16_input_model
from toolkit.core.artifacts import write_npz
from toolkit.core.errors import InputError
from toolkit.inputs import InputSpec, load_npz


def _bad_npz_files(tmp_path):
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    text = tmp_path / "text.npz"
    text.write_text("hello, not a zip\n")
    pickled = tmp_path / "pk.npz"
    pickled.write_bytes(b"\x80\x04\x95" + b"\x00" * 20)  # a pickle header: numpy would suggest allow_pickle
    npy = tmp_path / "single.npz"
    with open(npy, "wb") as fh:
        np.save(fh, np.zeros((1, 4), np.float32))
    return {"empty (0 bytes)": empty, "not an npz (zip) archive": text, "not an npz (zip) archive ": pickled,
            "single-array .npy": npy}


def test_load_npz_refuses_empty_and_non_zip_files(tmp_path):
    from toolkit.inputs.npz import load_npz

    for expected, path in _bad_npz_files(tmp_path).items():
        with pytest.raises(InputError) as info:
            load_npz(path, [])  # refused before the arrays are checked against any model input
        msg = str(info.value)
        assert expected.strip() in msg and str(path) in msg and "allow_pickle" not in msg and "pickled" not in msg and "\n" not in msg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_load_npz_restores_declared_ml_dtypes(tmp_path):
    from toolkit.inputs.npz import load_npz
    from toolkit.inputs.spec import input_specs

    specs = input_specs(_bf16_input_model())
    bf = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    write_npz(tmp_path / "a.npz", {"x": bf})  # stored as float32
    got = load_npz(tmp_path / "a.npz", specs)["x"]
    assert got.dtype == bf.dtype and got.tobytes() == bf.tobytes()
    np.savez(tmp_path / "legacy.npz", x=bf)  # raw |V2
    got = load_npz(tmp_path / "legacy.npz", specs)["x"]
    assert got.dtype == bf.dtype and got.tobytes() == bf.tobytes()
    np.savez(tmp_path / "lossy.npz", x=np.array([1.0, 2.0, 1.0 + 2 ** -12], np.float32))  # not a bfloat16 value
    with pytest.raises(InputError, match="bfloat16"):
        load_npz(tmp_path / "lossy.npz", specs)


def _string_model(path: Path) -> Path:
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="i")], "s",
                          [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def test_string_input_advice_works_str_array_npz_is_accepted(tmp_path):
    from toolkit.inputs import input_specs, load_npz

    m = onnx.load(_string_model(tmp_path / "s.onnx"))
    np.savez(tmp_path / "u.npz", x=np.array(["hello", "wörld"]))
    np.savez(tmp_path / "b.npz", x=np.array([b"ab", b"c"]))
    for name, want in (("u.npz", ["hello", "wörld"]), ("b.npz", ["ab", "c"])):
        feed = load_npz(tmp_path / name, input_specs(m))
        assert feed["x"].dtype == object and feed["x"].tolist() == want
        assert all(type(v) is str for v in feed["x"])


NUMERIC = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
           "uint64", "bool", "complex64", "complex128"]


@pytest.mark.parametrize("dt", NUMERIC)
def test_big_endian_npz_is_read_native_with_equal_values(tmp_path, dt):
    from toolkit.dataset.source import load_feed
    from toolkit.inputs.npz import load_npz
    from toolkit.inputs.spec import InputSpec

    values = (np.arange(12).reshape(3, 4) % 2 == 0) if dt == "bool" else np.arange(12).reshape(3, 4).astype(dt)
    big = values.astype(np.dtype(dt).newbyteorder(">"))
    np.savez(tmp_path / "b.npz", x=big)
    spec = [InputSpec("x", np.dtype(dt), (3, 4))]
    for feed in (load_npz(tmp_path / "b.npz", spec), load_feed("b.npz", (tmp_path / "b.npz").read_bytes(), spec)):
        assert feed["x"].dtype == np.dtype(dt) and feed["x"].dtype.isnative
        np.testing.assert_array_equal(feed["x"], values)


SPECS = [InputSpec("x", np.dtype("float32"), ("batch", 3, 4)), InputSpec("ids", np.dtype("int64"), ("batch", None))]


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text
    return text


def _npz(tmp_path, **arrays):
    path = tmp_path / "feed.npz"
    np.savez(path, **arrays)
    return path


def test_load_npz_round_trip_with_dynamic_dims(tmp_path):
    x, ids = np.ones((5, 3, 4), np.float32), np.arange(35, dtype=np.int64).reshape(5, 7)
    feed = load_npz(_npz(tmp_path, ids=ids, x=x), SPECS)
    assert list(feed) == ["x", "ids"]
    np.testing.assert_array_equal(feed["x"], x)
    np.testing.assert_array_equal(feed["ids"], ids)


def test_load_npz_refuses_pickled_arrays(tmp_path):
    path = _npz(tmp_path, x=np.array([{"a": 1}], dtype=object), ids=np.zeros((1, 1), np.int64))
    with pytest.raises(InputError) as err:
        load_npz(path, SPECS)
    msg = _one_line(err)
    assert "feed.npz" in msg and "'x'" in msg and "pickle" in msg


def test_load_npz_names_missing_and_extra_keys(tmp_path):
    path = _npz(tmp_path, X=np.ones((1, 3, 4), np.float32), ids=np.zeros((1, 2), np.int64))
    with pytest.raises(InputError) as err:
        load_npz(path, SPECS)
    msg = _one_line(err)
    assert "missing ['x']" in msg and "unexpected ['X']" in msg and "['x', 'ids']" in msg


def test_load_npz_wrong_dtype(tmp_path):
    path = _npz(tmp_path, x=np.ones((1, 3, 4), np.float64), ids=np.zeros((1, 2), np.int64))
    with pytest.raises(InputError, match=r"'x' has dtype float64 but the model declares x: float32\[batch,3,4\]"):
        load_npz(path, SPECS)


def test_load_npz_wrong_static_dim_and_rank(tmp_path):
    ids = np.zeros((1, 2), np.int64)
    with pytest.raises(InputError, match=r"axis 2 must be 4, got 5"):
        load_npz(_npz(tmp_path, x=np.ones((1, 3, 5), np.float32), ids=ids), SPECS)
    with pytest.raises(InputError, match=r"rank 2\) but the model declares .*\(rank 3\)"):
        load_npz(_npz(tmp_path, x=np.ones((3, 4), np.float32), ids=ids), SPECS)


def test_load_npz_shared_symbolic_dim_must_agree(tmp_path):
    path = _npz(tmp_path, x=np.ones((2, 3, 4), np.float32), ids=np.zeros((3, 2), np.int64))
    with pytest.raises(InputError, match="dynamic dim 'batch' is 2 in input 'x' but 3 in input 'ids'"):
        load_npz(path, SPECS)


def test_load_npz_missing_or_not_npz(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_npz(tmp_path / "nope.npz", SPECS)
    bad = tmp_path / "bad.npz"
    bad.write_text("not a zip")
    with pytest.raises(InputError) as err:
        load_npz(bad, SPECS)
    assert "bad.npz" in _one_line(err)


def test_an_inputs_folder_lists_npz_files_in_any_letter_case(tmp_path):
    """`A.NPZ`, `b.npz` and `c.Npz` are three input sets wherever a folder is read (single run, dataset, tune);
    other suffixes are not; a folder named like a set is listed (reading it is then a one-line error)."""
    from toolkit.dataset.source import list_inputs
    from toolkit.inputs.npz import npz_files
    from toolkit.source import ModelSource, input_sets
    from toolkit.tuning.feeds import load_feed_sets

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    folder = tmp_path / "sets"
    folder.mkdir()
    for i, name in enumerate(["b.npz", "A.NPZ", "c.Npz"]):
        with open(folder / name, "wb") as fh:  # np.savez would append ".npz" to a name ending in ".NPZ"
            np.savez(fh, x=np.full((1, 2), i, np.float32))
    (folder / "notes.txt").write_text("not a set")
    (folder / "x.npz.bak").write_text("not a set")
    want = ["A.NPZ", "b.npz", "c.Npz"]
    assert [p.name for p in npz_files(folder)] == want
    assert [r.name for r in list_inputs(folder)] == want
    src = ModelSource(tmp_path / "m.onnx", "m", "file")
    sets = input_sets(model, src, str(folder))
    assert [label for label, _ in sets] == want
    assert [float(f["x"][0, 0]) for _, f in sets] == [1.0, 0.0, 2.0]  # each file's own values
    assert len(load_feed_sets(model, src, str(folder))) == 3
    with pytest.raises(InputError, match="3 .npz files"):
        load_feed_sets(model, src, str(folder), max_sets=2)
    (folder / "d.NPZ").mkdir()
    assert [p.name for p in npz_files(folder)] == [*want[:1], "b.npz", "c.Npz", "d.NPZ"]


def test_npz_paths_the_file_system_refuses_are_one_input_error(tmp_path, monkeypatch):
    """Kind: an .npz path or --inputs folder the file system refuses (a name too long, a link loop, a file on the
    way; a folder that cannot be listed): one InputError line naming it, never an OSError."""
    import errno

    from toolkit.inputs.npz import npz_files

    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    spec = [InputSpec("x", np.dtype(np.float32), (1, 4))]
    for bad, why in ((tmp_path / ("a" * 300 + ".npz"), "bytes long"), (tmp_path / "loop" / "x.npz", "loops"),
                     (tmp_path / "f.txt" / "x.npz", "is a file, not a folder")):
        with pytest.raises(InputError, match=f"^npz file '.*' cannot be used: .*{why}"):
            load_npz(bad, spec)

    def refuse(self):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", refuse)
    with pytest.raises(InputError, match="^--inputs folder '.*' cannot be listed: Permission denied; give a readable"):
        npz_files(tmp_path)
