"""Verified advice (toolkit.tuning.advice): origins behind large but accurate tensors, accumulated error, fixes
that need several nodes; every printed fix applied and re-run, checked here against onnxruntime."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.faultkinds import builders as fk
from toolkit.config.schema import Config
from toolkit.diagnose import diagnose, prepare
from toolkit.engine import Session, shapes_of
from toolkit.report.context import answer_section
from toolkit.tuning.advice import VerifiedFix, _pointer, task_functions, verify_advice
from toolkit.tuning.tune import DEFAULT_TARGET, lines_target, tune

F = TensorProto.FLOAT


def _c(name, a):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def _save(tmp_path, model, feeds):
    mp, ip = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(model, mp)
    np.savez(ip, **feeds)
    return str(mp), str(ip)


def _ort(model, feeds) -> dict:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _cos(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _device_outputs(model, feeds, cfg: Config, keep) -> dict:
    cfg = dataclasses.replace(cfg, keep_dtype=list(keep), op_compiler_cache_mode="disable")
    return Session(model, cfg, input_shapes=shapes_of(feeds)).run(feeds).outputs


def _diagnose(path, inputs, cfg):
    prep = prepare(path, inputs)
    diag, extras = diagnose(prep, cfg)
    fix = verify_advice(prep, cfg, diag.findings, extras, diag.summary["stage"], diag.summary["verdict"])
    return prep, diag, fix


# ------------------------------------------------------------------ origin behind a large, accurate tensor
def _large_then_bn(magnitude: float, big_var: float, channels: int = 8, hw: int = 12, seed: int = 0):
    """x → conv_a (|y| up to about ``magnitude``, FP16-accurate) → bn (running_var holds ``big_var``, past FP16)
    → relu → conv_b → y. Only bn breaks in FP16."""
    rng = np.random.default_rng(seed)
    x = fk.fp16_exact(rng.standard_normal((1, channels, hw, hw)))
    wa = rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels)
    wa *= magnitude / 4.0
    var = rng.uniform(0.5, 2.0, channels) * magnitude ** 2 / 16
    var[int(rng.integers(channels))] = big_var
    s = rng.uniform(0.5, 1.5, channels)  # normalised: bn's output is O(1)
    wb = rng.standard_normal((channels, channels, 1, 1)) / np.sqrt(channels)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1] * 4),
             helper.make_node("BatchNormalization", ["a", "s", "b", "m", "v"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "wb"], ["y"], name="conv_b")]
    inits = [_c("wa", wa), _c("s", s), _c("b", 0.1 * rng.standard_normal(channels)), _c("m", np.zeros(channels)),
             _c("v", var), _c("wb", wb)]
    shape = [1, channels, hw, hw]
    g = helper.make_graph(nodes, "large_then_bn", [helper.make_tensor_value_info("x", F, shape)],
                          [helper.make_tensor_value_info("y", F, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), {"x": x}


@pytest.mark.parametrize("magnitude", [3e3, 2e4])
@pytest.mark.parametrize("big_var", [1e6, 9.8e7])
def test_origin_behind_a_large_but_accurate_tensor_is_found_and_its_fix_verified(tmp_path, magnitude, big_var):
    model, feeds = _large_then_bn(magnitude, big_var)
    ref = _ort(model, feeds)["y"]
    a = fk.reference(model, feeds)["a"]
    assert np.abs(a).max() > magnitude / 4  # the upstream tensor is large ...
    cfg = Config(precision_mode="force_fp16", fusion_level=0, op_compiler_cache_mode="disable")
    prep, diag, fix = _diagnose(*_save(tmp_path, model, feeds), cfg)
    fd = diag.summary["first_divergence"]
    assert fd and fd["node"] == "bn"
    conv_row = diag.table.set_index("TensorName").loc["a"]
    assert not conv_row["Abnormal"]  # ... and accurate: FP16 noise at its magnitude, not an abnormal input
    const = [f for f in diag.findings if f.kind == "fp16_constant"]
    assert const and const[0].subject == "v" and const[0].evidence["verified"]["met"]
    assert fix.needed and fix.met and "bn" in fix.keep_dtype
    out = _device_outputs(model, feeds, cfg, fix.keep_dtype)["y"]
    assert _cos(out, ref) >= 0.9999 and np.abs(out - ref).max() <= 1e-2
    assert _cos(_device_outputs(model, feeds, cfg, [])["y"], ref) < 0.99  # the fault is real


def test_the_same_model_fused_passes_without_a_fix(tmp_path):
    model, feeds = _large_then_bn(2e4, 9.8e7)
    cfg = Config(precision_mode="force_fp16", fusion_level=2, op_compiler_cache_mode="disable")
    _, diag, fix = _diagnose(*_save(tmp_path, model, feeds), cfg)
    assert diag.summary["verdict"] in ("PASS", "WARN")
    assert not [f for f in diag.findings if f.severity == "error"]


# ------------------------------------------------------------------ accumulated error, no single origin
def _deep_chain(layers: int, width: int, out_scale: float, seed: int = 0):
    """``layers`` x (MatMul by an orthogonal matrix, Tanh-free: exact-scale rotations), then a scale by
    ``out_scale``: FP16 rounding accumulates evenly over the layers, none of which is wrong alone."""
    rng = np.random.default_rng(seed)
    x = fk.fp16_exact(rng.standard_normal((4, width)))
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        q, _ = np.linalg.qr(rng.standard_normal((width, width)))
        inits.append(_c(f"w{i}", q))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        prev = f"h{i}"
    inits.append(_c("scale", np.full((1, width), out_scale)))
    nodes.append(helper.make_node("Mul", [prev, "scale"], ["y"], name="out_scale"))
    g = helper.make_graph(nodes, "deep_chain", [helper.make_tensor_value_info("x", F, [4, width])],
                          [helper.make_tensor_value_info("y", F, [4, width])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), {"x": x}


#: A strict line (user-set, so applied as given) and the matching target: 1 - cosine <= 1e-6.
STRICT_LINE, STRICT_TARGET = "CosineSimilarity<0.999999", "CosineSimilarity>=0.999999"


@pytest.mark.parametrize("layers,width", [(32, 32), (48, 16)])
def test_accumulated_error_is_its_own_answer_with_shares_and_a_verified_set(tmp_path, layers, width):
    model, feeds = _deep_chain(layers, width, out_scale=1.0)
    ref = _ort(model, feeds)["y"]
    cfg = Config(precision_mode="force_fp16", fusion_level=0, op_compiler_cache_mode="disable")
    assert _cos(_device_outputs(model, feeds, cfg, [])["y"], ref) < 0.999999  # the line is crossed as compiled
    mp, ip = _save(tmp_path, model, feeds)
    prep = prepare(mp, ip)
    diag, extras = diagnose(prep, cfg, thresholds=STRICT_LINE)
    assert diag.summary["verdict"] == "FAIL"
    fix = verify_advice(prep, cfg, diag.findings, extras, diag.summary["stage"], "FAIL", target=STRICT_TARGET)
    assert not [f for f in diag.findings if f.kind in ("first_divergence", "divergence_origin", "fp16_overflow")]
    acc = [f for f in diag.findings if f.kind == "accumulated_error"]
    assert acc and acc[0].evidence["kernels"] >= layers // 2
    shares = acc[0].evidence["shares"]
    assert shares and all(0.0 <= v <= 1.0 for v in shares.values())

    def red(keep):  # independently: ‖npu − ref‖ / ‖ref‖ of the plan with ``keep`` in FP32
        d = _device_outputs(model, feeds, cfg, keep)["y"].astype(np.float64) - ref
        return float(np.linalg.norm(d) / np.linalg.norm(ref.astype(np.float64)))
    for name, share in shares.items():  # each: the output error removed by keeping that kernel alone in FP32
        assert share == pytest.approx(max(0.0, 1.0 - red([name]) / red([])), abs=1e-6), name
    assert f"accumulated over {acc[0].evidence['kernels']}" in acc[0].recommendation
    assert fix.met and len(fix.keep_dtype) > 1
    out = _device_outputs(model, feeds, cfg, fix.keep_dtype)["y"]
    assert _cos(out, ref) >= 0.999999


def _allowance(ref: np.ndarray, depth: int) -> np.ndarray:
    """The default target's element-wise bound on an output of ``depth`` FP16 roundings, written out here:
    max(1e-2, 2^-10·sqrt(depth)·max(|y_i|, rms(y)))."""
    y = np.abs(np.asarray(ref, np.float64))
    return np.maximum(1e-2, 2.0 ** -10 * np.sqrt(depth) * np.maximum(y, np.sqrt(np.mean(y ** 2))))


def _ill_conditioned_chain(layers: int, decades: float, width: int = 32, seed: int = 3):
    """``layers`` x (MatMul by Q·diag(d)·Q', then Add of a small bias), d alternating between 10^-decades..1 and
    its inverse: every layer is accurate alone, but each amplifies the FP16 rounding the layer before left, so
    the first layer to cross a line is a local storage origin whose fix leaves the rest of the chain in FP16."""
    rng = np.random.default_rng(seed)
    d = np.logspace(0, -decades, width)
    q = np.linalg.qr(rng.standard_normal((width, width)))[0]
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        qn = np.linalg.qr(rng.standard_normal((width, width)))[0]
        inits += [_c(f"W{i}", q @ np.diag(d if i % 2 == 0 else 1 / d) @ qn), _c(f"b{i}", 0.01 * rng.standard_normal(width))]
        nodes += [helper.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"], name=f"layers.{i}.mm"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"h{i}"], name=f"layers.{i}.add")]
        q, prev = qn.T, f"h{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    g = helper.make_graph(nodes, "ill", [helper.make_tensor_value_info("x", F, [8, width])],
                          [helper.make_tensor_value_info("y", F, [8, width])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, {"x": rng.standard_normal((8, width)).astype(np.float32)}


@pytest.mark.parametrize("layers,decades", [(40, 3.6), (24, 4.0)])
def test_origins_that_do_not_restore_the_outputs_give_way_to_accumulated_error(tmp_path, layers, decades):
    model, feeds = _ill_conditioned_chain(layers, decades)
    ref = _ort(model, feeds)["y"]
    cfg = Config(precision_mode="force_fp16", fusion_level=2, op_compiler_cache_mode="disable")
    assert _cos(_device_outputs(model, feeds, cfg, [])["y"], ref) < 0.999  # the error is real
    _, diag, fix = _diagnose(*_save(tmp_path, model, feeds), cfg)
    assert diag.summary["verdict"] == "FAIL"
    acc = [f for f in diag.findings if f.kind == "accumulated_error"]
    assert acc and diag.findings[0] is acc[0] and acc[0].severity == "error"
    origins = [f for f in diag.findings if f.kind in ("first_divergence", "divergence_origin")]
    assert origins and all(f.severity == "warning" and "a local origin only" in f.recommendation for f in origins)
    # independently: the origins' own sets, applied, leave most of the output error; the verified fix does not
    part = acc[0].evidence["origins_keep_dtype"]
    e0 = np.linalg.norm(_device_outputs(model, feeds, cfg, [])["y"] - ref)
    assert np.linalg.norm(_device_outputs(model, feeds, cfg, part)["y"] - ref) > 0.5 * e0
    out = _device_outputs(model, feeds, cfg, fix.keep_dtype)["y"]
    # the output is still stored in FP16 (|y| ~ 1e2): within the default target's rounding allowance for a chain
    # of layers + 1 FP16 roundings (the input's Cast, one fused MatMul+Add kernel per layer)
    assert fix.met and _cos(out, ref) >= 0.9999 and (np.abs(out - ref) <= _allowance(ref, layers + 1)).all()
    assert answer_section(diag)["recommendation"] == acc[0].recommendation  # the first screen leads with it


@pytest.mark.parametrize("builder", [lambda: fk.normalize_eps(), lambda: _large_then_bn(2e4, 9.8e7)],
                         ids=["eps_flush_two_nodes", "bn_variance_past_fp16"])
def test_an_origin_whose_set_restores_the_outputs_is_not_called_accumulated(tmp_path, builder):
    built = builder()
    model, feeds = (built.model, built.feeds) if hasattr(built, "model") else built
    cfg = Config(precision_mode="force_fp16", fusion_level=0, op_compiler_cache_mode="disable")
    _, diag, fix = _diagnose(*_save(tmp_path, model, feeds), cfg)
    assert fix.met and not [f for f in diag.findings if f.kind == "accumulated_error"]
    assert [f for f in diag.findings if f.severity == "error" and f.kind in ("first_divergence", "divergence_origin",
                                                                              "fp16_overflow")]


# ------------------------------------------------------------------ a fix that needs two nodes
@pytest.mark.parametrize("eps,dim", [(1e-12, 128), (1e-10, 64)])
def test_a_fix_that_needs_two_nodes_is_the_verified_set_and_single_advice_says_it_fails(tmp_path, eps, dim):
    b = fk.normalize_eps(dim=dim, eps=eps)
    ref = _ort(b.model, b.feeds)["y"]
    cfg = Config(precision_mode="force_fp16", op_compiler_cache_mode="disable")
    for alone in (["normalize"], ["add_eps"]):
        assert not np.isfinite(_device_outputs(b.model, b.feeds, cfg, alone)["y"]).all()
    _, diag, fix = _diagnose(*_save(tmp_path, b.model, b.feeds), cfg)
    assert fix.met and sorted(fix.keep_dtype) == ["add_eps", "normalize"]
    out = _device_outputs(b.model, b.feeds, cfg, fix.keep_dtype)["y"]
    assert np.isfinite(out).all() and np.abs(out - ref).max() <= 1e-2
    single = [f for f in diag.findings if f.evidence.get("verified") and len(f.evidence["keep_dtype"]) == 1]
    assert single and all(not f.evidence["verified"]["met"] and "does not meet" in f.recommendation for f in single)


# ------------------------------------------------------------------ diagnose and tune agree
@pytest.mark.parametrize("builder", [lambda: fk.normalize_eps(), lambda: fk.bn_variance(big_var=1e5)])
def test_diagnose_fix_equals_tune_answer_at_the_default_target(tmp_path, builder):
    b = builder()
    cfg = Config(precision_mode="force_fp16", fusion_level=0, op_compiler_cache_mode="disable")
    _, _, fix = _diagnose(*_save(tmp_path, b.model, b.feeds), cfg)
    res = tune(b.model, [("x", b.feeds)], cfg, DEFAULT_TARGET)
    assert fix.met == res.met and sorted(fix.keep_dtype) == sorted(res.chosen)


# ------------------------------------------------------------------ real models (slow: downloads PP-OCRv4)
@pytest.mark.slow
def test_ppocr_det_unfused_fp16_names_the_batchnorm_and_its_verified_fix_restores_the_output():
    cfg = Config(precision_mode="force_fp16", fusion_level=0)
    prep = prepare("ppocr_det")
    diag, extras = diagnose(prep, cfg)
    assert diag.summary["first_divergence"]["node"] == "p2o.BatchNormalization.1"
    const = [f for f in diag.findings if f.kind == "fp16_constant" and f.evidence.get("reader") == "p2o.BatchNormalization.1"]
    assert const and const[0].evidence["overflow"]["absmax"] > 65504
    fix = verify_advice(prep, cfg, diag.findings, extras, diag.summary["stage"], diag.summary["verdict"])
    printed = [f for f in diag.findings if f.kind in ("fp16_constant", "first_divergence") and "verified" in f.evidence]
    assert printed
    ref = _ort(prep.model, prep.feeds)
    sets = [fix.keep_dtype] if fix.met else []
    sets += [f.evidence["keep_dtype"] for f in printed if f.evidence["verified"]["output_cosine_after"] >= 0.999]
    assert sets, "no printed fix restores the output"
    for keep in sets:  # every fix that says it restores the output does, checked against onnxruntime
        out = _device_outputs(prep.model, prep.feeds, cfg, keep)
        assert min(_cos(out[k], ref[k]) for k in ref) >= 0.999
    fused = Config(precision_mode="force_fp16", fusion_level=2)
    assert diagnose(prepare("ppocr_det"), fused)[0].summary["verdict"] in ("PASS", "WARN")


@pytest.mark.slow
def test_ppocr_rec_default_precision_has_no_error_under_its_verdict_and_agrees_with_tune():
    cfg = Config()
    prep = prepare("ppocr_rec")
    diag, extras = diagnose(prep, cfg)
    fix = verify_advice(prep, cfg, diag.findings, extras, diag.summary["stage"], diag.summary["verdict"])
    if diag.summary["verdict"] != "FAIL":
        assert not [f for f in diag.findings if f.severity == "error"]
    res = tune(prep.model, [("x", prep.feeds)], cfg, DEFAULT_TARGET, tasks=task_functions(prep.zoo_name))
    assert sorted(fix.keep_dtype) == sorted(res.chosen)


# ------------------------------------------------------------------ a reference that is already NaN/Inf
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("why", ["nan_input", "sqrt_of_negative", "log_of_zero"])
@pytest.mark.parametrize("fusion_level", [0, 2])
def test_no_fix_is_searched_when_the_fp32_reference_itself_is_not_finite(tmp_path, why, fusion_level):
    """Kind: outputs the FP32 reference already computes as NaN/Inf (NaN inputs, a Sqrt of a negative, a Log of
    zero). No precision setting can help, so diagnose says so and searches no keep set."""
    rng = np.random.default_rng(1)
    w = rng.normal(0, 0.5, (8, 8)).astype(np.float32)
    x = rng.normal(0, 1, (4, 8)).astype(np.float32)
    shift = {"nan_input": 0.0, "sqrt_of_negative": -100.0, "log_of_zero": 0.0}[why]
    tail = {"nan_input": "Relu", "sqrt_of_negative": "Sqrt", "log_of_zero": "Log"}[why]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "s"], ["a"], name="shift"),
             helper.make_node("Relu" if why == "log_of_zero" else "Identity", ["a"], ["r"], name="pre"),
             helper.make_node("Mul", ["r", "z"] if why == "log_of_zero" else ["r", "one"], ["p"], name="scale"),
             helper.make_node(tail, ["p"], ["y"], name="tail")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4, 8])],
                          [helper.make_tensor_value_info("y", F, [4, 8])],
                          [_c("w", w), _c("s", np.full(8, shift)), _c("one", 1.0), _c("z", 0.0)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if why == "nan_input":
        x[:] = np.nan
    ref = _ort(model, {"x": x})["y"]
    assert not np.isfinite(ref).all()  # independently: the FP32 reference is not finite
    cfg = Config(precision_mode="force_fp16", fusion_level=fusion_level, op_compiler_cache_mode="disable")
    _, diag, fix = _diagnose(*_save(tmp_path, model, {"x": x}), cfg)
    assert any(f.kind == "golden_nonfinite" for f in diag.findings)
    assert not fix.searched and not fix.met and fix.keep_dtype == []
    assert "NaN/Inf" in fix.sentence() and "no keep_dtype fix" in fix.sentence()
    assert fix.trials == 0 and fix.summary()["not_searched"]


@pytest.mark.parametrize("rows", [0])
@pytest.mark.parametrize("width", [4, 7])
def test_no_fix_is_claimed_when_every_output_is_empty(tmp_path, rows, width):
    """Every output empty on the input: nothing was compared, so the advice neither says "no fix needed" nor
    claims the target is met; it says there is nothing to verify."""
    x = helper.make_tensor_value_info("x", F, ["N", width])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="n0")], "g", [x],
                                            [helper.make_tensor_value_info("y", F, ["N", width])]),
                          opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    _, diag, fix = _diagnose(*_save(tmp_path, m, {"x": np.zeros((rows, width), np.float32)}), Config())
    assert diag.summary["verdict"] == "WARN"
    assert fix.sentence().startswith("no fix to verify: every output is empty")
    assert all(r["Elements"] == 0 for r in fix.rows_before)


@pytest.mark.parametrize("state,says", [
    (dict(met=True, keep_dtype=["a"], searched=True), "see the verified fix"),
    (dict(verdict="WARN"), "no fix is needed to ship"),
    (dict(searched=False, not_searched="the FP32 reference's own outputs hold NaN/Inf"), "own outputs hold NaN/Inf"),
    (dict(searched=True, met=False), "no keep set found meets the target"),
])
def test_a_finding_whose_set_misses_points_only_to_a_fix_that_exists(state, says):
    text = _pointer(VerifiedFix(target=[], needed=True, **state))
    assert says in text and (("see the verified fix" in text) == bool(state.get("met")))


@pytest.mark.parametrize("n", [1, 12, 13, 150])
def test_a_long_fix_sentence_shows_a_dozen_names_and_counts_the_rest(n):
    keep = [f"layers.{i}.mm" for i in range(n)]
    text = VerifiedFix(target=[], needed=True, met=True, searched=True, keep_dtype=keep).sentence()
    shown = [k for k in keep if f"'{k}'" in text]
    assert shown == keep[:12]
    assert (f"and {n - 12} more ({n} in all, listed in keep_dtype.txt)" in text) == (n > 12)


@pytest.mark.parametrize("odd", ["ok", "#m2", " lead", "a\nb"])
@pytest.mark.parametrize("n", [1, 20])
def test_a_fix_sentence_names_only_the_files_that_can_hold_its_names(odd, n):
    """keep_dtype.txt is written only when every name fits one of its lines (toolkit.config.keep_dtype): the
    sentence names it only then, and a long list points to the file that holds it."""
    from toolkit.config.keep_dtype import keep_file_text

    keep = [odd] + [f"n{i}" for i in range(n - 1)]
    text = VerifiedFix(target=[], needed=True, met=True, searched=True, keep_dtype=keep).sentence()
    writable = keep_file_text(keep) is not None
    assert ("(keep_dtype.txt, fixed_config.json)" in text) == writable
    assert ("keep_dtype.txt cannot hold" in text) == (not writable)
    if n > 12:
        assert f"listed in {'keep_dtype.txt' if writable else 'fixed_config.json'})" in text


@pytest.mark.parametrize("left_out", [0, 1, 3])
def test_a_fix_checked_on_one_shape_of_a_dataset_does_not_claim_the_others(left_out):
    text = VerifiedFix(target=[], needed=True, met=True, searched=True, keep_dtype=["a"], inputs=2,
                       inputs_left_out=left_out).sentence()
    assert text.startswith("verified fix") == (left_out == 0)
    assert (f"{left_out} input(s) of other shapes were not checked" in text) == (left_out > 0)
    assert ("on all 2 inputs" in text) == (left_out == 0)


def _matmul_chain(layers: int, big: int, name: str | None):
    """(model, feeds): ``layers`` MatMuls on x (2×8, values ~30), every node called ``name`` (None: unnamed), layer
    ``big``'s weights ×1e3 so that its product passes FP16 max."""
    rng = np.random.default_rng(layers)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits.append(_c(f"w{i}", rng.standard_normal((8, 8)) * (1e3 if i == big else 0.3)))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], **({"name": name} if name else {})))
        prev = f"h{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", F, [2, 8])],
                          [helper.make_tensor_value_info(prev, F, [2, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, {"x": (rng.standard_normal((2, 8)) * 30).astype(np.float32)}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("layers,big", [(4, 1), (5, 3)])
def test_advice_for_a_node_whose_name_the_file_repeats_uses_the_files_name(tmp_path, layers, big):
    """``layers`` MatMuls all named 'dense' in the file (the loader calls the later ones dense__2...), layer
    ``big`` overflowing FP16: every advised set and the fix name 'dense', the one name the converter knows."""
    model, feeds = _matmul_chain(layers, big, "dense")
    cfg = Config(precision_mode="force_fp16", fusion_level=0, op_compiler_cache_mode="disable")
    _, diag, fix = _diagnose(*_save(tmp_path, model, feeds), cfg)
    advised = [f for f in diag.findings if isinstance(f.evidence, dict) and f.evidence.get("keep_dtype")]
    assert advised and all(f.evidence["keep_dtype"] == ["dense"] for f in advised)
    assert all(f"names 'dense' {layers} nodes" in f.recommendation for f in advised)
    assert fix.met and fix.keep_dtype == ["dense"]
    # the fix sentence says the one name keeps every node the file calls so (counted here from the file)
    assert fix.kept_nodes == sum(n.name == "dense" for n in model.graph.node) == layers
    assert f"'dense' (naming {layers} nodes" in fix.sentence()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("layers,big", [(3, 1), (5, 4)])
def test_a_fix_naming_unnamed_nodes_says_the_names_are_npuscopes(tmp_path, layers, big):
    """``layers`` unnamed MatMuls (the loader calls them MatMul_<index>), layer ``big`` overflowing FP16: the fix
    keeps that layer by npuscope's name, and diagnose's sentence and tune's notes say a converter reading the file
    has no node of that name; the fix, applied, meets the target (checked against onnxruntime here)."""
    model, feeds = _matmul_chain(layers, big, None)  # no names
    prev = model.graph.output[0].name
    cfg = Config(precision_mode="force_fp16", fusion_level=0, op_compiler_cache_mode="disable")
    prep, diag, fix = _diagnose(*_save(tmp_path, model, feeds), cfg)
    assert fix.met and f"MatMul_{big}" in fix.keep_dtype
    assert fix.unnamed == [k for k in fix.keep_dtype if k.startswith("MatMul_")]
    assert f"'MatMul_{big}'" in fix.sentence() and "leaves unnamed" in fix.sentence()
    got = _device_outputs(prep.model, feeds, cfg, fix.keep_dtype)[prev]
    assert _cos(got, _ort(model, feeds)[prev]) >= 0.9999
    res = tune(prep.model, [("x", feeds)], cfg, DEFAULT_TARGET)
    assert res.met and any(f"'MatMul_{big}'" in n and "leaves unnamed" in n for n in res.notes), res.notes


@pytest.mark.parametrize("lines,default", [(None, True), ("y:MaxAbsoluteError<=1e-2", False),
                                           ("CosineSimilarity<0.99999", False)])
def test_a_met_target_is_called_the_default_only_when_no_line_of_the_users_changed_it(tmp_path, lines, default):
    """y = x·2 (exact in FP16 for these inputs): nothing to fix, and the sentence names the target it met."""
    g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["y"], name="mul")], "m",
                          [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("y", F, [4])],
                          [_c("two", 2.0)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    prep = prepare(*_save(tmp_path, model, {"x": np.array([0.5, 1, 1.5, 2], np.float32)}))
    cfg = Config(precision_mode="force_fp16", op_compiler_cache_mode="disable")
    diag, extras = diagnose(prep, cfg, thresholds=lines)
    fix = verify_advice(prep, cfg, diag.findings, extras, diag.summary["stage"], diag.summary["verdict"],
                        target=lines_target(prep.model, lines))
    assert not fix.needed and fix.default is default
    said = "the default target (" if default else "the target (the default with your lines) ("
    assert said in fix.sentence()


def _cos_finite(a, b) -> float:
    both = np.isfinite(a) & np.isfinite(b)
    a, b = a[both].astype(np.float64), b[both].astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("case", ["all_nan_vs_low_cosine", "partial_nan_vs_lower_cosine", "finite_only",
                                  "two_with_nan"])
def test_a_dataset_state_takes_the_cosine_and_the_nan_count_of_the_same_worst_input(case):
    """The fix sentence's 'output cosine C with N NaN/Inf' over several inputs: C and N are the same input's
    (an input with NaN/Inf is the worst; more of them, worse; then the lowest cosine), computed here with numpy."""
    from toolkit.tuning.advice import _state
    from toolkit.tuning.tune import check_outputs, parse_target

    rng = np.random.default_rng(len(case))
    g = {k: rng.standard_normal((4, 16)).astype(np.float32) for k in ("a", "b", "c")}
    dev = {k: v + rng.standard_normal(v.shape).astype(np.float32) * s for (k, v), s in zip(g.items(), (0.01, 0.3, 0.05))}
    if case == "all_nan_vs_low_cosine":
        dev["a"][:] = np.nan
    elif case in ("partial_nan_vs_lower_cosine", "two_with_nan"):
        dev["a"][0, :5] = np.inf
    if case == "two_with_nan":
        dev["c"][:2, :] = np.nan
    rows = []
    for k in g:
        _, r, _ = check_outputs({"y": dev[k]}, {"y": g[k]}, parse_target("CosineSimilarity>=0.9999"))
        rows += [{**x, "Input": k} for x in r]
    bad = {k: int((~np.isfinite(dev[k])).sum()) for k in g}
    worst = max(g, key=lambda k: (bad[k] > 0, bad[k], -_cos_finite(dev[k], g[k]) if np.isfinite(dev[k]).any() else 9))
    cos, n = _state(rows)
    assert n == bad[worst]
    if np.isfinite(dev[worst]).any():
        assert cos == pytest.approx(_cos_finite(dev[worst], g[worst]), abs=1e-9)
    else:
        assert math.isnan(cos)
    if case == "finite_only":
        assert worst == "b" and n == 0


@pytest.mark.parametrize("bad_fraction", [0.25, 0.75, 1.0])
def test_a_cosine_next_to_nan_inf_says_it_is_over_the_finite_values_and_how_many_of_all(bad_fraction):
    """'0.99998 with 96 NaN/Inf' read as almost fine when 96 of 128 values are NaN/Inf: the text says the cosine
    is over the finite values and gives N of M (counted here), or n/a when nothing finite is left."""
    from toolkit.tuning.advice import _measures
    from toolkit.tuning.tune import check_outputs, parse_target

    rng = np.random.default_rng(int(bad_fraction * 8))
    g = rng.standard_normal((4, 32)).astype(np.float32)
    d = g + rng.standard_normal(g.shape).astype(np.float32) * 1e-3
    n_bad = int(bad_fraction * g.size)
    d.reshape(-1)[:n_bad] = np.inf
    _, rows, _ = check_outputs({"y": d}, {"y": g}, parse_target("CosineSimilarity>=0.9999"))
    text = _measures([{**r, "Input": "x"} for r in rows])["cosine"]
    assert text.endswith(f"with {n_bad} of {g.size} NaN/Inf")
    assert text.startswith("n/a") if n_bad == g.size else "on the finite values" in text


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("offset,spread", [(1000.0, 0.3), (-3000.0, 1.0)])
def test_outputs_whose_differences_fp16_erases_on_an_offset_fail_and_the_fix_is_tunes(tmp_path, offset, spread):
    """Logits = x·W + offset (a bias of ``offset``, the differences of size ``spread``): in FP16 the values round in
    steps comparable to the spread, within the magnitude-scaled noise, and the argmax flips (numpy, onnxruntime).
    diagnose FAILs on the output's KullbackLeiblerDivergence, its verified fix restores the argmax, and tune at the
    default target keeps the same set."""
    rng = np.random.default_rng(int(abs(offset)))
    w = rng.standard_normal((16, 10)) * spread / 4
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
                           helper.make_node("Add", ["h", "b"], ["logits"], name="bias")], "tied",
                          [helper.make_tensor_value_info("x", F, [64, 16])],
                          [helper.make_tensor_value_info("logits", F, [64, 10])],
                          [_c("w", w), _c("b", np.full(10, offset))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": rng.standard_normal((64, 16)).astype(np.float32)}
    ref = _ort(model, feeds)["logits"]
    cfg = Config(precision_mode="force_fp16", fusion_level=0, op_compiler_cache_mode="disable")
    before = _device_outputs(model, feeds, cfg, [])["logits"]
    assert np.mean(before.argmax(1) == ref.argmax(1)) < 0.9  # FP16 storage loses the argmax (numpy)
    assert _cos(before, ref) > 0.9999  # while cosine, dominated by the offset, does not see it
    prep, diag, fix = _diagnose(*_save(tmp_path, model, feeds), cfg)
    assert diag.summary["verdict"] == "FAIL"
    assert fix.met and fix.keep_dtype
    after = _device_outputs(prep.model, feeds, cfg, fix.keep_dtype)["logits"]
    assert np.mean(after.argmax(1) == ref.argmax(1)) == 1.0
    res = tune(prep.model, [("x", feeds)], cfg, DEFAULT_TARGET)
    assert res.met and sorted(res.chosen) == sorted(fix.keep_dtype)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_an_accumulated_error_finding_over_one_kernel_says_it_is_that_kernels_rounding(n):
    """With one FP16 kernel and no origin, nothing accumulated: the finding names that kernel's rounding, never
    "accumulated over 1 FP16 kernels"; with more, it says over how many."""
    import pandas as pd

    from toolkit.tuning.advice import accumulated_finding

    ranking = pd.DataFrame({"KeepName": [f"k{i}" for i in range(n)], "OutputShare": [1.0 / n] * n})
    fix = VerifiedFix(target=[], needed=True, met=True, searched=True, keep_dtype=["k0"])
    text = accumulated_finding(ranking, fix).recommendation
    assert ("accumulated over" in text) == (n > 1)
    assert (f"accumulated over {n} FP16 kernels" in text) == (n > 1)
    assert ("the one FP16 kernel, 'k0'" in text) == (n == 1)
