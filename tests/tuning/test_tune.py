"""`tune` (toolkit/tuning/tune.py): the FP32-fallback search, targets, and the peer's FP32 set checked on the
simulated NPU (bench/bench_tune.py).

Every accuracy claim is re-checked independently of the toolkit's comparison code: the tuned config is compiled
from scratch with toolkit.engine.Session and its outputs compared, with numpy, to plain onnxruntime outputs
computed here."""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.faultkinds import builders as fk
from toolkit.config.schema import Config
from toolkit.engine import Session, shapes_of
from toolkit.core.errors import UsageError
from toolkit.inputs import input_specs, load_npz
from toolkit.ir.load import load_model
from toolkit.tuning.tune import keep_config, parse_target, search, search_cheapest, tune


def _fake_tuner(trials: dict):
    return SimpleNamespace(cache={k: SimpleNamespace(met=met, rows=rows) for k, (met, rows) in trials.items()})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_without_it_is_not_claimed_when_the_set_fails_too():
    from toolkit.tuning.tune import NOT_MET_WITH_IT, _without_it

    fail = [{"Failed": "CosineSimilarity>=1.0"}]
    tuner = _fake_tuner({("a", "b"): (False, fail), ("b",): (False, fail)})
    assert _without_it(["a", "b"], "a", tuner) == NOT_MET_WITH_IT
    tuner = _fake_tuner({("a", "b"): (True, []), ("b",): (False, fail), ("a",): (True, [])})
    assert _without_it(["a", "b"], "a", tuner) == "fails CosineSimilarity>=1.0"
    assert _without_it(["a", "b"], "b", tuner) == "met"
    assert _without_it(["a", "b", "c"], "c", _fake_tuner({})) == "not tried"


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


def _smoff(w_scale: float = 1.0, seed: int = 0):
    """x -> MatMul 'proj' -> Add 'offset' (+20000) -> Softmax 'sm' -> MatMul 'ctx' (as the tester's smoff)."""
    rng = np.random.default_rng(seed)
    W = (rng.normal(0, 0.5, (64, 64)) * w_scale).astype(np.float32)
    V = rng.normal(0, 0.5, (64, 64)).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["logits"], name="proj"),
                helper.make_node("Add", ["logits", "off"], ["l2"], name="offset"),
                helper.make_node("Softmax", ["l2"], ["p"], name="sm", axis=-1),
                helper.make_node("MatMul", ["p", "V"], ["y"], name="ctx")],
               [("x", [4, 64])], [("y", [4, 64])], {"W": W, "off": 20000.0, "V": V})
    x = rng.uniform(0, 1, (4, 64)).astype(np.float32)
    return m, {"x": x}, W


def _target_met(model, feed, cfg):
    """Compile ``cfg`` from scratch and check CosineSimilarity>=0.9999, MaxAbsoluteError<=1e-2 with numpy
    against plain onnxruntime."""
    import onnxruntime as ort

    from toolkit.engine import Session, shapes_of
    from toolkit.ort.ort_env import session_options

    got = Session(model, cfg, input_shapes=shapes_of(feed)).run(feed).outputs["y"].astype(np.float64).ravel()
    sess = ort.InferenceSession(model.SerializeToString(), session_options(optimize=False),
                                providers=["CPUExecutionProvider"])
    ref = sess.run(None, feed)[0].astype(np.float64).ravel()
    if not np.isfinite(got).all():
        return False
    cos = got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref))
    return bool(cos >= 0.9999 and np.abs(got - ref).max() <= 1e-2)


TARGET = "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_tune_keeps_the_add_not_the_matmul():
    from toolkit.tuning.tune import tune

    model, feed, _ = _smoff()
    cfg = Config(fusion_level=0)
    assert not _target_met(model, feed, cfg)
    # both single-node sets meet the target; only the Add leaves every MatMul FLOP in FP16
    assert _target_met(model, feed, Config(fusion_level=0, keep_dtype=["offset"]))
    assert _target_met(model, feed, Config(fusion_level=0, keep_dtype=["proj"]))
    res = tune(model, [("x", feed)], cfg, TARGET)
    assert res.met and res.chosen == ["offset"], res.log
    assert res.coverage_after["flops_fp16_share"] == 1.0
    assert _target_met(model, feed, res.config)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_tune_keeps_the_matmul_when_its_own_output_overflows():
    from toolkit.tuning.tune import tune

    model, feed, W = _smoff(w_scale=20000.0, seed=1)
    logits = feed["x"].astype(np.float64) @ W.astype(np.float64)
    assert np.abs(logits).max() > FP16_MAX  # the product itself does not fit FP16: only FP32 'proj' helps
    assert not _target_met(model, feed, Config(fusion_level=0, keep_dtype=["offset"]))
    res = tune(model, [("x", feed)], Config(fusion_level=0), TARGET)
    assert res.met and "proj" in res.chosen and "offset" not in res.chosen, res.log
    assert _target_met(model, feed, res.config)


def test_search_cheapest_prefers_zero_cube_flops_then_replaces_a_cube_node():
    from toolkit.tuning.tune import search_cheapest

    cost = {"mm": 1e6, "add": 0.0, "mm2": 1e6, "mul": 0.0}
    # the MatMul alone or the two vector ops together meet the target: the vector pair costs no cube FLOPs
    meets = lambda k: "mm" in k or {"add", "mul"} <= set(k)  # noqa: E731
    chosen, ok = search_cheapest(["mm", "add", "mul"], meets, [], cost)
    assert ok and sorted(chosen) == ["add", "mul"]
    # 'mm2' is needed; 'mm' can be replaced by its neighbour 'add' (0 cube FLOPs) once 'mm2' is there
    meets = lambda k: "mm2" in k and ("mm" in k or "add" in k)  # noqa: E731
    log: list[str] = []
    chosen, ok = search_cheapest(["mm", "mm2", "add"], meets, log, cost, {"mm": ["add"], "mm2": []})
    assert ok and sorted(chosen) == ["add", "mm2"], log
    assert search_cheapest(["mm", "add"], lambda k: False, [], cost)[1] is False


X_4_8 = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


def _m1(path: Path) -> Path:
    """y = 3x + 1, z = exp(x) on x float32[4, 8] (two float outputs)."""
    from tests.graphs import affine_and

    m = affine_and("Exp")
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def test_tune_checks_exact_match_rate_on_integer_outputs():
    """check_outputs: an integer output with one of four positions differing has ExactMatchRate 3/4."""
    from toolkit.tuning.tune import check_outputs, parse_target

    golden = {"am": np.array([0, 1, 1, 0], np.int64), "y": np.ones(3, np.float32)}
    npu = {"am": np.array([0, 1, 0, 0], np.int64), "y": np.ones(3, np.float32)}
    met, rows, _ = check_outputs(npu, golden, parse_target("ExactMatchRate>=1,CosineSimilarity>=0.99"))
    by = {r["Output"]: r for r in rows}
    assert not met and by["am"]["ExactMatchRate"] == 0.75 and not by["am"]["Met"]
    assert by["am"]["Failed"] == "ExactMatchRate>=1.0"  # the float condition does not apply to it
    assert by["y"]["Met"] and by["y"]["Failed"] == ""
    met, _, _ = check_outputs(npu, golden, parse_target("ExactMatchRate>=0.75"))
    assert met


def test_tune_library_refuses_inapplicable_target_before_running(tmp_path):
    from toolkit.tuning.tune import tune

    m = onnx.load(_m1(tmp_path / "m.onnx"))
    with pytest.raises(UsageError, match="ExactMatchRate applies to integer/bool outputs only"):
        tune(m, [("a", {"x": X_4_8})], target="ExactMatchRate>=1")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_format_target_keeps_every_digit():
    from toolkit.tuning.tune import format_target, parse_target

    for text in ("CosineSimilarity>=0.9999999", "MaxAbsoluteError<=1.2345678901e-07", "CosineSimilarity>0.123456789"):
        (m, o, v), = parse_target(text)
        shown = format_target([(m, o, v)])[0]
        assert float(shown.split(o, 1)[1]) == float(text.split(o, 1)[1])
        assert shown.startswith(m + o)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_host_time_skips_the_warm_up_and_takes_the_median():
    from types import SimpleNamespace

    from toolkit.tuning.tune import host_time_ms

    class Fake:
        def __init__(self, times):
            self.times = list(times)

        def run(self, feed):
            return SimpleNamespace(total_ms=self.times.pop(0))

    times = [1000.0, 5.0, 1.0, 4.0, 2.0, 3.0]  # first run: session creation
    assert host_time_ms(Fake(times), {}, runs=5) == float(np.median(times[1:]))


CASES = Path("/work/shared/cases/fp16")
FOLDERS = sorted(p for p in CASES.glob("c*") if p.is_dir()) if CASES.is_dir() else []


#: each shared case's "condition" text as a config (see its expected.json)
CONDITIONS = {
    "c01": dict(precision_mode="force_fp16", fusion_level=0),
    "c02": dict(precision_mode="force_fp16", fusion_level=0),
    "c03": dict(precision_mode="force_fp16", op_select_implmode="high_performance"),
    "c04": dict(precision_mode="force_fp16"),
    "c05": dict(precision_mode="force_fp16", fusion_level=0),
    "c06": dict(precision_mode="force_fp16"),
    "c07": dict(precision_mode="force_fp32"),
    "c08": dict(precision_mode="force_fp16"),
    "c09": dict(precision_mode="force_fp16", fusion_level=0),
    "c10": dict(precision_mode="force_fp16", memory_alignment=1),
}


def ort_outputs(model: onnx.ModelProto, feed: dict) -> dict:
    """Plain onnxruntime, no graph optimisation (options compatible with a process-wide global thread pool,
    which an in-process CLI test of the same worker may have switched on)."""
    from toolkit.ort.ort_env import session_options

    sess = ort.InferenceSession(model.SerializeToString(), session_options(optimize=False),
                                providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


def assert_meets(model, feed, cfg: Config, cos_min=0.9999, mae_max=1e-2):
    """Compile ``cfg`` from scratch, run, and check the target against plain onnxruntime with numpy."""
    got = Session(model, cfg, input_shapes=shapes_of(feed)).run(feed).outputs
    for name, ref in ort_outputs(model, feed).items():
        x, y = np.asarray(got[name], np.float64).ravel(), np.asarray(ref, np.float64).ravel()
        assert np.isfinite(x).all() == np.isfinite(y).all(), name
        cos = float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y))) if np.any(y) else 1.0 - float(np.abs(x).max())
        assert cos >= cos_min, (name, cos)
        assert float(np.abs(x - y).max()) <= mae_max, (name, float(np.abs(x - y).max()))


# ------------------------------------------------------------------ the shared cases under their conditions
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name[:3] for p in FOLDERS])
def test_shared_case_tunes_to_a_culprit_and_meets_the_target(folder):
    expected = json.loads((folder / "expected.json").read_text())
    model = onnx.load(folder / "model.onnx")
    feed = load_npz(folder / "inputs.npz", input_specs(model))
    cfg = Config(**CONDITIONS[folder.name[:3]])
    res = tune(model, [("in", feed)], cfg, TARGET)
    assert res.met, res.log
    if expected["culprits"]:
        assert set(res.chosen) & set(expected["culprits"]), (res.chosen, expected["culprits"])
    else:
        assert res.chosen == []
    assert res.config.keep_dtype == list(cfg.keep_dtype) + res.chosen
    assert_meets(model, feed, res.config)


# ------------------------------------------------------------------ each fault kind, generated variants
KINDS = [
    ("rmsnorm_mul", lambda: fk.rmsnorm(hidden=128, rows=4, peak=600.0, square="mul", seed=3), dict(fusion_level=0)),
    ("layernorm", lambda: fk.layernorm(hidden=96, rows=8, peak=400.0, affine=False, seed=5), dict(fusion_level=0)),
    ("se_reducemean", lambda: fk.se_block(channels=16, hw=64, level=25.0, seed=1),
     dict(op_select_implmode="high_performance")),
    ("mask", lambda: fk.attention_mask(heads=2, seq=8, big_neg=-1e10, seed=2), {}),
    ("scores_div", lambda: fk.attention_scores(heads=1, seq=64, dim=32, level=50.0, scale_op="div", seed=4),
     dict(fusion_level=0)),
    ("eps", lambda: fk.normalize_eps(rows=3, dim=64, eps=1e-10, zero_row=2, seed=6), {}),
    ("softplus", lambda: fk.softplus(width=48, xmax=25.0, seed=7), {}),
    ("bn_var", lambda: fk.bn_variance(channels=3, hw=8, big_var=3e5, seed=8), dict(fusion_level=0)),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("make,extra", [(m, e) for _, m, e in KINDS], ids=[k for k, _, _ in KINDS])
def test_fault_kind_variant(make, extra):
    try:
        b = make()
    except TypeError as exc:  # a builder parameter this variant assumes is not there
        pytest.skip(f"builder signature: {exc}")
    ref = ort_outputs(b.model, b.feeds)
    cfg = Config(precision_mode="force_fp16", **extra)
    res = tune(b.model, [("gen", b.feeds)], cfg, TARGET)
    assert res.met and set(res.chosen) & set(b.culprits), (res.chosen, b.culprits, res.log)
    assert all(np.isfinite(v).all() for v in ref.values())
    assert_meets(b.model, b.feeds, res.config)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_worst_input_decides_and_every_input_is_verified():
    """Two inputs: only the second overflows; the set must fix it and hold on both."""
    calm = fk.rmsnorm(hidden=64, rows=2, peak=2.0, seed=1)
    hot = fk.rmsnorm(hidden=64, rows=2, peak=500.0, seed=1)
    feeds = [("calm", calm.feeds), ("hot", hot.feeds)]
    cfg = Config(precision_mode="force_fp16", fusion_level=0)
    res = tune(calm.model, feeds, cfg, TARGET)
    assert res.met and "pow_sq" in res.chosen
    assert set(res.after["Input"]) == {"calm", "hot"} and res.after["Met"].all()
    for _, f in feeds:
        assert_meets(calm.model, f, res.config)


# ------------------------------------------------------------------ search, target, ranges, inputs
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_search_finds_the_needed_set_with_fewer_runs_than_linear():
    ranked = [f"n{i}" for i in range(40)]
    need = {"n3", "n17", "n30"}
    calls = []

    def meets(keep):
        calls.append(tuple(keep))
        return need <= set(keep)

    chosen, ok = search(ranked, meets, [])
    assert ok and set(chosen) == need
    assert len({c for c in calls}) < 40 + 31  # doubling+bisection then one drop per member of the prefix
    assert search(ranked, lambda k: False, [])[1] is False
    assert search(ranked, lambda k: True, []) == ([], True)


def _monotone_oracles(seed: int):
    """Monotone targets over 12 ranked candidates (more FP32 never hurts): a needed set, and an accumulated
    error (each node removes its share; the target is met when enough is removed), as PP-OCRv4 det's is."""
    rng = np.random.default_rng(seed)
    names = [f"n{i}" for i in range(12)]
    need = set(rng.choice(names, size=int(rng.integers(1, 5)), replace=False))
    share = dict(zip(names, rng.random(12)))
    bar = float(rng.uniform(0.3, 0.8)) * sum(share.values())
    cost = {n: float(rng.choice([0.0, 1e6, 4e6])) for n in names}
    near = {n: [m for m in names if m != n and rng.random() < 0.25] for n in names}
    return names, cost, near, [lambda k: need <= set(k), lambda k: sum(share[n] for n in k) >= bar]


@pytest.mark.parametrize("seed", range(12))
def test_search_never_runs_a_try_a_failed_one_implies_and_stays_one_minimal(seed):
    """Over monotone targets: every keep set is run once at most; none is run that lies inside a set which
    already missed the target (its miss is implied); the answer meets the target and misses it without any one
    of its nodes (each member checked here directly, not through the search's log)."""
    names, cost, near, oracles = _monotone_oracles(seed)
    for target in oracles:
        asked: list[frozenset] = []

        def meets(keep):
            k = frozenset(keep)
            assert k not in asked, f"{sorted(k)} run twice"
            assert not any(k <= a and not target(a) for a in asked), f"{sorted(k)}: a miss already implied it"
            asked.append(k)
            return target(keep)

        chosen, ok = search_cheapest(names, meets, [], cost, near)
        assert ok == target(names)
        if ok:
            assert target(chosen)
            assert all(not target([c for c in chosen if c != n]) for n in chosen), chosen


def test_a_cube_nodes_replacement_is_not_run_when_its_drop_failed_with_the_neighbours_kept():
    """A cube node whose drop failed while its cheaper neighbours were in the set (here: inside the set of every
    candidate without cube ops) cannot be replaced by them: no try of them in its place is run."""
    cost = {"mm": 4e6, "add": 0.0, "mul": 0.0}
    calls: list[tuple] = []

    def meets(keep):
        calls.append(tuple(sorted(keep)))
        return "mm" in keep

    log: list[str] = []
    chosen, ok = search_cheapest(["add", "mm", "mul"], meets, log, cost, {"mm": ["add"]})
    assert ok and chosen == ["mm"]
    # ('add',) is never run: inside the missed set of every candidate without cube ops
    assert calls == [(), ("add", "mul"), ("add", "mm"), ("mm",)], calls
    assert any("implied" in line and "neighbours ['add']" in line for line in log), log


def test_without_it_reads_a_wider_failed_try_as_implied():
    from toolkit.tuning.tune import _without_it

    fail = [{"Failed": "CosineSimilarity>=0.9999"}]
    tuner = _fake_tuner({("a", "b", "c"): (True, []), ("b", "c", "x"): (False, fail)})
    assert _without_it(["a", "b", "c"], "a", tuner) == "fails CosineSimilarity>=0.9999 (implied: it failed with 1 " \
        "more node(s) in FP32)"
    assert _without_it(["a", "b", "c"], "b", tuner) == "not tried"  # no failed try without 'b' holds a and c


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("text,err", [("CosineSimilarity<=off", "'CosineSimilarity=off'"),  # every operator is
                                      ("MaxAbsoluteError>=-1", "takes values in"),          # accepted now (the
                                      ("Cosin>=0.9", "unknown metric"), ("CosineSimilarity 0.9", "expected"),
                                      ("", "empty"), ("CosineSimilarity=off", "no condition")])  # grammar's tests)
def test_parse_target_refuses_with_a_reason(text, err):
    with pytest.raises(UsageError, match=err):
        parse_target(text)
    assert parse_target(TARGET) == [("CosineSimilarity", ">=", 0.9999), ("MaxAbsoluteError", "<=", 0.01)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("passed", ["false", "yes", 1, None, np.array([True, False])])
def test_task_check_passed_must_be_a_real_bool(passed):
    """A task check whose ``passed`` is not a bool (a string "false" is truthy) never counts as met: tune
    validates results as diagnose does (toolkit.compare.tasks.run_check); one off the contract on the FP32
    reference itself is a usage error naming it, and one failing the reference too is refused as no keep set
    can pass it."""
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    def check(golden, npu, m):
        return {"name": "acc", "passed": passed, "value": 0.1, "detail": "accuracy dropped"}

    def good(golden, npu, m):
        return {"name": "acc", "passed": bool(np.array_equal(npu["y"], np.maximum(x, 0))), "value": 1.0, "detail": ""}

    def never(golden, npu, m):
        return {"name": "never", "passed": False, "value": 0.0, "detail": "never passes"}

    cfg = Config(precision_mode="force_fp32")
    assert tune(model, [("x", {"x": x})], cfg, tasks=[good]).met  # Relu in FP32 is exact: the target holds
    with pytest.raises(UsageError, match="also when given this input's FP32 reference"):
        tune(model, [("x", {"x": x})], cfg, tasks=[check])
    with pytest.raises(UsageError, match="fails the FP32 reference too.*no keep set can pass it"):
        tune(model, [("x", {"x": x})], cfg, tasks=[never])


BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_tune.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_tune_under_test", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _ort(model, feed) -> dict:
    from toolkit.ort.ort_env import session_options

    s = ort.InferenceSession(model.SerializeToString(), session_options(optimize=False),
                             providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


def _cos_mae(x, y) -> tuple[float, float]:
    """Cosine (zero-norm convention of the metric's docs: both zero → 1, one zero → 0) and max |x − y|."""
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    cos = float(x @ y / (nx * ny)) if nx and ny else float(nx == ny == 0)
    return cos, float(np.abs(x - y).max())


# ------------------------------------------------------------------ the peer's set on the simulated NPU
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_keep_config_adds_each_name_once_after_the_configs_own():
    cfg = Config(precision_mode="force_fp16", keep_dtype=["a"])
    got = keep_config(cfg, ["b", "a", "c"])
    assert got.keep_dtype == ["a", "b", "c"] and cfg.keep_dtype == ["a"]
    assert got.precision_mode == "force_fp16"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_peer_set_checked_on_device_fails_where_the_npu_shows_the_fault():
    """RMSNorm whose square overflows FP16: keeping nothing (what CPU onnxruntime lets the peer get away with)
    fails on the simulated NPU; keeping the culprit chain passes. The bench's verdict and numbers agree with
    numpy over our NPU outputs vs plain onnxruntime."""
    b = fk.rmsnorm(hidden=64, rows=2, peak=500.0, seed=1)
    bench = _bench()
    cond = {"fusion_level": 0}
    ref = _ort(b.model, b.feeds)
    for keep, want in (([], False), (tune(b.model, [("x", b.feeds)], bench.start_config(cond), TARGET).chosen, True)):
        got = bench.check_on_device(b.model, b.feeds, cond, list(keep))
        cfg = Config(precision_mode="force_fp16", fusion_level=0, keep_dtype=list(keep))
        with np.errstate(all="ignore"):
            npu = Session(b.model, cfg, input_shapes=shapes_of(b.feeds)).run(b.feeds).outputs
        name = b.model.graph.output[0].name
        finite = bool(np.isfinite(npu[name]).all())
        cos, mae = _cos_mae(npu[name], ref[name]) if finite else (float("nan"), float("nan"))
        assert got["met"] is want, (keep, got)
        assert got["met"] == (finite and cos >= 0.9999 and mae <= 1e-2)
        if finite:
            assert got["cos"] == pytest.approx(cos, abs=1e-9) and got["mae"] == pytest.approx(mae, rel=1e-6)
        else:
            assert "finite outputs" in "; ".join(got["failed"])


# ------------------------------------------------------------------ one reference run per input
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_reference_runs_once_per_input_even_when_searching(monkeypatch):
    from toolkit.ort import reference

    calls = []
    real = reference.ReferenceRunner.run
    monkeypatch.setattr(reference.ReferenceRunner, "run", lambda self, f: calls.append(1) or real(self, f))
    calm = fk.rmsnorm(hidden=64, rows=2, peak=2.0, seed=1)
    hot = fk.rmsnorm(hidden=64, rows=2, peak=500.0, seed=1)
    res = tune(calm.model, [("calm", calm.feeds), ("hot", hot.feeds)],
               Config(precision_mode="force_fp16", fusion_level=0), TARGET)
    assert res.met and res.chosen and len(calls) == 2
    # the sensitivity table was measured on the worst input ("hot"): its overflow shows in the ranking
    assert res.ranking["LocalOverflow"].any() or res.ranking["RangeOverflow"].any()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_coverage_flops_come_from_the_reference_shapes():
    """MatMul (2, 3, 8) x (8, 5): 2·|Y|·K = 2·(2·3·5)·8 FLOPs, all FP16 under force_fp16."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"], name="mm")], "m", [a], [y], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feed = {"a": np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32)}
    res = tune(model, [("x", feed)], Config(precision_mode="force_fp16"), "CosineSimilarity>=0.99")
    assert res.coverage_before["flops_total"] == 2 * (2 * 3 * 5) * 8


def test_the_advice_target_takes_the_users_lines_on_the_outputs():
    from toolkit.samples import SAMPLES
    from toolkit.tuning.tune import DEFAULT_TARGET, lines_target

    model = onnx.load(str(SAMPLES["resnet_small"].path))
    out = model.graph.output[0].name
    assert lines_target(model, None) == DEFAULT_TARGET
    got = parse_target(lines_target(model, f"MaxAbsErr<=1e-5,{out}:CosineSimilarity<0.99,not_an_output:RMSE<=1"))
    assert ("MaxAbsoluteError", "<=", 1e-5) in got and ("MaxAbsoluteError", "<=", 0.01) not in got
    assert ("CosineSimilarity", ">=", 0.9999) in got  # the default's, for every output
    assert any(c.output == out and c[0] == "CosineSimilarity" and c[2] == 0.99 for c in got)
    assert not any(c[0] == "RootMeanSquareError" for c in got)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_host_time_of_a_runtime_that_ran_already_takes_no_warm_up():
    from types import SimpleNamespace

    from toolkit.tuning.tune import host_time_ms

    class Fake:
        def __init__(self, times):
            self.times = list(times)

        def run(self, feed):
            return SimpleNamespace(total_ms=self.times.pop(0))

    fake = Fake([5.0, 1.0, 4.0])
    assert host_time_ms(fake, {}, runs=3, warm_up=False) == 4.0 and not fake.times


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("why", ["nan_input", "sqrt_of_negative"])
def test_tune_refuses_an_input_whose_fp32_reference_is_not_finite(why):
    """Kind: outputs the FP32 reference computes as NaN/Inf. No keep set can meet a target on them: tune names
    the input and the output (one line) instead of keeping every kernel in FP32 without a reason."""
    from toolkit.core.errors import InputError

    rng = np.random.default_rng(0)
    good = rng.normal(0, 1, (1, 8)).astype(np.float32)
    bad = good.copy()
    bad[0, 3] = np.nan
    op = "Sqrt" if why == "sqrt_of_negative" else "Relu"
    g = helper.make_graph([helper.make_node("Sub", ["x", "c"], ["s"], name="sub"),
                           helper.make_node(op, ["s"], ["y"], name="tail")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [numpy_helper.from_array(np.float32(50.0 if why == "sqrt_of_negative" else 0.0), "c")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = [("good.npz", {"x": good}), ("second.npz", {"x": bad if why == "nan_input" else good})]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert not np.isfinite(ref.run(None, feeds[1][1])[0]).all()  # independently: the reference is not finite
    with pytest.raises(InputError, match="FP32 reference output 'y' already holds") as e:
        tune(model, feeds, Config(precision_mode="force_fp16"))
    assert ("'second.npz'" in str(e.value) or "'good.npz'" in str(e.value)) and "\n" not in str(e.value)


def _io_model(outputs: list[tuple[str, int | None]]) -> onnx.ModelProto:
    """x float32[2, 3] -> each output: a Cast of x to its dtype (None: the output's type left undeclared)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    nodes, outs = [], []
    for name, dt in outputs:
        nodes.append(helper.make_node("Cast", ["x"], [name], name=f"cast_{name}", to=dt or TensorProto.FLOAT))
        outs.append(helper.make_tensor_value_info(name, dt, [2, 3]) if dt else onnx.ValueInfoProto(name=name))
    m = helper.make_model(helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("outputs, parts", [
    ([("f", TensorProto.FLOAT)], ["CosineSimilarity", "MaxAbsoluteError", "KullbackLeiblerDivergence"]),
    ([("i", TensorProto.INT8)], ["ExactMatchRate"]),
    ([("b", TensorProto.BOOL), ("i", TensorProto.INT64)], ["ExactMatchRate"]),
    ([("f", TensorProto.FLOAT16), ("i", TensorProto.INT32)], ["CosineSimilarity", "MaxAbsoluteError",
                                                             "KullbackLeiblerDivergence", "ExactMatchRate"]),
    ([("i", TensorProto.INT8), ("u", None)], ["CosineSimilarity", "MaxAbsoluteError", "KullbackLeiblerDivergence",
                                              "ExactMatchRate"]),
])
def test_the_default_target_bounds_what_the_outputs_can_be_checked_by(outputs, parts):
    """The default target holds the float conditions only when an output may be float and ExactMatchRate only when
    one may be integer/bool, so that tune without --target never refuses its own default; it runs."""
    from toolkit.tuning.tune import check_target_outputs, default_target

    m = _io_model(outputs)
    target = parse_target(default_target(m))
    assert [t[0] for t in target] == parts
    check_target_outputs(m, target, "the default target")  # does not raise
    res = tune(m, [("x", {"x": np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)})], Config())
    assert res.met and [t[0] for t in res.target] == parts


def test_tune_refuses_inputs_on_which_every_output_is_empty():
    from toolkit.core.errors import InputError

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="n0")], "g", [x],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    empty = ("a", {"x": np.zeros((0, 4), np.float32)})
    with pytest.raises(InputError, match=r"every graph output is empty on every input \(output 'y' is 0x4 on 'a'\)"):
        tune(m, [empty])
    with pytest.raises(InputError, match="every graph output is empty"):
        tune(m, [empty, ("b", {"x": np.ones((0, 4), np.float32)})])
    assert tune(m, [("c", {"x": -np.ones((3, 4), np.float32)})]).met


def test_tune_says_when_no_kernel_runs():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    m = helper.make_model(helper.make_graph([], "g", [x], [x]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    res = tune(m, [("a", {"x": np.ones((2, 3), np.float32)})])
    assert res.met and res.chosen == [] and any("no kernel runs on the device" in n for n in res.notes)
    relu = _io_model([("f", TensorProto.FLOAT)])
    assert tune(relu, [("a", {"x": np.ones((2, 3), np.float32)})]).notes == []


@pytest.mark.parametrize("lines", ["CosineSimilarity=off,MaxAbsoluteError=off,KullbackLeiblerDivergence=off",
                                   "y:CosineSimilarity=off,MaxAbsoluteError=off,KullbackLeiblerDivergence=off"])
def test_thresholds_that_turn_off_the_whole_default_target_are_named_as_thresholds(lines):
    from toolkit.tuning.tune import lines_target

    m = _io_model([("y", TensorProto.FLOAT)])
    with pytest.raises(UsageError, match=r"^--thresholds '.*' turns off every condition of the default target"):
        lines_target(m, lines)
    kept = parse_target(lines_target(m, "CosineSimilarity=off,MaxAbsoluteError>0.5,KullbackLeiblerDivergence=off"))
    assert [(t[0], t[1], t[2]) for t in kept] == [("MaxAbsoluteError", "<=", 0.5)]


# ------------------------------------------------------------------ the default target's FP16 noise allowance
# issue 17: the default target's absolute line is judged per element against the FP16 rounding of each value;
# a --target the user writes is applied as written. Expected values here are computed with numpy alone.
U16 = 2.0 ** -11  # unit roundoff of IEEE binary16 (11-bit significand), by hand
NOISE = 2 * U16  # allowed per element: the result's rounding and as much again from the operands


def _fp16_rounded(y: np.ndarray) -> np.ndarray:
    """``y`` rounded to an 11-bit significand (FP16's), with FP16's exponent range ignored so that 1e8 rounds too:
    np.float16 where it can hold the values, else frexp/ldexp."""
    y = np.asarray(y, np.float64)
    if np.abs(y).max() < 60000:
        return y.astype(np.float16).astype(np.float32)
    m, e = np.frexp(y)  # y = m·2^e, 0.5 <= |m| < 1: 11 significant bits = m rounded to 2^-11
    return np.ldexp(np.round(m * 2 ** 11) / 2 ** 11, e).astype(np.float32)


def _numpy_default_met(x, y) -> bool:
    """CosineSimilarity>=0.9999 and every |x_i - y_i| <= max(1e-2, 2^-10·max(|y_i|, rms(y))), with numpy."""
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    if not np.isfinite(x).all():
        return False
    cos = x @ y / (np.linalg.norm(x) * np.linalg.norm(y))
    rms = np.sqrt(np.mean(y * y))
    return bool(cos >= 0.9999 and (np.abs(x - y) <= np.maximum(1e-2, NOISE * np.maximum(np.abs(y), rms))).all())


def _check(npu, ref, target):
    from toolkit.tuning.tune import check_outputs

    return check_outputs({"y": npu}, {"y": ref}, parse_target(target))


@pytest.mark.parametrize("scale", [1.0, 1e2, 1e4, 1e8])
def test_fp16_rounding_meets_the_default_target_at_every_magnitude(scale):
    from toolkit.tuning.tune import DEFAULT_TARGET

    rng = np.random.default_rng(int(np.log10(scale)))
    ref = (rng.uniform(-1, 1, 4096) * scale).astype(np.float32)
    npu = _fp16_rounded(ref)
    err = np.abs(npu.astype(np.float64) - ref)
    # rounding only, by numpy (FP16 subnormals, below 2^-14, are spaced 2^-24: half of that absolute)
    assert err.max() > 0 and (err <= U16 * np.abs(ref.astype(np.float64)) + 2.0 ** -25).all()
    met, rows, _ = _check(npu, ref, DEFAULT_TARGET)
    assert met and _numpy_default_met(npu, ref), rows
    assert rows[0]["FP16AllowanceUsed"] <= 1.0
    # the user's absolute line, as written, holds exactly when numpy's max |x - y| says so
    met_abs, rows_abs, _ = _check(npu, ref, "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2")
    assert met_abs == bool(err.max() <= 1e-2)
    if scale >= 1e4:
        assert not met_abs and rows_abs[0]["Failed"] == "MaxAbsoluteError<=0.01"


@pytest.mark.parametrize("scale", [1.0, 1e2, 1e4, 1e8])
@pytest.mark.parametrize("kind", ["one_percent", "overflow", "sign"])
def test_real_errors_still_fail_the_default_target(scale, kind):
    from toolkit.tuning.tune import DEFAULT_TARGET

    rng = np.random.default_rng(7)
    ref = (rng.uniform(-1, 1, 4096) * scale).astype(np.float32)
    npu = _fp16_rounded(ref)
    i = int(np.argmax(np.abs(ref)))
    if kind == "one_percent":  # 1% of the largest value (2% at scale 1, where 1% is exactly the 1e-2 line)
        npu[i] = ref[i] * (1.01 if scale > 1 else 1.02)
    elif kind == "overflow":
        npu[i] = np.float32(np.inf) * np.sign(ref[i])
    else:  # a quarter of the values flip sign
        npu[: len(npu) // 4] *= -1
    assert not _numpy_default_met(npu, ref)
    met, rows, _ = _check(npu, ref, DEFAULT_TARGET)
    assert not met, rows
    failed = rows[0]["Failed"]
    assert ("finite outputs" in failed) if kind == "overflow" else ("MaxAbsoluteError<=0.01|fp16" in failed)


def test_small_outputs_get_exactly_the_absolute_lines_decisions():
    """Up to |y| <= 10.24 (2^-10·10.24 = 1e-2) the allowance is 1e-2 everywhere: the default target decides as
    CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2 on every error size, on both sides of the line."""
    from toolkit.tuning.tune import DEFAULT_TARGET

    rng = np.random.default_rng(3)
    for scale in (1e-3, 1.0, 10.0):
        ref = (rng.uniform(-1, 1, 2048) * scale).astype(np.float32)
        for err in (0.0, 1e-3, 9.9e-3, 1e-2, 1.01e-2, 2e-2, 0.1):
            npu = ref.copy()
            npu[rng.integers(0, ref.size)] += np.float32(err)
            absolute = _check(npu, ref, "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2")[0]
            assert _check(npu, ref, DEFAULT_TARGET)[0] == absolute, (scale, err)


def test_the_fp16_allowance_is_visible_and_only_the_default_has_it():
    from toolkit.tuning.tune import DEFAULT_TARGET, default_target, format_target

    m = _io_model([("y", TensorProto.FLOAT)])
    assert format_target(parse_target(default_target(m))) == ["CosineSimilarity>=0.9999", "MaxAbsoluteError<=0.01|fp16",
                                                              "KullbackLeiblerDivergence<=0.005"]
    assert [getattr(c, "fp16") for c in parse_target("MaxAbsoluteError<=1e-2")] == [False]
    assert format_target(parse_target("MaxAbsoluteError<=1e-2")) == ["MaxAbsoluteError<=0.01"]
    parts = format_target(parse_target(DEFAULT_TARGET))  # each item reads back as written, in any order
    assert format_target(parse_target(",".join(parts[::-1]))) == parts[::-1]
    with pytest.raises(UsageError, match=r"applies only to MaxAbsoluteError"):
        parse_target("RMSE<=1|fp16")
    from toolkit.compare.metrics import parse_thresholds
    with pytest.raises(UsageError, match=r"only in tune's --target"):
        parse_thresholds("MaxAbsoluteError>1e-2|fp16")


def _chain_model():
    """x (positive, up to 3.5e2) -> 3 MatMuls with positive weights -> y up to ~2e4 (the user's case: plain FP16
    rounding, cosine ~1, max |x - y| of several units)."""
    rng = np.random.default_rng(11)
    Ws = {f"W{i}": np.abs(rng.normal(0, 1 / 8, (64, 64))).astype(np.float32) for i in range(3)}
    m = _model([helper.make_node("MatMul", ["x", "W0"], ["a"], name="mm0"),
                helper.make_node("MatMul", ["a", "W1"], ["b"], name="mm1"),
                helper.make_node("MatMul", ["b", "W2"], ["y"], name="mm2")],
               [("x", [8, 64])], [("y", [8, 64])], Ws)
    return m, {"x": np.abs(rng.normal(0, 1, (8, 64)) * 10).astype(np.float32)}


def _square_model():
    """y = t·t, t = x @ W up to ~1.4e4: y ~ 1e8 overflows FP16, so the Mul must run in FP32; then only FP32
    rounding (one FP32 ulp at 1.9e8 is 16) is left."""
    rng = np.random.default_rng(5)
    W = np.abs(rng.normal(0, 1, (32, 32))).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"),
                helper.make_node("Mul", ["t", "t"], ["y"], name="sq")],
               [("x", [4, 32])], [("y", [4, 32])], {"W": W})
    return m, {"x": np.abs(rng.normal(0, 1, (4, 32)) * 600).astype(np.float32)}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_tune_keeps_nothing_for_fp16_rounding_of_large_outputs():
    m, feed = _chain_model()
    ref = ort_outputs(m, feed)["y"].astype(np.float64)
    got = Session(m, Config(), input_shapes=shapes_of(feed)).run(feed).outputs["y"].astype(np.float64)
    assert np.abs(ref).max() > 1e3 and np.abs(got - ref).max() > 1e-2  # the absolute line fails ...
    assert _numpy_default_met(got, ref)  # ... on FP16 rounding alone
    res = tune(m, [("x", feed)], Config())
    assert res.met and res.chosen == [], res.log
    assert res.coverage_after["flops_fp16_share"] == 1.0
    explicit = tune(m, [("x", feed)], Config(), "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2")
    assert explicit.chosen != []  # a user's absolute line is applied as written


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_tune_meets_the_default_target_on_a_1e8_output():
    m, feed = _square_model()
    ref = ort_outputs(m, feed)["y"].astype(np.float64)
    assert np.abs(ref).max() > 65504 * 1e3
    res = tune(m, [("x", feed)], Config())
    assert res.met, res.log
    got = Session(m, res.config, input_shapes=shapes_of(feed)).run(feed).outputs["y"].astype(np.float64)
    assert _numpy_default_met(got, ref)
    assert "sq" in res.chosen  # y overflows FP16: the Mul is kept (a real error, not rounding)
    assert np.abs(got - ref).max() > 1e-2 and res.chosen == ["sq"]  # the MatMul's FP16 rounding is allowed
    # a user's absolute line is applied as written: met only where numpy finds max |x - y| <= 1e-2
    explicit = tune(m, [("x", feed)], Config(), "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2")
    exp = Session(m, explicit.config, input_shapes=shapes_of(feed)).run(feed).outputs["y"].astype(np.float64)
    assert explicit.met == bool(np.abs(exp - ref).max() <= 1e-2) and explicit.chosen != ["sq"]


# ------------------------------------------------------------------ node names the model file repeats
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("layers,big", [(4, 2), (6, 4)])
def test_a_repeated_node_name_is_one_candidate_under_the_files_name(layers, big):
    """``layers`` MatMuls all named 'dense' in the file (the loader calls the later ones dense__2...); layer
    ``big`` scales by 1e3 so its output passes FP16 max. keep_dtype 'dense' keeps every one of them (the
    converter knows only that name), so tune's answer is the one entry, counted as all the nodes it names."""
    rng = np.random.default_rng(layers)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((8, 8)) * (1e3 if i == big else 0.3)
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name="dense"))
        prev = f"h{i}"
    g = helper.make_graph(nodes, "dup", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feed = {"x": (rng.standard_normal((2, 8)) * 30).astype(np.float32)}
    h = feed["x"].astype(np.float64)
    for i in range(big + 1):
        h = h @ numpy_helper.to_array(inits[i]).astype(np.float64)
    assert np.abs(h).max() > 65504  # independently: layer ``big`` overflows FP16
    with tempfile.TemporaryDirectory() as d:
        onnx.save(model, f"{d}/m.onnx")
        loaded = load_model(f"{d}/m.onnx")  # the loader renames the repeats, as every command sees them
    # onnxruntime refuses repeated node names: the reference runs the loaded copy (same weights, same math)
    ref = ort.InferenceSession(loaded.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    res = tune(loaded, [("in", feed)], Config(precision_mode="force_fp16", fusion_level=0))
    assert res.met and res.chosen == ["dense"] and res.kept_nodes == layers
    assert "1 keep_dtype entry naming" in res.kept_text()
    assert list(res.ranking["KeepName"]) == ["dense"]  # every twin is the file's one name
    assert not any("dense__" in line for line in res.log)
    out = Session(loaded, keep_config(Config(precision_mode="force_fp16", fusion_level=0), res.chosen),
                  input_shapes=shapes_of(feed)).run(feed).outputs[prev]
    assert np.isfinite(out).all() and np.allclose(out, ref, rtol=1e-4, atol=1e-2)
