"""Task read-outs (toolkit/inputs/tasks.py): CTC decoding, the character list, binarized IoU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from toolkit.core.errors import InputError, ModelError
from toolkit.inputs import binarize_iou, ctc_greedy_decode, read_ctc_characters


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
