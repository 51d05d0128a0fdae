"""diagnose in process (toolkit/diagnose.py): planted compile-stage faults, the verdict (outputs that cannot be
compared, error findings, lines crossed within noise), non-finite inputs, random ops, FP16-storage origins and
the noise allowance inherited downstream of FP16 data.

The planted faults are registered only inside a test (context managers that restore the registries)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T
from onnx import TensorProto as TP

from tests.dtype_models import _graph_model, _noise_row, _save
from tests.faultkinds import builders as fk
from toolkit.compare.layerwise import golden_range
from toolkit.compare.metrics import compare_tensors, parse_thresholds
from toolkit.core.records import Finding
from toolkit.config.schema import Config
from toolkit.tuning.advice import verify_advice
from toolkit.tuning.tune import lines_target
from toolkit.diagnose import _verdict, diagnose, prepare
from toolkit.engine import Session
from tests.diagnose.helpers import rows


def _model(nodes, inputs, outputs, inits=None, opset=17) -> onnx.ModelProto:
    """``inputs`` / ``outputs``: [(name, shape)] of float tensors; ``inits``: {name: array}."""
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


# ------------------------------------------------------------------ planted compile-stage faults
def scale_model() -> fk.Built:
    """x → Relu('act') → Mul(·, k=0.5) 'scale_mul' → Add(·, b) 'bias_add' → y."""
    rng = np.random.default_rng(0)
    x = fk.fp16_exact(rng.standard_normal((1, 8, 16)))
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="act"),
             helper.make_node("Mul", ["r", "k"], ["m"], name="scale_mul"),
             helper.make_node("Add", ["m", "b"], ["y"], name="bias_add")]
    model = fk._model(nodes, [fk._vi("x", (1, 8, 16))], [fk._vi("y", (1, 8, 16))],
                      [fk._c("k", 0.5), fk._c("b", np.full(16, 0.25))], "planted")
    return fk.Built(model, {"x": x}, ["scale_mul"])


@contextlib.contextmanager
def planted_rule(target: str, factor: float):
    """Register (for the with-block only) a graph-fusion rule that 'fuses' ``target`` alone and, while at
    it, multiplies its constant operand by ``factor``: a rewrite that changes the math."""
    from toolkit.compiler import rules

    rules.load_rules()

    def match(g, node):
        if node.name != target:
            return None
        cname = next(i for i in node.input if g.const(i) is not None)
        g.consts[cname] = (g.consts[cname] * np.float32(factor)).astype(np.float32)
        return rules.Match([node], "PlantedScale")

    before = list(rules.RULES)
    rule = rules.Rule("PlantedScaleFusionPass", frozenset({"Mul"}), match)
    rules.RULES.append(rule)
    try:
        yield rule
    finally:
        rules.RULES[:] = before


def _diag(tmp_path, built, stem, **cfg):
    mp, ip = built.save(tmp_path, stem)
    return diagnose(prepare(str(mp), str(ip)), Config(**cfg))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("precision_mode", ["allow_mix_precision", "force_fp16", "force_fp32"])
@pytest.mark.parametrize("plant", ["rule", "pass"])
def test_planted_compile_fault_is_reported_as_compile_stage(tmp_path, plant, precision_mode):
    b = scale_model()
    clean, _ = _diag(tmp_path, b, "clean", precision_mode=precision_mode)
    assert clean.summary["stage"] == "none" and clean.summary["first_divergence"] is None
    ctx = planted_rule("scale_mul", 1.5) if plant == "rule" else fk.planted_pass("scale_mul", 1.5)
    with ctx:
        diag, extra = _diag(tmp_path, b, "planted", precision_mode=precision_mode)
    s = diag.summary
    assert s["stage"] == "compile" and s["verdict"] == "FAIL"
    assert diag.triage["fp32_first_divergence"]["node"] == "scale_mul"
    assert diag.triage["fp32_first_divergence"]["kernel"] == "scale_mul"
    assert s["first_divergence"]["node"] == "scale_mul" and s["origin_nodes"] == ["scale_mul"]
    assert diag.findings[0].kind == "compile_stage_fault" and diag.findings[0].subject == "scale_mul"
    if plant == "rule":
        k = next(k for k in extra["compiled"].plan.kernels if "scale_mul" in k.nodes)
        assert k.rule == "PlantedScaleFusionPass"
    # the upstream node is untouched; the planted kernel's output is off by the planted factor
    t = diag.table.set_index("NodeName")
    assert not t.loc["act", "Abnormal"] and t.loc["scale_mul", "Abnormal"]
    ref_m = fk.reference(b.model, b.feeds)["m"]
    np.testing.assert_allclose(extra["device"]["m"].astype(np.float32), 1.5 * ref_m, rtol=2e-3, atol=1e-3)
    # and nothing leaks out of the with-block
    after, _ = _diag(tmp_path, b, "after", precision_mode=precision_mode)
    assert after.summary["stage"] == "none" and after.summary["first_divergence"] is None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("plant", [None, "scale_mul"])
def test_triage_screens_each_kernel_output_as_the_run_writes_it(tmp_path, plant, monkeypatch):
    """triage keeps no copy of the force_fp32 run's tensors (the run is made without dumps) and still names
    the first divergent tensor in node order, with the count of tensors compared up to it; the expected values
    come from a dumped force_fp32 run of the same plan checked with numpy against onnxruntime."""
    from toolkit.diagnose import triage
    from toolkit.engine import shapes_of
    from toolkit.runtime.npu import NpuRuntime

    b = scale_model()
    prep = prepare(*map(str, b.save(tmp_path, "m")))
    golden = {**fk.reference(b.model, b.feeds), **b.feeds}
    dumped = []
    run = NpuRuntime.run

    def spy(self, feeds, dump=False, **kw):
        dumped.append(dump)
        return run(self, feeds, dump=dump, **kw)

    with planted_rule(plant, 1.5) if plant else contextlib.nullcontext():
        sess = Session(prep.model, Config(precision_mode="force_fp32"), input_shapes=shapes_of(prep.feeds))
        dumps = sess.run(prep.feeds, dump=True).dumps
        monkeypatch.setattr(NpuRuntime, "run", spy)
        got = triage(prep, Config(), golden, None)
    assert dumped == [False]
    order = [o for n in b.model.graph.node for o in n.output]
    off = [t for t in order if not np.allclose(dumps[t].astype(np.float32), golden[t], rtol=1e-4, atol=1e-6)]
    assert bool(off) == bool(plant)
    if not off:
        assert got == {"fp32_first_divergence": None, "fp32_tensors_checked": len(order), "fp32_tight_lines": []}
        return
    first = got["fp32_first_divergence"]
    assert first["tensor"] == off[0] and first["node"] == plant and first["kind"] == "compile_stage"
    assert got["fp32_tensors_checked"] == order.index(off[0]) + 1


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_planted_rule_inside_a_fused_kernel_names_that_kernel(tmp_path):
    """The planted rewrite hits a Mul that buffer fusion puts in a Conv's epilogue: the compile-stage origin
    is that fused kernel."""
    rng = np.random.default_rng(1)
    x = fk.fp16_exact(rng.standard_normal((1, 4, 8, 8)))
    w = fk.fp16_exact(rng.standard_normal((4, 4, 1, 1)) * 0.5)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Mul", ["c", "k"], ["y"], name="scale_mul")]
    model = fk._model(nodes, [fk._vi("x", (1, 4, 8, 8))], [fk._vi("y", (1, 4, 8, 8))],
                      [fk._c("w", w), fk._c("k", 0.5)], "conv_scale")
    with fk.planted_pass("scale_mul", 2.0):
        diag, extra = _diag(tmp_path, fk.Built(model, {"x": x}, []), "m", precision_mode="force_fp32")
    k = next(k for k in extra["compiled"].plan.kernels if "scale_mul" in k.nodes)
    assert diag.summary["stage"] == "compile"
    assert diag.triage["fp32_first_divergence"]["kernel"] == k.name
    assert "scale_mul" in diag.summary["origin_nodes"]


# ------------------------------------------------------------------ a verdict must rest on compared tensors
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("poison", ["nan", "inf", "half_nan"])
def test_outputs_that_cannot_be_compared_fail_the_verdict(poison):
    """Kind: nothing vouches for an output (no position where both runs are finite). Whatever makes the
    output uncomparable — an all-NaN input, an all-Inf input, NaN in only some positions that still poison
    every output value — the verdict is FAIL naming the output, never PASS on nothing."""
    b = fk.rmsnorm(hidden=16, rows=2, seed=0)
    x = np.array(b.feeds["x"], dtype=np.float32, copy=True)
    if poison == "nan":
        x[...] = np.nan
    elif poison == "inf":
        x[...] = np.inf
    else:
        x[:, :, 0] = np.nan  # the row sums, hence every output value, become NaN
    prep = prepare(None, None)
    prep.model, prep.feeds, prep.name = b.model, {"x": x}, "rmsnorm"
    diag, _ = diagnose(prep, Config(precision_mode="force_fp32"))
    out = b.model.graph.output[0].name
    assert diag.summary["verdict"] == "FAIL"
    assert any(f"output '{out}' could not be compared" in r for r in diag.summary["reasons"])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_fully_compared_clean_run_still_passes():
    b = fk.rmsnorm(hidden=16, rows=2, seed=0)
    prep = prepare(None, None)
    prep.model, prep.feeds, prep.name = b.model, dict(b.feeds), "rmsnorm"
    diag, _ = diagnose(prep, Config(precision_mode="force_fp32"))
    assert diag.summary["verdict"] == "PASS", diag.summary["reasons"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("builder", ["softplus", "resnet_small"])
def test_nonfinite_input_is_not_blamed_on_fp16(value, builder):
    """Kind: NaN/Inf already in the input. Kernels spread them differently from the reference (inf·0 in a
    blocked convolution), which must not be reported as FP16 overflow with keep-in-FP32 advice: keeping
    anything in FP32 cannot fix the input. The nonfinite_input warning names the input instead."""
    if builder == "softplus":
        b = fk.softplus(width=16, xmax=5.0)
        model, feeds = b.model, {k: np.array(v, copy=True) for k, v in b.feeds.items()}
    else:
        from toolkit import samples
        model = onnx.load(samples.sample_path("resnet_small"))
        feeds = samples.sample("resnet_small").make_inputs(0)
    name = next(iter(feeds))
    feeds[name].reshape(-1)[3] = value
    prep = prepare(None, None)
    prep.model, prep.feeds, prep.name = model, feeds, builder
    diag, _ = diagnose(prep, Config(precision_mode="force_fp16"))
    kinds = [f.kind for f in diag.findings]
    assert "nonfinite_input" in kinds
    assert "fp16_overflow" not in kinds, [(f.kind, f.subject) for f in diag.findings]
    assert (diag.summary.get("first_divergence") or {}).get("kind") != "fp16_overflow"


def _table_row(device, golden, lines) -> dict:
    from toolkit.compare.layerwise import golden_range
    from toolkit.compare.metrics import compare_tensors

    row = {"Index": 0, "OpType": "MatMul", "NodeName": "mm", "TensorName": "y", "Kernel": "mm",
           "NPUDump": "mm", "DataType": "float32", **golden_range(golden)}
    row.update(compare_tensors(device, golden, thresholds=lines))
    return row


@pytest.mark.parametrize("lines", [None, {"CosineSimilarity": 0.99999999, "MaxAbsoluteError": 1e-3}])
def test_verdict_and_dump_reasons_print_crossed_values_beyond_their_lines(lines):
    """The verdict of diagnose/compare (with and without the lines passed) and of compare-dumps: a cosine of
    1 - 5e-8 crossing 0.99999999 and a max error just above 1e-3, both computed here with numpy."""
    from toolkit.diagnose import _verdict
    from toolkit.commands.compare_dumps import judge

    golden = np.linspace(1.0, 2.0, 64)
    device = golden.copy()
    device[::2] += 7.5e-4  # tiny relative errors: cosine 1 - O(1e-8)
    device[5] += 1.0000001e-3
    g, d = golden.astype(np.float64), device.astype(np.float64)
    cos = float(g @ d / (np.linalg.norm(g) * np.linalg.norm(d)))
    mae = float(np.max(np.abs(d - g)))
    assert 0.9999995 < cos < 0.99999999 and 1e-3 < mae < 1.0000002e-3  # both would print as the line / 1
    thresholds = lines or {"CosineSimilarity": 0.99999999, "MaxAbsoluteError": 1e-3}
    df = pd.DataFrame([_table_row(device, golden, thresholds)])
    df["Role"] = ""
    verdict, reasons = _verdict(df, ["y"], [], "none", [], lines=lines)
    assert verdict == "FAIL"
    dump_verdict, dump_reasons = judge(df, ["y"])
    assert dump_verdict == "FAIL"
    for reason in (reasons[0], dump_reasons[0]):
        c = re.search(r"CosineSimilarity ([-+0-9.e]+)", reason).group(1)
        m = re.search(r"MaxAbsoluteError ([-+0-9.e]+)", reason).group(1)
        # printed beyond the line it crossed, and close to the value (nearest digits, not rounded past the line)
        assert c not in ("1", "0.99999999") and float(c) < 0.99999999 and abs(cos - float(c)) < 1e-6, reason
        assert m not in ("0.001", "1e-03") and float(m) > 1e-3 and abs(float(m) - mae) < 2e-8, reason
    if lines:
        assert "< 0.99999999" in reasons[0] and "> 0.001" in reasons[0], reasons[0]


REASON = "depends on nondeterministic op '{}' ({}): reference and NPU draw different numbers"


def vi(name, shape, elem=T.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def save(path: Path, nodes, inputs, outputs, inits=(), opset: int = 17) -> Path:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def random_add(path: Path, op: str = "RandomUniformLike", **attrs) -> Path:
    """x float32[1, 64] -> <op> 'rnd' -> r; y = Add(x, r)."""
    return save(path, [helper.make_node(op, ["x"], ["r"], name="rnd", **attrs),
                       helper.make_node("Add", ["x", "r"], ["y"], name="add")], [vi("x", [1, 64])], [vi("y", [1, 64])])


def random_conv(path: Path) -> Path:
    """r = RandomNormalLike(x) 'rnd'; c = Conv(r, W) + B; y = Relu(c) (a Conv+Relu fusion at level 2)."""
    w = np.random.RandomState(0).standard_normal((4, 2, 3, 3)).astype(np.float32)
    b = np.arange(4, dtype=np.float32)
    return save(path, [helper.make_node("RandomNormalLike", ["x"], ["r"], name="rnd"),
                       helper.make_node("Conv", ["r", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["c"], ["y"], name="relu")],
                [vi("x", [1, 2, 8, 8])], [vi("y", [1, 4, 8, 8])],
                [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])


def random_and_independent(path: Path, random_output: bool) -> Path:
    """y_det = Relu(x) * 2 (independent of the random op); z = Add(x, RandomUniformLike(x) 'rnd'), a graph
    output when ``random_output`` else feeding nothing the model returns."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["r"], name="rnd"),
             helper.make_node("Add", ["x", "r"], ["z"], name="add"),
             helper.make_node("Relu", ["x"], ["t"], name="relu"),
             helper.make_node("Mul", ["t", "two"], ["y_det"], name="mul")]
    outs = [vi("y_det", [1, 64])] + ([vi("z", [1, 64])] if random_output else [])
    return save(path, nodes, [vi("x", [1, 64])], outs, [two])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fusion", [0, 2])
def test_random_op_feeding_a_conv_taints_everything_downstream(tmp_path, fusion):
    prep = prepare(str(random_conv(tmp_path / "rconv.onnx")))
    diag, _ = diagnose(prep, Config(fusion_level=fusion))
    rows = diag.table.set_index("TensorName")
    for t in ("r", "c", "y"):
        assert rows.at[t, "CompareFailReason"] == REASON.format("rnd", "RandomNormalLike")
        assert not rows.at[t, "Abnormal"]
    assert diag.summary["stage"] != "compile"
    assert not [f for f in diag.findings if f.kind == "compile_stage_fault"]
    assert [f.subject for f in diag.findings if f.kind == "nondeterministic_op"] == ["rnd"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fusion", [0, 2])
def test_output_independent_of_a_random_op_is_still_compared(tmp_path, fusion):
    prep = prepare(str(random_and_independent(tmp_path / "mixed.onnx", random_output=True)))
    diag, extra = diagnose(prep, Config(fusion_level=fusion))
    rows = diag.table.set_index("TensorName")
    assert rows.at["y_det", "CompareFailReason"] == ""
    x = prep.feeds["x"].astype(np.float64)
    expected = np.maximum(x, 0) * 2  # computed here, independently of both runs
    dev = np.asarray(extra["npu_outputs"]["y_det"], np.float64)
    cos = float((dev * expected).sum() / (np.linalg.norm(dev) * np.linalg.norm(expected)))
    assert cos > 0.999 and rows.at["y_det", "CosineSimilarity"] == pytest.approx(cos, abs=1e-6)
    assert rows.at["z", "CompareFailReason"] == REASON.format("rnd", "RandomUniformLike")
    assert any("output 'z' could not be compared" in r for r in diag.summary["reasons"])
    assert not any("'y_det'" in r for r in diag.summary["reasons"])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_seeded_random_op_is_still_not_compared(tmp_path):
    """A seed repeats one generator's sequence; onnxruntime's and the device's generators still differ."""
    prep = prepare(str(random_add(tmp_path / "seeded.onnx", op="RandomNormalLike", seed=3.0)))
    diag, _ = diagnose(prep, Config(precision_mode="force_fp32", fusion_level=0))
    rows = diag.table.set_index("TensorName")
    assert rows.at["y", "CompareFailReason"] == REASON.format("rnd", "RandomNormalLike")
    nd = [f for f in diag.findings if f.kind == "nondeterministic_op"]
    assert len(nd) == 1 and nd[0].evidence["seed"] == 3.0
    assert diag.summary["stage"] != "compile"


def softmax_offset(rows=4, dim=64, offset=20000.0, seed=0):
    """x[rows,dim] -> MatMul 'proj' (W ~ N(0,1)*0.5) -> Add 'offset' (+offset) -> Softmax 'sm' -> p."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, dim)) * 0.5).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["logits"], name="proj"),
                helper.make_node("Add", ["logits", "off"], ["l2"], name="offset"),
                helper.make_node("Softmax", ["l2"], ["p"], name="sm", axis=-1)],
               [("x", [rows, dim])], [("p", [rows, dim])], {"W": w, "off": np.array(offset, np.float32)})
    x = fk.fp16_exact(rng.random((rows, dim), dtype=np.float32))
    return m, {"x": x}


def scale_chain(rows=4, dim=64, factor=30000.0, seed=0, relu=True):
    """x -> MatMul 'mm' -> Mul 'scale' (x factor) -> Div 'unscale' (/ factor) -> [Relu 'relu'] -> MatMul 'mm2' -> y."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, dim)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Mul", ["mm", "big"], ["scaled"], name="scale"),
             helper.make_node("Div", ["scaled", "big2"], ["unscaled"], name="unscale")]
    last = "unscaled"
    if relu:
        nodes.append(helper.make_node("Relu", ["unscaled"], ["r"], name="relu"))
        last = "r"
    nodes.append(helper.make_node("MatMul", [last, "W2"], ["y"], name="mm2"))
    m = _model(nodes, [("x", [rows, dim])], [("y", [rows, dim])],
               {"W": w, "big": np.array(factor, np.float32), "big2": np.array(factor, np.float32), "W2": w.T.copy()})
    x = fk.fp16_exact(rng.standard_normal((rows, dim)).astype(np.float32))
    return m, {"x": x}


def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def run_diag(tmp_path, model, feeds, stem="m", **cfg):
    tmp_path.mkdir(parents=True, exist_ok=True)
    mp, ip = tmp_path / f"{stem}.onnx", tmp_path / f"{stem}.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    return diagnose(prepare(str(mp), str(ip)), Config(**cfg))


def check_metrics_consistent(table):
    """Abnormal => AbnormalMetrics non-empty; never Abnormal within the expected noise (the default lines it
    crossed stay listed); otherwise a listed line makes the tensor abnormal."""
    for _, r in table.iterrows():
        listed = list(r["AbnormalMetrics"]) if isinstance(r["AbnormalMetrics"], (list, tuple)) else []
        assert not r["Abnormal"] or listed, r["TensorName"]
        if r["WithinExpectedNoise"] is True:
            assert not r["Abnormal"], r["TensorName"]
        elif listed:
            assert r["Abnormal"], (r["TensorName"], listed)


STORAGE_CASES = [(4, 64, 20000.0, 2), (4, 64, 20000.0, 0), (8, 32, 30000.0, 2), (2, 128, -25000.0, 0)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("rows_, dim, offset, level", STORAGE_CASES)
def test_fp16_storage_that_destroys_an_fp32_softmax_is_the_origin(tmp_path, rows_, dim, offset, level):
    model, feeds = softmax_offset(rows_, dim, offset)
    ref = fk.reference(model, feeds)
    # precondition, independently: Softmax is exact on the reference logits and destroyed by their FP16 rounding
    assert cosine(softmax(ref["l2"].astype(np.float64)), ref["p"]) > 0.999999
    stored = ref["l2"].astype(np.float16).astype(np.float32)
    assert cosine(softmax(stored.astype(np.float64)), ref["p"]) < 0.99

    diag, extra = run_diag(tmp_path, model, feeds, fusion_level=level)
    plan = extra["compiled"].plan
    kernels = {k.name: k for k in plan.kernels}
    producer = plan.kernel_of_tensor()["l2"]
    assert producer.precision == "fp16" and kernels["sm"].precision == "fp32"
    assert diag.summary["verdict"] == "FAIL"
    first = diag.summary["first_divergence"]
    assert first["node"] == "offset" and first["kernel"] == producer.name and first["precision"] == "fp16"
    t = rows(diag)
    # (a) the FP32 Softmax re-run on the exact reference logits is exact: not locally abnormal
    assert t.loc["p", "LocalAbnormal"] is False and t.loc["p", "Role"] == "propagated"
    assert t.loc["p", "LocalCosineSimilarity"] == pytest.approx(cosine(softmax(ref["l2"].astype(np.float64)),
                                                                        ref["p"]), abs=1e-6)
    assert t.loc["l2", "Role"] == "origin" and t.loc["l2", "Abnormal"] and t.loc["l2", "WithinExpectedNoise"] is False
    # (c) AbnormalMetrics agrees with Abnormal on every row
    check_metrics_consistent(diag.table)
    # (b) no keep_dtype advice for the FP32 Softmax; the finding names the FP16 producer
    origin = next(f for f in diag.findings if f.kind == "first_divergence")
    assert origin.subject == "offset" and "keep 'sm'" not in origin.recommendation
    assert all("keep 'sm'" not in f.recommendation for f in diag.findings)
    assert origin.evidence["storage_rounding"]["consumer_node"] == "sm"
    # applying the advice (keep the producer kernel's nodes in FP32) makes the model pass
    keep = list(producer.nodes)
    fixed, fextra = run_diag(tmp_path / "fixed", model, feeds, fusion_level=level, keep_dtype=keep)
    assert fixed.summary["verdict"] == "PASS", fixed.summary["reasons"]
    assert cosine(fextra["npu_outputs"]["p"], ref["p"]) > 0.9999


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_keep_dtype_on_the_fp32_softmax_changes_nothing_and_is_not_advised(tmp_path):
    """The tester's loop: keep_dtype ['sm'] leaves the plan's result as it was; the advice is elsewhere."""
    model, feeds = softmax_offset()
    before, _ = run_diag(tmp_path / "a", model, feeds, fusion_level=0)
    after, extra = run_diag(tmp_path / "b", model, feeds, fusion_level=0, keep_dtype=["sm"])
    ref = fk.reference(model, feeds)
    assert cosine(extra["npu_outputs"]["p"], ref["p"]) < 0.99
    for d in (before, after):
        assert d.summary["first_divergence"]["node"] == "offset"
        assert all("keep 'sm'" not in f.recommendation for f in d.findings)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("cfg", [{"precision_mode": "force_fp32", "fusion_level": 0},
                                 {"precision_mode": "force_fp32"},  # fused: mm+scale+unscale+relu
                                 {"fusion_level": 0, "keep_dtype": ["unscale"]}])
def test_fp32_origin_wrong_on_exact_inputs_gets_no_keep_dtype_advice(tmp_path, cfg):
    model, feeds = scale_chain(factor=8.0)
    with fk.planted_pass("unscale", 1.5):
        diag, extra = run_diag(tmp_path, model, feeds, **cfg)
    first = diag.summary["first_divergence"]
    k = {k.name: k for k in extra["compiled"].plan.kernels}[first["kernel"]]
    assert k.precision == "fp32" and "unscale" in k.nodes
    t = rows(diag)
    assert t.loc[first["tensor"], "Role"] == "origin" and t.loc[first["tensor"], "LocalAbnormal"] is True
    origin = next(f for f in diag.findings if f.kind == "first_divergence")
    assert "keep_dtype cannot change it" in origin.recommendation
    assert "in FP32 (keep_dtype)" not in origin.recommendation  # neither the kernel nor its producer
    if k.rule:
        assert f"switch its fusion {k.rule} off" in origin.recommendation


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("rows_, dim, factor, relu", [(4, 64, 30000.0, True), (8, 32, 40000.0, False),
                                                      (2, 128, 50000.0, True)])
def test_fp32_kernel_downstream_of_fp16_inherits_the_noise_allowance(tmp_path, rows_, dim, factor, relu):
    model, feeds = scale_chain(rows_, dim, factor, relu=relu)
    ref = fk.reference(model, feeds)
    assert np.abs(ref["scaled"]).max() > 65504  # kept in FP32 because FP16 would overflow
    diag, extra = run_diag(tmp_path, model, feeds, fusion_level=0, keep_dtype=["scale"])
    kernels = extra["compiled"].plan.kernel_of_tensor()
    assert kernels["mm"].precision == "fp16" and kernels["scaled"].precision == "fp32"
    dev = extra["device"]
    mm_err = np.abs(dev["mm"].astype(np.float64) - ref["mm"])
    sc_err = np.abs(dev["scaled"].astype(np.float64) - ref["scaled"])
    # independently: 'scaled' carries exactly the FP16 error of 'mm', times the factor; an absolute line
    # (RMSE > 1) is crossed only because the values are large
    np.testing.assert_allclose(sc_err, mm_err * factor, rtol=1e-3, atol=factor * 1e-6)
    assert np.sqrt(np.mean(sc_err ** 2)) > 1.0
    assert diag.summary["verdict"] == "PASS", diag.summary["reasons"]
    t = rows(diag)
    assert t.loc["scaled", "WithinExpectedNoise"] is True and not t.loc["scaled", "Abnormal"]
    check_metrics_consistent(diag.table)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fault", [1.01, 1.1])
def test_genuine_faults_downstream_of_fp16_data_still_flag(tmp_path, fault):
    model, feeds = scale_chain(factor=30000.0)
    ref = fk.reference(model, feeds)
    # a planted error in the FP32 'unscale': beyond the inherited allowance (relative 4e-3 of the FP16 MatMul)
    with fk.planted_pass("unscale", fault):
        diag, extra = run_diag(tmp_path / "planted", model, feeds, fusion_level=0, keep_dtype=["scale"])
    dev = extra["device"]["unscaled"].astype(np.float64)
    rel = np.abs(dev - ref["unscaled"]) / np.maximum(np.abs(ref["unscaled"]), 1e-3)
    assert np.median(rel) > 0.9 * (fault - 1)  # the fault is there
    t = rows(diag)
    assert t.loc["unscaled", "WithinExpectedNoise"] is False
    red = np.linalg.norm(dev - ref["unscaled"]) / np.linalg.norm(ref["unscaled"])
    if red > 0.05:  # crosses the RelativeEuclideanDistance line: abnormal, whatever the noise
        assert t.loc["unscaled", "Abnormal"] and diag.summary["verdict"] != "PASS"
    else:
        assert fault == 1.01


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_softmax_destroyed_by_fp16_storage_keeps_its_output_abnormal(tmp_path):
    """No inherited allowance hides the Softmax destroyed by its FP16-stored input: the output still fails."""
    model, feeds = softmax_offset(4, 64, 20000.0)
    diag, _ = run_diag(tmp_path, model, feeds, fusion_level=0)
    t = rows(diag)
    assert t.loc["p", "Abnormal"] and t.loc["p", "WithinExpectedNoise"] is False
    assert diag.summary["verdict"] == "FAIL"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_verdict_names_default_lines_crossed_within_noise():
    from toolkit.compare.metrics import resolve_thresholds
    from toolkit.diagnose import _verdict

    df = pd.DataFrame([_noise_row("a", True, ["RootMeanSquareError"]), _noise_row("b", True, []),
                       _noise_row("y", True, ["RootMeanSquareError", "RelativeEuclideanDistance"]),
                       _noise_row("c", None, [])])
    verdict, reasons = _verdict(df, ["y"], [], "none", [], lines=resolve_thresholds(None))
    assert verdict == "PASS"
    assert ("2 tensor(s) cross a default line within the expected FP16/FP32 rounding noise (listed in "
            "AbnormalMetrics)") in reasons
    assert not any("every compared tensor within the abnormal lines" in r for r in reasons)
    # a line the user set is no default: not counted (such a row is abnormal: compare_tensors)
    user = parse_thresholds("RootMeanSquareError>1")
    df2 = pd.DataFrame([_noise_row("a", True, ["RootMeanSquareError"], abnormal=True), _noise_row("y", True, [])])
    verdict, reasons = _verdict(df2, ["y"], [], "none", [], lines=user)
    assert verdict == "WARN" and not any("rounding noise" in r for r in reasons)
    clean = pd.DataFrame([_noise_row("y", True, [])])
    assert _verdict(clean, ["y"], [], "none", [])[1] == [
        "every compared tensor within the abnormal lines; outputs and task checks hold"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
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
    assert any(r.startswith("1 tensor(s) cross a default line within the expected FP16/FP32 rounding noise")
               for r in diag.summary["reasons"]), diag.summary["reasons"]


def _row(tensor: str, device, golden, npu_dump: str) -> dict:
    row = {"Index": 0, "OpType": "Relu", "NodeName": tensor, "TensorName": tensor, "Kernel": "k",
           "NPUDump": "k", "DataType": npu_dump, **golden_range(golden)}
    row.update(compare_tensors(device, golden))
    return row


def test_no_pass_beside_an_error_finding():
    """Kind: every error-severity finding keeps the verdict from PASS (here one the table cannot show)."""
    g = np.linspace(-1, 1, 8).astype(np.float32)
    df = pd.DataFrame([_row("y", g.astype(np.float16), g, "float16")])
    df["Role"] = ""
    assert _verdict(df, ["y"], [], "none", [])[0] == "PASS"
    for severity, want in (("info", "PASS"), ("warning", "PASS"), ("error", "WARN")):
        f = Finding(severity, "fp16_range_overflow", "n", {}, "keep n in FP32")
        verdict, reasons = _verdict(df, ["y"], [], "none", [f])
        assert verdict == want, (severity, reasons)
    assert any("fp16_range_overflow at 'n'" in r for r in reasons)


def make(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def issue_model():
    """The issue's model: x[4,64] f16 -> MatMul 'mm' (W f16) -> Softmax 'sm' -> ReduceSum 'rs' -> y[4,1] f16."""
    w = (np.random.default_rng(0).standard_normal((64, 64)) * 0.3).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Softmax", ["m"], ["s"], name="sm", axis=-1),
             helper.make_node("ReduceSum", ["s", "axes"], ["y"], name="rs", keepdims=1)]
    return make(nodes, [("x", TP.FLOAT16, [4, 64])], [("y", TP.FLOAT16, [4, 1])],
                {"W": w, "axes": np.array([1], np.int64)}), w


def session(model, mode, **cfg):
    return Session(model, Config(precision_mode=mode, op_select_implmode="high_precision", **cfg))


def test_precision_frame_counts_fp16_origin_kernels():
    from toolkit.diagnose import _precision_frame

    model = issue_model()[0]
    frame = _precision_frame(session(model, "must_keep_origin_dtype").plan, model).set_index("OpType")
    assert frame.loc[["MatMul", "Softmax", "ReduceSum"], "FP16"].tolist() == [1, 1, 1]
    assert frame.loc[["MatMul", "Softmax", "ReduceSum"], "FP32"].tolist() == [0, 0, 0]


@pytest.mark.parametrize("verdict,reasons", [
    ("WARN", ["7 intermediate tensor(s) abnormal; outputs and task checks hold"]),
    ("WARN", ["2 constant(s) change in FP16"]),
    ("PASS", ["no tensor abnormal; outputs and task checks hold"]),
    ("FAIL", ["output 'y' is abnormal (CosineSimilarity 0.5 < 0.99)"])])
def test_the_ship_sentence_says_each_thing_once(verdict, reasons):
    from toolkit.diagnose import ship_sentence

    s = ship_sentence(verdict, reasons)
    assert s.count("hold") <= 1 and s.endswith(".") and s.startswith(("Can ship", "Cannot ship"))
    assert (verdict == "FAIL") == s.startswith("Cannot ship")
    if verdict != "PASS":
        assert reasons[0].removesuffix("; outputs and task checks hold") in s


@pytest.mark.parametrize("atol", [["--atol", "1", "--atol", "y:1e-9"], ["--atol", "y:1e-3"]])
def test_a_fail_reason_prints_the_line_of_the_tensor_that_crossed_it(atol):
    """Kind: per-tensor lines (``--atol y:...`` beside a global one, or alone). The reason prints the line the
    output crossed, its own, not the global one (it printed "0.0167 > 1") nor none."""
    from toolkit.compare.metrics import resolve_thresholds, with_shorthands
    from toolkit.diagnose import _verdict

    golden = np.linspace(1.0, 2.0, 64)
    device = golden.copy()
    device[7] += 0.016695
    pairs = list(zip(atol[0::2], atol[1::2]))
    lines = resolve_thresholds(with_shorthands(None, [v for _, v in pairs], []))
    df = pd.DataFrame([_table_row(device, golden, lines.for_tensor("y") if hasattr(lines, "for_tensor") else lines)])
    df["Role"] = ""
    verdict, reasons = _verdict(df, ["y"], [], "none", [], lines=lines)
    own = 1e-9 if len(pairs) == 2 else 1e-3
    assert verdict == "FAIL"
    m = re.search(r"MaxAbsoluteError ([-+0-9.e]+) > ([-+0-9.e]+)", reasons[0])
    assert m, reasons[0]
    assert float(m.group(2)) == own and float(m.group(1)) > own, reasons[0]


def _overflow_chain(tmp_path, k: int = 64):
    """x (5s) -> MatMul 'mm' (W 300s: |big| = 96000 > 65504 in FP16) -> Mul 'scale_down' (1e-3) -> Relu 'act'
    -> y. Computed with numpy here: the reference stays finite, FP16 storage of 'big' overflows."""
    from onnx import TensorProto, helper, numpy_helper

    x = np.full((1, k), 5.0, np.float32)
    w = np.full((k, 4), 300.0, np.float32)
    assert float(np.abs(x @ w).max()) > 65504 and np.isfinite(x @ w * 1e-3).all()
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["big"], name="mm"),
                           helper.make_node("Mul", ["big", "s"], ["small"], name="scale_down"),
                           helper.make_node("Relu", ["small"], ["y"], name="act")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(1e-3), "s")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    np.savez(tmp_path / "x.npz", x=x)
    return str(path), str(tmp_path / "x.npz")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("subset,origin_inside", [
    ({"outputs_only": True}, False), ({"nodes": "act"}, False), ({"nodes": "scale_down,act"}, False),
    ({"until": "act"}, True), ({"nodes": "mm,scale_down,act"}, True), ({}, True)])
def test_a_subset_names_no_origin_whose_inputs_it_did_not_compare(tmp_path, subset, origin_inside):
    """Kind: a subset leaving out what the first abnormal node inside it reads. The error may start before
    it, so no origin finding nor keep advice names that node: an origin_outside_subset warning says so and
    names the tensors left out. When the subset compares the origin's inputs, the origin finding stays."""
    from toolkit.compare.subset import Subset
    from toolkit.config.schema import Config

    path, inputs = _overflow_chain(tmp_path)
    diag, _ = diagnose(prepare(path, inputs), Config(precision_mode="force_fp16", fusion_level=0),
                       subset=Subset(**subset) if subset else None)
    kinds = {(f.kind, f.subject) for f in diag.findings}
    outside = [f for f in diag.findings if f.kind == "origin_outside_subset"]
    origins = [f for f in diag.findings if f.kind in ("first_divergence", "fp16_overflow", "divergence_origin")]
    assert diag.summary["verdict"] == "FAIL"
    if origin_inside:
        assert not outside and origins and all(f.subject == "mm" for f in origins), kinds
    else:
        assert outside and not origins, kinds
        assert all("big" in f.evidence["reads_uncompared"] or "small" in f.evidence["reads_uncompared"]
                   for f in outside)
        assert "keep_dtype fix" in outside[0].recommendation and "keep '" not in outside[0].recommendation
        assert diag.summary["first_divergence"]["basis"] == "subset"


def _empty_model(tmp_path, rows: int, slice_to_empty: bool):
    """y = Relu(x · 3) on x (rows, 4); ``slice_to_empty``: the output is then sliced to 0 rows (a detector that
    found nothing: its intermediates hold data, its output none)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 4])
    inits = [numpy_helper.from_array(np.float32(3.0), "three"), numpy_helper.from_array(np.int64([0]), "zero"),
             numpy_helper.from_array(np.int64([0]), "axis")]
    nodes = [helper.make_node("Mul", ["x", "three"], ["m"], name="mul"),
             helper.make_node("Relu", ["m"], ["r" if slice_to_empty else "y"], name="relu")]
    if slice_to_empty:
        nodes.append(helper.make_node("Slice", ["r", "zero", "zero", "axis"], ["y"], name="take_none"))
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((rows, 4)).astype(np.float32))
    return diagnose(prepare(str(tmp_path / "m.onnx"), str(tmp_path / "in.npz")),
                    Config(precision_mode="force_fp16"))[0]


def test_a_run_that_compared_no_element_is_not_a_pass(tmp_path):
    """An input with a dimension of size 0: every tensor is empty on both sides, every metric "passes" on
    nothing. The verdict is a WARN that says no element was compared, naming the output's shape."""
    diag = _empty_model(tmp_path, 0, slice_to_empty=False)
    table = diag.table
    compared = table[table["CompareFailReason"].fillna("") == ""]
    assert len(compared) and (compared["ComparedCount"] == 0).all()  # precondition: all empty, all "compared"
    assert diag.summary["verdict"] == "WARN"
    assert any("no element was compared" in r and "'y' is 0x4" in r for r in diag.summary["reasons"])
    assert diag.summary["ship"].startswith("Cannot tell whether it can ship: no element was compared")


@pytest.mark.parametrize("outputs", [["x"], ["x", "k"]], ids=["input-passed-through", "input-and-constant"])
def test_a_graph_that_runs_no_kernel_cannot_tell_whether_it_can_ship(tmp_path, outputs):
    """Every output a graph input passed through (or a constant): no kernel runs, nothing of the device is
    simulated. The verdict is a WARN naming both cases, and the ship sentence does not claim the model can ship."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    outs = [x] + ([helper.make_tensor_value_info("k", TensorProto.FLOAT, [2])] if "k" in outputs else [])
    nodes = [helper.make_node("Constant", [], ["k"], name="c", value=numpy_helper.from_array(
        np.float32([1.5, -2.0])))] if "k" in outputs else []
    m = helper.make_model(helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    diag = diagnose(prepare(str(tmp_path / "m.onnx"), None), Config(precision_mode="force_fp16"))[0]
    assert diag.summary["verdict"] == "WARN"
    reason = next(r for r in diag.summary["reasons"] if r.startswith("no kernel ran"))
    assert "graph input passed through" in reason and "constant" in reason
    assert diag.summary["ship"].startswith("Cannot tell whether it can ship: no kernel ran")


def test_an_empty_output_after_data_is_still_judged_by_its_intermediates(tmp_path):
    """A detector that found nothing: the output is empty on both sides (an exact match), but the tensors
    before it held data and were compared, so the run is judged as usual."""
    diag = _empty_model(tmp_path, 3, slice_to_empty=True)
    table = diag.table
    assert int(table.loc[table["TensorName"] == "y", "ComparedCount"].iloc[0]) == 0
    assert (table["ComparedCount"].fillna(0) > 0).any()
    assert not any("no element was compared" in r for r in diag.summary["reasons"])
    assert diag.summary["verdict"] in ("PASS", "WARN")


@pytest.mark.parametrize("x_scale, w_scale", [(6e-8, 0.2), (1.5e-7, 0.05), (1e-3, 1e-5), (1.0, 1e-7)])
def test_tiny_values_flushed_by_fp16_are_not_excused_as_rounding_noise(tmp_path, x_scale, w_scale):
    """MatMul of values FP16 cannot hold (subnormal or flushed to zero), then LpNormalization: the output is
    wrong (cosine well below 0.99 against an independent onnxruntime run on the FP16-rounded operands), so the
    verdict FAILs; the cube op's atol (1e-3) must not excuse a tensor whose values are far smaller."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((32, 16)) * w_scale).astype(np.float32)
    x = (rng.standard_normal((4, 32)) * x_scale).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
                           helper.make_node("LpNormalization", ["mm"], ["y"], name="norm", axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=x)

    def run(xv, wv):
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, {"x": xv})[0].astype(np.float64).ravel()
    exact = run(x, w)
    h = lambda a: a.astype(np.float16).astype(np.float64)  # noqa: E731 - FP16 storage, as the contract rounds
    mm16 = h(h(x) @ h(w))  # FP16 operands, FP32 accumulation, output stored in FP16
    fp16 = (mm16 / np.maximum(np.linalg.norm(mm16, axis=-1, keepdims=True), 1e-300)).ravel()
    cos = float(exact @ fp16 / (np.linalg.norm(exact) * np.linalg.norm(fp16)))
    assert cos < 0.99  # precondition, independent of npuscope: FP16 storage of the operands breaks the output
    diag = diagnose(prepare(str(tmp_path / "m.onnx"), str(tmp_path / "in.npz")), Config(precision_mode="force_fp16"))[0]
    assert diag.summary["verdict"] == "FAIL", diag.summary["reasons"]
    row = diag.table.set_index("TensorName").loc["y"]
    assert row["Abnormal"] and not row["WithinExpectedNoise"]


@pytest.mark.parametrize("amp, seed", [(1000.0, 0), (300.0, 1), (3000.0, 2)])
def test_a_kernel_behind_an_overflowing_input_is_not_a_new_origin(tmp_path, amp, seed):
    """x·amp → MatMul 'mm' (past FP16 max: inf in FP16 storage) → RMS over the row → Div 'norm'(mm, rms) →
    MatMul: 'norm' reads inf, so its broken output is explained by its inputs; the only origin named is 'mm',
    never 'norm' with "its inputs are normal"."""
    rng = np.random.default_rng(seed)
    c = lambda n, a: numpy_helper.from_array(np.asarray(a, np.float32), n)  # noqa: E731
    x = rng.standard_normal((1, 8, 16)).astype(np.float32) * 10
    wm = rng.standard_normal((16, 16)).astype(np.float32) * 3
    assert np.abs((x * amp) @ wm).max() > 65504  # precondition, computed here: 'mm' overflows FP16
    nodes = [helper.make_node("Mul", ["x", "big"], ["xb"], name="amp"),
             helper.make_node("MatMul", ["xb", "wm"], ["mm"], name="mm"),
             helper.make_node("Mul", ["mm", "mm"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq"], ["ms"], name="meansq", keepdims=1, axes=[-1]),
             helper.make_node("Sqrt", ["ms"], ["rms"], name="rms"),
             helper.make_node("Div", ["mm", "rms"], ["nrm"], name="norm"),
             helper.make_node("MatMul", ["nrm", "wo"], ["y"], name="out")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4])],
                          [c("big", amp), c("wm", wm), c("wo", rng.standard_normal((16, 4)))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=x)
    diag = diagnose(prepare(str(tmp_path / "m.onnx"), str(tmp_path / "in.npz")), Config())[0]
    origins = {f.subject for f in diag.findings if f.kind in ("first_divergence", "divergence_origin", "fp16_overflow")}
    assert diag.summary["verdict"] == "FAIL" and origins == {"mm"}, [(f.kind, f.subject) for f in diag.findings]
    roles = diag.table.set_index("TensorName")["Role"]
    assert roles["mm"] == "origin" and roles["nrm"] == "propagated"


@pytest.mark.parametrize("k", [1e8, 7e4])
@pytest.mark.parametrize("fusion_level", [0, 2])
def test_an_overflow_from_a_constant_past_fp16_max_names_the_constant(tmp_path, k, fusion_level):
    """x·s (small) → Mul by a constant k past FP16 max → y (back in range): no activation passes 65504, the
    constant does; the overflow finding names the constant instead of saying no value it reads passes FP16 max."""
    s = 10.0 / k
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    assert np.abs(x * s * k).max() < 65504 and k > 65504  # precondition: only the constant leaves FP16
    g = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["xs"], name="shrink"),
                           helper.make_node("Mul", ["xs", "k"], ["y"], name="grow")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                          [numpy_helper.from_array(np.float32(s), "s"), numpy_helper.from_array(np.float32(k), "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=x)
    diag = diagnose(prepare(str(tmp_path / "m.onnx"), str(tmp_path / "in.npz")),
                    Config(precision_mode="force_fp16", fusion_level=fusion_level))[0]
    (f,) = [f for f in diag.findings if f.kind == "fp16_overflow"]
    assert f.evidence["overflow"]["where"] == "constant" and f.evidence["overflow"]["tensor"] == "k"
    assert f.evidence["overflow"]["golden_absmax"] == pytest.approx(k, rel=1e-6)
    assert "reads constant 'k'" in f.recommendation and "no reference value" not in f.recommendation


# ------------------------------------------------------------------ a user line tighter than FP32 rounding
def cancel_model(k: int = 1024, scale: float = 300.0, seed: int = 0):
    """a = x @ W1 ('mm1'), b = x @ W2 ('mm2', W2 = W1 + 1e-2·noise), y = a - b ('sub'): two values ~1e4 that
    cancel to |y| ~ 1, so the FP32 rounding of a and b (~1e-3) is most of y's error. Returns (Built, float64
    numpy values {a, b, y})."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, k)).astype(np.float32)
    w1 = (rng.standard_normal((k, 16)) * scale).astype(np.float32)
    w2 = (w1 + rng.standard_normal((k, 16)).astype(np.float32) * 1e-2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["a"], name="mm1"),
             helper.make_node("MatMul", ["x", "W2"], ["b"], name="mm2"),
             helper.make_node("Sub", ["a", "b"], ["y"], name="sub")]
    model = fk._model(nodes, [fk._vi("x", (4, k))], [fk._vi("y", (4, 16))], [fk._c("W1", w1), fk._c("W2", w2)],
                      "cancel")
    x64 = x.astype(np.float64)
    a64, b64 = x64 @ w1.astype(np.float64), x64 @ w2.astype(np.float64)
    return fk.Built(model, {"x": x}, []), {"a": a64, "b": b64, "y": a64 - b64}


def _rms(a) -> float:
    a = np.asarray(a, np.float64)
    return float(np.sqrt(np.mean(a * a)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("cfg", [{"precision_mode": "force_fp32"}, {"precision_mode": "force_fp32", "fusion_level": 0},
                                 {}, {"fusion_level": 0}])
def test_a_user_line_tighter_than_fp32_rounding_is_no_compile_stage_fault(tmp_path, cfg):
    """The user's --atol is below the FP32 rounding of y (onnxruntime itself is further off the float64 value
    than the line): the force_fp32 re-run crosses it only within FP32 rounding of the operands a, b, which is
    no compile-stage fault. The line stays applied to the verdict; the warning names the tensor, the line and the
    relative error, and the diagnosis goes on as a precision-stage one."""
    b, f64 = cancel_model()
    ort = fk.reference(b.model, b.feeds)
    line = 0.5 * float(np.max(np.abs(ort["y"] - f64["y"])))  # tighter than onnxruntime's own FP32 rounding
    fp32 = Session(b.model, Config(precision_mode="force_fp32", **{k: v for k, v in cfg.items() if k != "precision_mode"}),
                   input_shapes={"x": (4, 1024)}).run(b.feeds, dump=True).outputs["y"].astype(np.float64)
    d = fp32 - ort["y"]
    assert np.max(np.abs(d)) > line  # precondition: the FP32 plan crosses the line
    operand_rms = max(_rms(ort["a"]), _rms(ort["b"]))
    assert _rms(d) / operand_rms < 1e-5 and _rms(ort["y"] - f64["y"]) / operand_rms < 1e-5  # FP32 rounding
    assert _rms(d) / _rms(ort["y"]) > 1e-4  # ... which is large against y itself (the cancellation)
    mp, ip = b.save(tmp_path, "m")
    prep = prepare(str(mp), str(ip))
    diag, extras = diagnose(prep, Config(**cfg), thresholds=parse_thresholds(f"MaxAbsoluteError<={line}"))
    kinds = [f.kind for f in diag.findings]
    assert "compile_stage_fault" not in kinds and diag.summary["stage"] != "compile"
    assert diag.triage["fp32_first_divergence"] is None
    tight = next(f for f in diag.findings if f.kind == "line_tighter_than_fp32")
    assert tight.severity == "warning" and tight.subject == "sub" and tight.evidence["tensor"] == "y"
    assert tight.evidence["lines"] == {"MaxAbsoluteError": pytest.approx(line)}
    assert tight.evidence["values"]["MaxAbsoluteError"] == pytest.approx(np.max(np.abs(d)), rel=1e-6)
    assert tight.evidence["relative_error"] == pytest.approx(_rms(d) / operand_rms, rel=1e-6)
    assert tight.evidence["operand_rms"] == pytest.approx(operand_rms, rel=1e-6)
    assert "no precision setting can meet it" in tight.recommendation and "loosen" in tight.recommendation
    t = diag.table.set_index("TensorName")
    hits = 0
    for f in diag.findings:  # an FP32 kernel whose row is within FP32 rounding is not reported as wrong
        if f.kind in ("first_divergence", "divergence_origin") and f.evidence.get("precision") == "fp32":
            if t.loc[f.evidence.get("tensor", ""), "WithinExpectedNoise"] is True:
                assert "loosen it rather than report it" in f.recommendation and "repro/" not in f.recommendation
                hits += 1
    assert hits or cfg.get("precision_mode") != "force_fp32"  # in force_fp32, 'a' (~1e4) crosses the line too
    # the user's line is applied as given: the output crosses it
    assert diag.summary["verdict"] == "FAIL"
    assert any(r.startswith("output 'y' is abnormal") and "MaxAbsoluteError" in r for r in diag.summary["reasons"])
    # no keep set can beat FP32 rounding: no search for one, and the fix sentence says why
    fix = verify_advice(prep, Config(**cfg), diag.findings, extras, diag.summary["stage"], diag.summary["verdict"],
                        target=lines_target(b.model, f"MaxAbsoluteError<={line}"))
    assert not fix.searched and not fix.met and "output 'y' is tighter than FP32 rounding" in fix.not_searched
    assert "tighter than FP32 rounding" in fix.sentence()
    assert not any("compile-stage" in r for r in diag.summary["reasons"])
    assert diag.summary["stage"] == "precision"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("factor", [1.5, 1.01])
def test_a_planted_compile_fault_is_still_reported_under_a_tight_user_line(tmp_path, factor):
    """A rescaled constant (a wrong value in the FP32 plan, off by ``factor`` - 1 relative, far beyond FP32
    rounding) under a user line tighter than anything: still a compile-stage fault, not line_tighter_than_fp32."""
    b = scale_model()
    ref_m = fk.reference(b.model, b.feeds)["m"].astype(np.float64)
    with fk.planted_pass("scale_mul", factor):
        diag, extra = _diag_lines(tmp_path, b, "MaxAbsoluteError<=1e-9", precision_mode="force_fp32")
    dev = np.asarray(extra["device"]["m"], np.float64)
    assert _rms(dev - ref_m) / _rms(ref_m) > 0.5 * (factor - 1.0)  # precondition: the plan is off
    assert diag.summary["stage"] == "compile" and diag.summary["verdict"] == "FAIL"
    assert diag.findings[0].kind == "compile_stage_fault" and diag.findings[0].subject == "scale_mul"
    assert "line_tighter_than_fp32" not in [f.kind for f in diag.findings]


def _diag_lines(tmp_path, built, thresholds, **cfg):
    mp, ip = built.save(tmp_path, "m")
    return diagnose(prepare(str(mp), str(ip)), Config(**cfg), thresholds=parse_thresholds(thresholds))
