"""Render text into an RGB image: the real input for the OCR models (no image files needed).

Uses Pillow's bundled default font (``ImageFont.load_default(size=...)``, a scalable FreeType font since
Pillow 10.1), black text on a white background.
"""

from __future__ import annotations

import functools

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from toolkit.core.errors import InputError

#: Font size in pixels; at 40 px a line of lower-case text is about 37 px tall.
DEFAULT_FONT_SIZE = 40
#: White space in pixels kept around the text when the canvas size is derived from the text.
DEFAULT_MARGIN = 8


@functools.lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def text_size(text: str, font_size: int = DEFAULT_FONT_SIZE) -> tuple[int, int]:
    """(height, width) in pixels of the ink box of a single line of ``text``."""
    left, top, right, bottom = _font(font_size).getbbox(text)
    return bottom - top, right - left


def render_text_image(text: str, height: int | None = None, width: int | None = None,
                      font_size: int = DEFAULT_FONT_SIZE) -> np.ndarray:
    """Draw ``text`` (lines separated by ``\\n``) in black on a white canvas.

    Each line is centred horizontally; line centres are spread evenly down the canvas (line i of n at
    height (i + 1) * H / (n + 1)), so several lines on a tall canvas stay well apart, as a detector needs.

    Args:
        text: the text; ``\\n`` starts a new line.
        height, width: canvas size in pixels; ``None`` fits the text plus an 8 px margin.
        font_size: font size in pixels (default 40).

    Returns:
        (height, width, 3) uint8 RGB array, 255 = white.

    Raises:
        InputError: empty text, or the text does not fit the canvas (the message gives the size needed).
    """
    lines = text.split("\n")
    if not text.strip():
        raise InputError("render_text_image got empty text; pass at least one visible character")
    sizes = [text_size(line, font_size) for line in lines]
    need_w = max(w for _, w in sizes) + 2 * DEFAULT_MARGIN
    line_h = max(h for h, _ in sizes)
    # one line: margin above and below; n lines: centre spacing H/(n+1) must leave a margin between lines
    need_h = line_h + 2 * DEFAULT_MARGIN if len(lines) == 1 else (len(lines) + 1) * (line_h + DEFAULT_MARGIN)
    height = need_h if height is None else int(height)
    width = need_w if width is None else int(width)
    if height < need_h or width < need_w:
        raise InputError(
            f"text {text!r} at font size {font_size} needs a canvas of at least {need_h}x{need_w} px (HxW), "
            f"got {height}x{width}; enlarge the canvas or shorten the text"
        )
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font = _font(font_size)
    for i, line in enumerate(lines):
        if not line:
            continue
        left, top, right, bottom = draw.textbbox((0, 0), line, font=font)
        centre_y = (i + 1) * height / (len(lines) + 1)
        x = (width - (right - left)) / 2 - left
        y = centre_y - (bottom - top) / 2 - top
        draw.text((round(x), round(y)), line, fill="black", font=font)
    return np.asarray(image, dtype=np.uint8).copy()
