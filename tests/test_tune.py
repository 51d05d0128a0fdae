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

from tests.faultkinds import builders as fk
from toolkit.config import Config
from toolkit.engine import Session, shapes_of
from toolkit.errors import UsageError
from toolkit.inputs import input_specs, load_npz
from toolkit.precision.feeds import load_feed_sets
from toolkit.precision.ranges import analyse_ranges, range_findings
from toolkit.precision.tune import parse_target, search, tune

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
    from toolkit.runtime.ort_env import session_options

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


def _expose(model):
    m = onnx.shape_inference.infer_shapes(model)
    for n in m.graph.node:
        for o in n.output:
            if o not in {x.name for x in m.graph.output}:
                m.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
    return m


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
    r = npuscope("tune", folder / "model.onnx", "--target", "Cosine>=0.9", "--out", tmp_path / "v")
    assert r.returncode == 2 and "CosineSimilarity" in r.stderr


def npuscope(*args):
    """The CLI in a fresh process (it switches onnxruntime to a global thread pool)."""
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


