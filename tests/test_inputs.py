"""Input specs, npz loading, random data, rendering, PP-OCR pre-processing and task read-outs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from toolkit import zoo
from toolkit.core.errors import InputError, ModelError, UserError
from toolkit.inputs import (InputSpec, binarize_iou, check_feed, ctc_greedy_decode, input_specs, load_npz,
                            parse_val_range, preprocess_cls, preprocess_det, preprocess_rec, random_inputs,
                            read_ctc_characters, realistic_image, realistic_inputs, render_text_image)
from toolkit.inputs.ppocr import DEFAULT_DET_LINES, DEFAULT_TEXT

SPECS = [InputSpec("x", np.dtype("float32"), ("batch", 3, 4)), InputSpec("ids", np.dtype("int64"), ("batch", None))]


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text
    return text


# ------------------------------------------------------------------ specs

def test_input_specs_skip_initializers_and_read_dims():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, None])
    x.type.tensor_type.shape.dim[2].Clear()  # an unnamed dynamic dim
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, [-1, "?"])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x, mask, w], [y],
                              [helper.make_tensor("w", TensorProto.FLOAT, [3], [1, 2, 3])])
    specs = input_specs(helper.make_model(graph))
    assert specs == [InputSpec("x", np.dtype("float32"), ("batch", 3, None)),
                     InputSpec("mask", np.dtype("bool"), (None, None))]
    assert not specs[0].is_static and specs[0].describe() == "x: float32[batch,3,?]"


def test_input_specs_refuse_non_tensor_inputs():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    graph = helper.make_graph([], "g", [seq], [seq])
    with pytest.raises(ModelError, match="'s' is a sequence_type"):
        input_specs(helper.make_model(graph))


# ------------------------------------------------------------------ npz

def _npz(tmp_path, **arrays):
    path = tmp_path / "feed.npz"
    np.savez(path, **arrays)
    return path


def test_load_npz_round_trip_with_dynamic_dims(tmp_path):
    x, ids = np.ones((5, 3, 4), np.float32), np.arange(35, dtype=np.int64).reshape(5, 7)
    feed = load_npz(_npz(tmp_path, ids=ids, x=x), SPECS)
    assert list(feed) == ["x", "ids"]
    np.testing.assert_array_equal(feed["x"], x)
    np.testing.assert_array_equal(feed["ids"], ids)


def test_load_npz_refuses_pickled_arrays(tmp_path):
    path = _npz(tmp_path, x=np.array([{"a": 1}], dtype=object), ids=np.zeros((1, 1), np.int64))
    with pytest.raises(InputError) as err:
        load_npz(path, SPECS)
    msg = _one_line(err)
    assert "feed.npz" in msg and "'x'" in msg and "pickle" in msg


def test_load_npz_names_missing_and_extra_keys(tmp_path):
    path = _npz(tmp_path, X=np.ones((1, 3, 4), np.float32), ids=np.zeros((1, 2), np.int64))
    with pytest.raises(InputError) as err:
        load_npz(path, SPECS)
    msg = _one_line(err)
    assert "missing ['x']" in msg and "unexpected ['X']" in msg and "['x', 'ids']" in msg


def test_load_npz_wrong_dtype(tmp_path):
    path = _npz(tmp_path, x=np.ones((1, 3, 4), np.float64), ids=np.zeros((1, 2), np.int64))
    with pytest.raises(InputError, match=r"'x' has dtype float64 but the model declares x: float32\[batch,3,4\]"):
        load_npz(path, SPECS)


def test_load_npz_wrong_static_dim_and_rank(tmp_path):
    ids = np.zeros((1, 2), np.int64)
    with pytest.raises(InputError, match=r"axis 2 must be 4, got 5"):
        load_npz(_npz(tmp_path, x=np.ones((1, 3, 5), np.float32), ids=ids), SPECS)
    with pytest.raises(InputError, match=r"rank 2\) but the model declares .*\(rank 3\)"):
        load_npz(_npz(tmp_path, x=np.ones((3, 4), np.float32), ids=ids), SPECS)


def test_load_npz_shared_symbolic_dim_must_agree(tmp_path):
    path = _npz(tmp_path, x=np.ones((2, 3, 4), np.float32), ids=np.zeros((3, 2), np.int64))
    with pytest.raises(InputError, match="dynamic dim 'batch' is 2 in input 'x' but 3 in input 'ids'"):
        load_npz(path, SPECS)


def test_load_npz_missing_or_not_npz(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_npz(tmp_path / "nope.npz", SPECS)
    bad = tmp_path / "bad.npz"
    bad.write_text("not a zip")
    with pytest.raises(InputError) as err:
        load_npz(bad, SPECS)
    assert "bad.npz" in _one_line(err)


# ------------------------------------------------------------------ value ranges and random data

def test_parse_val_range():
    assert parse_val_range("x:[0,1];y:[-1,1]") == {"x": (0.0, 1.0), "y": (-1.0, 1.0)}
    assert parse_val_range(" in:0 : [ -2.5 , 3e2 ] ;") == {"in:0": (-2.5, 300.0)}
    assert parse_val_range("[0,255]") == {"*": (0.0, 255.0)}


@pytest.mark.parametrize("text", ["", ";", "x[0,1]", "x:0,1", "x:[1,0]", "x:[a,1]", "x:[0,1,2]", "x:[0,inf]",
                                  "x:[0,1];x:[0,2]", ":[0,1]"])
def test_parse_val_range_errors(text):
    with pytest.raises(InputError) as err:
        parse_val_range(text)
    assert err.value.exit_code == 2 and _one_line(err)


def test_random_inputs_seeded_ranges_and_dims():
    specs = SPECS + [InputSpec("flag", np.dtype("bool"), (2,)), InputSpec("h", np.dtype("float16"), (3,))]
    a = random_inputs(specs, seed=3, val_ranges={"x": (-2.0, -1.0), "ids": (5, 7)}, dim_values={"batch": 4})
    b = random_inputs(specs, seed=3, val_ranges={"x": (-2.0, -1.0), "ids": (5, 7)}, dim_values={"batch": 4})
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["x"].shape == (4, 3, 4) and a["x"].dtype == np.float32
    assert a["x"].min() >= -2.0 and a["x"].max() < -1.0
    assert a["ids"].shape == (4, 1) and a["ids"].dtype == np.int64 and set(a["ids"].ravel()) <= {5, 6, 7}
    assert a["flag"].dtype == np.bool_ and a["h"].dtype == np.float16
    assert not np.array_equal(random_inputs(specs, seed=4)["x"], random_inputs(specs, seed=3)["x"])
    check_feed(a, specs)


def test_random_inputs_defaults_and_independence():
    feed = random_inputs(SPECS)
    assert feed["x"].shape == (1, 3, 4) and 0.0 <= feed["x"].min() and feed["x"].max() < 1.0
    assert 0 <= feed["ids"].min() and feed["ids"].max() <= 9
    alone = random_inputs(SPECS[:1])
    np.testing.assert_array_equal(alone["x"], feed["x"])  # one input's data does not depend on the others
    full = random_inputs(SPECS, dim_values={"ids": (2, 6), "batch": 2})
    assert full["ids"].shape == (2, 6) and full["x"].shape == (2, 3, 4)


def test_random_inputs_errors():
    with pytest.raises(InputError, match=r"unknown inputs \['z'\]"):
        random_inputs(SPECS, val_ranges={"z": (0, 1)})
    with pytest.raises(InputError, match="neither inputs"):
        random_inputs(SPECS, dim_values={"nope": 3})
    with pytest.raises(InputError, match="model declares x: float32"):
        random_inputs(SPECS, dim_values={"x": (1, 2, 4)})
    with pytest.raises(InputError, match="holds no int64 value"):
        random_inputs(SPECS, val_ranges={"ids": (0.2, 0.8)})


# ------------------------------------------------------------------ rendering and pre-processing

def _ink_bands(image: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges [top, bottom) that contain dark pixels."""
    rows = (image.min(axis=2) < 128).any(axis=1)
    edges = np.flatnonzero(np.diff(np.r_[0, rows.astype(int), 0]))
    return list(zip(edges[::2], edges[1::2]))


def test_render_text_image():
    image = render_text_image("npuscope 2026")
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert (image[0] == 255).all() and (image[-1] == 255).all() and image.min() == 0
    tall = render_text_image("one\ntwo\nthree", 300, 200)
    assert tall.shape == (300, 200, 3) and len(_ink_bands(tall)) == 3
    with pytest.raises(InputError, match="needs a canvas of at least"):
        render_text_image("npuscope 2026", 20, 50)


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


# ------------------------------------------------------------------ task read-outs

def test_ctc_greedy_decode():
    chars = ["a", "b", "c"]  # table: 0 blank, 1 a, 2 b, 3 c, 4 space
    steps = [[0, 1, 1, 0, 1, 2, 2, 4, 3, 0], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
    probs = np.zeros((2, 10, 5), np.float32)
    for n, seq in enumerate(steps):
        probs[n, np.arange(10), seq] = 0.9
    assert ctc_greedy_decode(probs, chars) == ["aab c", ""]
    # without the space class, the space step's row is all zero -> argmax 0 -> blank
    assert ctc_greedy_decode(probs[:, :, :4], chars, use_space_char=False) == ["aabc", ""]
    with pytest.raises(InputError, match=r"expected \(N, T, 5\)"):
        ctc_greedy_decode(probs[:, :, :4], chars)


def test_read_ctc_characters():
    graph = helper.make_graph([], "g", [], [])
    model = helper.make_model(graph)
    with pytest.raises(ModelError, match="no metadata key 'character'"):
        read_ctc_characters(model)
    helper.set_model_props(model, {"character": "a\nb\r\n'"})
    assert read_ctc_characters(model) == ["a", "b", "'"]


def test_binarize_iou():
    a = np.array([[0.9, 0.8, 0.1, 0.0]])
    b = np.array([[0.9, 0.2, 0.5, 0.0]])
    assert binarize_iou(a, b) == pytest.approx(1 / 3)  # masks {0,1} and {0,2}
    assert binarize_iou(a, b, thr=0.85) == 1.0
    assert binarize_iou(np.zeros(4), np.zeros(4)) == 1.0
    with pytest.raises(InputError, match="same shape"):
        binarize_iou(a, b.T)


# ------------------------------------------------------------------ real models (download once, slow)

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
