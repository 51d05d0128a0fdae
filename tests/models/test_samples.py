"""Built-in sample models: deterministic rebuild, validity, and numerics checked against numpy references."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from toolkit import samples
from toolkit.core.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _weights(path: Path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


# ------------------------------------------------------------------ files and determinism

def test_rebuild_is_bit_identical_to_committed_files(tmp_path):
    written = samples.build_all(tmp_path, copy_to=tmp_path / "copy")
    assert set(written) == set(samples.SAMPLES)
    assert {"resnet_small", "transformer_block", "detector_head", "transformer_seq"} <= set(written)
    for name, path in written.items():
        fresh = path.read_bytes()
        assert fresh == (tmp_path / "copy" / path.name).read_bytes()
        assert fresh == samples.SAMPLES[name].path.read_bytes(), f"{name}: toolkit/data copy is stale"
        assert fresh == (REPO / "sample_models" / path.name).read_bytes(), f"{name}: sample_models copy is stale"
    assert samples.model_bytes("resnet_small") == samples.model_bytes("resnet_small")
    assert samples.model_bytes("resnet_small", seed=1) != samples.model_bytes("resnet_small")


def test_canonical_location_is_package_data():
    assert samples.SAMPLES_DIR == Path(samples.__file__).resolve().parent / "data"
    for spec in samples.SAMPLES.values():
        assert spec.path.parent == samples.SAMPLES_DIR


def test_samples_are_small():
    total = sum(spec.path.stat().st_size for spec in samples.SAMPLES.values())
    assert total < 2 * 1024 * 1024


@pytest.mark.parametrize("name", list(samples.SAMPLES))
def test_sample_is_valid_opset17_with_unique_names(name):
    path = samples.sample_path(name)
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    names = [n.name for n in model.graph.node]
    assert all(names) and len(names) == len(set(names))
    generic = [n.name for n in model.graph.node if re.fullmatch(rf"{n.op_type}[_.]?\d*", n.name, re.IGNORECASE)]
    assert not generic, f"node names should say what the node does, got {generic}"


@pytest.mark.parametrize("name", list(samples.SAMPLES))
def test_inputs_are_seeded_and_fit_the_model(name):
    spec = samples.SAMPLES[name]
    a, b, c = spec.make_inputs(0), spec.make_inputs(0), spec.make_inputs(1)
    session = _session(spec.path)
    declared = {i.name: i for i in session.get_inputs()}
    assert set(a) == set(declared)
    for key in a:
        assert np.array_equal(a[key], b[key])
        # symbolic (str) dims of the dynamic-length samples take any size
        assert a[key].dtype == np.float32 and len(a[key].shape) == len(declared[key].shape)
        assert all(d == s or isinstance(d, str) for d, s in zip(declared[key].shape, a[key].shape))
    assert any(not np.array_equal(a[k], c[k]) for k in a)
    outputs = session.run(None, a)
    assert all(np.isfinite(o).all() for o in outputs)


def test_default_sample_and_unknown_names():
    assert samples.default_sample() == "resnet_small"
    assert samples.sample_path(samples.default_sample()).is_file()
    with pytest.raises(UserError, match="unknown sample 'nope'"):
        samples.sample_path("nope")


# ------------------------------------------------------------------ numpy references

def _conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, bias=None) -> np.ndarray:
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    y = np.einsum("nchwij,ocij->nohw", win, w, optimize=True)
    return y if bias is None else y + bias.reshape(1, -1, 1, 1)


def _bn(x, w, p):
    s, b, m, v = (w[f"{p}_bn.{k}"].reshape(1, -1, 1, 1) for k in ("scale", "bias", "mean", "var"))
    return (x - m) / np.sqrt(v + 1e-5) * s + b


def test_resnet_small_matches_numpy_reference():
    path = samples.sample_path("resnet_small")
    w = {k: v.astype(np.float64) for k, v in _weights(path).items()}
    x = samples.SAMPLES["resnet_small"].make_inputs()["x"]

    def conv_bn(h, p, stride=1):
        kernel = w[f"{p}_conv.weight"]
        return _bn(_conv(h, kernel, stride, kernel.shape[2] // 2), w, p)

    relu = lambda t: np.maximum(t, 0)  # noqa: E731
    h = relu(conv_bn(x.astype(np.float64), "stem"))
    h = relu(conv_bn(relu(conv_bn(h, "block1_a")), "block1_b") + h)
    h = relu(conv_bn(relu(conv_bn(h, "block2_a", 2)), "block2_b") + conv_bn(h, "block2_proj", 2))
    h = relu(conv_bn(relu(conv_bn(h, "block3_a")), "block3_b") + h)
    ref = h.mean(axis=(2, 3)) @ w["classifier.weight"].T + w["classifier.bias"]
    got = _session(path).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    bn_var = w["stem_bn.var"]
    assert not np.allclose(bn_var, 1.0) and not np.allclose(w["stem_bn.mean"], 0.0)  # non-trivial BN stats


def _transformer_reference(w, x, mask):
    erf = np.vectorize(math.erf)

    def ln(t, p):
        mu = t.mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(((t - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w[f"{p}.weight"] + w[f"{p}.bias"]

    def lin(t, p):
        return t @ w[f"{p}.weight"] + w[f"{p}.bias"]

    def heads(t):
        return t.reshape(1, 16, 4, 16).transpose(0, 2, 1, 3)

    h = ln(x, "ln1")
    q, k, v = heads(lin(h, "attn_q")), heads(lin(h, "attn_k")), heads(lin(h, "attn_v"))
    scores = q @ k.transpose(0, 1, 3, 2) / 4.0 + ((1 - mask) * -10000.0)[:, None, None, :]
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    h = x + lin((probs @ v).transpose(0, 2, 1, 3).reshape(1, 16, 64), "attn_out")
    up = lin(ln(h, "ln2"), "ffn_up")
    return h + lin(0.5 * up * (1 + erf(up / math.sqrt(2))), "ffn_down")


def test_transformer_block_matches_numpy_reference():
    path = samples.sample_path("transformer_block")
    w = {k: v.astype(np.float64) for k, v in _weights(path).items()}
    feed = samples.SAMPLES["transformer_block"].make_inputs()
    assert set(np.unique(feed["mask"])) == {0.0, 1.0}
    ref = _transformer_reference(w, feed["x"].astype(np.float64), feed["mask"].astype(np.float64))
    got = _session(path).run(None, feed)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_transformer_padding_does_not_leak_into_valid_tokens():
    feed = samples.SAMPLES["transformer_block"].make_inputs()
    valid = feed["mask"][0] == 1
    session = _session(samples.sample_path("transformer_block"))
    base = session.run(None, feed)[0]
    poked = dict(feed, x=feed["x"].copy())
    poked["x"][0, ~valid] += 5.0
    moved = session.run(None, poked)[0]
    np.testing.assert_allclose(moved[0, valid], base[0, valid], atol=1e-5)
    assert not np.allclose(moved[0, ~valid], base[0, ~valid])


def _iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_detector_head_decodes_and_suppresses_like_numpy():
    path = samples.sample_path("detector_head")
    w = {k: v.astype(np.float64) for k, v in _weights(path).items()}
    feat = samples.SAMPLES["detector_head"].make_inputs()["feat"]
    h = np.maximum(_conv(feat.astype(np.float64), w["head_conv.weight"], 1, 1, w["head_conv.bias"]), 0)
    deltas = _conv(h, w["box_conv.weight"], 1, 0, w["box_conv.bias"])  # (1, 8, 20, 20): anchor a -> rows 4a..4a+3
    logits = _conv(h, w["score_conv.weight"], 1, 0, w["score_conv.bias"])  # (1, 2, 20, 20)
    scores = 1 / (1 + np.exp(-logits[0].transpose(1, 2, 0).reshape(-1)))  # order (row, col, anchor)
    best = int(np.argmax(scores))
    row, col, a = best // 40, (best % 40) // 2, best % 2
    dx, dy, dw, dh = deltas[0, 4 * a: 4 * a + 4, row, col]
    aw, ah = [(32.0, 32.0), (64.0, 32.0)][a]
    cx, cy = (col + 0.5) * 16 + dx * aw, (row + 0.5) * 16 + dy * ah
    bw, bh = aw * math.exp(dw), ah * math.exp(dh)
    ref_box = [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]

    boxes, kept = _session(path).run(None, {"feat": feat})
    assert 1 <= len(kept) <= 20 and boxes.shape == (len(kept), 4)
    np.testing.assert_allclose(kept[0], scores[best], rtol=1e-5)
    np.testing.assert_allclose(boxes[0], ref_box, rtol=1e-4, atol=1e-3)
    assert np.all(np.diff(kept) <= 0) and np.all(kept >= 0.25)
    assert np.all(boxes[:, 2] > boxes[:, 0]) and np.all(boxes[:, 3] > boxes[:, 1])
    for i in range(len(boxes)):
        for j in range(i):
            assert _iou(boxes[i], boxes[j]) <= 0.5 + 1e-6
