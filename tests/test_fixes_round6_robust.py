"""Round 6 robustness fixes (adversarial tester, /work/adv6/defects.md).

5. Tensors of every element type onnxruntime's CPU provider computes on cross kernel boundaries (bfloat16, the
   float8 types, int4/uint4, int2/uint2, float8e8m0, uint16..uint64, int16, bool, string...), as intermediates,
   graph inputs and graph outputs, with the outputs onnxruntime gives; element types onnxruntime cannot run
   (complex, float4e2m1) are a one-line error, exit 1. Every value attribute of ``Constant`` (sparse_value,
   value_float(s), value_int(s), value_string(s)) runs.
9. ``regress`` validates every file it reads (summary.json, result.csv, plan.json, fusion_result.json,
   inputs.csv): each damage (truncated, empty, not UTF-8, not parsable, wrong top-level type, missing
   columns/keys, wrong field types) is a one-line error naming the file, exit 1.
12. No numpy RuntimeWarning reaches the terminal: memcheck's divergence on NaN/Inf values, and the main commands
    on NaN / Inf / empty tensors.
Cosmetic: default report folders keep Unicode model names readable (toolkit.core.artifacts.safe_filename).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unicodedata
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidGraph
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as NotImplementedOrt

from toolkit.core.artifacts import new_run_dir, safe_filename
from toolkit.config.schema import Config
from toolkit.core.errors import InputError

V = h.make_tensor_value_info
IR = {21: 10, 25: 12}


def cli(*args, cwd=None, warn="default"):
    env = dict(os.environ, PYTHONWARNINGS=warn)
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600, check=False)


def one_line_error(p, code=2):
    """The CLI failed with exit ``code`` and a single 'npuscope: error:' line, no traceback."""
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in p.stderr and len(lines) == 1 and lines[0].startswith("npuscope: error:"), p.stderr
    return lines[0]


def save(tmp: Path, name: str, nodes, ins, outs, opset=21, inits=()) -> Path:
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, list(inits)), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = IR[opset]
    p = tmp / name
    onnx.save(m, p)
    return p


def ort_run(path: Path, feeds: dict) -> dict:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


# ---------------------------------------------------------------------------------------- 5: element types
#: (ONNX type, opset, values exactly representable in it)
SIGNED = [-2.0, -1.0, 0.0, 1.0, 1.0, 0.0]
TYPES = {
    "bfloat16": (T.BFLOAT16, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e4m3fn": (T.FLOAT8E4M3FN, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e4m3fnuz": (T.FLOAT8E4M3FNUZ, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e5m2": (T.FLOAT8E5M2, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e5m2fnuz": (T.FLOAT8E5M2FNUZ, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "float8e8m0": (T.FLOAT8E8M0, 25, [0.5, 1, 2, 4, 8, 0.25]),
    "int4": (T.INT4, 21, [-8, -1, 0, 1, 2, 7]),
    "uint4": (T.UINT4, 21, [0, 1, 2, 3, 14, 15]),
    "int2": (T.INT2, 25, SIGNED),
    "uint2": (T.UINT2, 25, [0, 1, 2, 3, 0, 1]),
    "float16": (T.FLOAT16, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "double": (T.DOUBLE, 21, [0, 1.5, -2, 3, 0.25, -0.5]),
    "int8": (T.INT8, 21, [-3, -1, 0, 1, 2, 100]),
    "uint8": (T.UINT8, 21, [0, 1, 2, 3, 200, 255]),
    "int16": (T.INT16, 21, [-300, -1, 0, 1, 2, 3000]),
    "uint16": (T.UINT16, 21, [0, 1, 2, 3, 400, 60000]),
    "int32": (T.INT32, 21, [-70000, -1, 0, 1, 2, 70000]),
    "uint32": (T.UINT32, 21, [0, 1, 2, 3, 400, 70000]),
    "int64": (T.INT64, 21, [-70000, -1, 0, 1, 2, 70000]),
    "uint64": (T.UINT64, 21, [0, 1, 2, 3, 400, 70000]),
    "bool": (T.BOOL, 21, [0, 1, 0, 1, 1, 0]),
}


def np_dtype(code):
    return np.dtype(h.tensor_dtype_to_np_dtype(code))


def run_npu(path: Path, feeds: dict):
    """(NPU RunResult with dumps, FP32 reference outputs) of the model at ``path`` (defaults: mixed precision)."""
    from toolkit.engine import Session
    from toolkit.ir.load import load_model
    from toolkit.ort.reference import ReferenceRunner

    m = load_model(path)
    sess = Session(m, Config(), input_shapes={k: v.shape for k, v in feeds.items()})
    return sess.run(feeds, dump=True), ReferenceRunner(m).run(feeds)


def as_float(a) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


@pytest.mark.parametrize("name", list(TYPES))
def test_intermediate_of_every_type_crosses_kernels(tmp_path, name):
    """x -> Cast(T) -> Cast(float): the T tensor is written by one kernel and read by the next."""
    code, opset, vals = TYPES[name]
    p = save(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["b"], to=code, name="c1"),
                                  h.make_node("Cast", ["b"], ["y"], to=T.FLOAT, name="c2")],
             [V("x", T.FLOAT, [6])], [V("y", T.FLOAT, [6])], opset)
    x = np.array(vals, np.float32)
    want = ort_run(p, {"x": x})["y"]
    res, ref = run_npu(p, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], want)
    np.testing.assert_array_equal(ref["y"], want)
    assert ref["b"].dtype == np_dtype(code)
    if code != T.FLOAT16:  # float16-origin tensors are stored in the kernel's precision (numerics contract)
        assert res.dumps["b"].dtype == np_dtype(code)
    np.testing.assert_array_equal(as_float(res.dumps["b"]), want)  # the stored T values themselves
    np.testing.assert_array_equal(as_float(ref["b"]), want)


@pytest.mark.parametrize("name", list(TYPES))
def test_graph_input_of_every_type(tmp_path, name):
    code, opset, vals = TYPES[name]
    p = save(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["f"], to=T.FLOAT, name="c"),
                                  h.make_node("Relu", ["f"], ["y"], name="r")],
             [V("x", code, [6])], [V("y", T.FLOAT, [6])], opset)
    x = np.array(vals, np.float32).astype(np_dtype(code))
    want = np.maximum(x.astype(np.float32), 0)
    res, ref = run_npu(p, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], want)
    np.testing.assert_array_equal(ref["y"], want)


@pytest.mark.parametrize("name", list(TYPES))
def test_graph_output_of_every_type(tmp_path, name):
    """x -> Relu -> Cast(T) = y; expected: onnxruntime's own Cast of y back to float (fetchable)."""
    code, opset, vals = TYPES[name]
    nodes = [h.make_node("Relu", ["x"], ["r"], name="r"), h.make_node("Cast", ["r"], ["y"], to=code, name="c1")]
    p = save(tmp_path, "m.onnx", nodes, [V("x", T.FLOAT, [6])], [V("y", code, [6])], opset)
    probe = save(tmp_path, "probe.onnx", nodes + [h.make_node("Cast", ["y"], ["yf"], to=T.FLOAT, name="back")],
                 [V("x", T.FLOAT, [6])], [V("yf", T.FLOAT, [6])], opset)
    x = np.array(vals, np.float32)
    want = ort_run(probe, {"x": x})["yf"]
    res, ref = run_npu(p, {"x": x})
    for got in (res.outputs["y"], ref["y"]):
        assert got.dtype == np_dtype(code) and got.shape == (6,)
        np.testing.assert_array_equal(as_float(got), want)


def test_string_tensor_crosses_kernels(tmp_path):
    p = save(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["s"], to=T.STRING, name="c1"),
                                  h.make_node("Cast", ["s"], ["y"], to=T.FLOAT, name="c2")],
             [V("x", T.FLOAT, [4])], [V("y", T.FLOAT, [4])])
    x = np.array([0, 1.5, -2, 3], np.float32)
    res, ref = run_npu(p, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], ort_run(p, {"x": x})["y"])
    np.testing.assert_array_equal(ref["y"], ort_run(p, {"x": x})["y"])
    assert list(res.dumps["s"]) == list(ort_run(
        save(tmp_path, "s.onnx", [h.make_node("Cast", ["x"], ["s"], to=T.STRING)], [V("x", T.FLOAT, [4])],
             [V("s", T.STRING, [4])]), {"x": x})["s"])


@pytest.mark.parametrize("code,opset", [(T.COMPLEX64, 21), (T.FLOAT4E2M1, 25)])
def test_types_onnxruntime_cannot_run_are_one_line_errors(tmp_path, code, opset):
    p = save(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["b"], to=code, name="c1"),
                                  h.make_node("Cast", ["b"], ["y"], to=T.FLOAT, name="c2")],
             [V("x", T.FLOAT, [4])], [V("y", T.FLOAT, [4])], opset)
    with pytest.raises((InvalidGraph, NotImplementedOrt, Fail)):  # onnxruntime itself refuses the model
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
    line = one_line_error(cli("compare", str(p), "--out", str(tmp_path / "o")))
    assert "c1" in line or "complex" in line  # names the node or the type


def test_ortvalue_exchange_packs_sub_byte_types():
    """int4/uint4/int2 arrays survive the trip through onnxruntime's packed layout (checked by onnxruntime's own
    Cast of the packed tensor), odd counts included."""
    from toolkit.ort import ort_values

    for code, vals in [(T.INT4, [-8, 7, -1, 0, 3]), (T.UINT4, [15, 0, 9]), (T.INT2, [-2, 1, -1]),
                       (T.UINT2, [3, 0, 2, 1, 3])]:
        g = h.make_graph([h.make_node("Cast", ["b"], ["y"], to=T.FLOAT)], "g", [V("b", code, [len(vals)])],
                         [V("y", T.FLOAT, [len(vals)])])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 25)])
        m.ir_version = 12
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        b = np.array(vals, np.float32).astype(np_dtype(code))
        (y,) = ort_values.run(s, ["y"], {"b": b})
        np.testing.assert_array_equal(y, np.array(vals, np.float32))


SPARSE_FLAT = h.make_sparse_tensor(h.make_tensor("sv", T.FLOAT, [2], [5.0, 7.0]),
                                   h.make_tensor("si", T.INT64, [2], [1, 4]), [2, 3])
SPARSE_COO = h.make_sparse_tensor(h.make_tensor("sv", T.FLOAT, [2], [5.0, 7.0]),
                                  h.make_tensor("si", T.INT64, [2, 2], [0, 2, 1, 0]), [2, 3])
CONSTANTS = {
    "value": ({"value": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))}, T.FLOAT),
    "sparse_value_flat": ({"sparse_value": SPARSE_FLAT}, T.FLOAT),
    "sparse_value_coo": ({"sparse_value": SPARSE_COO}, T.FLOAT),
    "value_float": ({"value_float": 2.5}, T.FLOAT),
    "value_floats": ({"value_floats": [1.0, -2.0, 0.5]}, T.FLOAT),
    "value_int": ({"value_int": 7}, T.INT64),
    "value_ints": ({"value_ints": [1, -2, 3]}, T.INT64),
    "value_string": ({"value_string": "héllo"}, T.STRING),
    "value_strings": ({"value_strings": ["a", "bé", ""]}, T.STRING),
}


@pytest.mark.parametrize("name", list(CONSTANTS))
def test_every_constant_value_attribute_runs(tmp_path, name):
    """A Constant of each value attribute feeding an op that also reads the graph input; outputs equal
    onnxruntime's on the original model."""
    attrs, elem = CONSTANTS[name]
    if elem == T.STRING:  # Concat of [x] and c: strings through an op with a runtime input
        nodes = [h.make_node("Constant", [], ["c"], name="k", **attrs),
                 h.make_node("Reshape", ["c", "flat"], ["c1"], name="rs"),
                 h.make_node("Concat", ["x", "c1"], ["y"], axis=0, name="cat")]
        inits = [numpy_helper.from_array(np.array([-1], np.int64), "flat")]
        x = np.array(["x0", "x1"], dtype=object)
    else:
        nodes = [h.make_node("Constant", [], ["c"], name="k", **attrs), h.make_node("Add", ["x", "c"], ["y"], name="a")]
        inits = []
        x = (np.arange(6).reshape(2, 3) * 3 - 4).astype(np.float32 if elem == T.FLOAT else np.int64)
        if name in ("value_floats", "value_ints"):
            x = x[:, :3]
    y_shape = [2 + (3 if name == "value_strings" else 1)] if elem == T.STRING else list(x.shape)
    p = save(tmp_path, "m.onnx", nodes, [V("x", elem, list(x.shape))], [V("y", elem, y_shape)], 21, inits)
    want = ort_run(p, {"x": x})["y"]
    res, ref = run_npu(p, {"x": x})
    assert list(np.asarray(res.outputs["y"]).reshape(-1)) == list(np.asarray(want).reshape(-1))
    assert list(np.asarray(ref["y"]).reshape(-1)) == list(np.asarray(want).reshape(-1))


def test_constant_value_helper_matches_onnxruntime():
    """fold_constants.constant_value gives, for each attribute, the array onnxruntime's Constant produces."""
    from toolkit.compiler.passes.fold_constants import constant_value

    for name, (attrs, elem) in CONSTANTS.items():
        node = h.make_node("Constant", [], ["c"], **attrs)
        m = h.make_model(h.make_graph([node, h.make_node("Identity", ["c"], ["y"])], "g", [], [V("y", elem, None)]),
                         opset_imports=[h.make_opsetid("", 21)])
        m.ir_version = 10
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
        got = constant_value(node)
        assert got.shape == np.shape(want) and list(np.ravel(got)) == list(np.ravel(want)), name


def test_tester_reproducers_bf16_and_sparse_compare(tmp_path):
    """o_bf16.onnx / o_sparse.onnx of the report: compare exits 0, no traceback."""
    bf = save(tmp_path, "o_bf16.onnx", [h.make_node("Cast", ["x"], ["b"], to=T.BFLOAT16, name="c1"),
                                        h.make_node("Cast", ["b"], ["y"], to=T.FLOAT, name="c2")],
              [V("x", T.FLOAT, [4])], [V("y", T.FLOAT, [4])], 21)
    sp = save(tmp_path, "o_sparse.onnx", [h.make_node("Constant", [], ["c"], sparse_value=SPARSE_FLAT, name="k"),
                                          h.make_node("Add", ["x", "c"], ["y"], name="a")],
              [V("x", T.FLOAT, [2, 3])], [V("y", T.FLOAT, [2, 3])], 21)
    for p in (bf, sp):
        r = cli("compare", str(p), "--out", str(tmp_path / f"out-{p.stem}"))
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_origin_isolation_reruns_a_kernel_reading_bfloat16(tmp_path):
    """An FP16 overflow at a Cast reading a bfloat16 graph input: the origin analysis re-runs that kernel alone
    on the reference's bfloat16 values (toolkit.reexec.isolate) and names it; FAIL, exit 1, no traceback."""
    p = save(tmp_path, "m.onnx", [h.make_node("Cast", ["x"], ["f"], to=T.FLOAT, name="c2"),
                                  h.make_node("Mul", ["f", "k"], ["y"], name="mul2")],
             [V("x", T.BFLOAT16, [8])], [V("y", T.FLOAT, [8])], 21, [numpy_helper.from_array(np.array(0.5, np.float32), "k")])
    # (an .npz cannot hold bfloat16: random values in a range past FP16 max instead)
    r = cli("compare", str(p), "--val-range", "x:[60000,200000]", "--precision-mode", "force_fp16",
            "--out", str(tmp_path / "o"))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "first divergence: node 'c2'" in r.stdout, r.stdout


# ---------------------------------------------------------------------------------------- 9: regress
@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One compare report folder of y = 3x + 1 (written in-process; regress reads only files)."""
    from toolkit import api

    tmp = tmp_path_factory.mktemp("regress6")
    model = save(tmp, "m.onnx", [h.make_node("Mul", ["x", "c3"], ["t"], name="mul"),
                                 h.make_node("Add", ["t", "c1"], ["y"], name="add")],
                 [V("x", T.FLOAT, [4, 8])], [V("y", T.FLOAT, [4, 8])], 21,
                 [numpy_helper.from_array(np.array(3, np.float32), "c3"),
                  numpy_helper.from_array(np.array(1, np.float32), "c1")])
    api.diagnose_command(str(model), Config(), out=str(tmp / "base"), html=False)
    return tmp / "base"


def damaged_copy(report: Path, tmp: Path, name: str, content) -> Path:
    bad = tmp / "bad"
    shutil.copytree(report, bad)
    target = bad / name
    if callable(content):
        content = content(target.read_bytes())
    target.write_bytes(content if isinstance(content, bytes) else
                       (content if isinstance(content, str) else json.dumps(content)).encode())
    return bad


def half(b: bytes) -> bytes:
    return b[: len(b) // 2]


def summary_with(**change):
    def edit(raw: bytes) -> bytes:
        s = json.loads(raw)
        for k, v in change.items():
            if v is KeyError:
                s.pop(k, None)
            else:
                s[k] = v
        return json.dumps(s).encode()
    return edit


def csv_edit(fn):
    def edit(raw: bytes) -> bytes:
        import io

        import pandas as pd

        t = pd.read_csv(io.BytesIO(raw))
        return fn(t).to_csv(index=False).encode()
    return edit


DAMAGES = {
    "summary.json": {
        "truncated": half, "empty": b"", "not json": "garbage{", "not utf8": b"\xff\xfe\x00{",
        "top-level array": [1, 2], "top-level number": 5, "top-level string": '"PASS"',
        "no verdict": summary_with(verdict=KeyError), "no model_sha256": summary_with(model_sha256=KeyError),
        "no counts/triage": summary_with(counts=KeyError, triage=KeyError),
        "verdict number": summary_with(verdict=5), "verdict unknown": summary_with(verdict="MAYBE"),
        "environment array": summary_with(environment=[1]), "config string": summary_with(config="x"),
        "dataset array": summary_with(dataset=[1]), "model_sha256 number": summary_with(model_sha256=5),
        "criteria items": summary_with(criteria=[5]), "criterion name": summary_with(criteria=[{"name": 1, "status": "PASS"}]),
        "inputs_sha256 array": summary_with(inputs_sha256=[1]),
    },
    "result.csv": {
        "truncated row": lambda b: b[: b.rindex(b"\n", 0, len(b) - 1) + 20], "unclosed quote": 'garbage,"\n',
        "empty": b"", "header only blank": b"\n\n", "not utf8": b"\xff\xfe\x00a,b\n",
        "no TensorName": csv_edit(lambda t: t.drop(columns=["TensorName"])),
        "no NodeName": csv_edit(lambda t: t.drop(columns=["NodeName"])),
        "no OpType": csv_edit(lambda t: t.drop(columns=["OpType"])),
        "empty TensorName": csv_edit(lambda t: t.assign(TensorName=[None] + list(t["TensorName"][1:]))),
        "Abnormal not bool": csv_edit(lambda t: t.assign(Abnormal="maybe")),
        "metric not number": csv_edit(lambda t: t.assign(CosineSimilarity="abc")),
    },
    "plan.json": {
        "truncated": half, "not json": "{", "top-level array": [1], "kernels number": {"kernels": 5},
        "no kernels": {"tensors": []}, "kernel not object": {"kernels": [5]},
        "kernel without name": {"kernels": [{"nodes": ["a"]}]}, "nodes string": {"kernels": [{"name": "k", "nodes": "ab"}]},
        "node number": {"kernels": [{"name": "k", "nodes": [1]}]},
        "precision number": {"kernels": [{"name": "k", "nodes": ["a"], "precision": 16}]},
    },
    "fusion_result.json": {
        "truncated": half, "top-level array": [], "graph number": {"g": 5}, "level number": {"g": {"graph_fusion": 5}},
        "pass number": {"g": {"graph_fusion": {"p": 5}}},
        "count array": {"g": {"graph_fusion": {"p": {"match_times": [1], "effect_times": "1"}}}},
    },
}
CASES = [(f, d) for f, kinds in DAMAGES.items() for d in kinds]


@pytest.mark.parametrize("fname,damage", CASES, ids=[f"{f}-{d}" for f, d in CASES])
def test_regress_names_each_damaged_file(report, tmp_path, fname, damage):
    from toolkit.signoff.regress import regress

    bad = damaged_copy(report, tmp_path, fname, DAMAGES[fname][damage])
    for a, b in ((report, bad), (bad, report)):
        with pytest.raises(InputError) as err:
            regress(a, b)
        msg = str(err.value)
        assert "\n" not in msg and f"'{bad / fname}'" in msg and "re-run" in msg, msg
        assert "compile result" not in msg and "another command" not in msg, msg


def test_regress_dataset_inputs_csv_damage(report, tmp_path):
    """A dataset run's inputs.csv (read for input digests): unparsable and ragged files are named."""
    from toolkit.signoff.regress import regress

    for i, content in enumerate([b'Input,Sha256\n"a.npz,1\n', b"Input,Sha256\na.npz\n", b"\xff\xfe"]):
        folders = []
        for side in ("a", "b"):
            f = tmp_path / f"{side}{i}"
            shutil.copytree(report, f)
            s = json.loads((f / "summary.json").read_text())
            s["dataset"] = {"inputs_dir": "ds", "inputs": 1}
            (f / "summary.json").write_text(json.dumps(s))
            (f / "inputs.csv").write_text("Input,Sha256\na.npz,00\n")
            folders.append(f)
        (folders[1] / "inputs.csv").write_bytes(content)
        with pytest.raises(InputError, match="inputs.csv"):
            regress(*folders)


def test_regress_undamaged_copy_still_compares(report, tmp_path):
    """The checks refuse nothing a real report holds (this test fails if a validator is too strict)."""
    from toolkit.signoff.regress import regress

    shutil.copytree(report, tmp_path / "same")
    rep = regress(report, tmp_path / "same")
    assert rep["verdict"] == "NO REGRESSION"


def test_regress_cli_damaged_folder_is_one_line_exit_1(report, tmp_path):
    for name, content in [("result.csv", 'garbage,"\n'), ("plan.json", '{"kernels": 5}'),
                          ("summary.json", '{"verdict": 5}'), ("summary.json", "[1, 2]")]:
        work = tmp_path / f"w{abs(hash((name, content)))}"
        work.mkdir()
        bad = damaged_copy(report, work, name, content)
        line = one_line_error(cli("regress", str(report), str(bad), "--out", str(work / "o"), "--no-html"))
        assert name in line and "compile result" not in line, line


# ---------------------------------------------------------------------------------------- 12: RuntimeWarnings
def test_memcheck_diff_has_no_warnings():
    from toolkit.memcheck.memcheck import _diff

    nan, inf = np.nan, np.inf
    cases = [([nan, nan], [nan, nan], 0.0), ([nan], [2.0], nan), ([inf, 1], [inf, 3], 2.0), ([inf], [1.0], inf),
             ([], [], 0.0), ([-inf], [inf], inf), ([1.0, 5.0], [1.0, 2.0], 3.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for a, b, want in cases:
            got = _diff(np.array(a, np.float32), np.array(b, np.float32))
            assert (np.isnan(want) and np.isnan(got)) or got == want, (a, b, got)
        assert _diff(np.array([1 + 2j]), np.array([1 + 0j])) == 2.0
        assert np.isnan(_diff(np.array(["a"]), np.array(["b"])))


M1_NODES = [h.make_node("Mul", ["x", "c3"], ["t"], name="mul"), h.make_node("Add", ["t", "c1"], ["y"], name="add"),
            h.make_node("Exp", ["x"], ["z"], name="exp")]
M1_INITS = [numpy_helper.from_array(np.array(3, np.float32), "c3"), numpy_helper.from_array(np.array(1, np.float32), "c1")]


def m1(tmp: Path) -> Path:
    return save(tmp, "m1.onnx", M1_NODES, [V("x", T.FLOAT, [4, 8])], [V("y", T.FLOAT, [4, 8]), V("z", T.FLOAT, [4, 8])],
                21, M1_INITS)


def feeds(kind: str) -> np.ndarray:
    x = (np.random.default_rng(1).standard_normal((4, 8)) * 3).astype(np.float32)
    if kind == "nan":
        x[:] = np.nan
    elif kind == "inf":
        x[:] = np.inf
    elif kind == "mixed":
        x[0, 0], x[1, 1], x[2, 2], x[3, 3] = np.nan, np.inf, -np.inf, 200
    return x


@pytest.mark.parametrize("kind", ["normal", "nan", "mixed"])
def test_memcheck_plan_with_conflict_prints_no_runtime_warning(tmp_path, kind):
    """The tester's case: a plan whose 't' overwrites 'x__cast_fp16' still read by 'exp' (memcheck --plan)."""
    model = m1(tmp_path)
    r = cli("compile", str(model), "--precision-mode", "force_fp16", "--out", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "c" / "plan.json").read_text())
    tensors = {t["name"]: t for t in plan["tensors"]}
    tensors["t"]["offset"] = tensors["x__cast_fp16"]["offset"]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    np.savez(tmp_path / "in.npz", x=feeds(kind))
    r = cli("memcheck", str(model), "--plan", str(tmp_path / "plan.json"), "--inputs", str(tmp_path / "in.npz"),
            "--out", str(tmp_path / "o"))
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "Warning" not in r.stderr, r.stderr
    assert "CONFLICT" in r.stdout


SWEEP = [pytest.param(cmd, extra, kind)
         for cmd, extra in [("compare", ["--precision-mode", "force_fp16"]), ("run", []), ("memcheck", []),
                            ("profile", []), ("diagnose", ["--precision-mode", "force_fp16"]),
                            ("tune", ["--precision-mode", "force_fp16"])]
         for kind in ("nan", "inf", "mixed")]


@pytest.mark.parametrize("cmd,extra,kind", SWEEP)
def test_commands_on_nonfinite_inputs_print_no_runtime_warning(tmp_path, cmd, extra, kind):
    np.savez(tmp_path / "in.npz", x=feeds(kind))
    r = cli(cmd, str(m1(tmp_path)), "--inputs", str(tmp_path / "in.npz"), *extra, "--out", str(tmp_path / "o"))
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "Warning" not in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["compare", "memcheck", "profile", "tune"])
def test_commands_on_empty_tensors_print_no_runtime_warning(tmp_path, cmd):
    p = save(tmp_path, "e.onnx", [h.make_node("Relu", ["x"], ["r"], name="r"), h.make_node("Exp", ["r"], ["y"], name="e")],
             [V("x", T.FLOAT, [0, 3])], [V("y", T.FLOAT, [0, 3])])
    np.savez(tmp_path / "in.npz", x=np.zeros((0, 3), np.float32))
    r = cli(cmd, str(p), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "o"))
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "Warning" not in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------- cosmetic: names
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


def test_default_report_folder_keeps_unicode_model_name(tmp_path):
    assert new_run_dir(tmp_path, "模型 #1").name.startswith("模型_1-")
    p = save(tmp_path, "模型.onnx", [h.make_node("Relu", ["x"], ["y"], name="r")], [V("x", T.FLOAT, [2])],
             [V("y", T.FLOAT, [2])])
    r = cli("compile", str(p), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    made = [d.name for d in (tmp_path / "reports").iterdir()]
    assert len(made) == 1 and made[0].startswith("模型-"), made
