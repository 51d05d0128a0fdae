"""Pre-processing for the PP-OCR models, as PaddleOCR / RapidOCR do it, and realistic rendered inputs.

Sources: PaddleOCR ``ppocr/data/imaug/operators.py`` (DetResizeForTest, NormalizeImage: scale 1/255,
ImageNet mean/std) and ``tools/infer/predict_rec.py`` / ``predict_cls.py`` ``resize_norm_img``; RapidOCR
1.4.4 ``ch_ppocr_rec/text_recognize.py`` and ``ch_ppocr_cls/text_cls.py`` (same rec/cls code).
Differences, on purpose: resizing uses Pillow bilinear instead of OpenCV ``INTER_LINEAR`` (no OpenCV
dependency; values differ by a few grey levels at edges); the detector input is resized to an exact size
(default 640x640) instead of PaddleOCR's "limit side, round to a multiple of 32"; RapidOCR 1.4.4's det
config uses mean = std = 0.5, we use PaddleOCR's ImageNet statistics (both detect our rendered text).
Images are RGB; PaddleOCR feeds OpenCV BGR with the same mean tuple, which is irrelevant for grey text.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from toolkit import zoo
from toolkit.core.errors import InputError
from toolkit.inputs.render import render_text_image

#: ImageNet mean and std on [0, 1] RGB, used by PaddleOCR's detector pre-processing.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: Text used for the recogniser and classifier inputs.
DEFAULT_TEXT = "npuscope 2026"
#: Lines drawn on the detector canvas.
DEFAULT_DET_LINES = ("npuscope 2026", "mixed precision", "FP16 vs FP32")


def _check_image(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise InputError(
            f"image has dtype {image.dtype} and shape {image.shape}, expected uint8 (H, W, 3) RGB; "
            "convert it with np.asarray(PIL.Image.open(path).convert('RGB'))"
        )
    return image


def _resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of an (H, W, 3) uint8 image to (height, width, 3) float32 in [0, 255]."""
    if image.shape[:2] == (height, width):
        return image.astype(np.float32)
    resized = Image.fromarray(image).resize((width, height), Image.Resampling.BILINEAR)
    return np.asarray(resized, dtype=np.float32)


def preprocess_det(image: np.ndarray, size: tuple[int, int] = (640, 640),
                   mean: tuple[float, float, float] = IMAGENET_MEAN,
                   std: tuple[float, float, float] = IMAGENET_STD) -> np.ndarray:
    """Detector input: resize to ``size`` = (H, W) px, ``(x / 255 - mean) / std``, NCHW.

    Args:
        image: (H, W, 3) uint8 RGB.
        size: output (height, width) in pixels, each a multiple of 32 (the DB backbone's stride).

    Returns:
        (1, 3, H, W) float32.

    Raises:
        InputError: wrong image dtype/shape, or a size that is not a positive multiple of 32.
    """
    image = _check_image(image)
    height, width = (int(v) for v in size)
    if height <= 0 or width <= 0 or height % 32 or width % 32:
        raise InputError(f"detector size {height}x{width} px is not a multiple of 32; use e.g. 640x640 or 960x960")
    x = _resize(image, height, width) / 255.0
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def resize_norm_img(image: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """PaddleOCR's rec/cls ``resize_norm_img`` for one image and ``max_wh_ratio = W / H`` of ``shape``.

    The image is resized to height H keeping its aspect ratio (width ``min(ceil(H * w / h), W)``), scaled
    to [-1, 1] by ``(x / 255 - 0.5) / 0.5`` and right-padded with zeros to width W.

    Args:
        image: (h, w, 3) uint8 RGB.
        shape: (C, H, W) with C = 3.

    Returns:
        (1, C, H, W) float32.
    """
    image = _check_image(image)
    channels, height, width = (int(v) for v in shape)
    if channels != 3:
        raise InputError(f"rec/cls input shape {shape} has {channels} channels, expected 3 (RGB)")
    h, w = image.shape[:2]
    resized_w = min(width, int(math.ceil(height * w / float(h))))
    x = _resize(image, height, resized_w).transpose(2, 0, 1) / 255.0
    out = np.zeros((channels, height, width), dtype=np.float32)
    out[:, :, :resized_w] = (x - 0.5) / 0.5
    return out[None]


def preprocess_rec(image: np.ndarray, shape: tuple[int, int, int] = (3, 48, 320)) -> np.ndarray:
    """Recogniser input (1, 3, 48, 320) float32 by :func:`resize_norm_img`."""
    return resize_norm_img(image, shape)


def preprocess_cls(image: np.ndarray, shape: tuple[int, int, int] = (3, 48, 192)) -> np.ndarray:
    """Direction-classifier input (1, 3, 48, 192) float32 by :func:`resize_norm_img`."""
    return resize_norm_img(image, shape)


def realistic_image(model_name: str, text: str | None = None) -> np.ndarray:
    """The rendered (H, W, 3) uint8 RGB image behind :func:`realistic_inputs`.

    det: :data:`DEFAULT_DET_LINES` (or ``text``, lines split on ``\\n``) on a white canvas of the model's
    default input size (640x640); rec/cls: one line (default :data:`DEFAULT_TEXT`) on a canvas fitted to it.
    """
    info = zoo.model_info(model_name)
    if model_name == "ppocr_det":
        _, _, height, width = info.input_shape
        return render_text_image(text or "\n".join(DEFAULT_DET_LINES), height, width)
    return render_text_image(text or DEFAULT_TEXT)


def realistic_inputs(model_name: str, text: str | None = None) -> dict[str, np.ndarray]:
    """Input feed for a PP-OCR zoo model built from rendered text, ready for onnxruntime.

    Args:
        model_name: "ppocr_det", "ppocr_rec" or "ppocr_cls".
        text: text to render; defaults as in :func:`realistic_image`.

    Returns:
        ``{"x": array}``: det (1, 3, 640, 640), rec (1, 3, 48, 320), cls (1, 3, 48, 192), all float32.

    Raises:
        UserError: unknown model name; InputError: text does not fit.
    """
    info = zoo.model_info(model_name)
    image = realistic_image(model_name, text)
    _, channels, height, width = info.input_shape
    if model_name == "ppocr_det":
        x = preprocess_det(image, (height, width))
    else:
        x = resize_norm_img(image, (channels, height, width))
    return {info.input_name: x}
