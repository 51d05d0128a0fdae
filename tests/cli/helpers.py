"""Test builders shared by test_cli.py, test_compare.py."""

from __future__ import annotations

import csv
import html
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T
from onnx import helper as h

from tests.dataset.helpers import FP16
from tests.faultkinds import builders as fk
from tests.graphs import N, affine_and, make_model
from toolkit import samples
from toolkit.config.schema import Config

TIMEOUT_S = 600

def npuscope(*args, cwd: Path, **kw):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"), **kw)

def run_cli(*args, env=None, cwd=None, timeout=240):
    full = dict(os.environ)
    full.pop("NPUSCOPE_THREADS", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=timeout)

REPO = Path(__file__).resolve().parents[2]

TITLE = "\x1b]0;PWNED-TITLE\x07\x1b[2J\x1b[31mFAKE verdict: PASS\x1b[0m\r"   # OSC 0 title, CSI clear, colour, CR

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"                                      # clipboard write

OSC8 = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07"                    # hyperlink

#: LF, BS, DEL, C1 CSI/OSC/ST, TAB, VT, FF. Not NUL: a model whose names hold one is refused at load
#: (tests/ir/test_proto_checks.py), with the name escaped in the one-line error.
REST = "\nverdict: PASS\x08\x08\x7f\x9b31m\x9d0;t\x9c\t\x0b\x0c"

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

#: Node and tensor names of the evil model; each starts with a spreadsheet formula character as well.
N_MUL = "+cmd|' /C calc'!A0" + TITLE

T_MUL = '=HYPERLINK("http://evil","x")' + OSC52

N_DIV = "-2+3" + OSC8 + BIDI

T_DIV = "@SUM(A1)" + BIDI

N_RELU = "\t=1+1" + REST

OUT = "\r=cmd" + REST + BIDI + TITLE

BIDI_CHARS = set(BIDI) | {"\u061c", "\u200e", "\u200f", "\u2028", "\u2029"}

FORMULA = ("=", "+", "-", "@", "\t", "\r")

def _cli_bytes(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONIOENCODING="utf-8", **(env or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=REPO, capture_output=True,
                          timeout=timeout, env=full)

def _bad_chars(text: str) -> list[str]:
    """Characters that must not reach a terminal: C0 controls but LF, DEL and C1, bidi controls, separators."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F or c in BIDI_CHARS]

def _assert_clean(raw: bytes, what: str) -> str:
    text = raw.decode("utf-8")  # strict: a lone surrogate or a broken sequence fails here too
    assert not _bad_chars(text), (what, sorted(set(map(hex, map(ord, _bad_chars(text))))), text[:2000])
    return text

def _evil_model(path: Path) -> Path:
    """x -> Mul(x, 1e5) -> Div(., 1e5) -> Relu -> OUT: every node and tensor named with control characters,
    and the Mul overflows FP16 (|x| * 1e5 > 65504), so force_fp16 fails with findings naming the nodes."""
    big = numpy_helper.from_array(np.full((8,), 1e5, np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], [T_MUL], name=N_MUL),
         helper.make_node("Div", [T_MUL, "w"], [T_DIV], name=N_DIV),
         helper.make_node("Relu", [T_DIV], [OUT], name=N_RELU)], "evil",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8))],
        [helper.make_tensor_value_info(OUT, TensorProto.FLOAT, (1, 8))], [big])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path

X_EVIL = np.array([[-0.9, -0.5, -0.1, 0.2, 0.4, 0.7, 0.8, 0.95]], np.float32)  # |x| > 0.655 overflows *1e5

@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    d = tmp_path_factory.mktemp("evil")
    _evil_model(d / "evil.onnx")
    np.savez(d / "x.npz", x=X_EVIL)
    return d

def _csv_cells(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))

def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True

def _assert_no_formula(path: Path) -> list[list[str]]:
    rows = _csv_cells(path)
    for row in rows:
        for cell in row:
            assert _is_number(cell) or not cell.startswith(FORMULA), (path.name, cell)
    return rows

V = h.make_tensor_value_info

IR = {21: 10, 25: 12}

def cli_with_warnings(*args, cwd=None, warn="default"):
    env = dict(os.environ, PYTHONWARNINGS=warn)
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600, check=False)

def write_model(tmp: Path, name: str, nodes, ins, outs, opset=21, inits=()) -> Path:
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, list(inits)), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = IR[opset]
    p = tmp / name
    onnx.save(m, p)
    return p

def _cli_user_path(*args, cwd, env_path: Path | None = None, timeout=300):
    import os

    env = dict(os.environ)
    if env_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(env_path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)

def _error_line(res, code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("npuscope: error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


FP32_UNFUSED = dict(precision_mode="force_fp32", fusion_level=0)

X_16_64 = np.random.default_rng(11).standard_normal((16, 64)).astype(np.float32)

def _cli_argv(argv, env=None, cwd=None, timeout=300):
    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *argv], cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=timeout, env=full)

def _one_error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]

@pytest.fixture(scope="module")
def tiny_compiled(tmp_path_factory):
    """y = 2x + 3x, a model file, an input npz, an FP32 config and the plan compiled with it."""
    d = tmp_path_factory.mktemp("tiny")
    model = make_model([N("Mul", ["x", "two"], ["a"], "mul_a"), N("Mul", ["x", "three"], ["b"], "mul_b"),
                        N("Add", ["a", "b"], ["y"], "add")], [("x", [16, 64])], ["y"],
                       {"two": np.float32(2.0), "three": np.float32(3.0)})
    for size in (16, 64):
        model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = size
    onnx.save(model, str(d / "m.onnx"))
    np.savez(d / "x.npz", x=X_16_64)
    (d / "fp32.json").write_text(json.dumps(FP32_UNFUSED))
    proc = _cli_argv(["-q", "compile", str(d / "m.onnx"), "--config", str(d / "fp32.json"), "--out", str(d / "c")])
    assert proc.returncode == 0, proc.stderr
    return d

ENV_WITH_WARNINGS = dict(os.environ, PYTHONWARNINGS="default")  # a numpy RuntimeWarning would show in stderr

def quiet_cli_with_warnings(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV_WITH_WARNINGS, timeout=timeout)

def one_line_error_without_warning(res: subprocess.CompletedProcess, code: int) -> str:
    """The error line of a run that must fail with ``code`` and a one-line message (no traceback, no warning)."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    assert "Warning" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("npuscope: error: "), lines[0]
    return lines[0]

def save_model(path: Path, elem: int, op: str = "Neg", shape=(1, 8)) -> Path:
    """x -> op -> y with x, y of ONNX element type ``elem``."""
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="n")], "g",
                          [helper.make_tensor_value_info("x", elem, list(shape))],
                          [helper.make_tensor_value_info("y", elem, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path

def cli_with_env(*args, env=None, cwd=None):
    e = dict(os.environ, PYTHONWARNINGS="ignore")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=e,
                          cwd=cwd, timeout=300)

def plan_of(out):
    return {k["name"]: k for k in json.loads((out / "plan.json").read_text())["kernels"]}

X_2_8 = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)

def _cli_cached(argv, cwd, cache):
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(cache), NPUSCOPE_COMPILE_CACHE_MODE="enable")
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, argv)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env, check=False)

def _tiny_model() -> onnx.ModelProto:
    """y = 2x + 1 on x float32[2, 8]."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="mul"),
             helper.make_node("Add", ["a", "one"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              [numpy_helper.from_array(np.float32(2.0), "two"),
                               numpy_helper.from_array(np.float32(1.0), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)

# ------------------------------------------------------------------------------------------ valid runs
@pytest.fixture
def tiny(tmp_path):
    onnx.save(_tiny_model(), str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "x.npz", x=X_2_8)
    return tmp_path


def error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npuscope:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]

@pytest.fixture()
def tiny_model(tmp_path):
    """x[1,4] float32 -> MatMul 'mm' (W 4x4) -> Relu 'relu' -> y."""
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16, "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"), helper.make_node("Relu", ["t"], ["y"], name="relu")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    return path


def cli_with_env_extra(*args, cwd, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600, check=False)

def _elt_model(folder: Path) -> tuple[Path, Path]:
    """y = (x*3 + 1000) - 1000: cancellation that FP16 storage of the sum ruins (an abnormal 's' and 'z')."""
    model = make_model([N("Mul", ["x", "a"], ["m"], "mul"), N("Add", ["m", "b"], ["s"], "add"),
                        N("Sub", ["s", "b"], ["z"], "sub")], [("x", [1, 64])], [],
                       {"a": np.array([3.0], np.float32), "b": np.array([1000.0], np.float32)})
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 64]))
    model.ir_version = 8
    onnx.save(model, folder / "elt.onnx")
    x = (np.linspace(-1, 1, 64, dtype=np.float32) + np.float32(1e-4)).reshape(1, 64)
    np.savez(folder / "elt.npz", x=x)
    return folder / "elt.onnx", folder / "elt.npz"

def _artifact_rows(page: Path) -> list[tuple[str, str, str]]:
    """(label, file, size) of each row of the report's Artifacts table."""
    sec = re.search(r'<section id="artifacts">(.*?)</section>', page.read_text(encoding="utf-8"), re.DOTALL)
    assert sec, "no artifacts section"
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", sec.group(1), re.DOTALL):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td>(.*?)</td>", tr, re.DOTALL)]
        if cells:
            rows.append(tuple(cells))
    return rows

def _size_text(n: int) -> str:
    """The size as the table prints it (B below 1 KiB, else KiB/MiB with two decimals), worked out here."""
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.2f} KiB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.2f} MiB"

def check_artifacts_agree_with_disk(folder: Path, page: str = "index.html", unlisted=frozenset()) -> None:
    """Every row names a file or folder on disk, with its size as on disk ("this page" for the report itself);
    every entry of the folder is listed, but ``unlisted``."""
    rows = _artifact_rows(folder / page)
    assert rows
    for label, name, size in rows:
        p = folder / name
        assert p.exists(), f"{label}: {name} listed but not on disk"
        if name == page:
            assert size == "this page"
        elif p.is_dir():
            assert size == "folder", (label, name, size)
        else:
            assert size == _size_text(p.stat().st_size), (label, name, size, p.stat().st_size)
    listed = {name.rstrip("/") for _, name, _ in rows}
    on_disk = {p.name for p in folder.iterdir() if not p.name.startswith(".")}
    extra = on_disk - listed - set(unlisted)
    assert extra == set(), f"files on disk the table does not list: {sorted(extra)}"


def npuscope_with_path(*args, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, NPUSCOPE_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=env)

def vi(name, shape, elem=T.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)

def save(path: Path, nodes, inputs, outputs, inits=(), opset: int = 17) -> Path:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path

def relu_model(path: Path) -> Path:
    """y = Relu(x), x float32[1, 8]."""
    return save(path, [helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [1, 8])], [vi("y", [1, 8])])

def npuscope_error_line(p, code=2):
    """The CLI failed with exit ``code`` (default 2: bad input) and a single "npuscope: error:" line, no traceback."""
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in p.stderr and len(lines) == 1 and lines[0].startswith("npuscope: error:"), p.stderr
    return lines[0]

ENV = dict(os.environ, PYTHONWARNINGS="ignore")

TB = str(samples.sample_path("transformer_block"))

def cli_no_warnings(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=TIMEOUT_S, cwd=cwd, check=False)

def refusal_line(proc) -> str:
    """The single stderr line of a refused command."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]

def _npz_folder(folder: Path, n: int) -> Path:
    """``n`` transformer_block inputs (x: 1x16x64 normal, mask: ones, the shapes of the sample's inputs)."""
    folder.mkdir()
    model = onnx.load(TB)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    rng = np.random.default_rng(1)
    for k in range(n):
        np.savez(folder / f"in{k:03d}.npz", **{name: (rng.normal(0, 1, s) if name == "x" else np.ones(s))
                                              .astype(np.float32) for name, s in shapes.items()})
    return folder


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV, timeout=600)

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

def cli_plain(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=cwd)

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


X_4_8 = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)

def _m1(path: Path) -> Path:
    """y = 3x + 1, z = exp(x) on x float32[4, 8] (two float outputs)."""
    from tests.graphs import affine_and

    m = affine_and("Exp")
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path

@pytest.fixture()
def m1(tmp_path) -> Path:
    _m1(tmp_path / "m1.onnx")
    np.savez(tmp_path / "in.npz", x=X_4_8)
    return tmp_path


PROGRESS = re.compile(r"^\[npuscope \d\d:\d\d:\d\d\] ")

def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not PROGRESS.match(ln)]

def assert_one_line_error(proc, code: int, *mentions: str, out: Path | None = None) -> str:
    """Exit ``code``; exactly one non-progress stderr line, ``npuscope: error: ...`` naming every ``mentions``."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("npuscope: error: "), line
    for m in mentions:
        assert m in line, f"{m!r} not in {line!r}"
    if out is not None:
        assert not out.exists() or not any(out.iterdir()), f"partial output left in {out}: {list(out.iterdir())}"
    return line

def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False

METRIC_COLUMNS = ["CosineSimilarity", "MaxAbsoluteError", "RelativeEuclideanDistance", "RootMeanSquareError",
                  "MeanAbsoluteError", "KullbackLeiblerDivergence"]

def check_result_csv(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path, keep_default_na=True)
    assert len(df) > 0
    reason = df["CompareFailReason"].fillna("").astype(str).str.strip()
    has_metrics = df[METRIC_COLUMNS].notna().any(axis=1)
    bad = df[~has_metrics & (reason == "")]
    assert bad.empty, f"rows with neither metrics nor a CompareFailReason:\n{bad[['NodeName', 'TensorName']]}"
    return df

# ------------------------------------------------------------------ diagnose / compare on the bundled sample
needs_tables = pytest.mark.skipif(not has_module("toolkit.core.csvjson"),
                                  reason="toolkit.core.csvjson (CSV/JSON writer) not written yet")


M1_NODES = [h.make_node("Mul", ["x", "c3"], ["t"], name="mul"), h.make_node("Add", ["t", "c1"], ["y"], name="add"),
            h.make_node("Exp", ["x"], ["z"], name="exp")]

M1_INITS = [numpy_helper.from_array(np.array(3, np.float32), "c3"), numpy_helper.from_array(np.array(1, np.float32), "c1")]

def m1_model(tmp: Path) -> Path:
    return write_model(tmp, "m1.onnx", M1_NODES, [V("x", T.FLOAT, [4, 8])], [V("y", T.FLOAT, [4, 8]), V("z", T.FLOAT, [4, 8])],
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


def rm_sm_model(path):
    """x[4,4096] -> ReduceMean 'rm' (axes [1], keepdims) -> m; Softmax 'sm' (axis 1) -> s -> ReduceSum 'rs' (axes
    input [1], keepdims) -> y2; opset 13; outputs m, s, y2."""
    m = make_model([N("ReduceMean", ["x"], ["m"], "rm", axes=[1], keepdims=1),
                    N("Softmax", ["x"], ["s"], "sm", axis=1),
                    N("ReduceSum", ["s", "ax"], ["y2"], "rs", keepdims=1)],
                   [("x", [4, 4096])], ["m", "s", "y2"], {"ax": np.array([1], np.int64)}, opset=13)
    del m.graph.output[:]
    m.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                           for n, shape in (("m", [4, 1]), ("s", [4, 4096]), ("y2", [4, 1]))])
    onnx.save(m, path)
    return path

def _string_model(path: Path) -> Path:
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="i")], "s",
                          [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)

@pytest.fixture()
def ws(tmp_path):
    """A working folder with a valid model (softplus) and a valid feed."""
    b = fk.softplus(width=16, xmax=5.0)
    b.save(tmp_path, "model")
    return tmp_path

FP16_MAX = 65504.0  # largest finite IEEE binary16 value, by hand

def _model(nodes, inputs, outputs, inits=None, opset=17) -> onnx.ModelProto:
    """``inputs`` / ``outputs``: [(name, shape)] of float tensors; ``inits``: {name: array}."""
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


TIMEOUT = 60

KINDS = ["fifo", "devzero", "socket", "broken"]

#: what each kind is called in the messages (toolkit.core.textfile.not_regular_reason)
SAID = {"fifo": "not a regular file but a FIFO", "devzero": "not a regular file but a character device",
        "socket": "not a regular file but a socket", "broken": "a broken symbolic link"}

def make_special(path: Path, kind: str) -> list:
    """Create ``path`` as a non-regular entry; returns objects to keep alive (the bound socket)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "devzero":
        os.symlink("/dev/zero", path)
    elif kind == "broken":
        os.symlink(path.parent / "nowhere-at-all", path)
    else:
        if len(str(path)) > 100:
            pytest.skip("socket path too long for AF_UNIX")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        return [s]
    return []

def run(args: list, cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                              timeout=TIMEOUT, check=False, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"blocked reading a non-regular file: {args}")

def cli_unblocked(*args, cwd: Path) -> subprocess.CompletedProcess:
    return run(["-m", "toolkit", *args], cwd)

def npuscope_errors_only(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, NPUSCOPE_LOG_LEVEL="3"))


# ---- the command line in a fresh process with its one strict error line, and two tiny models
ROOT = REPO  # the repository root


def npuscope_run(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """``python -m toolkit ARGS`` (stdout/stderr captured as text, no terminal)."""
    full = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=full, timeout=300)


def strict_error_line(proc) -> str:
    """The single ``npuscope: error:`` line of a failed run (no traceback, nothing else on stderr)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error: "), proc.stderr
    return lines[0]


def save_m1(folder: Path) -> Path:
    """y = 3x + 1, z = exp(x), x float32[4, 8] (tests.graphs.affine_and) saved as folder/m1.onnx, with
    folder/x.npz (seeded x in [0, 1))."""
    onnx.save(affine_and(), folder / "m1.onnx")
    np.savez(folder / "x.npz", x=np.random.default_rng(0).random((4, 8), dtype=np.float32))
    return folder / "m1.onnx"


#: the scale of :func:`overflow`: x in [1, 2) times it is above FP16's largest finite value (65504)
BIG = 1e5


def overflow(folder: Path) -> Path:
    """y = x * 1e5, x float32[2, 4] in [1, 2) (folder/big.npz): in FP16 every y overflows to inf, a FAIL verdict
    in force_fp16; exact in force_fp32."""
    graph = helper.make_graph([N("Mul", ["x", "s"], ["y"], "mul")], "big",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(np.array(BIG, np.float32), "s")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), folder / "big.onnx")
    np.savez(folder / "big.npz", x=(1 + np.random.default_rng(1).random((2, 4))).astype(np.float32))
    return folder / "big.onnx"


LOADER = '''import numpy as np


def make():
    """Two seeded input sets."""
    rng = np.random.default_rng(0)
    for _ in range(2):
        yield {"x": rng.random((4, 8), dtype=np.float32)}


def one():
    return [{"x": np.full((4, 8), 0.5, np.float32)}]


def broken():
    raise ValueError("no data today")
'''


def write_loader(folder: Path) -> Path:
    """folder/loader.py with make() (2 sets), one() (1 set of 0.5s) and broken() (raises) for m1's x."""
    (folder / "loader.py").write_text(LOADER)
    return folder / "loader.py"


def loader_sets() -> list[np.ndarray]:
    """The x arrays make() yields, computed here the same way."""
    rng = np.random.default_rng(0)
    return [rng.random((4, 8), dtype=np.float32) for _ in range(2)]


def loop_forever_model() -> onnx.ModelProto:
    """y = Loop(no trip count, cond = True, x): the body keeps cond True and adds 1 to x, so onnxruntime never
    returns (the model is valid: the checker accepts it)."""
    body = h.make_graph(
        [h.make_node("Identity", ["cond"], ["cond_out"], name="keep_going"),
         h.make_node("Add", ["x_in", "one"], ["x_out"], name="count")],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
         h.make_tensor_value_info("x_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, [1])],
        [h.make_tensor("one", T.FLOAT, [1], [1.0])])
    g = h.make_graph([h.make_node("Loop", ["", "always", "x"], ["y"], body=body, name="forever")], "loop_forever",
                     [h.make_tensor_value_info("x", T.FLOAT, [1])], [h.make_tensor_value_info("y", T.FLOAT, [1])],
                     [h.make_tensor("always", T.BOOL, [], [True])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model
