"""The FP16 / fusion / memory fault kinds of /work/shared/cases/fp16, each built here with its parameters swept
(tests/faultkinds/builders.py), diagnosed through the public API, and checked against properties computed
independently with numpy / plain onnxruntime.

Then every shared case folder is run as-is under the configuration its ``condition`` text describes.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.faultkinds import builders as fk
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.diagnose import diagnose, prepare
from toolkit.engine import Session, shapes_of

CASES_DIR = Path("/work/shared/cases/fp16")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy FP16 overflow is the point here


# ------------------------------------------------------------------ helpers
def run_diag(tmp_path: Path, built: fk.Built, stem: str = "model", **cfg):
    """Save ``built`` as files and diagnose them through prepare() + diagnose()."""
    mp, ip = built.save(tmp_path, stem)
    return diagnose(prepare(str(mp), str(ip)), Config(**cfg))


def first_node(diag) -> str | None:
    fd = diag.summary["first_divergence"]
    return fd["node"] if fd else None


def origins(diag) -> list[str]:
    t = diag.table
    return list(t.loc[(t["Role"] == "origin") & (t["OpType"] != "Input"), "NodeName"])


def output_rows(diag, model: onnx.ModelProto):
    outs = [o.name for o in model.graph.output]
    return diag.table[diag.table["TensorName"].isin(outs)]


def assert_output_clean(diag, model):
    rows = output_rows(diag, model)
    assert len(rows) == len(model.graph.output)
    assert not (rows["Abnormal"] | rows["OverFlow"]).any(), rows[["TensorName", "CosineSimilarity", "AbnormalMetrics"]]


def assert_output_broken(diag, model):
    rows = output_rows(diag, model)
    assert (rows["Abnormal"] | rows["OverFlow"]).any()


def assert_nothing_flagged(diag):
    t = diag.table
    assert diag.summary["first_divergence"] is None, diag.summary["first_divergence"]
    assert not (t["Abnormal"] | t["OverFlow"]).any(), t.loc[t["Abnormal"] | t["OverFlow"], ["NodeName", "AbnormalMetrics"]]
    assert not [f for f in diag.findings if f.severity == "error"], [(f.kind, f.subject) for f in diag.findings]
    assert diag.summary["verdict"] == "PASS"


def kernel_with(compiled_or_plan, node: str):
    plan = getattr(compiled_or_plan, "plan", compiled_or_plan)
    ks = [k for k in plan.kernels if node in k.nodes]
    assert len(ks) == 1, [(k.name, k.nodes) for k in ks]
    return ks[0]


def static_findings(built: fk.Built, **cfg):
    """Compiler findings only: no kernel is built and nothing runs."""
    return compile_model(built.model, Config(**cfg), input_shapes=shapes_of(built.feeds)).findings


def cosine(a, b) -> float:
    """Cosine similarity; 0 when either side is all zeros, NaN/inf entries counted as 0."""
    a, b = (np.nan_to_num(np.asarray(v, np.float64).ravel(), posinf=0.0, neginf=0.0) for v in (a, b))
    den = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / den) if den > 0 else 0.0


FP16_UNFUSED = dict(precision_mode="force_fp16", fusion_level=0)


# ------------------------------------------------------------------ c01 RMSNorm sum of squares
C01 = [(64, 300.0, "pow"), (256, 400.0, "pow"), (1024, 2000.0, "pow"), (64, 260.0, "mul"), (512, 900.0, "mul")]


@pytest.mark.parametrize("hidden,peak,square", C01)
def test_c01_rmsnorm_unfused_fp16_diverges_at_the_square(tmp_path, hidden, peak, square):
    b = fk.rmsnorm(hidden=hidden, peak=peak, square=square, seed=hidden)
    ref = fk.reference(b.model, b.feeds)
    assert ref["sq"].max() > fk.FP16_MAX and np.isinf(np.float16(ref["sq"].max()))  # the fault's precondition
    assert np.isfinite(ref["y"]).all()
    diag, extra = run_diag(tmp_path, b, **FP16_UNFUSED)
    assert first_node(diag) == "pow_sq"
    assert origins(diag)[0] == "pow_sq"
    assert diag.table.set_index("NodeName").loc["pow_sq", "OverFlow"]
    assert_output_broken(diag, b.model)
    # the FP16 run gives 0 or NaN on every row holding an outlier (x / inf, inf / inf)
    y = extra["npu_outputs"]["y"]
    assert np.all((y == 0) | np.isnan(y))
    assert diag.summary["verdict"] == "FAIL" and diag.summary["stage"] == "precision"


@pytest.mark.parametrize("hidden,peak,square", C01)
def test_c01_rmsnorm_fusion_restores(tmp_path, hidden, peak, square):
    b = fk.rmsnorm(hidden=hidden, peak=peak, square=square, seed=hidden)
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16", fusion_level=2)
    k = kernel_with(extra["compiled"], "pow_sq")
    assert k.rule == "RMSNormFusionPass" and set(fk.RMS_CHAIN) <= set(k.nodes)
    assert_nothing_flagged(diag)
    ref = fk.reference(b.model, b.feeds)["y"]
    np.testing.assert_allclose(extra["npu_outputs"]["y"], ref, rtol=4e-3, atol=4e-3)


@pytest.mark.parametrize("hidden,peak,square", C01)
def test_c01_rmsnorm_keep_dtype_of_the_chain_restores(tmp_path, hidden, peak, square):
    b = fk.rmsnorm(hidden=hidden, peak=peak, square=square, seed=hidden)
    diag, extra = run_diag(tmp_path, b, keep_dtype=b.keep, **FP16_UNFUSED)
    assert all(kernel_with(extra["compiled"], n).precision == "fp32" for n in b.keep)
    assert_nothing_flagged(diag)
    ref = fk.reference(b.model, b.feeds)["y"]
    np.testing.assert_allclose(extra["npu_outputs"]["y"], ref, rtol=4e-3, atol=4e-3)


def test_c01_sum_of_squares_overflows_only_in_fp16_accumulation(tmp_path):
    """Every square fits FP16 (|x| = 200) but their sum does not: FP32 accumulation (high_precision) is clean,
    FP16 accumulation (high_performance) makes the ReduceMean the origin."""
    b = fk.rmsnorm(hidden=256, peak=200.0, seed=3)
    ref = fk.reference(b.model, b.feeds)
    assert ref["sq"].max() < fk.FP16_MAX < (ref["sq"].astype(np.float64).sum(axis=-1)).max()
    clean, _ = run_diag(tmp_path, b, "hp", op_select_implmode="high_precision", **FP16_UNFUSED)
    assert_nothing_flagged(clean)
    acc, _ = run_diag(tmp_path, b, "hperf", op_select_implmode="high_performance", **FP16_UNFUSED)
    assert first_node(acc) == "mean_sq"


# ------------------------------------------------------------------ c02 decomposed LayerNorm
C02 = [(256, 64, 500.0, "pow", True), (128, 8, 300.0, "pow", False), (768, 16, 1000.0, "pow", True),
       (256, 4, 400.0, "mul", True), (64, 32, 600.0, "mul", False)]


@pytest.mark.parametrize("hidden,rows,peak,square,affine", C02)
def test_c02_layernorm_unfused_fp16_diverges_at_the_square(tmp_path, hidden, rows, peak, square, affine):
    b = fk.layernorm(hidden=hidden, rows=rows, peak=peak, square=square, affine=affine, seed=rows)
    ref = fk.reference(b.model, b.feeds)
    assert ref["sq"].max() > fk.FP16_MAX and np.abs(ref["centered"]).max() < fk.FP16_MAX
    diag, extra = run_diag(tmp_path, b, **FP16_UNFUSED)
    assert first_node(diag) == "ln_sq"
    assert origins(diag)[0] == "ln_sq"
    assert_output_broken(diag, b.model)
    assert cosine(extra["npu_outputs"]["y"], ref["y"]) < 0.9999


@pytest.mark.parametrize("hidden,rows,peak,square,affine", C02)
def test_c02_layernorm_fusion_restores(tmp_path, hidden, rows, peak, square, affine):
    b = fk.layernorm(hidden=hidden, rows=rows, peak=peak, square=square, affine=affine, seed=rows)
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16", fusion_level=2)
    k = kernel_with(extra["compiled"], "ln_sq")
    assert k.rule == "LayerNormFusionPass" and {"ln_mean", "ln_centered", "ln_normed", *fk.LN_CHAIN} <= set(k.nodes)
    assert_nothing_flagged(diag)
    ref = fk.reference(b.model, b.feeds)["y"]
    assert cosine(extra["npu_outputs"]["y"], ref) > 0.9999


@pytest.mark.parametrize("hidden,rows,peak,square,affine", C02)
def test_c02_layernorm_keep_dtype_restores_the_output(tmp_path, hidden, rows, peak, square, affine):
    b = fk.layernorm(hidden=hidden, rows=rows, peak=peak, square=square, affine=affine, seed=rows)
    diag, extra = run_diag(tmp_path, b, keep_dtype=b.keep, **FP16_UNFUSED)
    ref = fk.reference(b.model, b.feeds)["y"]
    assert cosine(extra["npu_outputs"]["y"], ref) > 0.9999
    assert_output_clean(diag, b.model)
    assert not [f for f in diag.findings if f.kind == "fp16_overflow"]
    assert diag.summary["verdict"] in ("PASS", "WARN")


@pytest.mark.parametrize("source", ["generated", "shared"])
def test_c02_after_the_recommended_fix_the_fixed_nodes_are_not_blamed_again(tmp_path, source):
    """Once the square and the variance run in FP32 (the advisor's own recommendation, and the shared case's
    stated fix), the diagnosis must not name one of those FP32 nodes as the origin and recommend keeping it
    in FP32 again."""
    keep = ["ln_sq", "ln_var"]
    if source == "generated":
        b = fk.layernorm(hidden=128, rows=8, peak=300.0, affine=False, seed=8)
        diag, extra = run_diag(tmp_path, b, keep_dtype=keep, **FP16_UNFUSED)
    else:
        folder = CASES_DIR / "c02_decomposed_layernorm_pow_overflow"
        if not folder.is_dir():
            pytest.skip(f"{folder} not present")
        diag, extra = diagnose(prepare(str(folder / "model.onnx"), str(folder / "inputs.npz")),
                               Config(keep_dtype=keep, **FP16_UNFUSED))
    assert all(kernel_with(extra["compiled"], n).precision == "fp32" for n in keep)
    blamed = [(f.kind, f.subject, f.evidence.get("abnormal_metrics")) for f in diag.findings if f.subject in keep]
    assert not blamed, f"{blamed}: these nodes already run in FP32"


# ------------------------------------------------------------------ c03 SE block pooling accumulation
C03 = [(32, 64, 20.0), (8, 32, 80.0), (16, 128, 5.0)]


@pytest.mark.parametrize("pool", ["reducemean", "gap"])
@pytest.mark.parametrize("channels,hw,level", C03)
def test_c03_se_pool_fp16_accumulation(tmp_path, pool, channels, hw, level):
    b = fk.se_block(channels=channels, hw=hw, level=level, pool=pool, seed=channels)
    x64 = b.feeds["x"].astype(np.float64)
    assert x64.sum(axis=(2, 3)).max() > fk.FP16_MAX > x64.mean(axis=(2, 3)).max()  # sum overflows, mean fits
    diag, _ = run_diag(tmp_path, b, "perf", precision_mode="force_fp16", op_select_implmode="high_performance")
    assert first_node(diag) == "se_pool"
    assert origins(diag)[0] == "se_pool"
    assert_output_broken(diag, b.model)


@pytest.mark.parametrize("pool", ["reducemean", "gap"])
@pytest.mark.parametrize("channels,hw,level", C03)
def test_c03_se_pool_fp32_accumulation_is_clean(tmp_path, pool, channels, hw, level):
    b = fk.se_block(channels=channels, hw=hw, level=level, pool=pool, seed=channels)
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16", op_select_implmode="high_precision")
    assert kernel_with(extra["compiled"], "se_pool").precision == "fp16"  # still an FP16 kernel
    assert_nothing_flagged(diag)


def test_c03_optypelist_applies_the_mode_to_listed_ops_only(tmp_path):
    b = fk.se_block(pool="reducemean")
    # the listed op types take op_select_implmode; every other op keeps the default, high_performance
    unlisted, _ = run_diag(tmp_path, b, "a", precision_mode="force_fp16", op_select_implmode="high_precision",
                           optypelist_for_implmode=["Softmax"])
    assert first_node(unlisted) == "se_pool"
    listed, _ = run_diag(tmp_path, b, "b", precision_mode="force_fp16", op_select_implmode="high_precision",
                         optypelist_for_implmode=["ReduceMean"])
    assert_nothing_flagged(listed)


# ------------------------------------------------------------------ c04 attention mask constant
C04 = [(4, 16, -1e12, 4), (1, 8, -1e5, 1), (2, 32, -3.4e38, 16), (8, 12, -1e9, 11)]


@pytest.mark.parametrize("heads,seq,big_neg,masked", C04)
def test_c04_static_check_names_the_constant_before_any_run(heads, seq, big_neg, masked):
    b = fk.attention_mask(heads=heads, seq=seq, big_neg=big_neg, masked=masked)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isinf(np.float16(big_neg))
    found = [f for f in static_findings(b, precision_mode="force_fp16") if f.kind == "fp16_constant"]
    assert [f.subject for f in found] == ["big_neg"]
    assert "overflow" in found[0].evidence


@pytest.mark.parametrize("heads,seq,big_neg,masked", C04)
def test_c04_mask_constant_nan_starts_at_the_mask_mul(tmp_path, heads, seq, big_neg, masked):
    b = fk.attention_mask(heads=heads, seq=seq, big_neg=big_neg, masked=masked, seed=seq)
    ref = fk.reference(b.model, b.feeds)
    assert np.isfinite(ref["probs"]).all()
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16")
    assert "big_neg" in [f.subject for f in diag.findings if f.kind == "fp16_constant"]
    assert first_node(diag) == "mask_scale"
    probs = extra["npu_outputs"]["probs"]
    assert np.isnan(probs).any()  # 0 * -inf on the unmasked positions


@pytest.mark.parametrize("heads,seq,big_neg,masked", C04)
def test_c04_keep_dtype_of_the_mask_mul_removes_the_nan(tmp_path, heads, seq, big_neg, masked):
    b = fk.attention_mask(heads=heads, seq=seq, big_neg=big_neg, masked=masked, seed=seq)
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16", keep_dtype=["mask_scale"])
    probs = extra["npu_outputs"]["probs"]
    assert not np.isnan(probs).any()
    np.testing.assert_allclose(probs, fk.reference(b.model, b.feeds)["probs"], atol=2e-3)
    assert_output_clean(diag, b.model)


def test_c04_representable_mask_constant_is_not_flagged(tmp_path):
    b = fk.attention_mask(big_neg=-3e4)
    assert not [f for f in static_findings(b, precision_mode="force_fp16") if f.kind == "fp16_constant"]
    diag, _ = run_diag(tmp_path, b, precision_mode="force_fp16")
    assert_nothing_flagged(diag)


# ------------------------------------------------------------------ c05 QK^T product overflow
C05 = [(2, 128, 64, 40.0, "mul"), (1, 32, 32, 50.0, "div"), (4, 64, 128, 30.0, "mul"), (2, 16, 16, 70.0, "div")]


@pytest.mark.parametrize("heads,seq,dim,level,scale_op", C05)
def test_c05_unfused_attention_diverges_at_qk_matmul(tmp_path, heads, seq, dim, level, scale_op):
    b = fk.attention_scores(heads=heads, seq=seq, dim=dim, level=level, scale_op=scale_op, seed=dim)
    ref = fk.reference(b.model, b.feeds)
    # FP32 accumulation does not help: the stored product itself passes 65504; the scaled scores fit
    assert ref["qk"].max() > fk.FP16_MAX > np.abs(ref["qk_scaled"]).max()
    diag, _ = run_diag(tmp_path, b, **FP16_UNFUSED)
    assert first_node(diag) == "qk_matmul"
    assert origins(diag)[0] == "qk_matmul"
    assert_output_broken(diag, b.model)


@pytest.mark.parametrize("heads,seq,dim,level,scale_op", C05)
def test_c05_fused_attention_restores(tmp_path, heads, seq, dim, level, scale_op):
    b = fk.attention_scores(heads=heads, seq=seq, dim=dim, level=level, scale_op=scale_op, seed=dim)
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16", fusion_level=2)
    k = kernel_with(extra["compiled"], "qk_matmul")
    assert k.rule == "AttentionFusionPass" and k.op_type == "Attention"
    assert set(b.meta["attention_nodes"]) <= set(k.nodes)
    fr = extra["compiled"].fusion_result_json()
    assert int(next(iter(fr.values()))["graph_fusion"]["AttentionFusionPass"]["effect_times"]) == 1
    assert_nothing_flagged(diag)
    ref = fk.reference(b.model, b.feeds)["y"]
    np.testing.assert_allclose(extra["npu_outputs"]["y"], ref, rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------------ c06 eps underflow
C06 = [(4, 128, 1e-12, 0), (8, 64, 1e-9, 3), (2, 256, 2e-8, 1), (16, 32, 1e-20, 15)]


@pytest.mark.parametrize("rows,dim,eps,zero_row", C06)
def test_c06_eps_underflow_static_finding_and_nan_row(tmp_path, rows, dim, eps, zero_row):
    b = fk.normalize_eps(rows=rows, dim=dim, eps=eps, zero_row=zero_row, seed=rows)
    assert np.float16(eps) == 0 and eps > 0
    found = [f for f in static_findings(b, precision_mode="force_fp16") if f.kind == "fp16_constant"]
    assert [f.subject for f in found] == ["eps"] and "underflow_to_zero" in found[0].evidence
    ref = fk.reference(b.model, b.feeds)["y"]
    assert np.all(ref[zero_row] == 0)
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16")
    assert first_node(diag) in b.culprits
    y = extra["npu_outputs"]["y"]
    assert np.isnan(y[zero_row]).all()
    others = np.delete(np.arange(rows), zero_row)
    np.testing.assert_allclose(y[others], ref[others], rtol=5e-3, atol=5e-3)


def test_c06_representable_eps_is_not_flagged(tmp_path):
    b = fk.normalize_eps(eps=1e-3)
    assert not static_findings(b, precision_mode="force_fp16")
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16")
    assert_nothing_flagged(diag)
    assert np.all(extra["npu_outputs"]["y"][0] == 0)


# ------------------------------------------------------------------ c07 BN after Relu must not fold
C07 = [(1, 8, 32, 3), (3, 16, 17, 1), (4, 6, 9, 5)]


def _wrongly_folded(b: fk.Built) -> np.ndarray:
    """relu(conv(x, W*k) + bias'): what folding the BN into the Conv across the Relu would compute."""
    mt = b.meta
    k = mt["s"].astype(np.float64) / np.sqrt(mt["var"].astype(np.float64) + 1e-5)
    w = (mt["w"] * k.reshape(-1, 1, 1, 1)).astype(np.float32)
    bias = ((0 - mt["mean"]) * k + mt["b"]).astype(np.float32)
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[mt["pad"]] * 4),
         onnx.helper.make_node("Relu", ["c"], ["y"])], "wrong",
        [fk._vi("x", b.feeds["x"].shape)], [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [fk._c("w", w), fk._c("bias", bias)])
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, b.feeds)[0]


@pytest.mark.parametrize("level", [0, 1, 2])
@pytest.mark.parametrize("cin,channels,hw,ksize", C07)
def test_c07_bn_after_relu_is_not_folded_and_fp32_matches(tmp_path, level, cin, channels, hw, ksize):
    b = fk.conv_bn(channels_in=cin, channels=channels, hw=hw, ksize=ksize, relu_between=True, seed=hw)
    ref = fk.reference(b.model, b.feeds)["y"]
    assert np.abs(_wrongly_folded(b) - ref).max() > 0.1  # folding across the Relu would really be wrong
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp32", fusion_level=level)
    bn_kernel = kernel_with(extra["compiled"], "bn")
    assert "conv" not in bn_kernel.nodes and bn_kernel.rule != "ConvBatchnormFusionPass"
    np.testing.assert_allclose(extra["npu_outputs"]["y"], ref, rtol=1e-5, atol=1e-5)
    assert_nothing_flagged(diag)


@pytest.mark.parametrize("level", [0, 1, 2])
@pytest.mark.parametrize("cin,channels,hw,ksize", C07)
def test_c07_direct_conv_bn_is_folded_from_level_1(tmp_path, level, cin, channels, hw, ksize):
    b = fk.conv_bn(channels_in=cin, channels=channels, hw=hw, ksize=ksize, relu_between=False, seed=hw)
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp32", fusion_level=level)
    k = kernel_with(extra["compiled"], "bn")
    if level == 0:
        assert k.nodes == ["bn"]
    else:
        assert k.rule == "ConvBatchnormFusionPass" and k.nodes == ["conv", "bn"]
        assert not [kk for kk in extra["compiled"].plan.kernels if kk.op_type == "BatchNormalization"]
    np.testing.assert_allclose(extra["npu_outputs"]["y"], fk.reference(b.model, b.feeds)["y"], rtol=1e-5, atol=1e-5)
    assert_nothing_flagged(diag)


# ------------------------------------------------------------------ c08 softplus Exp overflow
C08 = [(64, 30.0, -10.0), (256, 12.0, -5.0), (17, 80.0, 0.0), (100, 15.0, -40.0)]


@pytest.mark.parametrize("width,xmax,xmin", C08)
def test_c08_softplus_exp_overflow(tmp_path, width, xmax, xmin):
    b = fk.softplus(width=width, xmax=xmax, xmin=xmin, seed=width)
    x = b.feeds["x"]
    assert np.exp(x.astype(np.float64)).max() > fk.FP16_MAX and (x > np.log(fk.FP16_MAX)).any()
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16")
    assert first_node(diag) == "exp"
    assert origins(diag)[0] == "exp"
    y = extra["npu_outputs"]["y"]
    assert not np.isfinite(y[x > 11.1]).any()


@pytest.mark.parametrize("width,xmax,xmin", C08)
def test_c08_keep_dtype_of_exp_add_log_restores(tmp_path, width, xmax, xmin):
    b = fk.softplus(width=width, xmax=xmax, xmin=xmin, seed=width)
    x = b.feeds["x"]
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16", keep_dtype=b.keep)
    y = extra["npu_outputs"]["y"]
    big = x > 11.1
    assert np.abs(y[big] - x[big]).max() < 1e-3  # softplus(x) = x + log1p(exp(-x)) ≈ x
    np.testing.assert_allclose(y, np.logaddexp(0.0, x.astype(np.float64)), rtol=1e-5, atol=1e-5)
    assert_nothing_flagged(diag)


# ------------------------------------------------------------------ c09 BN variance out of range, unfused
C09 = [(4, 16, 1e5, 6e-8), (8, 8, 1e6, None), (6, 12, 7e4, 1e-8), (16, 4, 3e38, 1e-9)]


@pytest.mark.parametrize("channels,hw,big,tiny", C09)
def test_c09_unfused_bn_variance(tmp_path, channels, hw, big, tiny):
    b = fk.bn_variance(channels=channels, hw=hw, big_var=big, tiny_var=tiny, seed=channels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isinf(np.float16(big))
    found = [f for f in static_findings(b, **FP16_UNFUSED) if f.kind == "fp16_constant"]
    assert "v" in [f.subject for f in found]
    diag, extra = run_diag(tmp_path, b, **FP16_UNFUSED)
    assert first_node(diag) == "bn"
    assert origins(diag)[0] == "bn"
    ref = fk.reference(b.model, b.feeds)["y"]
    c = b.meta["big_channel"]
    assert not np.allclose(extra["npu_outputs"]["y"][0, c], ref[0, c], atol=1e-2)  # var -> inf wipes the channel


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("channels,hw,big,tiny", C09)
def test_c09_bn_folded_in_fp32_is_clean(tmp_path, level, channels, hw, big, tiny):
    b = fk.bn_variance(channels=channels, hw=hw, big_var=big, tiny_var=tiny, seed=channels)
    diag, extra = run_diag(tmp_path, b, precision_mode="force_fp16", fusion_level=level)
    k = kernel_with(extra["compiled"], "bn")
    assert k.rule == "ConvBatchnormFusionPass" and k.nodes == ["conv", "bn"] and k.precision == "fp16"
    assert not diag.findings
    assert_nothing_flagged(diag)


# ------------------------------------------------------------------ c10 repeated runs bitwise equal
C10 = [(192, 197, 512), (64, 50, 512), (384, 7, 1), (96, 33, 64)]


@pytest.mark.parametrize("impl", ["high_performance", "high_precision"])
@pytest.mark.parametrize("channels,width,alignment", C10)
def test_c10_repeated_runs_are_bitwise_equal(channels, width, alignment, impl):
    b = fk.transpose_layernorm(channels=channels, width=width, seed=channels)
    cfg = Config(precision_mode="force_fp16", memory_reuse="greedy", memory_alignment=alignment,
                 op_select_implmode=impl)
    sess = Session(b.model, cfg, input_shapes=shapes_of(b.feeds))
    assert sess.plan.arena_bytes < sum(t.nbytes for t in sess.plan.tensors.values() if t.storage == "arena")  # reuse on
    first = sess.run(b.feeds).outputs["y"]
    second = sess.run(b.feeds).outputs["y"]
    other = {"x": fk.fp16_exact(np.random.default_rng(99).standard_normal(b.feeds["x"].shape) * 7.0)}
    sess.run(other)
    third = sess.run(b.feeds).outputs["y"]
    assert first.tobytes() == second.tobytes() == third.tobytes()
    ref = fk.reference(b.model, b.feeds)["y"]
    np.testing.assert_allclose(first, ref, rtol=4e-3, atol=1e-2)


# ------------------------------------------------------------------ the shared case folders themselves
CASE_FOLDERS = sorted(p for p in CASES_DIR.glob("c*") if p.is_dir()) if CASES_DIR.is_dir() else []


def configs_for(condition: str) -> list[Config]:
    """The Config(s) a case's ``condition`` text describes (every fusion level when it says 'any')."""
    text = condition.lower()
    base: dict = {}
    if "fp32 precision" in text:
        base["precision_mode"] = "force_fp32"
    elif "fp16" in text:
        base["precision_mode"] = "force_fp16"
    if "high-performance" in text or "accumulated in fp16" in text:
        base["op_select_implmode"] = "high_performance"
    if "memory reuse" in text:
        base["memory_reuse"] = "greedy"
        if "most aggressive" in text:
            base["memory_alignment"] = 1
    if "any fusion level" in text:
        levels = [0, 1, 2]
    elif re.search(r"\bno \w+ fusion\b|\bunfused\b|folding switched off|fusion off", text):
        levels = [0]
    else:
        levels = [2]
    return [Config(**base, fusion_level=lv) for lv in levels]


def test_configs_for_maps_every_shared_condition():
    assert CASE_FOLDERS, f"no case folders under {CASES_DIR}"
    seen = {}
    for folder in CASE_FOLDERS:
        cond = json.loads((folder / "expected.json").read_text())["condition"]
        seen[folder.name[:3]] = [(c.precision_mode, c.fusion_level, c.op_select_implmode) for c in configs_for(cond)]
    assert seen["c01"] == seen["c02"] == [("force_fp16", 0, "high_performance")]
    assert seen["c05"][0][:2] == ("force_fp16", 0) and seen["c09"][0][:2] == ("force_fp16", 0)
    assert seen["c07"] == [("force_fp32", lv, "high_performance") for lv in (0, 1, 2)]
    assert all(v[0][0] == "force_fp16" for k, v in seen.items() if k != "c07")


@pytest.mark.parametrize("folder", CASE_FOLDERS, ids=[p.name for p in CASE_FOLDERS])
def test_shared_case_under_its_condition(folder):
    expected = json.loads((folder / "expected.json").read_text())
    inputs = folder / "inputs.npz"
    prep = prepare(str(folder / "model.onnx"), str(inputs) if inputs.is_file() and inputs.stat().st_size else None)
    for cfg in configs_for(expected["condition"]):
        diag, extra = diagnose(prep, cfg)
        what = f"{folder.name} under {cfg.precision_mode}/level {cfg.fusion_level}"
        if expected["culprits"]:
            assert first_node(diag) in expected["culprits"], f"{what}: first divergence {first_node(diag)}"
            assert set(diag.summary["origin_nodes"]) & set(expected["culprits"]), what
            assert origins(diag)[0] in expected["culprits"], what
            assert diag.summary["verdict"] == "FAIL"
        else:
            assert_nothing_flagged(diag)
        if folder.name.startswith("c10"):
            sess = Session(prep.model, cfg, input_shapes=shapes_of(prep.feeds))
            a, b = sess.run(prep.feeds).outputs, sess.run(prep.feeds).outputs
            for name in a:
                assert a[name].tobytes() == b[name].tobytes()
                np.testing.assert_allclose(a[name], extra["golden"][name], rtol=4e-3, atol=1e-2)
        if folder.name.startswith("c07"):
            for name, arr in extra["npu_outputs"].items():
                np.testing.assert_allclose(arr, extra["golden"][name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("folder", [p for p in CASE_FOLDERS if p.name[:3] in ("c04", "c06", "c09")],
                         ids=lambda p: p.name)
def test_shared_case_static_constant_finding(folder):
    """c04 big_neg, c06 eps, c09 v: named by the compiler alone (no run)."""
    want = {"c04": "big_neg", "c06": "eps", "c09": "v"}[folder.name[:3]]
    prep = prepare(str(folder / "model.onnx"), str(folder / "inputs.npz"))
    cfg = configs_for(json.loads((folder / "expected.json").read_text())["condition"])[0]
    res = compile_model(prep.model, cfg, input_shapes=shapes_of(prep.feeds))
    assert want in [f.subject for f in res.findings if f.kind == "fp16_constant"]
