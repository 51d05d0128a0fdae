"""Weights left on disk (toolkit.ir.weights): the loader maps external initializers of MAP_MIN_BYTES or more
instead of reading them, keeps its safety checks, and every reader gets the file's values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.graphs import mlp_model
from toolkit.config.schema import Config
from toolkit.core.errors import ModelError
from toolkit.diagnose import diagnose, prepare
from toolkit.ir import load, weights
from toolkit.ir.load import load_model


@pytest.mark.parametrize("one_file", [False, True])
def test_large_initializers_stay_mapped_with_the_files_values(tmp_path, one_file):
    path, inits = mlp_model(tmp_path, np.random.default_rng(0), one_file=one_file)
    model = load_model(path)
    for t in model.graph.initializer:
        big = inits[t.name].nbytes >= weights.MAP_MIN_BYTES
        assert weights.is_mapped(t) == big, t.name
        arr = weights.array_of(t)
        assert isinstance(arr, np.memmap) == big
        np.testing.assert_array_equal(arr, inits[t.name])
        if big:
            assert not t.raw_data  # never read into the proto
            assert not arr.flags.writeable


def test_large_initializers_inside_the_model_file_stay_there(tmp_path):
    """Weights stored in the .onnx file itself are mapped at their offset in it, with the file's values."""
    path, inits = mlp_model(tmp_path, np.random.default_rng(12))
    onnx.save(onnx.load(str(path)), str(tmp_path / "embedded.onnx"))  # every tensor inside the model file
    model = load_model(tmp_path / "embedded.onnx")
    for t in model.graph.initializer:
        big = inits[t.name].nbytes >= weights.MAP_MIN_BYTES
        assert weights.is_mapped(t) == big and not (big and t.raw_data), t.name
        if big:
            f = {e.key: e.value for e in t.external_data}
            assert f["location"] == "embedded.onnx" and f[weights.PATH_KEY] == str((tmp_path / "embedded.onnx").resolve())
        np.testing.assert_array_equal(weights.array_of(t), inits[t.name])


@pytest.mark.parametrize("embedded", [True, False])
def test_weight_data_digest_is_each_files_sha256_read_once(tmp_path, monkeypatch, embedded):
    """data_digest names every data file by its sha256 (checked with hashlib); a file the loader already read
    (weights inside the .onnx file) is not read a second time, external data files once each."""
    import hashlib

    path, _ = mlp_model(tmp_path, np.random.default_rng(3), one_file=True)
    if embedded:
        path = tmp_path / "embedded.onnx"
        onnx.save(onnx.load(str(tmp_path / "model.onnx")), str(path))
    model = load_model(path)
    streamed = []
    real = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest", lambda fh, d: streamed.append(fh.name) or real(fh, d))
    got = weights.data_digest(model)
    files = list(dict.fromkeys({e.key: e.value for e in t.external_data}[weights.PATH_KEY]
                               for t in model.graph.initializer if weights.is_mapped(t)))
    want = hashlib.sha256()
    for f in files:
        want.update(f"{f}\0{hashlib.sha256(Path(f).read_bytes()).hexdigest()}\0".encode())
    assert files and got == want.hexdigest()
    assert streamed == ([] if embedded else files)
    weights.data_digest(model)
    assert streamed == ([] if embedded else files)  # remembered


def test_mapped_path_is_the_checked_file_inside_the_folder(tmp_path):
    path, _ = mlp_model(tmp_path, np.random.default_rng(1))
    model = load_model(path)
    for t in model.graph.initializer:
        if weights.is_mapped(t):
            f = {e.key: e.value for e in t.external_data}
            assert f[weights.PATH_KEY] == str((tmp_path / f["location"]).resolve())


def test_short_mapped_data_file_refused_before_reading(tmp_path):
    path, inits = mlp_model(tmp_path, np.random.default_rng(2))
    big = next(k for k, v in inits.items() if v.nbytes >= weights.MAP_MIN_BYTES)
    data = tmp_path / big
    data.write_bytes(data.read_bytes()[:-4])
    with pytest.raises(ModelError, match="fewer than|beyond the end"):
        load_model(path)


def test_mapped_data_outside_the_folder_refused(tmp_path):
    inner = tmp_path / "m"
    inner.mkdir()
    path, inits = mlp_model(inner, np.random.default_rng(3))
    big = next(k for k, v in inits.items() if v.nbytes >= weights.MAP_MIN_BYTES)
    (inner / big).rename(tmp_path / big)
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        if t.name == big:
            for e in t.external_data:
                if e.key == "location":
                    e.value = f"../{big}"
    onnx.save(m, str(path))
    with pytest.raises(ModelError, match="outside the model's folder"):
        load_model(path)


def test_data_digest_follows_the_file_contents(tmp_path):
    path, inits = mlp_model(tmp_path, np.random.default_rng(4), one_file=True)
    before = weights.data_digest(load_model(path))
    raw = bytearray((tmp_path / "model.data").read_bytes())
    raw[-1] ^= 1  # same size, same offsets: only the bytes differ
    (tmp_path / "model.data").write_bytes(bytes(raw))
    assert weights.data_digest(load_model(path)) != before


# ---------------------------------------------------------------- a whole diagnosis on weights left on disk
def _tensors_close(x, y, what):
    """Equal up to GEMM summation order (a constant B is prepacked, a mapped one is read in place): FP32 within
    1e-5 relative or 1e-4 of the tensor's largest magnitude; FP16 within 4 FP16 steps (an output rounded one
    step apart upstream moves later ones by a few), inf at the same positions."""
    assert x.dtype == y.dtype and x.shape == y.shape, what
    if x.dtype.kind != "f":
        np.testing.assert_array_equal(x, y, err_msg=what)
        return
    np.testing.assert_array_equal(np.isinf(x), np.isinf(y), err_msg=what)
    fin = np.isfinite(y)
    scale = float(np.abs(y[fin]).max()) if fin.any() else 0.0
    step = 4 * 2.0 ** -10 if x.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(x[fin].astype(np.float64), y[fin].astype(np.float64), rtol=step,
                               atol=(1e-2 if x.dtype == np.float16 else 10) * step * scale, err_msg=what)


@pytest.mark.parametrize("precision_mode", ["force_fp16", "allow_mix_precision"])
@pytest.mark.parametrize("storage", ["external", "embedded"])
def test_diagnosis_on_mapped_weights_equals_the_all_in_memory_one(tmp_path, monkeypatch, precision_mode, storage):
    """External data split over many files (or weights inside the .onnx file): the diagnosis reading the weights
    from their maps gives, tensor by tensor, the reference and device values and the verdict of the diagnosis
    that read them all into memory."""
    path, _ = mlp_model(tmp_path, np.random.default_rng(8), widths=(64, 1024, 512, 512, 256))
    if storage == "embedded":
        onnx.save(onnx.load(str(path)), str(path))
    np.savez(tmp_path / "in.npz", ids=np.random.default_rng(9).integers(0, 600, (1, 16)))
    cfg = Config(precision_mode=precision_mode, op_compiler_cache_mode="disable")
    runs = {}
    for label, threshold in (("mapped", weights.MAP_MIN_BYTES), ("in_memory", 1 << 62)):
        monkeypatch.setattr(load, "MAP_MIN_BYTES", threshold)
        prep = prepare(str(path), str(tmp_path / "in.npz"))
        assert weights.has_mapped(prep.model) == (label == "mapped")
        runs[label] = diagnose(prep, cfg)
    (da, ea), (db, eb) = runs["mapped"], runs["in_memory"]
    assert da.summary["verdict"] == db.summary["verdict"]
    for side in ("golden", "device"):
        assert ea[side].keys() == eb[side].keys()
        for k in eb[side]:
            _tensors_close(np.asarray(ea[side][k]), np.asarray(eb[side][k]), f"{side} {k}")
    assert list(da.table["TensorName"]) == list(db.table["TensorName"])


PEAK = r"""
import json, os, sys, threading, time
from toolkit.ort.ort_env import enable_global_thread_pool
enable_global_thread_pool()
from toolkit.config.schema import Config
from toolkit.diagnose import diagnose, prepare

def anon():
    with open(f"/proc/{os.getpid()}/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith("RssAnon"))

base, peak = anon(), [0]
def sample():
    while True:
        peak[0] = max(peak[0], anon())
        time.sleep(0.01)
threading.Thread(target=sample, daemon=True).start()
prep = prepare(sys.argv[1], sys.argv[2])
diag, _ = diagnose(prep, Config(precision_mode="force_fp16", op_compiler_cache_mode="disable"))
time.sleep(0.05)
print(json.dumps({"base": base, "peak": max(peak[0], anon()), "verdict": diag.summary["verdict"]}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RssAnon from /proc")
def test_diagnosis_memory_stays_bounded_when_weights_exceed_the_budget(tmp_path):
    """24 MatMul layers of 16 MiB FP32 weights (384 MiB, one file each): a diagnosis in a child process grows
    its private (anonymous) memory by less than a budget of half the weights, as the weights stay in their
    files (memory-mapped, file-backed pages the kernel may drop). Before, every copy of the weights (proto,
    numpy, kernel models, sessions) cost another 384 MiB."""
    width, layers = 2048, 24
    path, inits = mlp_model(tmp_path, np.random.default_rng(10), widths=(width,) * (layers + 1), vocab=64)
    total = sum(v.nbytes for v in inits.values())
    budget = total // 2
    np.savez(tmp_path / "in.npz", ids=np.random.default_rng(11).integers(0, 64, (1, 16)))
    out = subprocess.run([sys.executable, "-c", PEAK, str(path), str(tmp_path / "in.npz")], capture_output=True,
                         text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["peak"] - got["base"] < budget, (got, total)


@pytest.mark.parametrize("storage", ["external", "embedded"])
def test_a_file_replaced_after_loading_does_not_change_the_loaded_weights(tmp_path, storage):
    """The maps are made when the model loads: a file replaced afterwards (a new file under the same name, as
    an export or a download does) leaves the loaded model's values those of the bytes checked."""
    path, inits = mlp_model(tmp_path, np.random.default_rng(13), one_file=True)
    if storage == "embedded":
        onnx.save(onnx.load(str(path)), str(path))
    target = path if storage == "embedded" else tmp_path / "model.data"
    model = load_model(path)
    fresh = tmp_path / "fresh"
    fresh.write_bytes(bytes(len(target.read_bytes())))  # zeros, same size
    fresh.replace(target)
    for t in model.graph.initializer:
        np.testing.assert_array_equal(weights.array_of(t), inits[t.name], err_msg=t.name)


RELEASE = r"""
import json, sys
import numpy as np
from toolkit.ir.load import load_model
from toolkit.ir.weights import mapped_initializers, release_pages
from toolkit.cache.compile_entry import constant_values

def file_rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))

model = load_model(sys.argv[1])
maps = mapped_initializers(model)
base = file_rss()
sums = {k: float(np.asarray(v, np.float64).sum()) for k, v in maps.items()}  # every page touched
touched = file_rss()
for v in maps.values():
    release_pages(v)
released = file_rss()
again = {k: float(np.asarray(v, np.float64).sum()) for k, v in maps.items()}  # read back from the page cache
for v in maps.values():
    release_pages(v)
constant_values(model)  # the compile cache's value digests read every weight and release them
hashed = file_rss()
release_pages(np.ones(4))  # not a map: nothing happens
print(json.dumps({"base": base, "touched": touched, "released": released, "hashed": hashed,
                  "same": sums == again}))
"""


def test_released_weight_pages_leave_the_process_and_read_back_the_same(tmp_path):
    """Kind: whole-weight scans (the constant screen, the compile cache's value digests) of weights left on
    disk. Afterwards their pages are no longer counted in the process' RSS, and a later read gives the same
    values (from the page cache)."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((1024, 4096)).astype(np.float32)  # 16 MiB
    g = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                               [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 1024])],
                               [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4096])],
                               [onnx.numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)]), path,
              save_as_external_data=True, location="w.bin", size_threshold=1024)
    out = subprocess.run([sys.executable, "-c", RELEASE, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["touched"] - got["base"] >= 0.9 * w.nbytes, got  # the scan mapped them in
    assert got["released"] - got["base"] <= 0.1 * w.nbytes, got
    assert got["hashed"] - got["base"] <= 0.1 * w.nbytes, got
    assert got["same"]


@pytest.mark.parametrize("storage", ["external", "embedded"])
def test_weights_in_a_folder_whose_name_is_not_utf8_are_mapped_and_run(tmp_path, storage):
    """Kind: a model in a folder (or a file) whose name holds bytes that are not UTF-8 (legal on Linux; os.fsdecode
    gives lone surrogates, which a protobuf string cannot hold): the mapped path is kept exactly (PATH_KEY holds its
    bytes), values, data digest and the diagnosis are those of the same model in a plain folder."""
    plain = tmp_path / "plain"
    plain.mkdir()
    path, inits = mlp_model(plain, np.random.default_rng(5), one_file=True)
    if storage == "embedded":
        onnx.save(onnx.load(str(path)), str(path))
    odd = tmp_path / os.fsdecode(b"m\xff\xfe")
    os.rename(plain, odd)
    os.rename(odd / "model.onnx", odd / os.fsdecode(b"model\xff.onnx"))
    model = load_model(odd / os.fsdecode(b"model\xff.onnx"))
    mapped = [t for t in model.graph.initializer if weights.is_mapped(t)]
    assert mapped
    for t in mapped:
        np.testing.assert_array_equal(weights.array_of(t), inits[t.name])
        model.SerializeToString()  # every proto string is UTF-8
    assert weights.data_digest(model)
    assert weights.for_onnxruntime(onnx.ModelProto.FromString(model.SerializeToString())) is None  # ORT: our maps
    np.savez(tmp_path / "in.npz", ids=np.random.default_rng(9).integers(0, 600, (1, 16)))
    diag, _ = diagnose(prepare(str(odd / os.fsdecode(b"model\xff.onnx")), str(tmp_path / "in.npz")),
                       Config(precision_mode="force_fp32", op_compiler_cache_mode="disable"))
    assert diag.summary["verdict"] == "PASS"
