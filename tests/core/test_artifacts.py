"""Artifacts (toolkit/core/artifacts.py): arrays of every dtype read back without pickle, values without an
array form refused, and safe file names."""

from __future__ import annotations

import os
import unicodedata

import numpy as np
import pytest

from tests.dtype_models import CPU_TYPES, _expected_stored, _reference_output
from toolkit.core.artifacts import safe_filename, save_npz, storable
from toolkit.core.errors import ModelError


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", CPU_TYPES)
def test_npz_and_npy_of_every_cpu_dtype_read_back_without_pickle(name, tmp_path):
    from toolkit.core.artifacts import save_npy

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


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), np.float32("nan"), np.float64("-inf")])
def test_written_json_is_strict_whatever_floats_it_holds(tmp_path, value):
    """Kind: non-finite floats (a -inf cosine of a NaN output, a NaN error) in any JSON file we write
    (summary.json of tune and the others): strict JSON (null), which parsers other than Python's read."""
    import json

    from toolkit.core.artifacts import write_json

    path = write_json(tmp_path / "s.json", {"a": value, "b": [1, value, np.int64(3)], "c": {"d": np.array([value])}})

    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    got = json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)
    assert got == {"a": None, "b": [1, None, 3], "c": {"d": [None]}}


def test_write_json_and_write_text_escape_names_that_are_not_utf8(tmp_path):
    """Kind: a model path whose bytes are not UTF-8 (plan.json, compile.log, summary.json name it): written
    escaped (\\xff), the files stay UTF-8, no UnicodeEncodeError."""
    import json
    import os

    from toolkit.core.artifacts import write_json, write_text

    model = os.fsdecode(b"/m/\xff\xfe.onnx")
    got = json.loads(write_json(tmp_path / "s.json", {"model": model}).read_bytes().decode("utf-8"))
    assert got == {"model": r"/m/\xff\xfe.onnx"}
    assert write_text(tmp_path / "c.log", f"loaded {model}\n").read_bytes().decode("utf-8") == \
        "loaded /m/\\xff\\xfe.onnx\n"


@pytest.mark.parametrize("kind", ["long", "long-below-missing", "loop", "file-on-the-way"])
def test_output_paths_the_file_system_refuses_are_one_line_and_create_nothing(tmp_path, kind):
    """Kind: an --out / --dump / --save-outputs the file system refuses (ENAMETOOLONG, ELOOP, ENOTDIR): check_out,
    output_dir, check_dump_dir and write_npz raise UsageError (exit 2, one line naming the option), before
    anything is created (no folder above it either)."""
    from toolkit.core.artifacts import check_dump_dir, check_out, output_dir, write_npz
    from toolkit.core.errors import UsageError

    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    bad = {"long": tmp_path / ("a" * 300), "long-below-missing": tmp_path / "new" / ("a" * 300),
           "loop": tmp_path / "loop" / "x", "file-on-the-way": tmp_path / "f.txt" / "x"}[kind]
    before = sorted(os.listdir(tmp_path))
    for call, option in ((lambda: check_out(str(bad)), "--out"), (lambda: check_dump_dir(str(bad), None), "--dump"),
                         (lambda: check_dump_dir(str(tmp_path / "d"), str(bad)), "--out"),
                         (lambda: write_npz(bad.with_suffix(".npz"), {"y": np.ones(2)}), "--save-outputs")):
        with pytest.raises(UsageError) as exc:
            call()
        assert str(exc.value).startswith(f"{option} '") and "\n" not in str(exc.value) and \
            "cannot be used: " in str(exc.value)
    with pytest.raises(UsageError, match="^--out '"):
        with output_dir(str(bad), tmp_path, "m"):
            pass
    assert sorted(os.listdir(tmp_path)) == before
