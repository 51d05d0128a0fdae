"""Task-level read-outs of model outputs, used to check that two runs agree on what matters to a user.

- CTC greedy decoding of the PP-OCR recogniser (PaddleOCR ``ppocr/postprocess/rec_postprocess.py``
  ``CTCLabelDecode``; RapidOCR 1.4.4 ``ch_ppocr_rec/utils.py`` does the same): the class table is
  ``["blank"] + dictionary + [" "]`` (blank at index 0; the space appended because ``use_space_char`` is
  true), take the argmax per time step, drop repeats, then drop blanks.
- IoU of binarised probability maps, as the DB detector post-processing binarises at ``thresh = 0.3``
  (``pred > thresh``, PaddleOCR ``DBPostProcess``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import onnx

from toolkit.core.errors import InputError, ModelError

#: Metadata key of the PP-OCR recogniser that holds the dictionary, one character per line.
CHARACTER_KEY = "character"
#: Binarisation threshold of the DB text detector (PaddleOCR / RapidOCR ``thresh``).
DB_THRESHOLD = 0.3


def read_ctc_characters(model: onnx.ModelProto | str | os.PathLike) -> list[str]:
    """The dictionary stored in the model's metadata ``character`` (split on line breaks), without blank/space.

    Raises:
        ModelError: the model has no ``character`` metadata.
    """
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(os.fspath(model), load_external_data=False)
    for prop in model.metadata_props:
        if prop.key == CHARACTER_KEY:
            return prop.value.splitlines()
    raise ModelError(
        f"model has no metadata key {CHARACTER_KEY!r} (keys: {[p.key for p in model.metadata_props]}); "
        "pass the CTC dictionary explicitly (one character per line, as PaddleOCR's ppocr_keys_v1.txt)"
    )


def ctc_table(characters: Sequence[str], use_space_char: bool = True) -> list[str]:
    """Class index -> text: ``[""(blank)] + characters + [" " if use_space_char]``.

    The blank maps to ``""`` here (PaddleOCR calls it "blank"; it is always removed).
    """
    return [""] + list(characters) + ([" "] if use_space_char else [])


def ctc_greedy_decode(probs: np.ndarray, characters: Sequence[str], use_space_char: bool = True) -> list[str]:
    """Greedy CTC decoding, one string per batch item.

    Args:
        probs: (N, T, C) float array of per-step class scores (softmax probabilities or logits: only the
            argmax is used); C must equal ``len(characters) + 1 + use_space_char``.
        characters: the dictionary without blank or space, e.g. :func:`read_ctc_characters`.
        use_space_char: whether the last class is a space (true for PP-OCRv4 rec, C = 6625).

    Returns:
        list of N decoded strings.

    Raises:
        InputError: ``probs`` is not 3-D or its class count does not match the dictionary.
    """
    probs = np.asarray(probs)
    table = ctc_table(characters, use_space_char)
    if probs.ndim != 3 or probs.shape[2] != len(table):
        raise InputError(
            f"CTC scores have shape {probs.shape}, expected (N, T, {len(table)}) for a dictionary of "
            f"{len(characters)} characters + blank{' + space' if use_space_char else ''}; "
            "pass the recogniser's output and the dictionary from its metadata"
        )
    texts = []
    for indices in probs.argmax(axis=2):
        keep = np.ones(indices.shape, dtype=bool)
        keep[1:] = indices[1:] != indices[:-1]
        keep &= indices != 0
        texts.append("".join(table[i] for i in indices[keep]))
    return texts


def binarize_iou(a: np.ndarray, b: np.ndarray, thr: float = DB_THRESHOLD) -> float:
    """Intersection over union of ``a > thr`` and ``b > thr``.

    Args:
        a, b: probability maps of equal shape (e.g. the detector's (N, 1, H, W) output in [0, 1]).
        thr: binarisation threshold (default 0.3, the DB post-processing threshold).

    Returns:
        IoU in [0, 1]; 1.0 when both binarised maps are empty (they agree).

    Raises:
        InputError: the shapes differ.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise InputError(f"binarize_iou got maps of shapes {a.shape} and {b.shape}; compare maps of the same shape")
    mask_a, mask_b = a > thr, b > thr
    union = int(np.count_nonzero(mask_a | mask_b))
    if union == 0:
        return 1.0
    return int(np.count_nonzero(mask_a & mask_b)) / union
