"""`tune`: the FP32-fallback search, its range analysis and its outputs.

Every accuracy claim is re-checked independently of the toolkit's comparison code: the tuned config is compiled
from scratch with toolkit.engine.Session and its outputs compared, with numpy, to plain onnxruntime outputs
computed here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import faultkinds as fk
from toolkit.config.schema import Config
from toolkit.engine import Session, shapes_of
from toolkit.core.errors import UsageError
from toolkit.inputs import input_specs, load_npz
from toolkit.tuning.feeds import load_feed_sets
from toolkit.precision.ranges import analyse_ranges, range_findings
from toolkit.tuning.tune import parse_target, search, tune

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

CASES = Path("/work/shared/cases/fp16")
FOLDERS = sorted(p for p in CASES.glob("c*") if p.is_dir()) if CASES.is_dir() else []
TARGET = "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2"
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


@pytest.mark.parametrize("text,err", [("CosineSimilarity<=off", "'CosineSimilarity=off'"),  # every operator is
                                      ("MaxAbsoluteError>=-1", "takes values in"),          # accepted now (the
                                      ("Cosin>=0.9", "unknown metric"), ("CosineSimilarity 0.9", "expected"),
                                      ("", "no condition")])                                # grammar's tests)
def test_parse_target_refuses_with_a_reason(text, err):
    with pytest.raises(UsageError, match=err):
        parse_target(text)
    assert parse_target(TARGET) == [("CosineSimilarity", ">=", 0.9999), ("MaxAbsoluteError", "<=", 0.01)]


def _ranges_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])
    nodes = [helper.make_node("Mul", ["x", "big"], ["scaled"], name="scale_up"),
             helper.make_node("Mul", ["x", "tiny"], ["small"], name="scale_down"),
             helper.make_node("Floor", ["scaled"], ["counts"], name="floor"),
             helper.make_node("Add", ["counts", "small"], ["y"], name="join")]
    inits = [numpy_helper.from_array(np.array(1000.0, np.float32), "big"),
             numpy_helper.from_array(np.array(1e-9, np.float32), "tiny")]
    g = helper.make_graph(nodes, "r", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_range_analysis_against_numpy_over_all_inputs():
    model = _ranges_model()
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.uniform(-100, 100, (4, 256)).astype(np.float32)} for _ in range(2)]
    feeds[1]["x"][0, 0] = 90.0  # scaled = 90000 > 65504
    runs = []
    for f in feeds:
        vals = dict(ort_outputs(_expose(model), f))
        vals.update(f)
        runs.append(vals)
    df = analyse_ranges(model, runs).set_index("Tensor")
    scaled = np.concatenate([np.abs(r["scaled"]).ravel() for r in runs])
    assert df.at["scaled", "OverflowShare"] == pytest.approx(np.mean(scaled > 65504))
    assert df.at["scaled", "AbsMax"] == pytest.approx(scaled.max())
    worst_p999 = max(np.percentile(np.abs(r["scaled"]).ravel(), 99.9) for r in runs)
    assert df.at["scaled", "P999Abs"] == pytest.approx(worst_p999, rel=1e-6)
    small = np.concatenate([np.abs(r["small"]).ravel() for r in runs])
    nz = small[small > 0]
    assert df.at["small", "SubnormalShare"] == pytest.approx(np.mean(nz < 6.1e-5))
    assert df.at["small", "FlushShare"] == pytest.approx(np.mean(nz < 6e-8))
    assert df.at["counts", "IntegerValued"] and df.at["counts", "IntegerInexact"]
    assert not df.at["x", "IntegerValued"]
    kinds = {(f.kind, f.subject) for f in range_findings(df.reset_index())}
    assert ("fp16_range_overflow", "scale_up") in kinds and ("fp16_integer_inexact", "floor") in kinds
    assert ("fp16_flush_to_zero", "scale_down") in kinds


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 4099])
@pytest.mark.parametrize("q", [0.0, 50.0, 99.9, 100.0])
def test_percentile_linear_equals_numpy(n, q):
    from toolkit.precision.ranges import percentile_linear

    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    assert percentile_linear(x, q) == pytest.approx(float(np.percentile(x.astype(np.float64), q)), rel=1e-6, abs=1e-7)


def _expose(model):
    m = onnx.shape_inference.infer_shapes(model)
    for n in m.graph.node:
        for o in n.output:
            if o not in {x.name for x in m.graph.output}:
                m.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
    return m


def test_feed_sets_from_folder_and_loader_script(tmp_path):
    b = fk.rmsnorm(hidden=32, rows=2, seed=0)
    (tmp_path / "d").mkdir()
    for i in range(3):
        np.savez(tmp_path / "d" / f"{i}.npz", x=b.feeds["x"] * (i + 1))
    sets = load_feed_sets(b.model, None, str(tmp_path / "d"))
    assert [lbl for lbl, _ in sets] == ["0.npz", "1.npz", "2.npz"]
    np.testing.assert_array_equal(sets[2][1]["x"], b.feeds["x"] * 3)
    script = tmp_path / "loader.py"
    script.write_text("import numpy as np\ndef inputs():\n    for s in (1.0, 2.0):\n"
                      f"        yield {{'x': np.full({list(b.feeds['x'].shape)}, s, np.float32)}}\n")
    sets = load_feed_sets(b.model, None, str(script))
    assert len(sets) == 2 and float(sets[1][1]["x"].max()) == 2.0


# ------------------------------------------------------------------ the command
def test_cli_writes_artifacts_and_the_tuned_config_is_accepted(tmp_path):
    folder = CASES / "c08_softplus_exp_overflow"
    if not folder.is_dir():
        pytest.skip("shared case missing")
    out = tmp_path / "t"
    r = npuscope("tune", folder / "model.onnx", "--inputs", folder / "inputs.npz", "--precision-mode", "force_fp16",
                 "--target", TARGET, "--out", out)
    assert r.returncode == 0, r.stderr
    keep = (out / "keep_dtype.txt").read_text().split()
    assert "exp" in keep
    summary = json.loads((out / "summary.json").read_text())
    assert summary["met"] and summary["keep_dtype"] == keep
    html = (out / "tune.html").read_text()
    assert "Nodes kept in FP32" in html and "FP16 coverage" in html and "<script src=" not in html
    cfg = Config.load(out / "tuned_config.json")
    assert cfg.keep_dtype == keep and cfg.precision_mode == "force_fp16"
    model = onnx.load(folder / "model.onnx")
    assert_meets(model, load_npz(folder / "inputs.npz", input_specs(model)), cfg)
    r = npuscope("tune", folder / "model.onnx", "--inputs", folder / "inputs.npz", "--precision-mode", "force_fp16",
                 "--target", "CosineSimilarity>1", "--no-html", "--out", tmp_path / "u")  # clipped to [-1, 1]: never met
    assert r.returncode == 1 and "NOT MET" in r.stdout
    r = npuscope("tune", folder / "model.onnx", "--target", "Cosin>=0.9", "--out", tmp_path / "v")
    assert r.returncode == 2 and "CosineSimilarity" in r.stderr


def npuscope(*args):
    """The CLI in a fresh process (it switches onnxruntime to a global thread pool)."""
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("passed", ["false", "yes", 1, None, np.array([True, False])])
def test_task_check_passed_must_be_a_real_bool(passed):
    """A task check whose ``passed`` is not a bool (a string "false" is truthy) never counts as met: tune
    validates results as diagnose does (toolkit.compare.tasks.run_check)."""
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    def check(golden, npu, m):
        return {"name": "acc", "passed": passed, "value": 0.1, "detail": "accuracy dropped"}

    def good(golden, npu, m):
        return {"name": "acc", "passed": bool(np.array_equal(npu["y"], np.maximum(x, 0))), "value": 1.0, "detail": ""}

    cfg = Config(precision_mode="force_fp32")
    assert tune(model, [("x", {"x": x})], cfg, tasks=[good]).met  # Relu in FP32 is exact: the target holds
    res = tune(model, [("x", {"x": x})], cfg, tasks=[check])
    assert not res.met
    assert res.tasks_after and not any(t["passed"] for t in res.tasks_after)
