"""Round 6 fixes, dtypes and number texts (fault kinds, not instances):

1. compare/diagnose compare every dtype onnxruntime's CPU provider can output: strings and integer-like tensors
   (bool, the ml_dtypes int4/uint4/int2/uint2) by exact match, bfloat16/float8/float4 as floats; equal outputs
   PASS, a planted difference is found.
2. every array npuscope writes (outputs.npz, --dump, repro/, dataset stores) reads back without pickle, in
   plain numpy and in npuscope's own readers, which restore the ml_dtypes the model declares.
3. two different numbers printed side by side (regress) never print alike: console.show_pair.
4. a PASS/WARN says how many tensors cross a default line within the expected FP16 noise; line_origins
   records which lines the user set.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper

from toolkit.core.artifacts import save_npz, storable, write_npz
from toolkit.compare.metrics import compare_tensors, dtype_class, line_origins, parse_thresholds, value_kind
from toolkit.config.schema import Config
from toolkit.core.errors import InputError, ModelError
from toolkit.ort import ort_values

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
OPSET = 25
SHAPE = [2, 3]
FEED = np.linspace(0.1, 0.9, 6, dtype=np.float32).reshape(SHAPE)


# ------------------------------------------------------------------------------------------ tiny models
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
TYPES = sorted(CPU_MODELS)


def test_the_dtype_list_covers_every_kind():
    """The probe found what onnxruntime 1.32 outputs: numeric, bool, string, bfloat16, float8, sub-byte ints."""
    assert {"FLOAT", "DOUBLE", "FLOAT16", "BOOL", "STRING", "INT64", "UINT8", "BFLOAT16", "FLOAT8E4M3FN",
            "FLOAT8E5M2", "FLOAT8E8M0", "INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1"} <= set(TYPES)


def _save(model: onnx.ModelProto, folder: Path) -> Path:
    path = folder / "m.onnx"
    onnx.save(model, path)
    return path


# ------------------------------------------------------------------------------------------ 1. comparison
def _planted(arr: np.ndarray) -> np.ndarray:
    """A copy of ``arr`` with element 0 changed to another value of its dtype (computed with numpy/ml_dtypes)."""
    out = np.array(arr, copy=True)
    flat = out.reshape(-1)
    if out.dtype.kind in "OUS":
        flat[0] = str(flat[0]) + "x"
    elif out.dtype == np.bool_:
        flat[0] = not flat[0]
    elif np.dtype(out.dtype).name.startswith(("int", "uint")):
        flat[0] = np.array(0 if int(flat[0].astype(np.int64)) != 0 else 1).astype(out.dtype)
    else:
        big = float(np.abs(out.astype(np.float64)).max()) * 4.0 or 4.0
        flat[0] = np.array(big).astype(out.dtype)
    return out


def _diagnose(path: Path, monkeypatch=None, plant=False):
    from toolkit import diagnose as dg

    if plant:
        real = dg._run_or_explain

        def planted(sess, prep):
            res = real(sess, prep)
            bad = _planted(res.outputs["y"])
            res.outputs["y"] = bad
            res.dumps["y"] = bad
            return res

        monkeypatch.setattr(dg, "_run_or_explain", planted)
    prep = dg.prepare(str(path))
    diag, extra = dg.diagnose(prep, Config())
    return diag, extra


@pytest.mark.parametrize("name", TYPES)
def test_equal_outputs_of_every_cpu_dtype_pass(name, tmp_path):
    diag, extra = _diagnose(_save(CPU_MODELS[name], tmp_path))
    row = diag.table.set_index("TensorName").loc["y"]
    assert row["CompareFailReason"] == "", row["CompareFailReason"]
    assert diag.summary["verdict"] == "PASS", diag.summary["reasons"]
    golden = np.asarray(extra["golden"]["y"])
    if golden.dtype.kind in "OUS" or value_kind(golden.dtype) == "integer":
        assert row["ExactMatchRate"] == 1.0
    else:
        assert row["MaxAbsoluteError"] == 0.0 and row["CosineSimilarity"] == 1.0


@pytest.mark.parametrize("name", TYPES)
def test_a_planted_difference_in_every_cpu_dtype_fails(name, tmp_path, monkeypatch):
    diag, extra = _diagnose(_save(CPU_MODELS[name], tmp_path), monkeypatch, plant=True)
    row = diag.table.set_index("TensorName").loc["y"]
    assert diag.summary["verdict"] == "FAIL", diag.summary["reasons"]
    assert row["CompareFailReason"] == "" and row["Abnormal"]
    golden = np.asarray(extra["golden"]["y"])
    device = _planted(golden)
    if golden.dtype.kind in "OUS" or value_kind(golden.dtype) == "integer":
        assert row["ExactMatchRate"] == 5 / 6  # one of six elements differs
    else:
        g64, d64 = golden.astype(np.float32).astype(np.float64), device.astype(np.float32).astype(np.float64)
        both = np.isfinite(g64) & np.isfinite(d64)
        if both.all():
            assert row["MaxAbsoluteError"] == pytest.approx(np.abs(d64 - g64).max(), rel=1e-12)
        else:  # the planted value overflowed the format: the device NaN/inf where the golden is finite
            assert row["OverFlow"]


def test_cli_compare_passes_string_and_int4_outputs(tmp_path):
    for name in ("STRING", "INT4"):
        (tmp_path / name).mkdir()
        path = _save(CPU_MODELS[name], tmp_path / name)
        res = _run_cli("compare", path, "--out", f"o{name}", cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert json.loads((tmp_path / f"o{name}" / "summary.json").read_text())["verdict"] == "PASS"


def test_compare_tensors_text_and_subbyte_kinds():
    words = np.array(["a", "bb", "ç"], dtype=object)
    assert compare_tensors(words, np.array(["a", "bb", "ç"]))["ExactMatchRate"] == 1.0  # object vs <U
    assert compare_tensors(np.array([b"a", b"bb"]), np.array(["a", "bb"], dtype=object))["ExactMatchRate"] == 1.0
    row = compare_tensors(words, np.array(["a", "b", "ç"], dtype=object))
    assert row["ExactMatchRate"] == 2 / 3 and row["Abnormal"]
    mixed = compare_tensors(np.array(["1", "2"], dtype=object), np.array([1, 2]))
    assert mixed["CompareFailReason"].startswith("dtype class mismatch") and "text" in mixed["CompareFailReason"]
    odd = compare_tensors(np.array([{}, 1], dtype=object), np.array([{}, 1], dtype=object))
    assert odd["CompareFailReason"].startswith("unsupported dtype")
    i4 = np.array([-8, 7, 0, -1], ml_dtypes.int4)
    assert compare_tensors(i4, i4.copy())["ExactMatchRate"] == 1.0
    assert compare_tensors(i4, np.array([-8, 7, 0, -1], np.int8))["ExactMatchRate"] == 1.0
    assert compare_tensors(i4, np.array([-8, 7, 0, 1], ml_dtypes.int4))["ExactMatchRate"] == 0.75
    u2 = np.array([0, 1, 2, 3], ml_dtypes.uint2)
    assert compare_tensors(u2, np.array([0, 1, 2, 2], ml_dtypes.uint2))["ExactMatchRate"] == 0.75
    bf = np.array([1.0, 2.0, 3.0], ml_dtypes.bfloat16)
    row = compare_tensors(bf, np.array([1.0, 2.0, 3.0], np.float32))
    assert row["CosineSimilarity"] == 1.0 and row["MaxAbsoluteError"] == 0.0


@pytest.mark.parametrize("dt, cls", [(np.float32, "float"), (ml_dtypes.bfloat16, "float"),
                                     (ml_dtypes.float8_e5m2, "float"), (ml_dtypes.float4_e2m1fn, "float"),
                                     (np.bool_, "integer"), (ml_dtypes.int4, "integer"), (ml_dtypes.uint2, "integer"),
                                     (np.str_, "integer"), (object, "integer"), (np.complex64, "other")])
def test_dtype_class_of_every_kind(dt, cls):
    assert dtype_class(dt) == cls


# ------------------------------------------------------------------------------------------ 2. array files
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


@pytest.mark.parametrize("name", TYPES)
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


def test_values_without_an_array_form_are_refused_in_one_line():
    with pytest.raises(ModelError, match="'seq' is a sequence of 2 tensors"):
        storable([np.zeros(2), np.zeros(3)], "seq")
    with pytest.raises(ModelError, match="empty optional"):
        storable(None, "opt")
    with pytest.raises(ModelError, match="dict"):
        storable(np.array([{}, {}], dtype=object), "objs")


def _run_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize("name", ["STRING", "BFLOAT16", "INT4", "FLOAT8E5M2"])
def test_run_outputs_and_dumps_read_back(name, tmp_path):
    from toolkit.dumps.readers import SideSpec, read_side

    path = _save(CPU_MODELS[name], tmp_path)
    np.savez(tmp_path / "in.npz", x=FEED)
    res = _run_cli("run", path, "--inputs", "in.npz", "--out", "o", "--dump", "d", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    golden = _reference_output(name)
    with np.load(tmp_path / "o" / "outputs.npz", allow_pickle=False) as z:
        stored = z["y"]
    assert stored.dtype.kind in "biufU"
    index = json.loads((tmp_path / "d" / "index.json").read_text())
    entry = next(v for v in index.values() if v["tensor"] == "y")
    assert entry["dtype"] == str(golden.dtype)
    assert entry["stored_dtype"] == str(stored.dtype)
    dumped = next(e for e in read_side(SideSpec(str(tmp_path / "d"), "target")).entries if e.name == "y").load()
    if golden.dtype.kind == "O":
        assert dumped.dtype.kind == "U" and dumped.tolist() == golden.tolist() and stored.tolist() == golden.tolist()
    else:  # the reader restores the ml_dtypes dtype index.json records; outputs.npz holds the exact standard form
        assert dumped.dtype == golden.dtype and dumped.tobytes() == golden.tobytes()
        assert stored.astype(golden.dtype).tobytes() == golden.tobytes()


def test_legacy_void_dumps_are_restored(tmp_path):
    """Older npuscope wrote ml_dtypes arrays as raw |V2 / |V1 bytes: the recorded dtype restores them."""
    from toolkit.dumps.readers import SideSpec, read_side

    bf = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    np.save(tmp_path / "t.npy", bf)  # numpy writes '|V2'
    (tmp_path / "index.json").write_text(json.dumps({"t.npy": {"tensor": "t", "kernel": "k", "dtype": "bfloat16"}}))
    back = read_side(SideSpec(str(tmp_path), "golden")).entries[0].load()
    assert back.dtype == bf.dtype and back.tobytes() == bf.tobytes()


def _bf16_input_model() -> onnx.ModelProto:
    """x (bfloat16) -> Identity -> y: an ml_dtypes model input."""
    return _graph_model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3])],
                        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3])])


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


@pytest.mark.parametrize("name", ["STRING", "BFLOAT16", "INT4"])
def test_repro_files_read_back_and_feed_the_reproducer(name, tmp_path):
    from toolkit.reexec.repro import write_repro
    from toolkit.inputs.npz import load_npz
    from toolkit.inputs.spec import input_specs
    from toolkit.ort.reference import ReferenceRunner

    model = CPU_MODELS[name]
    feeds = {"x": FEED}
    golden = ReferenceRunner(model).run(feeds)
    golden.update(feeds)
    last = model.graph.node[-1].name
    folder = write_repro(model, [last], golden, Config().to_dict(), tmp_path / "repro")
    sub = onnx.load(folder / "model.onnx")
    for fname in ("inputs.npz", "expected.npz"):
        with np.load(folder / fname, allow_pickle=False) as z:
            assert all(z[k].dtype.kind in "biufU" for k in z.files)
    loaded = load_npz(folder / "inputs.npz", input_specs(sub))
    for k, v in loaded.items():
        ref = np.asarray(golden[k])
        assert v.dtype == ref.dtype and v.tolist() == ref.tolist()


def test_dataset_store_results_read_back_without_pickle(tmp_path):
    from toolkit.dataset.store import Store
    from toolkit.dataset.worker import COLUMNS, Record

    store = Store(tmp_path)
    rec = Record({"input": "ä 1.npz", "sha256": "ab", "status": "error", "verdict": "ERROR", "error": "ö",
                  "reasons": ["x"]}, np.array([0, 2], np.int32), np.ones((2, len(COLUMNS))))
    path = store.write(rec)
    with np.load(path, allow_pickle=False) as z:
        assert z["meta"].dtype.kind == "U" and json.loads(str(z["meta"]))["error"] == "ö"
        assert z["rows"].tolist() == [0, 2]
    back, why = store.load("ä 1.npz")
    assert why == "" and back.meta == rec.meta


# ------------------------------------------------------------------------------------------ 3. pair texts
def test_show_pair_never_prints_two_numbers_alike():
    from toolkit.core.text import show, show_pair

    assert show(0.12345649, 0.12345651) == show(0.12345651, 0.12345649)  # the defect: each against the other
    rng = np.random.default_rng(0)
    base = rng.uniform(-2, 2, 400)
    pairs = [(a, np.nextafter(a, np.inf)) for a in base[:100]]
    pairs += [(a, a * (1 + s)) for a, s in zip(base[100:], rng.choice([1e-7, 1e-8, 1e-9, 2e-16, 1e-3], 300))]
    pairs += [(0.12345649, 0.12345651), (1.0, 0.9999999999999998), (0.3, 0.1 + 0.2), (2.0, 2.0)]
    for a, b in pairs:
        ta, tb = show_pair(a, b)
        assert (ta == tb) == (a == b), (a, b, ta, tb)
        assert np.sign(float(ta) - float(tb)) == np.sign(a - b), (a, b, ta, tb)
        assert (float(ta) == 1.0) == (a == 1.0) and (float(tb) == 1.0) == (b == 1.0)
    assert show_pair(0.3, 0.1 + 0.2) == ("0.3", "0.30000000000000004")
    assert show_pair(float("nan"), 0.5) == ("nan", "0.5")


def _compare_run(folder: Path) -> Path:
    from toolkit import api

    model = _cast_model(TensorProto.FLOAT, True)
    path = _save(model, folder)
    api.diagnose_command(str(path), Config(), out=str(folder / "run"), html=False)
    return folder / "run"


def test_regress_prints_close_baseline_and_new_values_apart(tmp_path):
    from toolkit.signoff.regress import regress

    (tmp_path / "a").mkdir()
    base = _compare_run(tmp_path / "a")
    new = tmp_path / "new"
    shutil.copytree(base, new)
    for folder, value in ((base, 0.12345649), (new, 0.12345651)):
        df = pd.read_csv(folder / "result.csv")
        df.loc[df["TensorName"] == "y", "MaxAbsoluteError"] = value
        df.to_csv(folder / "result.csv", index=False)
    rep = regress(base, new, tolerance={"MaxAbsoluteError": 1e-8})
    line = next(r for r in rep["reasons"] if "MaxAbsoluteError" in r)
    assert "0.12345649 -> 0.12345651" in line and "(tolerance 1e-08)" in line


# ------------------------------------------------------------------------------------------ 4. noise reason
def _row(name, within, crossed, abnormal=False):
    return {"TensorName": name, "OpType": "Mul", "Abnormal": abnormal, "OverFlow": False, "CompareFailReason": "",
            "WithinExpectedNoise": within, "AbnormalMetrics": crossed, "CosineSimilarity": 1.0,
            "RelativeEuclideanDistance": 0.0, "GoldenNaN": 0, "GoldenInf": 0}


def test_verdict_names_default_lines_crossed_within_noise():
    from toolkit.compare.metrics import resolve_thresholds
    from toolkit.diagnose import _verdict

    df = pd.DataFrame([_row("a", True, ["RootMeanSquareError"]), _row("b", True, []),
                       _row("y", True, ["RootMeanSquareError", "RelativeEuclideanDistance"]),
                       _row("c", None, [])])
    verdict, reasons = _verdict(df, ["y"], [], "none", [], lines=resolve_thresholds(None))
    assert verdict == "PASS"
    assert "2 tensor(s) cross a default line within the expected FP16 noise (listed in AbnormalMetrics)" in reasons
    assert not any("every compared tensor within the abnormal lines" in r for r in reasons)
    # a line the user set is no default: not counted (such a row is abnormal: compare_tensors)
    user = parse_thresholds("RootMeanSquareError>1")
    df2 = pd.DataFrame([_row("a", True, ["RootMeanSquareError"], abnormal=True), _row("y", True, [])])
    verdict, reasons = _verdict(df2, ["y"], [], "none", [], lines=user)
    assert verdict == "WARN" and not any("expected FP16 noise" in r for r in reasons)
    clean = pd.DataFrame([_row("y", True, [])])
    assert _verdict(clean, ["y"], [], "none", [])[1] == [
        "every compared tensor within the abnormal lines; outputs and task checks hold"]


def test_diagnose_reports_fp16_rounding_over_the_default_rmse_line(tmp_path):
    """Values around 2e4-3e4 rounded to FP16 (step 16) give an RMSE > 1 (the default line) within the
    elementwise noise allowance: PASS, and the reasons say so."""
    from toolkit.diagnose import diagnose, prepare

    model = _graph_model([helper.make_node("Mul", ["x", "one"], ["y"], name="mul")],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])])
    model.graph.initializer.append(helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]))
    path = _save(model, tmp_path)
    x = np.random.default_rng(1).uniform(2e4, 3e4, 256).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    rmse = float(np.sqrt(np.mean((x.astype(np.float16).astype(np.float64) - x.astype(np.float64)) ** 2)))
    assert rmse > 1.0  # the default RootMeanSquareError line is crossed by FP16 rounding alone
    diag, _ = diagnose(prepare(str(path), inputs=str(tmp_path / "in.npz")), Config(precision_mode="force_fp16"))
    row = diag.table.set_index("TensorName").loc["y"]
    assert row["WithinExpectedNoise"] is True and "RootMeanSquareError" in row["AbnormalMetrics"]
    assert diag.summary["verdict"] == "PASS", diag.summary["reasons"]
    assert any(r.startswith("1 tensor(s) cross a default line within the expected FP16 noise")
               for r in diag.summary["reasons"]), diag.summary["reasons"]


def test_line_origins_tell_user_lines_from_defaults():
    assert set(line_origins(None).values()) == {"default"}
    lines = parse_thresholds("CosineSimilarity<0.99,MaxAbsoluteError>1e-3,RootMeanSquareError=off")
    origins = line_origins(lines)
    assert origins["CosineSimilarity"] == "user"  # named, even at the default value
    assert origins["MaxAbsoluteError"] == "user" and origins["RootMeanSquareError"] == "removed"
    assert origins["RelativeEuclideanDistance"] == "default" and origins["ExactMatchRate"] == "default"
    assert line_origins({"CosineSimilarity": 0.999})["CosineSimilarity"] == "user"  # another value


def _sequence_model(path, ragged: bool):
    """s = SequenceConstruct(relu(x), x or x[0]) (a sequence graph output) next to r = relu(x)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu")]
    second = "x"
    if ragged:
        nodes.append(h.make_node("Gather", ["x", "zero"], ["x0"], name="row0", axis=0))
        second = "x0"
    nodes.append(h.make_node("SequenceConstruct", ["r", second], ["s"], name="sc"))
    seq = h.make_value_info("s", h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, None)))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [seq, h.make_tensor_value_info("r", T.FLOAT, [2, 3])],
                     [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("ragged", [False, True])
@pytest.mark.parametrize("command", ["run", "diagnose", "compare"])
def test_sequence_outputs_never_crash_a_command(tmp_path, command, ragged):
    """A sequence graph output: each command ends with exit 0 or a one-line error (exit 2), never an internal
    error; run --dump writes the tensor outputs and skips what has no array form."""
    import subprocess
    import sys

    model = _sequence_model(tmp_path / "seq.onnx", ragged)
    extra = ["--dump", str(tmp_path / "dump")] if command == "run" else []
    proc = subprocess.run([sys.executable, "-m", "toolkit", command, str(model), *extra, "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 2), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    if command != "run":  # the sequence is compared value by value (ragged: its tensors concatenated)
        import pandas as pd

        assert proc.returncode == 0, proc.stdout + proc.stderr
        rows = pd.read_csv(tmp_path / "o" / "result.csv", keep_default_na=False).set_index("TensorName")
        assert rows.loc["s", "CompareFailReason"] == "" and float(rows.loc["s", "CosineSimilarity"]) > 0.999
    elif proc.returncode == 2:
        assert proc.stderr.startswith("npuscope: error:") and proc.stderr.count("\n") == 1, proc.stderr
    else:
        x = np.load(tmp_path / "o" / "outputs.npz")
        assert "r" in x.files
        assert (tmp_path / "dump" / "r.npy").is_file()
