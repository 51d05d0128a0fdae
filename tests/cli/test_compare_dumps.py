"""``npuscope compare-dumps`` in a subprocess: Polygraphy JSON and npuscope run dumps on either side, BOMs,
mappings naming nodes the model lacks, unreadable dumps and their advice, special files, dump names shared by
two nodes, the origin wording with and without --model, and a broken output dump failing the run."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from tests.dumps.builders import T0, PLANT, NODES, weights, feed, build_model, softmax, golden_values, target_values, write_onnx_golden, device_name, write_device, save_checked_model, vi, ort_run, dump_model, dump_sides
from tests.cli.helpers import TIMEOUT_S, TIMEOUT, KINDS, SAID, make_special, run, cli_unblocked, npuscope_errors_only


def npuscope(*args, cwd: Path, **kw):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"), **kw)


needs_polygraphy = pytest.mark.skipif(importlib.util.find_spec("polygraphy") is None, reason="polygraphy not installed")


# ------------------------------------------------------------------------------------ Polygraphy and the CLI
def polygraphy_run(tmp_path: Path, model: Path, x: np.ndarray) -> Path:
    """Run polygraphy itself (onnxruntime, every tensor marked as an output) on ``x``; return the JSON path."""
    from polygraphy.json import save_json

    save_json([{"x": x}], str(tmp_path / "inputs.json"))
    exe = shutil.which("polygraphy") or str(Path(sys.executable).with_name("polygraphy"))
    proc = subprocess.run([exe, "run", str(model), "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs",
                           str(tmp_path / "inputs.json"), "--save-outputs", str(tmp_path / "pg.json")],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp_path / "pg.json"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@needs_polygraphy
def test_polygraphy_json_on_either_side_through_the_cli(tmp_path):
    x = feed()
    model = build_model(tmp_path / "m.onnx")
    pg = polygraphy_run(tmp_path, model, x)
    gold, dev = golden_values(x), target_values(x)
    write_device(tmp_path / "device", dev)
    write_onnx_golden(tmp_path / "golden", gold)

    # golden = Polygraphy (onnxruntime), target = device dumps with the planted fault
    proc = npuscope("compare-dumps", pg, "device", "--model", model, "--out", "rep", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "first divergence: node 'relu_2'" in proc.stdout
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["verdict"] == "FAIL" and summary["first_divergence"]["node"] == "relu_2"
    assert summary["golden"]["format"] == "polygraphy" and summary["target"]["format"] == "device"
    df = pd.read_csv(tmp_path / "rep" / "result.csv")
    mm = df[df["NodeName"] == "mm/0"].iloc[0]
    assert mm["TensorName"] == "t_mm" and mm["GoldenDump"].endswith("[0]:t_mm")
    # polygraphy's onnxruntime golden equals the numpy golden to float32 rounding
    assert mm["MaxAbsoluteError"] == pytest.approx(np.abs(dev["t_mm"].astype(np.float64) - gold["t_mm"]).max(),
                                                   abs=1e-5)
    assert (tmp_path / "rep" / "index.html").is_file()
    assert "relu_2" in (tmp_path / "rep" / "index.html").read_text(encoding="utf-8")

    # golden = numpy dumps, target = Polygraphy: onnxruntime FP32 agrees with numpy → PASS, exit 0
    proc = npuscope("compare-dumps", "golden", pg, "--model", model, "--out", "rep2", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    df = pd.read_csv(tmp_path / "rep2" / "result.csv")
    assert len(df) == len(NODES) and (df["CompareFailReason"].isna()).all()
    assert (df["CosineSimilarity"] > 1 - 1e-6).all() and not (tmp_path / "rep2" / "index.html").exists()

    # the same JSON on both sides, runner chosen by prefix: identical
    proc = npuscope("compare-dumps", pg, pg, "--target-runner", "onnxrt", "--out", "rep3", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0 and "verdict: PASS" in proc.stdout, proc.stdout + proc.stderr

    proc = npuscope("compare-dumps", pg, "device", "--golden-runner", "trt", "--model", model, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "matches no runner" in proc.stderr
    proc = npuscope("compare-dumps", pg, "device", "--golden-iteration", "3", "--model", model, cwd=tmp_path)
    assert proc.returncode == 2 and "1 iteration(s)" in proc.stderr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_bad_folder_is_one_line_exit_1(tmp_path):
    proc = npuscope("compare-dumps", "missing", "also_missing", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "GOLDEN 'missing' does not exist" in proc.stderr and not any(tmp_path.iterdir())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_two_npuscope_run_dump_folders(tmp_path):
    """`npuscope run --dump` folders: compared with numpy goldens through the model, and with each other."""
    x = feed()
    model = build_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=x)
    for name in ("d1", "d2"):
        proc = npuscope("run", model, "--inputs", "in.npz", "--dump", name, "--out", f"run_{name}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = npuscope("compare-dumps", "d1", "d2", "--out", "same", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0 and "verdict: PASS" in proc.stdout, proc.stdout + proc.stderr
    df = pd.read_csv(tmp_path / "same" / "result.csv")
    assert len(df) >= 1 and (df["MaxAbsoluteError"] == 0).all()

    write_onnx_golden(tmp_path / "golden", golden_values(x))
    proc = npuscope("compare-dumps", "golden", "d1", "--model", model, "--out", "rep", "--no-html", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    df = pd.read_csv(tmp_path / "rep" / "result.csv")
    index = json.loads((tmp_path / "d1" / "index.json").read_text())
    gold = golden_values(x)
    for fname, info in index.items():
        r = df[df["TensorName"] == info["tensor"]].iloc[0]
        dev = np.load(tmp_path / "d1" / fname)
        assert r["MaxAbsoluteError"] == pytest.approx(np.abs(dev.astype(np.float64) - gold[info["tensor"]]).max(),
                                                      rel=1e-9, abs=1e-12)


ENV = dict(os.environ, PYTHONWARNINGS="ignore")
BOM = b"\xef\xbb\xbf"


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV, timeout=600)


def one_line_error(res: subprocess.CompletedProcess, code: int) -> str:
    """The error line of a run that must fail with ``code`` and a one-line message (no traceback)."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def _npuscope_dump(folder: Path, arrays: dict, bom: bool = False) -> Path:
    folder.mkdir()
    index = {}
    for k, (tensor, arr) in enumerate(arrays.items()):
        np.save(folder / f"t{k}.npy", arr)
        index[f"t{k}.npy"] = {"tensor": tensor, "kernel": f"k{k}"}
    data = json.dumps(index).encode()
    (folder / "index.json").write_bytes((BOM if bom else b"") + data)
    return folder


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_compare_dumps_index_json_with_bom(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = a + np.float32(0.5)
    _npuscope_dump(tmp_path / "g", {"y": a})
    _npuscope_dump(tmp_path / "t", {"y": b}, bom=True)
    res = cli("compare-dumps", "g", "t", "--out", "o", "--no-html", cwd=tmp_path)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    row = pd.read_csv(tmp_path / "o" / "result.csv").iloc[0]
    assert row["MaxAbsoluteError"] == pytest.approx(float(np.abs(b - a).max()), rel=1e-6)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_compare_dumps_mapping_node_not_in_model(tmp_path):
    from toolkit.samples import resnet_small_inputs

    x = resnet_small_inputs()["x"]
    _npuscope_dump(tmp_path / "g", {"x": x})
    _npuscope_dump(tmp_path / "t", {"x": x})
    (tmp_path / "m.json").write_bytes(BOM + b'{"fused": ["stem_cnv", "stem_relu"]}')
    line = one_line_error(cli("compare-dumps", "g", "t", "--mapping", "m.json", "--model", "resnet_small",
                              "--out", "o", "--no-html", cwd=tmp_path), 2)
    assert "mapping file 'm.json'" in line and "'stem_cnv'" in line and "did you mean 'stem_conv'" in line
    assert not (tmp_path / "o").exists()


ENV_WITH_WARNINGS = dict(os.environ, PYTHONWARNINGS="default")  # a numpy RuntimeWarning would show in stderr


def quiet_cli_with_warnings(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV_WITH_WARNINGS, timeout=timeout)


def _dump_sides(tmp_path: Path, broken_side: str, how: str) -> tuple[Path, Path]:
    values = {"a": np.arange(6, dtype=np.float32), "b": np.ones(4, np.float32), "c": np.full(3, 2, np.float32)}
    sides = {}
    for side in ("golden", "target"):
        folder = tmp_path / side
        folder.mkdir()
        for i, (name, v) in enumerate(values.items()):
            np.save(folder / f"{name}.0.{1000 + i}.npy", v)
        sides[side] = folder
    bad = sides[broken_side] / "b.0.1001.npy"
    if how == "pickled":
        np.save(bad, np.array([{"k": 1}, None], dtype=object), allow_pickle=True)
    elif how == "truncated":
        bad.write_bytes(bad.read_bytes()[:-5])
    else:
        bad.write_bytes(b"this is not an npy file at all")
    return sides["golden"], sides["target"]


def test_cli_compare_dumps_pickled_recommendation(tmp_path):
    g, t = _dump_sides(tmp_path, "target", "pickled")
    res = quiet_cli_with_warnings("compare-dumps", g, t, "--no-html", "--out", tmp_path / "o")
    assert res.returncode in (0, 1), res.stderr
    findings = json.loads((tmp_path / "o" / "findings.json").read_text())
    rows = findings if isinstance(findings, list) else findings.get("findings", [])
    rec = next(f["recommendation"] for f in rows if f["kind"] == "target_dump_unreadable")
    assert "pickled" in rec and "truncated" not in rec, rec


def save_checked(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def cli_plain(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=cwd)


DUMP_NODES = [("mm", "MatMul", "t_mm"), ("relu", "Relu", "y")]


def mm_relu_model(path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(5).standard_normal((8, 6)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t_mm"], name="mm"),
                           helper.make_node("Relu", ["t_mm"], ["y"], name="relu")], "d",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])], [w])
    return save_checked(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def write_dumps(tmp: Path) -> tuple[Path, Path]:
    """Golden (ONNX Runtime naming: node.output.timestamp.npy) and device (Op.node.task.stream.timestamp.output.
    N.npy) dumps; the device's 'relu' output has a planted fault (half its values negated), 'mm' is exact."""
    x = np.random.default_rng(6).standard_normal((4, 8)).astype(np.float32)
    w = np.random.default_rng(5).standard_normal((8, 6)).astype(np.float32)
    mm = x @ w
    gold = {"t_mm": mm, "y": np.maximum(mm, 0)}
    dev = {"t_mm": mm.copy(), "y": gold["y"].copy()}
    dev["y"][:, :3] *= -1.0
    g, t = tmp / "golden", tmp / "device"
    g.mkdir()
    t.mkdir()
    for i, (node, op, tensor) in enumerate(DUMP_NODES):
        np.save(g / f"{node}.0.{T0 + i}.npy", gold[tensor])
        np.save(t / f"{op}.{node}.{i + 1}.2.{T0 + 100 + i}.output.0.npy", dev[tensor])
    return g, t


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_compare_dumps_without_model_does_not_claim_the_origin(tmp_path):
    g, t = write_dumps(tmp_path)
    r = cli_plain("compare-dumps", g, t, "--out", tmp_path / "rep", "--no-html")
    assert r.returncode == 1, r.stdout + r.stderr  # an abnormal tensor without a model: FAIL
    fd_line = [ln for ln in r.stdout.splitlines() if ln.startswith("ERROR   first_divergence")]
    assert len(fd_line) == 1 and "relu" in fd_line[0], r.stdout
    assert "first abnormal tensor in dump order" in fd_line[0]
    assert "inputs cannot be checked" in fd_line[0] and "pass --model" in fd_line[0]
    assert "keep_dtype" not in fd_line[0] and "is where the error starts" not in fd_line[0]
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["first_divergence"]["node"] == "relu"
    assert summary["first_divergence"]["basis"].startswith("dump order")
    findings = json.loads((tmp_path / "rep" / "findings.json").read_text())
    first = [f for f in (findings if isinstance(findings, list) else findings["findings"])
             if f["kind"] == "first_divergence"]
    assert len(first) == 1 and "pass --model" in first[0]["recommendation"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_compare_dumps_with_model_keeps_the_origin_wording(tmp_path):
    g, t = write_dumps(tmp_path)
    model = mm_relu_model(tmp_path / "m.onnx")
    r = cli_plain("compare-dumps", g, t, "--model", model, "--out", tmp_path / "rep", "--no-html")
    assert r.returncode == 1, r.stdout + r.stderr  # the graph output y is abnormal
    fd_line = [ln for ln in r.stdout.splitlines() if ln.startswith("ERROR   first_divergence")]
    assert len(fd_line) == 1, r.stdout
    assert "is where the error starts; its inputs are normal" in fd_line[0]
    assert "keep 'relu' in FP32 (keep_dtype)" in fd_line[0]
    assert "dump order" not in fd_line[0]
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["first_divergence"]["basis"] == "graph"
    # nothing was re-run: every keep_dtype set compare-dumps names says it is an unapplied candidate
    found = json.loads((tmp_path / "rep" / "findings.json").read_text())
    found = found if isinstance(found, list) else found["findings"]
    named = [f for f in found if "(keep_dtype)" in f["recommendation"] or (f.get("evidence") or {}).get("keep_dtype")]
    assert named and all(f["evidence"]["verified"] is False and "a candidate, not applied" in f["recommendation"]
                         and "npuscope diagnose" in f["recommendation"] for f in named)
    assert "verified:" not in r.stdout and "a candidate, not applied" in fd_line[0]


def error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _npuscope_dump_with_meta(folder: Path, arrays: dict) -> None:
    folder.mkdir()
    index = {}
    for name, arr in arrays.items():
        np.save(folder / f"{name}.npy", arr)
        index[f"{name}.npy"] = {"tensor": name, "kernel": name, "dtype": "float32", "shape": list(arr.shape)}
    (folder / "index.json").write_text(json.dumps(index))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("kind", KINDS)
def test_npuscope_dump_member_that_is_not_a_regular_file_is_an_unreadable_row(tmp_path, kind):
    a, b = np.arange(8, dtype=np.float32), np.linspace(-1, 1, 8, dtype=np.float32)
    _npuscope_dump_with_meta(tmp_path / "G", {"a": a, "b": b})
    _npuscope_dump_with_meta(tmp_path / "T", {"a": a, "b": b})
    (tmp_path / "T" / "b.npy").unlink()
    keep = make_special(tmp_path / "T" / "b.npy", kind)
    proc = cli_unblocked("compare-dumps", "G", "T", "--out", "cd", "--no-html", cwd=tmp_path)
    del keep
    assert proc.returncode in (0, 1), proc.stderr
    df = pd.read_csv(tmp_path / "cd" / "result.csv", keep_default_na=False)
    reasons = dict(zip(df["TensorName"] if "TensorName" in df else df.iloc[:, 2], df["CompareFailReason"]))
    assert reasons["b"].startswith(f"target dump unreadable (b.npy): {SAID[kind]}"), reasons
    assert reasons["a"] == ""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("what", ["side", "index"])
def test_side_path_or_index_json_that_is_a_fifo_is_a_one_line_error(tmp_path, what):
    _npuscope_dump_with_meta(tmp_path / "G", {"a": np.zeros(3, np.float32)})
    if what == "side":
        os.mkfifo(tmp_path / "T")
    else:
        _npuscope_dump_with_meta(tmp_path / "T", {"a": np.zeros(3, np.float32)})
        (tmp_path / "T" / "index.json").unlink()
        os.mkfifo(tmp_path / "T" / "index.json")
    proc = cli_unblocked("compare-dumps", "G", "T", "--out", "cd", "--no-html", cwd=tmp_path)
    assert proc.returncode == 2
    assert "not a regular file but a FIFO" in error_line(proc)
    assert not (tmp_path / "cd").exists()


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=300)


def _clash_model():
    nodes = [h.make_node("Relu", ["x"], ["t1"], name="blk/relu.1"), h.make_node("Mul", ["t1", "half"], ["t3"], name="a/b"),
             h.make_node("Mul", ["t3", "c"], ["y"], name="a.b")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8])],
                     [nh.from_array(np.array(0.5, np.float32), "half"), nh.from_array(np.array(1.5, np.float32), "c")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_dump_names_shared_by_two_nodes_are_never_paired_by_name(tmp_path):
    model = _clash_model()
    onnx.save(model, tmp_path / "m.onnx")
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    t1 = np.maximum(x, 0)
    t3, y = t1 * 0.5, t1 * 0.5 * 1.5
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], y)
    gold, dev = tmp_path / "gold", tmp_path / "dev"
    gold.mkdir()
    dev.mkdir()
    for node, arr in (("blk_relu_1", t1), ("a_b", t3)):  # ONNX golden names: <node>.<index>.<timestamp>.npy
        np.save(gold / f"{node}.0.1700000000000001.npy", arr)
    bad = t3.copy()
    bad[0, 7] += 5.0  # the device op of node 'a/b' is wrong
    np.save(dev / "Relu.blk_relu_1.1.0.1700000000000100.output.0.1x8.npy", t1)
    np.save(dev / "Mul.a_b.2.0.1700000000000101.output.0.1x8.npy", bad)   # node 'a/b'
    np.save(dev / "Mul.a_b.3.0.1700000000000102.output.0.1x8.npy", y)     # node 'a.b'
    proc = _cli("compare-dumps", gold, dev, "--model", tmp_path / "m.onnx", "--no-html", "--out", tmp_path / "o")
    assert proc.returncode in (0, 1), proc.stderr
    rows = {r["NodeName"]: r for r in __import__("csv").DictReader(open(tmp_path / "o" / "result.csv"))}
    for node in ("a/b", "a.b"):
        assert "ambiguous" in rows[node]["CompareFailReason"], rows[node]
    # no node was compared against a dump of the other: nothing reports y's values as t3's error (0.5·t3)
    assert rows["blk/relu.1"]["CompareFailReason"] == ""
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert "'a/b' / 'a.b' -> 'a_b'" in json.dumps(summary)  # the note names the clash


@pytest.mark.parametrize("spoil", ["absent", "listed_missing", "misshaped", "truncated"])
def test_broken_output_dump_fails_compare_dumps(tmp_path, spoil):
    """Kind: with --model, a graph output that could not be compared fails (exit 1) like compare does;
    the same broken dump on an intermediate stays a WARN (exit 0)."""
    model = dump_model(tmp_path / "m.onnx")
    for where, code, verdict in (("y", 1, "FAIL"), ("u", 0, "WARN")):
        case = tmp_path / f"{where}"
        case.mkdir()
        g, t = dump_sides(case, model, spoil, where)
        proc = npuscope_errors_only("compare-dumps", g, t, "--model", model, "--out", case / "r", "--no-html", cwd=tmp_path)
        assert proc.returncode == code, proc.stdout + proc.stderr
        summary = json.loads((case / "r" / "summary.json").read_text())
        assert summary["verdict"] == verdict, summary["reasons"]
        out_reason = [r for r in summary["reasons"] if r.startswith("output 'y' could not be compared")]
        assert bool(out_reason) == (where == "y")
