"""PP-OCR inputs (toolkit/inputs/ppocr.py): pre-processing as PaddleOCR does it, realistic inputs, and the real
PP-OCRv4 models reading them (slow)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from toolkit import zoo
from toolkit.core.errors import InputError, UserError
from toolkit.inputs import (
    binarize_iou,
    ctc_greedy_decode,
    preprocess_cls,
    preprocess_det,
    preprocess_rec,
    read_ctc_characters,
    realistic_image,
    realistic_inputs,
)
from toolkit.inputs.ppocr import DEFAULT_DET_LINES, DEFAULT_TEXT


def _ink_bands(image: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges [top, bottom) that contain dark pixels."""
    rows = (image.min(axis=2) < 128).any(axis=1)
    edges = np.flatnonzero(np.diff(np.r_[0, rows.astype(int), 0]))
    return list(zip(edges[::2], edges[1::2]))


def test_preprocess_rec_and_cls_follow_paddleocr():
    image = np.full((48, 96, 3), 255, np.uint8)
    image[:, :10] = 0
    x = preprocess_rec(image)
    assert x.shape == (1, 3, 48, 320) and x.dtype == np.float32
    expected = (image.transpose(2, 0, 1).astype(np.float32) / 255 - 0.5) / 0.5  # h already 48: no resize
    np.testing.assert_array_equal(x[0, :, :, :96], expected)
    assert (x[0, :, :, 96:] == 0).all()  # right padding with zeros
    wide = preprocess_cls(np.full((24, 400, 3), 255, np.uint8))
    assert wide.shape == (1, 3, 48, 192) and np.allclose(wide, 1.0)  # squeezed to the full width


def test_preprocess_det_normalises_with_imagenet_stats():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)
    x = preprocess_det(image, (64, 96))
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(x[0], ((image / 255.0 - mean) / std).transpose(2, 0, 1), rtol=1e-5, atol=1e-5)
    assert preprocess_det(image).shape == (1, 3, 640, 640)
    with pytest.raises(InputError, match="multiple of 32"):
        preprocess_det(image, (100, 96))
    with pytest.raises(InputError, match="expected uint8"):
        preprocess_det(image.astype(np.float32))


def test_realistic_inputs_shapes():
    expected = {"ppocr_det": (1, 3, 640, 640), "ppocr_rec": (1, 3, 48, 320), "ppocr_cls": (1, 3, 48, 192)}
    for name, shape in expected.items():
        feed = realistic_inputs(name)
        assert list(feed) == ["x"] and feed["x"].shape == shape and feed["x"].dtype == np.float32
    assert len(_ink_bands(realistic_image("ppocr_det"))) == len(DEFAULT_DET_LINES)
    with pytest.raises(UserError, match="unknown zoo model"):
        realistic_inputs("ppocr_nope")


def _run(name: str, feed: dict) -> np.ndarray:
    session = ort.InferenceSession(str(zoo.fetch(name)), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


@pytest.mark.slow
def test_ppocr_rec_reads_rendered_text():
    probs = _run("ppocr_rec", realistic_inputs("ppocr_rec"))
    chars = read_ctc_characters(onnx.load(str(zoo.fetch("ppocr_rec"))))
    assert ctc_greedy_decode(probs, chars) == [DEFAULT_TEXT]
    other = "Hello NPU 42"
    assert ctc_greedy_decode(_run("ppocr_rec", realistic_inputs("ppocr_rec", other)), chars) == [other]


@pytest.mark.slow
def test_ppocr_cls_says_upright():
    probs = _run("ppocr_cls", realistic_inputs("ppocr_cls"))
    assert probs.shape == (1, 2) and probs[0, 0] > 0.9  # label '0' (not rotated 180)


@pytest.mark.slow
def test_ppocr_det_probability_map_covers_text_lines():
    image = realistic_image("ppocr_det")
    prob = _run("ppocr_det", realistic_inputs("ppocr_det"))
    assert prob.shape == (1, 1, 640, 640)
    text = np.zeros((640, 640), bool)
    ink = image.min(axis=2) < 128
    bands = _ink_bands(image)
    assert len(bands) == len(DEFAULT_DET_LINES)
    binary = prob[0, 0] > 0.3
    for top, bottom in bands:
        cols = np.flatnonzero(ink[top:bottom].any(axis=0))
        left, right = cols[0], cols[-1] + 1
        text[top:bottom, left:right] = True
        centre_row = binary[(top + bottom) // 2, left:right]
        assert centre_row.mean() > 0.8, "the text line's centre row is not detected"
    grown = np.zeros_like(text)  # allow a few pixels of slack around each line
    for top, bottom in bands:
        cols = np.flatnonzero(text[top])
        grown[max(top - 4, 0):bottom + 4, max(cols[0] - 4, 0):cols[-1] + 5] = True
    assert binary[~grown].sum() == 0, "text probability above 0.3 outside the text lines"
    # FP16 storage of the map barely moves the binarised text region
    assert binarize_iou(prob, prob.astype(np.float16).astype(np.float32)) > 0.99
