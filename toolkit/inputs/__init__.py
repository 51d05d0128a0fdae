"""Model inputs: declared specs, safe npz loading, seeded random data, rendered OCR images, task read-outs.

Modules: ``spec`` (InputSpec, input_specs), ``validate`` (check_feed), ``npz`` (load_npz), ``synthetic``
(random_inputs, parse_val_range), ``render`` (render_text_image), ``ppocr`` (PP-OCR pre-processing,
realistic_inputs), ``tasks`` (ctc_greedy_decode, binarize_iou).

The names below are imported from their module on first use (PEP 562 ``__getattr__``): the compiler imports
``toolkit.inputs.spec`` on every compile, and must not pay for Pillow and the OCR renderer (~20 ms).
"""

import importlib

_HOME = {
    "load_npz": "npz", "preprocess_cls": "ppocr", "preprocess_det": "ppocr", "preprocess_rec": "ppocr",
    "realistic_image": "ppocr", "realistic_inputs": "ppocr", "render_text_image": "render", "InputSpec": "spec",
    "input_specs": "spec", "parse_val_range": "synthetic", "random_inputs": "synthetic", "binarize_iou": "tasks",
    "ctc_greedy_decode": "tasks", "read_ctc_characters": "tasks", "check_feed": "validate",
}
__all__ = [
    "InputSpec", "binarize_iou", "check_feed", "ctc_greedy_decode", "input_specs", "load_npz", "parse_val_range",
    "preprocess_cls", "preprocess_det", "preprocess_rec", "random_inputs", "read_ctc_characters",
    "realistic_image", "realistic_inputs", "render_text_image",
]


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'toolkit.inputs' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"toolkit.inputs.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOME))
