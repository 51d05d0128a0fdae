"""Model inputs: declared specs, safe npz loading, seeded random data, rendered OCR images, task read-outs.

Modules: ``spec`` (InputSpec, input_specs), ``validate`` (check_feed), ``npz`` (load_npz), ``synthetic``
(random_inputs, parse_val_range), ``render`` (render_text_image), ``ppocr`` (PP-OCR pre-processing,
realistic_inputs), ``tasks`` (ctc_greedy_decode, binarize_iou).
"""

from toolkit.inputs.npz import load_npz
from toolkit.inputs.ppocr import preprocess_cls, preprocess_det, preprocess_rec, realistic_image, realistic_inputs
from toolkit.inputs.render import render_text_image
from toolkit.inputs.spec import InputSpec, input_specs
from toolkit.inputs.synthetic import parse_val_range, random_inputs
from toolkit.inputs.tasks import binarize_iou, ctc_greedy_decode, read_ctc_characters
from toolkit.inputs.validate import check_feed

__all__ = [
    "InputSpec", "binarize_iou", "check_feed", "ctc_greedy_decode", "input_specs", "load_npz", "parse_val_range",
    "preprocess_cls", "preprocess_det", "preprocess_rec", "random_inputs", "read_ctc_characters",
    "realistic_image", "realistic_inputs", "render_text_image",
]
