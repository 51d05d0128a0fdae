"""force_fp32 at fusion level 2 (the default) computes what onnxruntime computes.

For every output: cosine similarity >= 0.99999 and max |npu - ort| <= 1e-4 * max |ort| (non-float outputs must
be equal). Models: the shared fault cases (shared/cases/fp16/*/model.onnx + inputs.npz), the three built-in
samples (toolkit.samples.SAMPLES with their make_inputs), and the PP-OCRv4 zoo models (slow: fetched with
toolkit.zoo.fetch, inputs from toolkit.inputs.realistic_inputs).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from toolkit.config.schema import Config
from toolkit.engine import simulate

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("NPUSCOPE_SHARED", REPO.parent / "shared")) / "cases" / "fp16"
CASES = sorted(p.parent.name for p in SHARED.glob("*/model.onnx")) if SHARED.is_dir() else []
COSINE_MIN = 0.99999
REL_MAX_ABS = 1e-4


def ort_outputs(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    from toolkit.ort.ort_env import session_options

    sess = ort.InferenceSession(model.SerializeToString(), session_options(optimize=False),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, sess.run(names, feeds)))


def assert_equivalent(model: onnx.ModelProto, feeds: dict, label: str) -> None:
    ref = ort_outputs(model, feeds)
    got = simulate(model, feeds, Config(precision_mode="force_fp32")).outputs
    for name, r in ref.items():
        g = np.asarray(got[name])
        assert g.shape == r.shape, f"{label}/{name}: shape {g.shape} vs onnxruntime {r.shape}"
        if not np.issubdtype(r.dtype, np.floating):
            np.testing.assert_array_equal(g, r, err_msg=f"{label}/{name}")
            continue
        x, y = g.astype(np.float64).ravel(), r.astype(np.float64).ravel()
        assert np.array_equal(np.isnan(x), np.isnan(y)), f"{label}/{name}: NaN positions differ"
        fin = np.isfinite(y)
        assert np.array_equal(x[~fin], y[~fin], equal_nan=True), f"{label}/{name}: inf positions differ"
        x, y = x[fin], y[fin]
        if y.size == 0:
            continue
        nx, ny = np.linalg.norm(x), np.linalg.norm(y)
        cos = 1.0 if nx == ny == 0 else float(x @ y / (nx * ny)) if nx and ny else 0.0
        err, scale = float(np.abs(x - y).max()), float(np.abs(y).max())
        assert cos >= COSINE_MIN, f"{label}/{name}: cosine {cos:.8f} < {COSINE_MIN}"
        assert err <= REL_MAX_ABS * scale, f"{label}/{name}: max abs err {err:.3g} > {REL_MAX_ABS} * {scale:.3g}"


@pytest.mark.skipif(not CASES, reason=f"shared cases not found at {SHARED}")
@pytest.mark.parametrize("case", CASES)
def test_shared_case(case):
    folder = SHARED / case
    model = onnx.load(str(folder / "model.onnx"))
    with np.load(folder / "inputs.npz") as npz:
        feeds = {k: npz[k] for k in npz.files}
    assert_equivalent(model, feeds, case)


@pytest.mark.parametrize("name", ["resnet_small", "transformer_block", "detector_head"])
def test_sample(name):
    from toolkit.samples import SAMPLES

    spec = SAMPLES[name]
    assert_equivalent(onnx.load(str(spec.path)), spec.make_inputs(), name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppocr_det", "ppocr_rec", "ppocr_cls"])
def test_ppocr(name):
    from toolkit import zoo
    from toolkit.inputs import realistic_inputs

    path = zoo.fetch(name)
    assert_equivalent(onnx.load(str(path)), realistic_inputs(name), name)
