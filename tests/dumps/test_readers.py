"""Dump sides (toolkit/dumps/readers.py): legacy void dumps restored, special entries in a folder, and which
JSON files are taken for Polygraphy RunResults (with or without a BOM)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from tests.core.special_files import TIMEOUT, SAID, make_special, run, py
from toolkit.core.errors import InputError as _InputError
from toolkit.dumps.raw_writer import RawTensorSpec, write_raw_dump
from toolkit.dumps.readers import SideSpec as _SideSpec, read_side as _read_side


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_legacy_void_dumps_are_restored(tmp_path):
    """Older npuscope wrote ml_dtypes arrays as raw |V2 / |V1 bytes: the recorded dtype restores them."""
    from toolkit.dumps.readers import SideSpec, read_side

    bf = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    np.save(tmp_path / "t.npy", bf)  # numpy writes '|V2'
    (tmp_path / "index.json").write_text(json.dumps({"t.npy": {"tensor": "t", "kernel": "k", "dtype": "bfloat16"}}))
    back = read_side(SideSpec(str(tmp_path), "golden")).entries[0].load()
    assert back.dtype == bf.dtype and back.tobytes() == bf.tobytes()


KINDS = ["fifo", "devzero", "socket", "broken"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("kind", KINDS)
def test_device_folder_member_is_a_row_when_named_like_a_dump_and_ignored_otherwise(tmp_path, kind):
    """Node-keyed (ONNX golden naming) folders: a special entry named like a dump becomes an unreadable row; one
    named like nothing is counted in ignored_files, never silently dropped."""
    from toolkit.dumps.readers import SideSpec, read_side

    for side in ("G", "T"):
        (tmp_path / side).mkdir()
        np.save(tmp_path / side / "add.0.100.npy", np.ones(4, np.float32))
    keep = make_special(tmp_path / "T" / "mul.0.100.npy", kind)
    keep += make_special(tmp_path / "T" / "notes.bin", "fifo" if kind == "socket" else kind)
    t = read_side(SideSpec(str(tmp_path / "T"), "target", "onnx"))  # listing only: nothing is opened
    assert sorted(e.source for e in t.entries) == ["add.0.100.npy", "mul.0.100.npy"]
    assert t.ignored == ["notes.bin"]
    code = ("from toolkit.dumps.readers import SideSpec, read_side\nfrom toolkit.dumps.entry import DumpReadError\n"
            f"t = read_side(SideSpec({str(tmp_path / 'T')!r}, 'target', 'onnx'))\n"
            "e = next(e for e in t.entries if e.source == 'mul.0.100.npy')\n"
            "try:\n    e.load()\nexcept DumpReadError as exc:\n    print('REASON', exc)\n")
    if kind == "socket":  # a fresh bound socket for the reading process
        (tmp_path / "T" / "mul.0.100.npy").unlink()
        keep = make_special(tmp_path / "T" / "mul.0.100.npy", kind)
    proc = py(code, tmp_path)
    for obj in keep:
        obj.close()
    assert f"REASON {SAID[kind]}" in proc.stdout, proc.stdout + proc.stderr


# ------------------------------------------------------------------------------------------ Polygraphy JSON
# The shape Polygraphy's encoder writes (polygraphy/json/serde.py, comparator/struct.py): the class key last.
RUN_RESULTS = '{\n "lst": [\n  ["onnxrt-runner", []]\n ],\n "polygraphy_class": "RunResults"\n}'
LEGACY = '{"lst": [["r", []]], "__polygraphy_encoded_RunResults": "polygraphy_serialized_json_type"}'


@pytest.mark.parametrize("text, kind", [
    (RUN_RESULTS, "RunResults"),
    ("\ufeff" + RUN_RESULTS + "\n", "RunResults"),
    (LEGACY, "RunResults"),
    ('{"polygraphy_class": "RunResults", "lst": []}', "RunResults"),
    ('{"a": 1}', "other"),
    ('{"lst": [["r", []]]}', "other"),                                   # no class key
    ('{"a": {"polygraphy_class": "RunResults"}}', "other"),              # not at the top level
    ('{"x": 1, "polygraphy_class": "RunResults"}', "other"),             # no "lst"
    ('[{"x": {"array": "", "polygraphy_class": "ndarray"}}]', "other"),  # --save-inputs: a list
    ('{"lst": [], "polygraphy_class": "AccuracyResult"}', "polygraphy AccuracyResult"),
    ("", "empty"), (" \n\t", "empty"), ("\ufeff", "empty"), ("hello", "not JSON"),
])
def test_run_results_kind_accepts_only_polygraphys_own_shape(text, kind):
    from toolkit.dumps.readers import run_results_kind

    data = text.encode("utf-8")
    assert run_results_kind(data, data) == kind


def _side_error(path: Path):
    from toolkit.core.errors import UserError
    from toolkit.dumps.readers import SideSpec, read_side

    with pytest.raises(UserError) as info:
        read_side(SideSpec(str(path), "golden"))
    return info.value


@pytest.mark.parametrize("text", ['{"a":1}', '[1, 2]', '{"lst": [["r", []]]}', "\ufeff{}"])
@pytest.mark.parametrize("polygraphy", ["installed", "missing"])
def test_json_that_is_not_run_results_names_the_formats_read(tmp_path, monkeypatch, text, polygraphy):
    """Kind: any JSON given as a dump side that is not a RunResults. The error is one line naming the formats
    compare-dumps reads, never 'needs polygraphy' (with or without polygraphy installed)."""
    from toolkit.core.errors import InputError

    if polygraphy == "missing":
        monkeypatch.setitem(sys.modules, "polygraphy.comparator", None)  # import fails as if not installed
    path = tmp_path / "golden.json"
    path.write_text(text, encoding="utf-8")
    err = _side_error(path)
    msg = str(err)
    assert type(err) is InputError and "\n" not in msg and "polygraphy:" not in msg, msg
    assert "not a Polygraphy RunResults JSON" in msg and "index.json" in msg and ".npy" in msg, msg


def test_run_results_without_polygraphy_asks_for_it(tmp_path, monkeypatch):
    from toolkit.core.errors import InputError

    monkeypatch.setitem(sys.modules, "polygraphy.comparator", None)
    path = tmp_path / "out.json"
    path.write_text(RUN_RESULTS)
    err = _side_error(path)
    assert type(err) is not InputError and "needs polygraphy: pip install" in str(err)


@pytest.mark.skipif(importlib.util.find_spec("polygraphy") is None, reason="polygraphy not installed")
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_run_results_written_by_polygraphy_are_read_with_or_without_a_bom(tmp_path, bom):
    """Kind: a RunResults JSON starting with a UTF-8 BOM (saved again by a Windows editor) is read like the file
    polygraphy wrote; its tensors (over the bytes peeked at each end) come back as saved."""
    from polygraphy.comparator import IterationResult, RunResults

    from toolkit.dumps.readers import RUN_RESULTS_PEEK, SideSpec, read_side, run_results_kind

    values = {"a": np.arange(4096, dtype=np.float32), "b": np.full((2, 3), 7, np.int64)}
    results = RunResults([("onnxrt-runner", [IterationResult(dict(values), runner_name="onnxrt-runner")])])
    path = tmp_path / "pg.json"
    path.write_bytes(bom + results.to_json().encode("utf-8"))
    data = path.read_bytes()
    assert len(data) > 2 * RUN_RESULTS_PEEK
    assert run_results_kind(data[:RUN_RESULTS_PEEK], data[-RUN_RESULTS_PEEK:]) == "RunResults"
    side = read_side(SideSpec(str(path), "golden"))
    assert side.format == "polygraphy" and [e.name for e in side.entries] == list(values)
    for entry in side.entries:
        np.testing.assert_array_equal(entry.load(), values[entry.name])


@pytest.mark.parametrize("original_op", [None, ("head/sq", 0)])
def test_a_raw_dump_and_its_npy_conversion_are_one_dump(tmp_path, original_op):
    """msaccucmp convert writes ``<raw name>.output.{i}.npy`` beside the raw file: the two are one dump. It is
    counted once (the raw output as superseded), read from the .npy, and keyed as the raw header records it."""
    raw_values = np.arange(6, dtype=np.float16).reshape(2, 3)
    npy_values = raw_values - np.float16(5)  # a conversion that disagrees: the .npy must be the one read
    name = "Mul.head_sq.5.2.1700000000000002"
    write_raw_dump(tmp_path / name, [RawTensorSpec(raw_values, original_op=original_op)])
    np.save(tmp_path / f"{name}.output.0.npy", npy_values)
    ds = _read_side(_SideSpec(str(tmp_path), "target"))
    assert len(ds.entries) == 1 and ds.superseded == 1
    e = ds.entries[0]
    assert e.source == f"{name}.output.0.npy"
    assert np.array_equal(e.load(), npy_values)
    assert (e.name, e.index, e.kernel) == (("head/sq", 0, "head_sq") if original_op else ("head_sq", 0, ""))
    assert "also converted to .npy" in ds.detail


def test_nested_device_dumps_are_found_beside_other_files(tmp_path):
    """The device's {time}/{device_id}/{om}/{model_id}/{iteration}/ tree with a {time}_summary.json next to it:
    the dumps are read from the tree, and the file beside it is listed as ignored."""
    leaf = tmp_path / "dev" / "20241010101010" / "0" / "tiny_om" / "1" / "0"
    leaf.mkdir(parents=True)
    values = np.linspace(-1, 1, 6, dtype=np.float16)
    np.save(leaf / "Relu.relu.4.2.1700000000000001.output.0.npy", values)
    (tmp_path / "dev" / "20241010101010_summary.json").write_text("{}")
    ds = _read_side(_SideSpec(str(tmp_path / "dev"), "target"))
    assert [(e.name, e.index) for e in ds.entries] == [("relu", 0)]
    assert np.array_equal(ds.entries[0].load(), values)
    assert "20241010101010_summary.json" in ds.ignored and "nested folder '20241010101010/0/tiny_om/1/0'" in ds.detail


def test_a_folder_of_other_files_and_no_nested_dumps_is_still_refused(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "notes.txt").write_text("x")
    with pytest.raises(_InputError, match="holds no .npy file and no raw device dump"):
        _read_side(_SideSpec(str(tmp_path / "dev"), "target"))


@pytest.mark.parametrize("form", ["5-field", "4-field", "9-field"])
@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("tasks", [(5, 17), (17, 5), (9, 10)])
def test_dumps_of_one_op_with_one_timestamp_are_told_apart_by_task_id(tmp_path, form, raw, tasks):
    """Two dumps of one op output share a timestamp: the one of the higher task id (it ran later) is used, compared
    as numbers (17 > 5, though '5' sorts after '17' as text), whatever the name form, raw or converted; the side's
    detail says a tie was broken."""
    ts = 1700000000000100
    values = {t: np.full((2, 3), float(t), np.float16) for t in tasks}
    for t in tasks:
        name = {"5-field": f"Add.loop.{t}.2.{ts}", "4-field": f"Add.loop.{t}.{ts}",
                "9-field": f"Add.loop.2.{t}.{ts}.0.0.1234.0"}[form]
        if raw:
            write_raw_dump(tmp_path / name, [RawTensorSpec(values[t])])
        else:
            np.save(tmp_path / f"{name}.output.0.npy", values[t])
    ds = _read_side(_SideSpec(str(tmp_path), "target"))
    assert len(ds.entries) == 1 and ds.superseded == 1
    assert np.array_equal(ds.entries[0].load(), values[max(tasks)])
    assert "share its timestamp" in ds.detail


@pytest.mark.parametrize("with_dumps", [0, 1, 2])
def test_only_nested_folders_holding_dumps_count_as_the_nested_layout(tmp_path, with_dumps):
    """A folder of CSVs whose subfolders hold reports (CSV, JSON) and ``with_dumps`` of them dumps: folders without
    a dump are not taken for the nested layout. None: refused as holding no dump, naming what it holds and
    pointing to parse-log; one: read from it; two: both named."""
    side = tmp_path / "side"
    side.mkdir()
    (side / "result_1.csv").write_text("Index,OpType\n")
    for i in range(3):
        sub = side / f"report{i}"
        sub.mkdir()
        (sub / "summary.json").write_text("{}")
        (sub / "op_summary.csv").write_text("x\n")
        if i < with_dumps:
            np.save(sub / f"Relu.relu.4.2.170000000000000{i}.output.0.npy", np.ones(3, np.float16))
    if with_dumps == 1:
        ds = _read_side(_SideSpec(str(side), "target"))
        assert ds.path == side / "report0" and [e.name for e in ds.entries] == ["relu"]
        return
    with pytest.raises(_InputError) as info:
        _read_side(_SideSpec(str(side), "target"))
    msg = str(info.value)
    if with_dumps == 0:
        assert "holds no .npy file and no raw device dump" in msg and "'result_1.csv'" in msg and "parse-log" in msg
    else:
        assert "dumps in 2 nested folders ('report0', 'report1')" in msg


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float8_e4m3fn"])
def test_a_device_npy_named_with_an_ml_dtype_is_read_in_that_dtype(tmp_path, dtype_name):
    """MindSpore's ``....output.0.DefaultFormat.bfloat16.npy``: np.save writes an ml_dtypes array as raw bytes
    (void ``|V2``); the dtype in the file name restores it bit for bit. A plain float32 file of that name is read
    as it is."""
    want = np.dtype(getattr(ml_dtypes, dtype_name))
    values = np.array([0.5, -1.25, 3.0, 0.0], dtype=want)
    stem = f"MatMul.mm.3.2.1700000000000005.output.0.DefaultFormat.{dtype_name}"
    np.save(tmp_path / f"{stem}.npy", values)
    assert np.load(tmp_path / f"{stem}.npy").dtype.kind == "V"  # what numpy wrote (checked, not assumed)
    got = _read_side(_SideSpec(str(tmp_path), "target")).entries[0].load()
    assert got.dtype == want and got.tobytes() == values.tobytes()
    other = tmp_path / "plain"
    other.mkdir()
    np.save(other / f"{stem}.npy", values.astype(np.float32))
    got = _read_side(_SideSpec(str(other), "target")).entries[0].load()
    assert got.dtype == np.float32 and np.array_equal(got, values.astype(np.float32))
