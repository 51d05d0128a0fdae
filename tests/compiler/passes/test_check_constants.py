"""check_constants (toolkit/compiler/passes/check_constants.py): the FP16 representability test against a
float64 statement of the three faults, on random arrays over 19 decades and on the boundaries (2**-25 rounds
to zero, 2**-24 does not; 65504 is the largest finite FP16, 65520 rounds to inf; odd integers above 2048 are
inexact); material changes against each role's tolerance, and the findings that name the initializer."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.compiler.helpers import f32
from tests.graphs import N, make_model
from toolkit.compiler.passes.check_constants import ADDITIVE_REL_TOL, REL_TOL, fp16_constant_issues, material_issues
from toolkit.config.schema import Config
from toolkit.engine import Session


def reference(arr: np.ndarray) -> dict:
    a = arr.astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = arr.astype(np.float16).astype(np.float64)
    fin = np.isfinite(a)
    ev = {}
    over = fin & (np.abs(a) > 65504)
    if over.any():
        ev["overflow"] = {"count": int(over.sum()), "absmax": float(np.abs(a[over]).max())}
    under = fin & (a != 0) & (h == 0)
    if under.any():
        ev["underflow_to_zero"] = {"count": int(under.sum()), "absmin": float(np.abs(a[under]).min()),
                                   "nonzero": int((fin & (a != 0)).sum())}
    ints = fin & (a == np.round(a)) & (np.abs(a) > 2048) & (h != a) & ~over
    if ints.any():
        ev["integer_inexact"] = {"count": int(ints.sum()), "example": float(a[ints].flat[0])}
    return ev


EDGES = [
    np.array([], np.float32),
    np.array([2.0 ** -25, -(2.0 ** -25), 2.0 ** -24, 1e-30, 0.0], np.float32),
    np.array([2048, 2049, 2050, 4097, -4097], np.float32),
    np.array([65504, 65519, 65520, -1e6, np.inf, -np.inf, np.nan], np.float32),
    np.full((3, 4), 0.5, np.float32),
]


@pytest.mark.parametrize("arr", EDGES, ids=["empty", "underflow-edge", "integers", "overflow-edge", "benign"])
def test_boundaries(arr):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fp16_constant_issues(arr) == reference(arr)


def test_random_arrays_over_many_decades():
    rng = np.random.default_rng(11)
    for _ in range(400):
        a = (rng.standard_normal(int(rng.integers(1, 64))) * 10.0 ** rng.uniform(-12, 7)).astype(np.float32)
        if rng.random() < 0.3:
            a = np.round(a)
        if rng.random() < 0.1:
            a[0] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert fp16_constant_issues(a) == reference(a)


@pytest.mark.parametrize("values,want", [
    ([1e-12], "error"),                      # an eps that becomes 0
    ([1e-12, -3e-9, 0.0], "error"),          # every non-zero value flushes
    ([0.5, 1e-12, 0.25, -0.75], "warning"),  # some weights flush: each moves by < 2**-25
    ([1e5, 0.5], "error"),                   # overflow
    ([4097.0, 2.0], "warning"),              # integer exactness only
])
def test_severity(values, want):
    from toolkit.compiler.passes.check_constants import severity

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert severity(fp16_constant_issues(np.array(values, np.float32))) == want


def test_fp16_constant_issues_does_not_warn_and_counts_overflow():
    from toolkit.compiler.passes.check_constants import fp16_constant_issues

    a = np.array([1e6, -7e4, 65504.0, 1.0, 3e38], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ev = fp16_constant_issues(a)
    over = np.abs(a) > 65504.0  # float16 max, by hand
    assert ev["overflow"] == {"count": int(over.sum()), "absmax": float(np.abs(a[over]).max())}


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


def _f16(v) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(v, np.float32).astype(np.float16).astype(np.float64)


def _max_rel(a) -> float:
    a = np.asarray(a, np.float32).astype(np.float64)
    nz = a != 0
    return float((np.abs(_f16(a)[nz] - a[nz]) / np.abs(a[nz])).max())


def test_overflow_and_all_flushed_are_errors():
    a = np.array([1e5, 0.5, -7e4], np.float32)
    ev = material_issues(a)
    assert ev["overflow"]["count"] == int((np.abs(a) > FP16_MAX).sum()) == 2
    e = np.array([1e-12, -3e-9, 0.0], np.float32)
    assert (_f16(e) == 0).all()
    assert material_issues(e)["underflow_to_zero"]["count"] == 2


@pytest.mark.parametrize("value", [3e-8, 1e-7, 5e-7, 1e-6, 2.65e-6, 1e-5, 1e-4, 0.5])
def test_small_constant_change_against_each_role_tolerance(value):
    rel = _max_rel([value])
    assert (rel > 0.5) == (value == 3e-8)  # 3e-8 becomes 2**-24 = 5.96e-8 (+99%), by numpy
    for additive, tol in ((True, 2.0 ** -4), (False, 1e-3)):
        ev = material_issues(np.array([value], np.float32), additive=additive)
        assert ("value_change" in ev) == (rel > tol), (value, additive, rel)
        if ev:
            assert ev["value_change"]["fp16"] == float(_f16(value)[()])
            assert ev["value_change"]["max_rel"] == pytest.approx(rel, rel=1e-9)
    assert (ADDITIVE_REL_TOL, REL_TOL) == (2.0 ** -4, 1e-3)


def test_integers_lose_exactness_in_small_or_integer_tensors_only():
    assert _f16(4097.0) != 4097.0
    assert "integer_inexact" in material_issues(np.array([4097.0, 2.0], np.float32))
    table = np.arange(5000, dtype=np.float32)  # an index table kept as floats: every value an integer
    ev = material_issues(table)
    assert ev["integer_inexact"]["count"] == int((_f16(table) != table).sum())
    w = np.random.default_rng(5).normal(0, 0.1, 1000).astype(np.float32)
    w[0] = 4097.0  # one integer-valued weight among fractional ones: ordinary rounding (2.4e-4 relative)
    d = _f16(w) - w.astype(np.float64)
    assert np.linalg.norm(d) / np.linalg.norm(w.astype(np.float64)) < 1e-3
    assert material_issues(w) == {}


def test_a_handful_of_denormal_weights_is_not_reported_but_a_shifted_tensor_is():
    w = np.random.default_rng(6).normal(0, 0.1, 57361).astype(np.float32)
    w[[0, 1]] = [3e-39, -1e-40]  # FP32 denormals, flushed to 0 in FP16
    assert (_f16(w[[0, 1]]) == 0).all()
    rel_l2 = np.linalg.norm(_f16(w) - w.astype(np.float64)) / np.linalg.norm(w.astype(np.float64))
    assert rel_l2 < 1e-3
    assert material_issues(w) == {}
    tiny = np.random.default_rng(7).normal(0, 1e-5, 1000).astype(np.float32)  # mostly FP16 subnormals
    rel_l2 = np.linalg.norm(_f16(tiny) - tiny.astype(np.float64)) / np.linalg.norm(tiny.astype(np.float64))
    assert rel_l2 > 1e-3
    ev = material_issues(tiny)
    assert ev["norm_change"]["rel_l2"] == pytest.approx(rel_l2, rel=1e-9)
    assert ev["norm_change"]["flushed_to_zero"] == int(((tiny != 0) & (_f16(tiny) == 0)).sum())


def _const_findings(nodes, inits, precision_mode="force_fp16"):
    from toolkit.engine import compile_model

    m = _model(nodes, [("x", [2, 8])], [("y", [2, 8])], inits)
    res = compile_model(m, Config(precision_mode=precision_mode), input_shapes={"x": [2, 8]})
    return {f.subject: f for f in res.findings if f.kind == "fp16_constant"}


def test_compiler_reports_the_eps_but_not_an_activation_bias():
    found = _const_findings([helper.make_node("Add", ["x", "eps"], ["a"], name="addeps"),
                             helper.make_node("Add", ["a", "bias"], ["b"], name="addbias"),
                             helper.make_node("Mul", ["b", "scale"], ["y"], name="mulscale")],
                            {"eps": 3e-8, "bias": -2.65e-6, "scale": 1e-6})
    # eps +99% (> 2**-4, added); bias -1.1% (< 2**-4, added); scale +1.3% (> 1e-3, multiplies)
    assert _max_rel([3e-8]) > 2 ** -4 > _max_rel([-2.65e-6]) and _max_rel([1e-6]) > 1e-3
    assert set(found) == {"eps", "scale"}
    assert found["eps"].severity == "warning" and "5.96e-08" in found["eps"].recommendation
    assert "addeps" in found["eps"].recommendation
    # in FP32 kernels nothing is converted
    assert _const_findings([helper.make_node("Add", ["x", "eps"], ["y"], name="addeps")], {"eps": 3e-8},
                           "force_fp32") == {}


def test_l2_change_fast_path_never_hides_a_material_change():
    """The bound that lets large tensors skip the FP16 conversion is an upper bound of the real relative L2
    change (computed here by numpy), so the fast path never hides a tensor the full rule reports."""
    from toolkit.compiler.passes import check_constants as cc

    rng = np.random.default_rng(11)
    for trial in range(300):
        n = int(rng.integers(17, 4000))
        a = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 1)).astype(np.float32)
        tiny_share = rng.choice([0.0, 0.001, 0.1, 0.9, 1.0])
        m = rng.random(n) < tiny_share
        a[m] = (rng.standard_normal(int(m.sum())) * 10.0 ** rng.uniform(-12, -5)).astype(np.float32)
        a = np.clip(a, -2048, 2048)
        mag = np.abs(a)
        tiny = int(np.count_nonzero((mag > 0) & (mag < 2.0 ** -14)))
        h = a.astype(np.float16).astype(np.float64)
        norm = np.linalg.norm(a.astype(np.float64))
        real = float(np.linalg.norm(h - a) / norm) if norm > 0 else 0.0
        if norm > 0:
            assert cc._l2_change_bound(a, tiny) >= real * (1 - 1e-9), trial
        full = real > cc.REL_TOL or (norm > 0 and np.count_nonzero(h) == 0 and np.count_nonzero(a) > 0)
        assert bool(cc.material_issues(a)) == full, (trial, real)


# ------------------------------------------------------------------------------ constant findings
def test_fp16_constant_findings_name_the_initializer():
    nodes = [N("Mul", ["x", "c_over"], ["a"], "mul_over"), N("Add", ["a", "c_under"], ["b"], "add_under"),
             N("Mul", ["b", "c_int"], ["c"], "mul_int"), N("Mul", ["c", "c_ok"], ["y"], "mul_ok")]
    model = make_model(nodes, [("x", [2, 3])], ["y"],
                       {"c_over": f32([1.0, 1e5, 2.0]), "c_under": f32(1e-12), "c_int": f32(4097.0),
                        "c_ok": f32([0.5, 2048.0, 3.0])})
    with np.errstate(over="ignore"):
        sess = Session(model, Config(precision_mode="force_fp16"))
    found = {f.subject: f for f in sess.compiled.findings if f.kind == "fp16_constant"}
    assert set(found) == {"c_over", "c_under", "c_int"}
    assert "overflow" in found["c_over"].evidence and found["c_over"].evidence["overflow"]["count"] == 1
    assert found["c_over"].evidence["reader"] == "mul_over" and found["c_over"].severity == "error"
    assert "underflow_to_zero" in found["c_under"].evidence and found["c_under"].severity == "error"
    assert found["c_int"].evidence["integer_inexact"]["example"] == 4097.0
    for name, f in found.items():
        assert name in f.recommendation
    # read by FP32 kernels, the same constants are harmless
    sess32 = Session(model, Config(precision_mode="force_fp16", keep_dtype=["mul_over", "add_under", "mul_int"]))
    assert not [f for f in sess32.compiled.findings if f.kind == "fp16_constant"]


def test_precision_recompiles_screen_each_constant_array_once_and_a_replaced_one_again(monkeypatch):
    """Precision-only recompiles share the structure stage's constant arrays: each is screened once, the
    evidence equals a fresh screen, and an array put in a constant's place is screened anew."""
    import gc

    from toolkit.compiler.passes import check_constants as cc

    calls = []
    real = cc.material_issues
    monkeypatch.setattr(cc, "material_issues", lambda a, add=False: calls.append(id(a)) or real(a, add))
    tiny = np.full(8, 1e-9, np.float32)  # every value flushes to zero in FP16
    first = cc.cached_material_issues(tiny)
    again = cc.cached_material_issues(tiny)
    assert first == again == real(tiny) and "underflow_to_zero" in first and len(calls) == 1
    fine = np.full(8, 0.5, np.float32)  # the same values would be a new screen: a new array is not the old one
    assert cc.cached_material_issues(fine) == {} and len(calls) == 2
    key = (id(tiny), False)
    del tiny
    gc.collect()
    assert key not in cc._ISSUES


# ------------------------------------------------------------------------------ constants a fold computed
def _conv_bn_model(var: float, gamma: float = 1.0, eps: float = 1e-5, gemm: bool = False) -> onnx.ModelProto:
    """Conv (or Gemm, transB=1) 'conv' with weight 'cw' (and bias 'cb') -> BatchNormalization 'bn' (scale 'g',
    B 'bb', mean 'rm', var 'rv' = ``var`` on every channel) -> Relu."""
    r = np.random.default_rng(5)
    c = 4
    if gemm:
        w = r.uniform(0.5, 1.5, (c, 6)) * r.choice([-1, 1], (c, 6))
        first = helper.make_node("Gemm", ["x", "cw", "cb"], ["c"], name="conv", transB=1)
        x_shape = [2, 6]
    else:
        w = r.uniform(0.5, 1.5, (c, 3, 3, 3)) * r.choice([-1, 1], (c, 3, 3, 3))
        first = helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1])
        x_shape = [1, 3, 6, 6]
    inits = {"cw": w, "cb": r.uniform(-0.1, 0.1, c), "g": np.full(c, gamma), "bb": np.zeros(c), "rm": np.zeros(c),
             "rv": np.full(c, var)}
    out_shape = [2, c] if gemm else [1, c, 6, 6]
    nodes = [first, helper.make_node("BatchNormalization", ["c", "g", "bb", "rm", "rv"], ["b"], name="bn",
                                     epsilon=eps),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _folded_weight(model: onnx.ModelProto) -> tuple[np.ndarray, np.ndarray]:
    """(W * gamma / sqrt(var + eps) per output channel, that factor), float64 by hand from the model."""
    init = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    eps = next(a.f for a in model.graph.node[1].attribute if a.name == "epsilon")
    k = init["g"] / np.sqrt(init["rv"] + np.float64(np.float32(eps)))
    w = init["cw"]
    return w * k.reshape((-1,) + (1,) * (w.ndim - 1)), k


@pytest.mark.parametrize("gemm", [False, True], ids=["conv", "gemm"])
@pytest.mark.parametrize("var,gamma,eps,clause", [
    (1e-10, 1.0, 1e-12, "overflow"),           # running_var tiny: the folded weight overflows FP16
    (1e18, 1.0, 1e-5, "underflow_to_zero"),    # running_var huge: every folded value flushes to 0 in FP16
    (1e12, 1.0, 1e-5, "norm_change"),          # folded weights ~1e-6, FP16 subnormals: the tensor changes
])
def test_a_bn_folded_constant_is_named_by_its_source_in_the_model(var, gamma, eps, clause, gemm):
    """Kind: an fp16_constant finding about a weight the compiler computed by folding a BatchNormalization into
    the node before it (fusion on). The finding says where it comes from in the model (the node, its weight, the
    BN and its running_var / scale, in evidence["folded_from"] and the recommendation), what FP16 does to it
    (judged on W*gamma/sqrt(var+eps) computed here) and what to change in the model; never only a name the model
    does not hold. With the fusion off no folded constant is compiled, so none is reported."""
    from toolkit.engine import compile_model

    model = _conv_bn_model(var, gamma, eps, gemm=gemm)
    w, k = _folded_weight(model)
    h = _f16(w.astype(np.float32))
    a = w.astype(np.float32).astype(np.float64)
    expect = {"overflow": bool((np.abs(a) > FP16_MAX).any()),
              "underflow_to_zero": bool((h == 0).all()),
              "norm_change": np.linalg.norm(h - a) / np.linalg.norm(a) > 1e-3}
    assert expect[clause]  # the variant does what it is meant to (numpy)
    shapes = {"x": [2, 6] if gemm else [1, 3, 6, 6]}
    with np.errstate(over="ignore"):
        res = compile_model(model, Config(precision_mode="force_fp16"), input_shapes=shapes)
    found = {f.subject: f for f in res.findings if f.kind == "fp16_constant"}
    model_names = {t.name for t in model.graph.initializer}
    folded = [f for name, f in found.items() if name not in model_names]
    assert folded, found
    f = next(x for x in folded if x.evidence["folded_from"]["role"] == "weight")
    assert clause in f.evidence
    src = f.evidence["folded_from"]
    assert src["node"] == "conv" and src["weight"] == "cw" and src["batchnorm"] == "bn"
    assert src["batchnorm_inputs"] == {"scale": "g", "B": "bb", "mean": "rm", "var": "rv"}
    assert set(src["inputs"]) == {"cw", "g", "bb", "rm", "rv"} <= model_names
    assert src["factor"]["absmax"] == pytest.approx(np.abs(k).max(), rel=1e-6)
    rec = f.recommendation
    for text in ("'cw'", "BatchNormalization 'bn'", "running_var 'rv'", "scale 'g'", "fusion"):
        assert text in rec, (text, rec)
    assert "clamp the constant" not in rec and "raise the constant" not in rec
    assert f.evidence["keep_dtype"] == ["conv"]
    # the fusion off: the BN is its own kernel, no constant of the compiler's is read (only the model's own)
    for cfg in ({"fusion_level": 0}, {"fusion_switch_file": {"Switch": {"GraphFusion": {"ConvBatchnormFusionPass": "off"}}}}):
        with np.errstate(over="ignore"):
            off = compile_model(model, Config(precision_mode="force_fp16", **cfg), input_shapes=shapes)
        subjects = {x.subject for x in off.findings if x.kind == "fp16_constant"}
        assert subjects <= model_names, (cfg, subjects)
        assert not any("folded_from" in x.evidence for x in off.findings if x.kind == "fp16_constant")


@pytest.mark.parametrize("how", ["initializer", "constant_node"])
def test_a_constant_of_the_model_has_no_folded_source(how):
    """Kind: an fp16_constant finding about a constant of the model itself (an initializer, or a Constant node's
    value), also next to a BN fold: no folded_from, the model-level advice about the constant."""
    from toolkit.engine import compile_model

    model = _conv_bn_model(1.0)
    big = numpy_helper.from_array(np.array([1e5], np.float32), "big")
    if how == "initializer":
        model.graph.initializer.append(big)
    else:
        model.graph.node.insert(0, helper.make_node("Constant", [], ["big"], name="bigconst", value=big))
    model.graph.node.append(helper.make_node("Mul", ["y", "big"], ["z"], name="mulbig"))
    model.graph.output[0].name = "z"
    with np.errstate(over="ignore"):
        res = compile_model(model, Config(precision_mode="force_fp16"), input_shapes={"x": [1, 3, 6, 6]})
    found = {f.subject: f for f in res.findings if f.kind == "fp16_constant"}
    assert set(found) == {"big"} and "folded_from" not in found["big"].evidence
    assert "clamp the constant" in found["big"].recommendation


@pytest.mark.parametrize("op,a,b,clause", [
    ("Mul", 400.0, 400.0, "overflow"),              # 1.6e5 > 65504
    ("Div", 1e-4, 1e5, "underflow_to_zero"),        # 1e-9 rounds to 0 in FP16
    ("Add", 6e4, 6e4, "overflow"),
])
def test_a_constant_computed_at_compile_time_is_named_by_the_node_it_replaced(op, a, b, clause):
    """Kind: an fp16_constant finding about a tensor fold_constants computed from the model's constants (the
    output of a node whose inputs are all initializers): the finding names that node and the initializers it is
    computed from (evidence folded_from) and advises changing those; the clause follows numpy's value of it."""
    from toolkit.engine import compile_model

    value = {"Mul": np.float32(a) * np.float32(b), "Div": np.float32(a) / np.float32(b),
             "Add": np.float32(a) + np.float32(b)}[op]
    assert bool(material_issues(np.full(3, value, np.float32)).get(clause))  # numpy's value does fail the clause
    m = _model([helper.make_node(op, ["ca", "cb"], ["ab"], name="fold_me"),
                helper.make_node("Mul", ["x", "ab"], ["y"], name="use")],
               [("x", [2, 3])], [("y", [2, 3])], {"ca": np.full(3, a), "cb": np.full(3, b)})
    with np.errstate(over="ignore"):
        res = compile_model(m, Config(precision_mode="force_fp16"), input_shapes={"x": [2, 3]})
    found = {f.subject: f for f in res.findings if f.kind == "fp16_constant"}
    assert set(found) == {"ab"} and clause in found["ab"].evidence
    assert found["ab"].evidence["folded_from"] == {"rule": "fold_constants", "node": "fold_me", "op_type": op,
                                                   "inputs": ["ca", "cb"]}
    assert f"{op} 'fold_me'" in found["ab"].recommendation and "('ca', 'cb')" in found["ab"].recommendation
