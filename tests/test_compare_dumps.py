"""``npuscope compare-dumps``: dumps written here in each naming convention, a Polygraphy RunResults JSON made
by polygraphy itself, a planted divergence, a fusion mapping, and missing / mis-shaped / truncated dumps.

The golden values are computed with numpy in this file; the target values are their FP16 rounding with one
planted fault (a channel scaled by 1.5 at 'relu_2') propagated downstream in numpy. Metric values are checked
against numpy formulas applied to the same arrays.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.commands.compare_dumps import compare_dumps
from toolkit.dumps.entry import DumpReadError, read_npy
from toolkit.dumps.names import choose_convention, parse_device, parse_onnx_golden
from toolkit.dumps.readers import SideSpec
from toolkit.core.errors import InputError, UsageError, UserError

TIMEOUT_S = 300
T0 = 1_700_000_000_000_000  # 16-digit µs timestamps, as on the device
PLANT = 1.5  # channel 2 of relu_2's output is scaled by this on the target
#: (node name, op type, output tensor), in execution order; names hold '/' and '.' on purpose
NODES = [("mm/0", "MatMul", "t_mm"), ("add.1", "Add", "t_add"), ("relu_2", "Relu", "t_relu"),
         ("mul_3", "Mul", "t_mul"), ("sm_4", "Softmax", "y")]

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
needs_polygraphy = pytest.mark.skipif(importlib.util.find_spec("polygraphy") is None, reason="polygraphy not installed")


# ------------------------------------------------------------------------------------------------ fixtures
def weights():
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((8, 6)) * 0.5).astype(np.float32)
    b = np.array([0.1, -0.2, 3.0, 0.3, -0.1, 0.2], np.float32)  # channel 2 stays positive through Relu
    s = np.full(6, 1.7, np.float32)
    return w, b, s


def feed() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)


def build_model(path: Path) -> Path:
    w, b, s = weights()
    nodes = [helper.make_node(op, ins, [out], name=name, **({"axis": -1} if op == "Softmax" else {}))
             for (name, op, out), ins in zip(NODES, [["x", "w"], ["t_mm", "b"], ["t_add"], ["t_relu", "s"], ["t_mul"]])]
    graph = helper.make_graph(nodes, "dumps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
                              [numpy_helper.from_array(a, n) for n, a in (("w", w), ("b", b), ("s", s))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def golden_values(x: np.ndarray) -> dict[str, np.ndarray]:
    """{tensor: float32 array} computed with numpy."""
    w, b, s = weights()
    mm = x @ w
    add = mm + b
    relu = np.maximum(add, 0)
    mul = relu * s
    return {"t_mm": mm, "t_add": add, "t_relu": relu, "t_mul": mul, "y": softmax(mul)}


def target_values(x: np.ndarray) -> dict[str, np.ndarray]:
    """FP16 results with the planted fault at relu_2, propagated downstream (numpy)."""
    g = golden_values(x)
    _, _, s = weights()
    relu = g["t_relu"].copy()
    relu[:, 2] *= PLANT
    mul = relu * s
    vals = {"t_mm": g["t_mm"], "t_add": g["t_add"], "t_relu": relu, "t_mul": mul, "y": softmax(mul)}
    return {k: v.astype(np.float16) for k, v in vals.items()}


def write_onnx_golden(folder: Path, values: dict) -> Path:
    """``{node}.{output_index}.{timestamp}.npy`` ('/' becomes '_' in file names; dots stay)."""
    folder.mkdir()
    for i, (name, _op, tensor) in enumerate(NODES):
        np.save(folder / f"{name.replace('/', '_')}.0.{T0 + 10 * i}.npy", values[tensor])
    return folder


def device_name(i: int, name: str, op: str, role: str = "output", index: int = 0) -> str:
    return f"{op}.{name.replace('/', '_')}.{i + 3}.1.{T0 + 100 + 10 * i}.{role}.{index}.npy"


def write_device(folder: Path, values: dict, skip=()) -> Path:
    """``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.output.0.npy`` plus one input dump per op."""
    folder.mkdir()
    for i, (name, op, tensor) in enumerate(NODES):
        if name in skip:
            continue
        np.save(folder / device_name(i, name, op), values[tensor])
        np.save(folder / device_name(i, name, op, "input", 0), np.zeros(3, np.float16))  # must be ignored
    return folder


def side(path, role, **kw) -> SideSpec:
    return SideSpec(str(path), role, **kw)


def npuscope(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ, PYTHONWARNINGS="ignore"))


def row(df: pd.DataFrame, node: str) -> pd.Series:
    hit = df[df["NodeName"] == node]
    assert len(hit) == 1, f"{node}: {len(hit)} rows in\n{df[['NodeName', 'TensorName', 'CompareFailReason']]}"
    return hit.iloc[0]


def cosine(x, y) -> float:
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def red(x, y) -> float:
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    return float(np.sqrt(((x - y) ** 2).sum() / (y ** 2).sum()))


# ------------------------------------------------------------------------------------------- file names
def test_device_names_parse_from_both_ends():
    p = parse_device("Conv2D.backbone.conv.1.5.2.1700000000000123.output.2.1x3x4x4.npy")
    assert (p.op_type, p.name, p.index, p.timestamp, p.role) == ("Conv2D", "backbone.conv.1", 2, 1700000000000123,
                                                                 "output")
    p = parse_device("Add.add_1.4.1.1700000000000000.input.1.npy")
    assert (p.name, p.index, p.role) == ("add_1", 1, "input")
    p = parse_device("Relu.relu_2.4.1.1700000000000000.npy")  # converted without the .output suffix
    assert (p.op_type, p.name, p.index, p.converted) == ("Relu", "relu_2", 0, False)
    assert parse_device("relu_2.0.1700000000000000.npy") is None  # only 3 fields
    assert parse_device("Relu.relu_2.x.1.1700000000000000.npy") is None
    assert parse_device("Relu.relu_2.4.1.1700000000000000").raw  # not converted: a raw dump (toolkit.dumps.raw)


def test_onnx_golden_names_keep_dots_in_the_node():
    p = parse_onnx_golden("block.3.conv.2.1700000000000000.npy")
    assert (p.name, p.index, p.timestamp) == ("block.3.conv", 2, 1700000000000000)
    assert parse_onnx_golden("conv.npy") is None and parse_onnx_golden("a.b.1.npy") is None
    assert parse_onnx_golden("Conv.c.1.2.3.output.0.npy") is None


def test_convention_choice_breaks_ties_by_side():
    both = ["Relu.r.1.2.1700000000000000.npy", "Add.a.1.2.1700000000000001.npy"]  # fit both conventions
    assert choose_convention(both, "onnx")[0] == "onnx"
    assert choose_convention(both, "device")[0] == "device"
    assert choose_convention(["relu.0.1700000000000000.npy"] + both, "device")[0] == "onnx"  # onnx reads more
    assert choose_convention(["x.npy"], "onnx")[0] is None


def test_truncated_and_foreign_npy_files_raise_dump_read_errors(tmp_path):
    good = tmp_path / "a.npy"
    np.save(good, np.arange(100, dtype=np.float32))
    assert np.array_equal(read_npy(good), np.arange(100, dtype=np.float32))
    data = good.read_bytes()
    cases = {"trunc.npy": data[:200], "header.npy": data[:30], "text.npy": b"not numpy", "empty.npy": b""}
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "zip.npz", a=np.zeros(3))
    cases["zip.npy"] = (tmp_path / "zip.npz").read_bytes()
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
    for name in list(cases) + ["obj.npy"]:
        with pytest.raises(DumpReadError):
            read_npy(tmp_path / name)
    with pytest.raises(DumpReadError, match="truncated"):
        read_npy(tmp_path / "trunc.npy")


# ------------------------------------------------------------------------------------ onnx golden vs device
@pytest.mark.parametrize("with_model", [False, True])
def test_planted_divergence_is_the_first_divergence(tmp_path, with_model):
    x = feed()
    gold, dev = golden_values(x), target_values(x)
    g = write_onnx_golden(tmp_path / "golden", gold)
    t = write_device(tmp_path / "device", dev)
    model = str(build_model(tmp_path / "m.onnx")) if with_model else None
    diag = compare_dumps(side(g, "golden"), side(t, "target"), model=model)
    df = diag.table
    # without a model rows carry the file names' node names ('/' written as '_'); with one, the model's
    names = [n if with_model else n.replace("/", "_") for n, _, _ in NODES]
    assert list(df["NodeName"]) == names  # timestamps / topological order agree here
    assert diag.summary["first_divergence"]["node"] == "relu_2"
    assert diag.findings[0].kind == "first_divergence" and diag.findings[0].subject == "relu_2"
    for node, (_n, _op, tensor) in zip(names, NODES):
        r = row(df, node)
        assert r["CompareFailReason"] == ""
        assert r["MaxAbsoluteError"] == pytest.approx(np.abs(dev[tensor].astype(np.float64) - gold[tensor]).max(),
                                                      rel=1e-12)
        assert r["CosineSimilarity"] == pytest.approx(cosine(dev[tensor], gold[tensor]), abs=1e-12)
        assert r["RelativeEuclideanDistance"] == pytest.approx(red(dev[tensor], gold[tensor]), rel=1e-9)
    assert not row(df, names[0])["Abnormal"] and not row(df, "add.1")["Abnormal"]
    assert row(df, "relu_2")["Abnormal"] and row(df, "relu_2")["Role"] == "origin"
    assert row(df, "mul_3")["Role"] == "propagated"
    assert row(df, "relu_2")["Kernel"] == "relu_2" and row(df, "relu_2")["KernelOpType"] == "Relu"
    assert row(df, "relu_2")["NPUDump"] == "float16" and row(df, "relu_2")["DataType"] == "float32"
    assert diag.summary["target"]["input_dumps_skipped"] == len(NODES)
    assert diag.summary["verdict"] == "FAIL"
    if with_model:
        assert row(df, "mm/0")["TensorName"] == "t_mm"
        assert diag.summary["reasons"][0].startswith("output 'y' is abnormal")


def test_overflow_before_the_planted_origin_comes_first(tmp_path):
    x = feed()
    gold, dev = golden_values(x), target_values(x)
    dev["t_add"][1, 3] = np.inf  # FP16 overflow at add.1, upstream of the planted fault at relu_2
    g = write_onnx_golden(tmp_path / "golden", gold)
    t = write_device(tmp_path / "device", dev)
    diag = compare_dumps(side(g, "golden"), side(t, "target"))
    first = diag.summary["first_divergence"]
    assert (first["node"], first["kind"]) == ("add.1", "fp16_overflow")
    assert diag.findings[0].kind == "fp16_overflow" and diag.findings[0].subject == "add.1"
    r = row(diag.table, "add.1")
    assert r["OverFlow"] and r["DeviceInf"] == 1 and r["ComparedCount"] == dev["t_add"].size - 1


def test_order_follows_the_model_else_the_golden_timestamps(tmp_path):
    x = feed()
    gold = golden_values(x)
    g = tmp_path / "golden"
    g.mkdir()
    stamps = [T0 + 50, T0 + 40, T0 + 30, T0 + 20, T0 + 30]  # reversed, with a tie between relu_2 and sm_4
    for (name, _op, tensor), ts in zip(NODES, stamps):
        np.save(g / f"{name.replace('/', '_')}.0.{ts}.npy", gold[tensor])
    t = write_device(tmp_path / "device", {k: v.astype(np.float16) for k, v in gold.items()})
    df = compare_dumps(side(g, "golden"), side(t, "target")).table
    assert list(df["NodeName"]) == ["mul_3", "relu_2", "sm_4", "add.1", "mm_0"]  # tie: by node name
    model = str(build_model(tmp_path / "m.onnx"))
    df = compare_dumps(side(g, "golden"), side(t, "target"), model=model).table
    assert list(df["NodeName"]) == [n for n, _, _ in NODES]


def test_mapping_compares_the_fused_op_with_the_last_original(tmp_path):
    x = feed()
    gold, dev = golden_values(x), target_values(x)
    g = write_onnx_golden(tmp_path / "golden", gold)
    t = write_device(tmp_path / "device", dev, skip={"add.1", "relu_2"})
    np.save(t / f"FusedAddRelu.add_relu_fused.9.1.{T0 + 115}.output.0.npy", dev["t_relu"])
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({"add_relu_fused": ["add.1", "relu_2"]}))
    diag = compare_dumps(side(g, "golden"), side(t, "target"), mapping=str(mapping))
    df = diag.table
    assert row(df, "add.1")["CompareFailReason"] == "fused into add_relu_fused"
    fused = row(df, "relu_2")
    assert fused["Kernel"] == "add_relu_fused" and fused["FusedNodes"] == "add.1;relu_2"
    assert fused["MaxAbsoluteError"] == pytest.approx(np.abs(dev["t_relu"].astype(np.float64) - gold["t_relu"]).max())
    assert diag.summary["first_divergence"]["node"] == "relu_2"
    assert "kernel 'add_relu_fused' (add.1, relu_2)" in diag.findings[0].recommendation
    assert diag.summary["counts"].get("not compared: fused into") is None  # fused rows are expected, not gaps


def test_missing_misshaped_truncated_and_superseded_dumps_are_rows(tmp_path):
    x = feed()
    gold = golden_values(x)
    dev = {k: v.astype(np.float16) for k, v in gold.items()}  # no fault: only the broken files matter
    g = write_onnx_golden(tmp_path / "golden", gold)
    np.save(g / f"relu_2.0.{T0 - 5}.npy", np.full((4, 6), 99, np.float32))  # older dump: superseded
    t = write_device(tmp_path / "device", dev, skip={"mul_3"})
    np.save(t / device_name(0, "mm/0", "MatMul"), dev["t_mm"].T.copy())  # mis-shaped
    trunc = t / device_name(1, "add.1", "Add")
    trunc.write_bytes(trunc.read_bytes()[:-10])  # truncated
    np.save(t / f"TransData.trans_9.9.1.{T0 + 999}.output.0.npy", np.zeros(2, np.float16))  # device-only op
    diag = compare_dumps(side(g, "golden"), side(t, "target"))
    df = diag.table
    assert row(df, "mm_0")["CompareFailReason"] == "shape mismatch: device (6, 4) vs golden (4, 6)"
    assert row(df, "add.1")["CompareFailReason"].startswith(f"target dump unreadable ({trunc.name}): truncated")
    assert row(df, "mul_3")["CompareFailReason"] == "no target dump"
    assert row(df, "trans_9")["CompareFailReason"] == "no golden dump"
    relu = row(df, "relu_2")
    assert relu["CompareFailReason"] == "" and relu["MaxAbsoluteError"] == pytest.approx(
        np.abs(dev["t_relu"].astype(np.float64) - gold["t_relu"]).max())
    assert diag.summary["golden"]["superseded_dumps"] == 1
    assert diag.summary["verdict"] == "WARN" and not df["Abnormal"].any()
    kinds = {f.kind for f in diag.findings}
    assert {"shape_mismatch", "target_dump_unreadable", "no_target_dump", "no_golden_dump"} <= kinds


def test_dtype_mismatch_is_a_row(tmp_path):
    x = feed()
    gold = golden_values(x)
    g = write_onnx_golden(tmp_path / "golden", gold)
    dev = {k: v.astype(np.float16) for k, v in gold.items()}
    dev["y"] = np.zeros((4, 6), np.int32)
    t = write_device(tmp_path / "device", dev)
    df = compare_dumps(side(g, "golden"), side(t, "target")).table
    assert row(df, "sm_4")["CompareFailReason"].startswith("dtype class mismatch")


@pytest.mark.parametrize("spoil", ["all_misshaped", "disjoint_names"])
def test_nothing_compared_fails_the_verdict(tmp_path, spoil):
    """Kind: a verdict resting on nothing. Whether every pair is mis-shaped or the two sides share no name,
    zero compared tensors is FAIL, never PASS/WARN with exit 0."""
    x = feed()
    gold = golden_values(x)
    g = write_onnx_golden(tmp_path / "golden", gold)
    if spoil == "all_misshaped":
        t = write_device(tmp_path / "device", {k: np.zeros(np.asarray(v).size + 1, np.float16)
                                               for k, v in gold.items()})
    else:
        t = tmp_path / "device"
        t.mkdir()
        for i, (name, op, tensor) in enumerate(NODES):
            np.save(t / device_name(i, f"other_{name}", op), np.asarray(gold[tensor]).astype(np.float16))
    diag = compare_dumps(side(g, "golden"), side(t, "target"))
    assert not (diag.table["CompareFailReason"] == "").any()
    assert diag.summary["verdict"] == "FAIL"
    assert "no tensor could be compared" in diag.summary["reasons"][0]


# ------------------------------------------------------------------------------------------ bad inputs
def test_bad_inputs_are_one_line_errors(tmp_path):
    x = feed()
    g = write_onnx_golden(tmp_path / "golden", golden_values(x))
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk").mkdir()
    np.save(tmp_path / "junk" / "weights.npy", np.zeros(2))
    (tmp_path / "inputs_only").mkdir()
    np.save(tmp_path / "inputs_only" / f"Relu.relu_2.4.1.{T0}.input.0.npy", np.zeros(2, np.float16))
    (tmp_path / "bad.json").write_text('{"a": [')
    (tmp_path / "list.json").write_text('["a", "b"]')
    (tmp_path / "values.json").write_text('{"op": "a"}')
    (tmp_path / "twice.json").write_text('{"op1": ["a"], "op2": ["a"]}')
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    cases = [
        (dict(target=tmp_path / "nope"), "does not exist"),
        (dict(target=tmp_path / "empty"), "empty folder"),
        (dict(target=tmp_path / "junk"), "no dump recognised"),
        (dict(target=tmp_path / "inputs_only"), "only device input dumps"),
        (dict(mapping=tmp_path / "bad.json"), "not valid JSON"),
        (dict(mapping=tmp_path / "list.json"), "holds a JSON list"),
        (dict(mapping=tmp_path / "values.json"), "non-empty list"),
        (dict(mapping=tmp_path / "twice.json"), "listed under both"),
        (dict(mapping=tmp_path / "nope.json"), "does not exist"),
        (dict(model=tmp_path / "bad.onnx"), "bad.onnx"),
    ]
    for kw, expected in cases:
        target = kw.pop("target", g)
        kw = {k: str(v) for k, v in kw.items()}
        with pytest.raises(UserError) as info:
            compare_dumps(side(g, "golden"), side(target, "target"), **kw)
        msg = str(info.value)
        assert expected in msg and "\n" not in msg, (kw, msg)


def test_mixed_keys_without_model_ask_for_the_model(tmp_path):
    x = feed()
    g = write_onnx_golden(tmp_path / "golden", golden_values(x))
    d = tmp_path / "ours"
    d.mkdir()
    np.save(d / "t_mm.npy", golden_values(x)["t_mm"])
    (d / "index.json").write_text(json.dumps({"t_mm.npy": {"tensor": "t_mm", "kernel": "mm/0"}}))
    with pytest.raises(UsageError, match="pass --model"):
        compare_dumps(side(g, "golden"), side(d, "target"))
    df = compare_dumps(side(g, "golden"), side(d, "target"), model=str(build_model(tmp_path / "m.onnx"))).table
    assert row(df, "mm/0")["CompareFailReason"] == "" and row(df, "mm/0")["MaxAbsoluteError"] == 0.0
    assert row(df, "add.1")["CompareFailReason"] == "no target dump"


def test_polygraphy_json_without_polygraphy_is_refused(tmp_path, monkeypatch):
    (tmp_path / "out.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "polygraphy.comparator", None)  # import fails as if not installed
    with pytest.raises(UserError, match=r"needs polygraphy: pip install 'npuscope\[dumps\]'"):
        compare_dumps(side(tmp_path / "out.json", "golden"), side(tmp_path / "out.json", "target"))


@pytest.mark.parametrize("content", [b"", b"   \n", b"\x93NUMPY\x01\x00", b"hello"])
def test_a_file_that_is_not_json_is_named_as_such(tmp_path, content):
    """Kind: a file given where a dump folder or a RunResults JSON is expected, that is neither. The error says
    what the file is, not that polygraphy is needed to read it."""
    (tmp_path / "afile").write_bytes(content)
    g = write_onnx_golden(tmp_path / "golden", golden_values(feed()))
    with pytest.raises(InputError, match=r"is (an empty file|not JSON); give a folder of \.npy dumps"):
        compare_dumps(side(g, "golden"), side(tmp_path / "afile", "target"))


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


def test_cli_bad_folder_is_one_line_exit_1(tmp_path):
    proc = npuscope("compare-dumps", "missing", "also_missing", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "GOLDEN 'missing' does not exist" in proc.stderr and not any(tmp_path.iterdir())


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
