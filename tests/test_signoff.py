"""``npuscope signoff``: a policy that passes, one that fails on each criterion kind (the failure names the
criterion and its evidence), policy validation, and the JUnit XML read back with junitparser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toolkit.config import Config
from toolkit.errors import ConfigError
from toolkit.signoff.criteria import arena_conflicts, check_memory
from toolkit.signoff.policy import load_policy, policy_from_dict

junitparser = pytest.importorskip("junitparser")

C08 = Path("/work/shared/cases/fp16/c08_softplus_exp_overflow")
KEEP = {"precision_mode": "force_fp16", "keep_dtype": ["exp", "add_one", "log"]}
NO_KEEP = {"precision_mode": "force_fp16"}
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

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")]


def always_fails(golden, npu, model):
    """A task check (module:function) that never passes."""
    return {"name": "always_fails", "passed": False, "value": 0, "detail": "planted failing task"}


def always_passes(golden, npu, model):
    return {"name": "always_passes", "passed": True, "value": 1, "detail": "ok"}


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


def junit_cases(path: Path) -> dict:
    xml = junitparser.JUnitXml.fromfile(str(path))
    cases = {}
    for suite in xml:
        for case in suite:
            cases[case.name] = case
    return cases


FAILING = {
    "outputs": ('[outputs.y]\nRelativeEuclideanDistance = 1e-9\n', NO_KEEP, "outputs.y.RelativeEuclideanDistance",
                "with FP16 overflow"),
    "layers_abnormal": ("[layers]\nmax_abnormal = 0\n", NO_KEEP, "layers.max_abnormal", "e, e1, y"),
    "layers_cosine": ("[layers]\nmin_cosine = 1.0\nignore = ['exp']\n", NO_KEEP, "layers.min_cosine", "lowest CosineSimilarity"),
    "tasks": ("[tasks]\nrequired_pass_rate = 1.0\nmetrics = ['test_signoff:always_fails']\n", KEEP,
              "tasks.pass_rate", "0/1 input set(s) pass"),
    "fp16_overflow": ("[fp16_overflow]\nallow = ['y']\n", NO_KEEP, "fp16_overflow", "e, e1"),
    "memory_budget": ("[memory]\nmax_arena_bytes = 16\n", KEEP, "memory.peak_arena_bytes", "(budget 16)"),
    "latency": ("[latency]\nmax_ms = 1e-9\n", KEEP, "latency.device_ms", "budget 1e-09 ms"),
    "throughput": ("[latency]\nmin_throughput = 1e12\ndevice = 'ascend910'\n", KEEP, "latency.throughput",
                   "at least 1e+12; ascend910"),
    "latency_host": ("[latency]\nmax_ms = 1e-9\nsource = 'host'\nstatistic = 'max'\n", KEEP, "latency",
                     "host-measured"),
}


def test_cli_exit_codes(tmp_path):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    pol = write(tmp_path, "p.toml", PASSING)
    cfg = write(tmp_path, "keep.json", json.dumps({"keep_dtype": ["exp", "add_one", "log"]}))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "toolkit", "signoff", str(C08 / "model.onnx"), "--inputs",
                               str(C08 / "inputs.npz"), "--no-html", *map(str, args)], capture_output=True, text=True,
                              env=env, timeout=300, cwd=tmp_path)

    ok = run("--policy", pol, "--config", cfg, "--precision-mode", "force_fp16", "--out", tmp_path / "a")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run("--policy", pol, "--precision-mode", "force_fp16", "--out", tmp_path / "b")
    assert bad.returncode == 1 and "FAIL fp16_overflow" in bad.stdout
    usage = run("--policy", write(tmp_path, "x.toml", "[latncy]\nmax_ms=1\n"), "--out", tmp_path / "c")
    assert usage.returncode == 2 and "did you mean 'latency'" in usage.stderr


# ------------------------------------------------------------------ the worked example (docs/signoff-example.md)
DOC = Path(__file__).resolve().parents[1] / "docs" / "signoff-example.md"


def doc_policy(index: int) -> str:
    import re

    return re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)[index]


# ------------------------------------------------------------------ [latency] on every input shape
SEQ = "transformer_seq"


def _seq_inputs(folder: Path, names: dict[str, int]) -> dict[str, np.ndarray]:
    """One .npz per name with x of shape (1, seq, 64); returns {name: x}."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    out = {}
    for name, seq in names.items():
        out[name] = rng.standard_normal((1, seq, 64)).astype(np.float32)
        np.savez(folder / name, x=out[name])
    return out


def _shape_timing(seq: int) -> dict:
    """The schedule of transformer_seq compiled for x (1, seq, 64) alone, on the default device."""
    from toolkit.compiler.pipeline import compile_model
    from toolkit.ir.load import load_model
    from toolkit.profile.budget import device_timing
    from toolkit.source import resolve_model

    compiled = compile_model(load_model(resolve_model(SEQ).path), Config(), input_shapes={"x": [1, seq, 64]})
    return device_timing(compiled)


def tomllib_loads(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


# ------------------------------------------------------------------ tensors / outputs that could not be compared
def _layers(rows: list[dict]):
    import pandas as pd

    base = {"NodeName": "n", "OpType": "Relu", "CosineSimilarity": float("nan"), "CompareFailReason": "",
            "DataType": "float32", "NPUDump": "float16", "Abnormal": False, "OverFlow": False}
    ok = {**base, "TensorName": "fine", "CosineSimilarity": 0.9995}
    return pd.DataFrame([ok] + [{**base, **r} for r in rows])


def _evidence(layers=None, rows=None):
    from toolkit.signoff.criteria import Evidence

    return Evidence(outputs=["y"], output_rows={"y": rows or []}, layers=layers, tasks=[], plan=None, run_ms=[],
                    inputs=[f"in{i}" for i in range(len(rows or []))])


NOT_COMPARABLE = {
    "non_finite": {"CompareFailReason": "no position where both tensors are finite"},
    "shape": {"CompareFailReason": "shape mismatch: device (2,) vs golden (3,)"},
    "dtype": {"CompareFailReason": "dtype class mismatch: device int32 (integer) vs golden float32 (float)"},
    "not_stored": {"CompareFailReason": "not stored by the NPU plan"},
    "not_exposed": {"CompareFailReason": "not exposed by the reference run (non-tensor or unknown type)"},
    "dataset_partial": {"CompareFailReason": "not compared on 1 of 3 input(s)"},
    "float_nan_no_reason": {},
}
SAME_BY_CONSTRUCTION = {
    "fused": {"CompareFailReason": "fused into kernel k0"},
    "folded": {"CompareFailReason": "computed at compile time (constant folding)"},
    "integer": {"DataType": "int64", "NPUDump": "int64"},  # compared by ExactMatchRate, cosine not applicable
}


def test_cli_bad_policy_device_exits_2_before_running(tmp_path):
    pol = write(tmp_path, "p.toml", "[latency]\nmax_ms = 1\ndevice = 'atlas300'\n")
    r = subprocess.run([sys.executable, "-m", "toolkit", "signoff", SEQ, "--policy", str(pol), "--no-html", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 2 and "[latency] device = 'atlas300'" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_cli_unknown_output_is_a_policy_error_not_a_failing_criterion(tmp_path):
    pol = write(tmp_path, "p.toml", "[outputs.nosuchout]\nCosineSimilarity = 0.9\n")
    r = subprocess.run([sys.executable, "-m", "toolkit", "signoff", SEQ, "--policy", str(pol), "--no-html", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 2 and '[outputs."nosuchout"] names no output' in r.stderr, r.stdout + r.stderr


