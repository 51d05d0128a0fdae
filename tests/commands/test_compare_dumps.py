"""The compare-dumps command (toolkit/commands/compare_dumps.py), in process: dumps written here in each naming
convention, a planted divergence, a fusion mapping, missing / mis-shaped / truncated dumps, advice for
unreadable dumps, golden non-finite outputs, and the same user lines as compare.

The golden values are computed with numpy in this file; the target values are their FP16 rounding with one
planted fault (a channel scaled by 1.5 at 'relu_2') propagated downstream in numpy. Metric values are checked
against numpy formulas applied to the same arrays."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T

from tests.faultkinds import builders as fk
from toolkit.compare.metrics import noise_covers, parse_thresholds, resolve_thresholds
from toolkit.commands.compare_dumps import compare_dumps
from toolkit.dumps.readers import SideSpec
from toolkit.core.errors import InputError, UsageError, UserError
from tests.dumps.builders import T0, PLANT, NODES, weights, feed, build_model, softmax, golden_values, target_values, write_onnx_golden, device_name, write_device, save_checked_model, vi, ort_run, dump_model, dump_sides


def side(path, role, **kw) -> SideSpec:
    return SideSpec(str(path), role, **kw)


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


# ------------------------------------------------------------------------------------ onnx golden vs device
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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
    assert row(df, "relu_2")["NPUDump"] == "relu_2" and row(df, "relu_2")["DataType"] == "float16"
    assert row(df, "relu_2")["GroundTruth"] == "relu_2" and row(df, "relu_2")["GroundTruthDataType"] == "float32"
    assert diag.summary["target"]["input_dumps_skipped"] == len(NODES)
    assert diag.summary["verdict"] == "FAIL"
    if with_model:
        assert row(df, "mm/0")["TensorName"] == "t_mm"
        assert diag.summary["reasons"][0].startswith("output 'y' is abnormal")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("overflow", [False, True])
@pytest.mark.parametrize("mapped_op", ["add_relu_fused", "no_such_op"])
def test_mapping_with_model_and_an_abnormal_tensor_gives_a_verdict(tmp_path, mapped_op, overflow):
    """--model with --mapping: the advisor reads the plan the dumps imply (every kernel field it needs), also
    when the mapping names an op the target never dumped, and on the FP16-overflow path."""
    x = feed()
    gold, dev = golden_values(x), target_values(x)
    if overflow:
        dev["t_relu"][0, 2] = np.inf
    g = write_onnx_golden(tmp_path / "golden", gold)
    fused = mapped_op == "add_relu_fused"
    t = write_device(tmp_path / "device", dev, skip={"add.1", "relu_2"} if fused else ())
    if fused:
        np.save(t / f"FusedAddRelu.add_relu_fused.9.1.{T0 + 115}.output.0.npy", dev["t_relu"])
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({mapped_op: ["add.1", "relu_2"]}))
    diag = compare_dumps(side(g, "golden"), side(t, "target"), mapping=str(mapping),
                         model=str(build_model(tmp_path / "m.onnx")))
    df = diag.table
    assert diag.summary["verdict"] == "FAIL"  # the output y is abnormal: the planted fault propagates
    assert diag.summary["first_divergence"]["node"] == "relu_2"
    assert diag.summary["first_divergence"]["kind"] == ("fp16_overflow" if overflow else "abnormal")
    r = row(df, "relu_2")
    assert r["Kernel"] == ("add_relu_fused" if fused else "relu_2")
    finite = np.isfinite(dev["t_relu"])
    assert r["CosineSimilarity"] == pytest.approx(cosine(dev["t_relu"][finite], gold["t_relu"][finite]), abs=1e-9)
    assert row(df, "sm_4")["Abnormal"] and row(df, "sm_4")["Role"] == "propagated"


def _chain_sides(tmp_path, seed: int):
    """(model path, {tensor: reference value computed with numpy}, empty golden folder, empty target folder) of
    dump_model's mm (t) -> relu (u) -> mul (y) on a random x."""
    model = dump_model(tmp_path / "m.onnx")
    x = np.random.default_rng(seed).standard_normal((4, 8)).astype(np.float32)
    w = numpy_helper.to_array(onnx.load(model).graph.initializer[0])
    vals = {"t": x @ w}
    vals["u"] = np.maximum(vals["t"], 0)
    vals["y"] = vals["u"] * 2
    g, t = tmp_path / "golden", tmp_path / "target"
    g.mkdir()
    t.mkdir()
    return model, vals, g, t


def test_tensors_inside_a_dump_folders_kernel_are_fused_not_missing(tmp_path):
    """An ``npuscope run --dump`` folder records the kernel that wrote each tensor (its anchor node): with
    --model, the nodes between that node and the tensor's producer ran inside the kernel, so their undumped
    outputs read "fused into <kernel>" and do not make the verdict WARN."""
    model, vals, g, t = _chain_sides(tmp_path, 2)
    for i, (node, tensor) in enumerate((("mm", "t"), ("relu", "u"), ("mul", "y"))):
        np.save(g / f"{node}.0.{T0 + i}.npy", vals[tensor])
    index = {"u.npy": {"tensor": "u", "kernel": "mm"}, "y.npy": {"tensor": "y", "kernel": "mul"}}
    for f, info in index.items():
        np.save(t / f, vals[info["tensor"]].astype(np.float16))
    (t / "index.json").write_text(json.dumps(index))
    diag = compare_dumps(side(g, "golden"), side(t, "target"), model=str(model))
    df = diag.table
    assert row(df, "mm")["CompareFailReason"] == "fused into mm"
    assert row(df, "relu")["Kernel"] == "mm" and row(df, "relu")["FusedNodes"] == "mm;relu"
    assert row(df, "relu")["CosineSimilarity"] == pytest.approx(
        cosine(vals["u"].astype(np.float16), vals["u"]), abs=1e-9)
    assert diag.summary["verdict"] == "PASS", diag.summary["reasons"]


@pytest.mark.parametrize("golden_kernel", ["mm", "relu"])
def test_tensors_inside_a_golden_dump_folders_kernel_are_fused_not_missing(tmp_path, golden_kernel):
    """The same on the golden side: an ``npuscope run --dump`` folder of a force_fp32 run as GOLDEN, device dumps of
    every node as TARGET. The golden kernel's inner tensors, which only the target dumped, read "fused into
    <kernel> in the golden run" and do not make the verdict WARN; the tensors both sides have are compared."""
    model, vals, g, t = _chain_sides(tmp_path, 3)
    # kernel 'mm' computes t and u (u dumped); kernel 'relu' names a node after the producer of t: no group
    index = {"u.npy": {"tensor": "u", "kernel": golden_kernel}, "y.npy": {"tensor": "y", "kernel": "mul"}}
    for f, info in index.items():
        np.save(g / f, vals[info["tensor"]])
    (g / "index.json").write_text(json.dumps(index))
    for i, (node, tensor) in enumerate((("mm", "t"), ("relu", "u"), ("mul", "y"))):
        np.save(t / f"{node}.0.{T0 + i}.npy", vals[tensor].astype(np.float16))
    diag = compare_dumps(side(g, "golden"), side(t, "target"), model=str(model))
    df = diag.table
    if golden_kernel == "mm":
        assert row(df, "mm")["CompareFailReason"] == "fused into mm in the golden run"
        assert diag.summary["verdict"] == "PASS", diag.summary["reasons"]
    else:  # 'relu' did not compute t: its absence is a real gap
        assert row(df, "mm")["CompareFailReason"] == "no golden dump"
    assert row(df, "relu")["CosineSimilarity"] == pytest.approx(
        cosine(vals["u"].astype(np.float16), vals["u"]), abs=1e-9)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dtype_mismatch_is_a_row(tmp_path):
    x = feed()
    gold = golden_values(x)
    g = write_onnx_golden(tmp_path / "golden", gold)
    dev = {k: v.astype(np.float16) for k, v in gold.items()}
    dev["y"] = np.zeros((4, 6), np.int32)
    t = write_device(tmp_path / "device", dev)
    df = compare_dumps(side(g, "golden"), side(t, "target")).table
    assert row(df, "sm_4")["CompareFailReason"].startswith("dtype class mismatch")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nothing_compared_fails_the_verdict(tmp_path):
    """Kind: a verdict resting on nothing. When every pair is mis-shaped, zero compared tensors is FAIL, never
    PASS/WARN with exit 0."""
    x = feed()
    gold = golden_values(x)
    g = write_onnx_golden(tmp_path / "golden", gold)
    t = write_device(tmp_path / "device", {k: np.zeros(np.asarray(v).size + 1, np.float16) for k, v in gold.items()})
    diag = compare_dumps(side(g, "golden"), side(t, "target"))
    assert not (diag.table["CompareFailReason"] == "").any()
    assert diag.summary["verdict"] == "FAIL"
    assert "no tensor could be compared" in diag.summary["reasons"][0]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("spoil", ["disjoint_names", "another_model"])
def test_sides_that_do_not_pair_are_a_one_line_input_error(tmp_path, spoil):
    """Kind: dumps that do not belong together. Golden and target folders sharing no name, or dumps of another
    model than --model, pair no row: nothing is compared, so it is an input error naming both folders (exit 2),
    not a FAIL verdict about the model."""
    x = feed()
    gold = golden_values(x)
    g = write_onnx_golden(tmp_path / "golden", gold)
    model = None
    if spoil == "disjoint_names":
        t = tmp_path / "device"
        t.mkdir()
        for i, (name, op, tensor) in enumerate(NODES):
            np.save(t / device_name(i, f"other_{name}", op), np.asarray(gold[tensor]).astype(np.float16))
    else:
        t = write_device(tmp_path / "device", {k: np.asarray(v).astype(np.float16) for k, v in gold.items()})
        other = helper.make_graph([helper.make_node("Relu", ["a"], ["b"], name="unrelated")], "other",
                                  [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
                                  [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
        model = str(tmp_path / "other.onnx")
        onnx.save(helper.make_model(other, opset_imports=[helper.make_opsetid("", 17)]), model)
    with pytest.raises(InputError) as err:
        compare_dumps(side(g, "golden"), side(t, "target"), model=model)
    msg = str(err.value)
    assert "nothing to compare" in msg and str(g) in msg and str(t) in msg and "\n" not in msg
    assert ("--model" in msg) == (model is not None)


# ------------------------------------------------------------------------------------------ bad inputs
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_polygraphy_json_without_polygraphy_is_refused(tmp_path, monkeypatch):
    """A file shaped like Polygraphy's RunResults (the top-level "lst" and class key its encoder writes) needs
    polygraphy; any other JSON is refused for what it is (tests/dumps/test_readers.py)."""
    (tmp_path / "out.json").write_text('{"lst": [["onnxrt-runner", []]], "polygraphy_class": "RunResults"}')
    monkeypatch.setitem(sys.modules, "polygraphy.comparator", None)  # import fails as if not installed
    with pytest.raises(UserError, match=r"needs polygraphy: pip install 'npuscope\[dumps\]'"):
        compare_dumps(side(tmp_path / "out.json", "golden"), side(tmp_path / "out.json", "target"))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("content", [b"", b"   \n", b"\x93NUMPY\x01\x00", b"hello"])
def test_a_file_that_is_not_json_is_named_as_such(tmp_path, content):
    """Kind: a file given where a dump folder or a RunResults JSON is expected, that is neither. The error says
    what the file is, not that polygraphy is needed to read it."""
    (tmp_path / "afile").write_bytes(content)
    g = write_onnx_golden(tmp_path / "golden", golden_values(feed()))
    with pytest.raises(InputError, match=r"is (an empty file|not JSON); give a folder of \.npy dumps"):
        compare_dumps(side(g, "golden"), side(tmp_path / "afile", "target"))


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


ADVICE_WORDS = {"pickled": "pickled", "truncated": "truncated", "garbage": "not .npy arrays"}


@pytest.mark.parametrize("side", ["golden", "target"])
@pytest.mark.parametrize("how", ["pickled", "truncated", "garbage"])
def test_compare_dumps_advice_matches_the_unreadable_reason(tmp_path, side, how):
    from toolkit.commands.compare_dumps import compare_dumps
    from toolkit.dumps.readers import SideSpec

    g, t = _dump_sides(tmp_path, side, how)
    diag = compare_dumps(SideSpec(str(g), "golden"), SideSpec(str(t), "target"))
    found = [f for f in diag.findings if f.kind == f"{side}_dump_unreadable"]
    assert len(found) == 1, [f.kind for f in diag.findings]
    rec = found[0].recommendation
    assert ADVICE_WORDS[how] in rec, rec
    for other, word in ADVICE_WORDS.items():
        if other != how:
            assert word not in rec, (how, rec)


def _scale_model(low: float, high: float):
    """x[4,8] -> t = 3x (Mul 'mul') -> y = t + 1 (Add 'add'); z = |x| (Abs 'abs'). Values ``low``..``high``."""
    from tests.graphs import affine_and

    m = affine_and("Abs", name="g")
    onnx.checker.check_model(m)
    x = np.random.default_rng(7).uniform(low, high, (4, 8)).astype(np.float32)
    return m, {"x": x}


def _diagnose(tmp_path: Path, model, feeds, thresholds):
    from toolkit.config.schema import Config
    from toolkit.diagnose import diagnose, prepare

    tmp_path.mkdir(parents=True, exist_ok=True)
    mp, ip = tmp_path / "m.onnx", tmp_path / "in.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    lines = resolve_thresholds(thresholds) if thresholds else None  # as toolkit.api.diagnose_command does
    diag, extra = diagnose(prepare(str(mp), str(ip)), Config(precision_mode="force_fp16", fusion_level=0),
                           thresholds=lines)
    return diag, extra, mp


def _compare_dumps(tmp_path: Path, model_path: Path, model, feeds, extra, thresholds):
    """compare-dumps of the same device tensors against an onnxruntime golden written here."""
    from toolkit.core.artifacts import write_dumps
    from toolkit.dumps.readers import SideSpec
    from toolkit.commands.compare_dumps import compare_dumps

    gold = tmp_path / "golden"
    gold.mkdir()
    ref = fk.reference(model, feeds)
    for node in model.graph.node:
        np.save(gold / f"{node.name}.0.1700000000000000.npy", ref[node.output[0]])
    target = write_dumps({t: a for t, a in extra["device"].items() if t not in feeds}, extra["compiled"].plan,
                         tmp_path / "target")
    d = compare_dumps(SideSpec(str(gold), "golden"), SideSpec(str(target), "target"), model=str(model_path),
                      thresholds=thresholds)
    return d, ref


def _by_tensor(df: pd.DataFrame) -> dict[str, dict]:
    rows = df[df["ComparedCount"].fillna(0).astype(float) > 0]
    return {r["TensorName"]: r for r in rows.to_dict("records") if r["OpType"] != "Input"}


@pytest.mark.parametrize("lines", ["MaxAbsoluteError>1e-3,CosineSimilarity<0.99999999", "RootMeanSquareError>1",
                                   "MeanRelativeError>1e-4,RelativeEuclideanDistance>1e-5", "MaxAbsoluteError>100"])
def test_compare_and_compare_dumps_agree_on_user_lines(tmp_path, lines):
    model, feeds = _scale_model(1.0, 10000.0)
    diag, extra, mp = _diagnose(tmp_path, model, feeds, lines)
    dumps, ref = _compare_dumps(tmp_path, mp, model, feeds, extra, lines)
    a, b = _by_tensor(diag.table), _by_tensor(dumps.table)
    assert set(a) == set(b) == {"t", "y", "z"}
    user = parse_thresholds(lines)
    _assert_agree(a, b, user)
    strict_a = {n for n in a if set(a[n]["AbnormalMetrics"]) & user.explicit}
    assert strict_a == {n for n in b if set(b[n]["AbnormalMetrics"]) & user.explicit}
    assert all(a[n]["Abnormal"] and b[n]["Abnormal"] for n in strict_a)  # a crossed user line: abnormal in both
    # and the verdict follows from lines checked here, on the device values and the onnxruntime reference
    for name in ("y", "z"):
        x64, y64 = extra["device"][name].astype(np.float64).ravel(), ref[name].astype(np.float64).ravel()
        diff = np.abs(x64 - y64)
        val = {"MaxAbsoluteError": diff.max(), "RootMeanSquareError": np.sqrt(np.mean(diff ** 2)),
               "MeanRelativeError": np.mean(diff / np.abs(y64)),
               "RelativeEuclideanDistance": np.linalg.norm(x64 - y64) / np.linalg.norm(y64),
               "CosineSimilarity": np.dot(x64, y64) / (np.linalg.norm(x64) * np.linalg.norm(y64))}
        crossed = {m for m in user.explicit
                   if (val[m] < user[m] if m == "CosineSimilarity" else val[m] > user[m])}
        assert crossed <= set(a[name]["AbnormalMetrics"]), (name, crossed)
        if crossed:
            assert a[name]["Abnormal"]


def test_compare_and_compare_dumps_differ_only_where_default_lines_are_excused(tmp_path):
    model, feeds = _scale_model(5000.0, 10000.0)
    diag, extra, mp = _diagnose(tmp_path, model, feeds, None)
    dumps, _ = _compare_dumps(tmp_path, mp, model, feeds, extra, None)
    a, b = _by_tensor(diag.table), _by_tensor(dumps.table)
    assert {n for n in a if a[n]["Abnormal"] != b[n]["Abnormal"]}  # this model crosses the default RMSE line
    _assert_agree(a, b, resolve_thresholds(None))


def _assert_agree(a: dict, b: dict, lines) -> None:
    """compare (``a``) and compare-dumps (``b``) rows list the same crossed lines; their Abnormal differs only
    where compare excuses default lines within the expected noise (docs/thresholds.md)."""
    for n in a:
        assert list(a[n]["AbnormalMetrics"]) == list(b[n]["AbnormalMetrics"]), n  # the same lines, listed
        assert b[n]["Abnormal"] == bool(list(b[n]["AbnormalMetrics"])), n  # compare-dumps: no allowance
        if a[n]["Abnormal"] != b[n]["Abnormal"]:
            assert b[n]["Abnormal"] and a[n]["WithinExpectedNoise"] is True, n
            assert all(noise_covers(m, lines) for m in a[n]["AbnormalMetrics"]), (n, a[n]["AbnormalMetrics"])


def test_compare_dumps_without_model_keeps_warn_for_broken_dumps(tmp_path):
    model = dump_model(tmp_path / "m.onnx")
    gold, t = dump_sides(tmp_path, model, "truncated", "y")
    g = tmp_path / "golden_by_tensor"  # both sides keyed by tensor: no model needed
    g.mkdir()
    for node, tensor in (("mm", "t"), ("relu", "u"), ("mul", "y")):
        np.save(g / f"{tensor}.npy", np.load(next(gold.glob(f"{node}.0.*.npy"))))
    (g / "index.json").write_text(json.dumps({f"{x}.npy": {"tensor": x, "kernel": x} for x in ("t", "u", "y")}))
    diag = compare_dumps(SideSpec(str(g), "golden"), SideSpec(str(t), "target"))
    assert diag.summary["verdict"] == "WARN"  # the outputs are unknown without --model


def test_compare_dumps_golden_nonfinite_output_is_not_overflow(tmp_path):
    """The golden's own NaN/Inf mirrored in the target: golden_nonfinite + WARN, never fp16_overflow."""
    model = dump_model(tmp_path / "m.onnx")
    g, t = dump_sides(tmp_path, model, "none", "")
    y_file = next(g.glob("mul.0.*.npy"))
    y = np.load(y_file)
    y[0, 0], y[1, 1] = np.nan, np.inf
    np.save(y_file, y)
    np.save(t / "y.npy", y.astype(np.float16))
    diag = compare_dumps(SideSpec(str(g), "golden"), SideSpec(str(t), "target"), model=str(model))
    kinds = [f.kind for f in diag.findings]
    assert "fp16_overflow" not in kinds and "golden_nonfinite" in kinds
    assert diag.summary["verdict"] == "WARN"
    row = diag.table[diag.table["TensorName"] == "y"].iloc[0]
    assert (row["GoldenNaN"], row["GoldenInf"]) == (int(np.isnan(y).sum()), int(np.isinf(y).sum()))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("with_model", [False, True])
@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_a_golden_dump_holding_nan_is_never_a_silent_pass(tmp_path, with_model, poison):
    """Kind: a golden (reference) dump that holds NaN/Inf. With or without --model the verdict says so (WARN at
    least, compared where finite); without a model it had been a PASS with no word of it."""
    x = feed()
    gold = golden_values(x)
    dev = {k: np.asarray(v).astype(np.float16) for k, v in gold.items()}
    out = NODES[-1][2]  # the last node's tensor: the model's output
    gold = {k: np.array(v, copy=True) for k, v in gold.items()}
    gold[out].flat[0] = poison
    g = write_onnx_golden(tmp_path / "golden", gold)
    t = write_device(tmp_path / "device", dev)
    model = str(build_model(tmp_path / "m.onnx")) if with_model else None
    diag = compare_dumps(side(g, "golden"), side(t, "target"), model=model)
    assert diag.summary["verdict"] in ("WARN", "FAIL"), diag.summary["reasons"]
    name = out if with_model else f"{NODES[-1][0]}:0"  # without a model, rows are named node:output index
    assert any("holds NaN/Inf" in r and f"'{name}'" in r for r in diag.summary["reasons"]), diag.summary["reasons"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_swapped_sides_are_flagged_and_their_keep_advice_marked_doubtful(tmp_path):
    """FP16 device dumps given as GOLDEN, the FP32 run as TARGET: a golden_lower_precision warning and note, and
    the keep_dtype advice (which assumes TARGET is the low-precision run) says it is doubtful."""
    x = feed()
    gold, dev = golden_values(x), target_values(x)
    t = write_onnx_golden(tmp_path / "golden", gold)
    g = write_device(tmp_path / "device", dev)
    diag = compare_dumps(side(g, "golden", format="device"), side(t, "target", format="onnx"),
                         model=str(build_model(tmp_path / "m.onnx")))
    kinds = [f.kind for f in diag.findings]
    assert kinds[0] == "golden_lower_precision"
    assert diag.findings[0].evidence["rows"] == len(NODES)  # every float16 golden against a float32 target
    assert any(n.startswith("golden_lower_precision") for n in diag.summary["notes"])
    keep = [f for f in diag.findings if f.evidence.get("keep_dtype") or "(keep_dtype)" in f.recommendation]
    assert keep and all("the arguments look swapped" in f.recommendation for f in keep)
    right = compare_dumps(side(t, "golden", format="onnx"), side(g, "target", format="device"),
                          model=str(build_model(tmp_path / "m2.onnx")))
    assert "golden_lower_precision" not in [f.kind for f in right.findings]


def test_a_0d_dump_row_names_its_shape(tmp_path):
    """A scalar (0-d) tensor dumped on both sides: compared, its Shape cell reads "scalar", not empty."""
    g, t = tmp_path / "golden", tmp_path / "target"
    g.mkdir()
    t.mkdir()
    np.save(g / "s.0.1700000000000001.npy", np.array(2.5, np.float32))
    np.save(t / "Add.s.1.2.1700000000000001.output.0.npy", np.array(2.5, np.float16))
    df = compare_dumps(side(g, "golden"), side(t, "target")).table
    assert list(df["Shape"]) == ["scalar"] and df["CosineSimilarity"].iloc[0] == pytest.approx(1.0)
