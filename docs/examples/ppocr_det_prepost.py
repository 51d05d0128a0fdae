"""Real pre- and post-processing for PP-OCRv4 text detection, for ``npuscope profile``::

    npuscope profile ppocr_det --pre docs/examples/ppocr_det_prepost.py:pre \
        --post docs/examples/ppocr_det_prepost.py:post --requests 20

``pre(request)`` takes the "camera frame" (a 720x1280 RGB image of rendered text, drawn once when this file is
loaded), resizes it to 640x640 (bilinear) and normalises it with ImageNet mean/std into the detector's
(1, 3, 640, 640) float32 input, as PaddleOCR's DetResizeForTest + NormalizeImage do.

``post(outputs)`` binarises the probability map (DB threshold 0.3), finds the connected text regions
(4-connected runs, joined with a small union-find), drops regions whose mean probability is under 0.6, grows
each box by DB's unclip distance (area · 1.5 / perimeter) and scales it back to the frame:
a list of (x0, y0, x1, y1, score) in frame pixels. Sources: PaddleOCR ``ppocr/postprocess/db_postprocess.py``
(thresh 0.3, box_thresh 0.6, unclip_ratio 1.5; boxes there are rotated rectangles, here axis-aligned).
"""

from __future__ import annotations

import numpy as np

from toolkit.inputs.ppocr import DEFAULT_DET_LINES, preprocess_det
from toolkit.inputs.render import render_text_image

FRAME_HW = (720, 1280)
MODEL_HW = (640, 640)
THRESH, BOX_THRESH, UNCLIP_RATIO, MIN_AREA = 0.3, 0.6, 1.5, 16

FRAME = render_text_image("\n".join(DEFAULT_DET_LINES), *FRAME_HW)


def pre(request: int) -> dict[str, np.ndarray]:
    """Detector feed {"x": (1, 3, 640, 640) float32} from the frame (the same frame for every request)."""
    return {"x": preprocess_det(FRAME, MODEL_HW)}


def _runs(mask: np.ndarray) -> list[tuple[int, int, int]]:
    """(row, start, end) of every horizontal run of True pixels (end exclusive)."""
    padded = np.zeros((mask.shape[0], mask.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = mask
    edges = np.diff(padded, axis=1)
    out = []
    for y in np.flatnonzero(mask.any(axis=1)):
        starts, ends = np.flatnonzero(edges[y] == 1), np.flatnonzero(edges[y] == -1)
        out += [(int(y), int(s), int(e)) for s, e in zip(starts, ends)]
    return out


def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def components(mask: np.ndarray) -> list[tuple[int, int, int, int, int]]:
    """4-connected regions of a boolean (H, W) mask as (x0, y0, x1, y1, area), x1/y1 inclusive."""
    runs = _runs(mask)
    parent = list(range(len(runs)))
    prev: list[int] = []
    row, cur = -2, []
    for i, (y, s, e) in enumerate(runs):
        if y != row:
            prev, cur, row = (cur if y == row + 1 else []), [], y
        for j in prev:
            _, ps, pe = runs[j]
            if ps < e and s < pe:
                parent[_find(parent, i)] = _find(parent, j)
        cur.append(i)
    boxes: dict[int, list[int]] = {}
    for i, (y, s, e) in enumerate(runs):
        b = boxes.setdefault(_find(parent, i), [s, y, e - 1, y, 0])
        b[0], b[1], b[2], b[3], b[4] = min(b[0], s), min(b[1], y), max(b[2], e - 1), max(b[3], y), b[4] + e - s
    return [tuple(b) for b in boxes.values()]


def _unclip(x0, y0, x1, y1, w, h):
    bw, bh = x1 - x0 + 1, y1 - y0 + 1
    d = bw * bh * UNCLIP_RATIO / (2.0 * (bw + bh))
    return max(0.0, x0 - d), max(0.0, y0 - d), min(w - 1.0, x1 + d), min(h - 1.0, y1 + d)


def post(outputs: dict[str, np.ndarray]) -> list[tuple[float, float, float, float, float]]:
    """Text boxes (x0, y0, x1, y1, score) in frame pixels from the detector's (1, 1, H, W) probability map."""
    prob = np.asarray(next(iter(outputs.values())), dtype=np.float32)[0, 0]
    h, w = prob.shape
    sy, sx = FRAME_HW[0] / h, FRAME_HW[1] / w
    out = []
    for x0, y0, x1, y1, area in components(prob > THRESH):
        score = float(prob[y0:y1 + 1, x0:x1 + 1].mean())
        if area < MIN_AREA or score < BOX_THRESH:
            continue
        ux0, uy0, ux1, uy1 = _unclip(x0, y0, x1, y1, w, h)
        out.append((ux0 * sx, uy0 * sy, (ux1 + 1) * sx, (uy1 + 1) * sy, score))
    return sorted(out, key=lambda b: b[1])
