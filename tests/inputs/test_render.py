"""Text rendering (toolkit/inputs/render.py)."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.core.errors import InputError
from toolkit.inputs import render_text_image


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
