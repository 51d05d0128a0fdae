"""Test builders shared by test_regress.py, test_regress.py."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from tests.dataset.helpers import tiny_model
from tests.dataset.helpers import FP16, write_inputs
from tests.dtype_models import _compare_run
from toolkit.config.schema import Config
from toolkit.core.errors import InputError, UsageError
from toolkit.signoff.regress import (
    DEFAULT_TOLERANCE,
    parse_tolerance,
    policy_changes,
    regress,
)

V = h.make_tensor_value_info

IR = {21: 10, 25: 12}

def write_model(tmp: Path, name: str, nodes, ins, outs, opset=21, inits=()) -> Path:
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, list(inits)), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = IR[opset]
    p = tmp / name
    onnx.save(m, p)
    return p

@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One compare report folder of y = 3x + 1 (written in-process; regress reads only files)."""
    from toolkit import api

    tmp = tmp_path_factory.mktemp("regress6")
    model = write_model(tmp, "m.onnx", [h.make_node("Mul", ["x", "c3"], ["t"], name="mul"),
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

KEEP = {"precision_mode": "force_fp16", "keep_dtype": ["exp", "add_one", "log"]}

NO_KEEP = {"precision_mode": "force_fp16"}


STRICT = 0.99999999999  # a cosine an FP16 plan cannot reach on random data

LENIENT = 0.5

def save_checked(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path

def conv_relu(path: Path) -> Path:
    """x [1,3,8,8] -> Conv (4 filters, pad 1) -> Relu -> y float32 [1,4,8,8]."""
    from tests.graphs import conv_relu as build

    return save_checked(build(1), path)

def npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path

def write_utf8(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path

def signoff_fp16(model: Path, policy: Path, inputs: Path, out: Path, cfg: dict = FP16):
    from toolkit import api

    return api.signoff_command(str(model), str(policy), Config.from_dict(cfg), inputs=str(inputs), out=str(out),
                               html=False)

def policy_text(limit: float) -> str:
    return f'[policy]\nname = "p"\n[outputs."*"]\nCosineSimilarity = {limit!r}\n'

@pytest.fixture(scope="module")
def conv_runs(tmp_path_factory):
    """Two signoffs of one model, config and input, judged by a lenient and a strict policy."""
    tmp = tmp_path_factory.mktemp("r4s")
    model = conv_relu(tmp / "cr.onnx")
    inputs = npz(tmp / "in.npz", x=np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32))
    pols = {"ok": write_utf8(tmp / "ok.toml", policy_text(LENIENT)), "strict": write_utf8(tmp / "strict.toml", policy_text(STRICT))}
    for name, pol in pols.items():
        signoff_fp16(model, pol, inputs, tmp / f"so_{name}")
    # the same policy text under another file name
    pols["ok_copy"] = write_utf8(tmp / "ok_copy.toml", policy_text(LENIENT))
    signoff_fp16(model, pols["ok_copy"], inputs, tmp / "so_ok_copy")
    return {"tmp": tmp, "model": model, "inputs": inputs, "policies": pols,
            **{n: tmp / f"so_{n}" for n in ("ok", "strict", "ok_copy")}}

C08 = Path("/work/shared/cases/fp16/c08_softplus_exp_overflow")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    model = tiny_model(root / "tiny.onnx")
    xs = write_inputs(root / "in", 8)
    return {"root": root, "model": model, "inputs": root / "in", "xs": xs}

PASSING = """
[policy]
name = "c08 passes"
[outputs."*"]
CosineSimilarity = 0.999
RelativeEuclideanDistance = 0.01
[layers]
max_abnormal = 0
min_cosine = 0.99
[fp16_overflow]
[memory]
max_arena_bytes = 1_000_000
[latency]
max_ms = 60_000
min_throughput = 1.0
[placement]
allowed_cpu_ops = []
"""

def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text, encoding="utf-8")
    return p

def signoff(tmp: Path, policy_text: str, cfg: dict, model=None, inputs=None, out="out"):
    from toolkit import api

    pol = write(tmp, f"{out}.toml", policy_text)
    model = model or str(C08 / "model.onnx")
    inputs = inputs if inputs is not None else (str(C08 / "inputs.npz") if model.endswith(".onnx") else None)
    return api.signoff_command(model, str(pol), Config.from_dict(cfg), inputs=inputs, out=str(tmp / out), html=False)

# ------------------------------------------------------------------ [latency] on every input shape
SEQ = "transformer_seq"
