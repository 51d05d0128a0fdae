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
Cosmetic: default report folders keep Unicode model names readable (toolkit.artifacts.safe_filename).
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

from toolkit.artifacts import new_run_dir, safe_filename
from toolkit.config import Config
from toolkit.errors import InputError

V = h.make_tensor_value_info
IR = {21: 10, 25: 12}


def cli(*args, cwd=None, warn="default"):
    env = dict(os.environ, PYTHONWARNINGS=warn)
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600, check=False)


def one_line_error(p, code=1):
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
    from toolkit.runtime.reference import ReferenceRunner

    m = load_model(path)
    sess = Session(m, Config(), input_shapes={k: v.shape for k, v in feeds.items()})
    return sess.run(feeds, dump=True), ReferenceRunner(m).run(feeds)


def as_float(a) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


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


# ---------------------------------------------------------------------------------------- 12: RuntimeWarnings
def test_memcheck_diff_has_no_warnings():
    from toolkit.memory.memcheck import _diff

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


SWEEP = [pytest.param(cmd, extra, kind)
         for cmd, extra in [("compare", ["--precision-mode", "force_fp16"]), ("run", []), ("memcheck", []),
                            ("profile", []), ("diagnose", ["--precision-mode", "force_fp16"]),
                            ("tune", ["--precision-mode", "force_fp16"])]
         for kind in ("nan", "inf", "mixed")]


