"""Task-level checks: does the NPU run still do the model's job? A small registry a user can extend.

A task check is ``fn(golden_outputs, npu_outputs, model) -> dict(name, passed, value, detail)`` where the
outputs are {graph output name: array}. Built-ins (selected by zoo name):

- ``ppocr_det``: IoU of the binarised probability maps (threshold 0.3), passes at >= 0.95;
- ``ppocr_rec``: CTC greedy decoding with the dictionary in the model's ``character`` metadata: texts equal;
- ``ppocr_cls``: argmax equal.

``--task-metric module:function`` loads a user check with the same signature.
"""

from __future__ import annotations

import importlib
from typing import Callable

import numpy as np
import onnx

from toolkit.errors import UsageError
from toolkit.inputs import binarize_iou, ctc_greedy_decode, read_ctc_characters

DET_IOU_MIN = 0.95


def _first(outputs: dict) -> np.ndarray:
    return np.asarray(next(iter(outputs.values())), dtype=np.float32)


def det_iou(golden, npu, model) -> dict:
    iou = float(binarize_iou(_first(golden), _first(npu), thr=0.3))
    return {"name": "det_binary_map_iou", "passed": iou >= DET_IOU_MIN, "value": iou,
            "detail": f"IoU of probability maps > 0.3: {iou:.4f} (needs >= {DET_IOU_MIN})"}


def rec_text(golden, npu, model) -> dict:
    chars = read_ctc_characters(model)
    a, b = ctc_greedy_decode(_first(golden), chars), ctc_greedy_decode(_first(npu), chars)
    return {"name": "rec_ctc_text", "passed": a == b, "value": b[0] if b else "",
            "detail": f"FP32 reads {a!r}, NPU reads {b!r}"}


def cls_argmax(golden, npu, model) -> dict:
    a, b = _first(golden).argmax(-1).tolist(), _first(npu).argmax(-1).tolist()
    return {"name": "cls_argmax", "passed": a == b, "value": b, "detail": f"FP32 argmax {a}, NPU argmax {b}"}


TASKS: dict[str, Callable] = {"ppocr_det": det_iou, "ppocr_rec": rec_text, "ppocr_cls": cls_argmax}


def load_task(spec: str, label: str = "", error: type = UsageError) -> Callable:
    """``module:function`` → the callable.

    ``label``: how messages name the entry (default ``--task-metric '<spec>'``; a policy passes
    ``policy 'p.toml': [tasks] metrics entry '<spec>'``). Raises ``error`` (UsageError by default) when the
    entry is malformed, cannot be imported or is not callable."""
    head = label or f"--task-metric '{spec}'"
    mod, sep, fn = spec.partition(":")
    if not sep or not mod or not fn:
        raise error(f"{head} is not 'module:function', e.g. 'mypkg.checks:my_check'")
    try:
        obj = getattr(importlib.import_module(mod), fn)
    except Exception as exc:  # ImportError, AttributeError, SyntaxError in the user's module, ...
        msg = " ".join(str(exc).split())
        raise error(f"{head} cannot be loaded ({type(exc).__name__}: {msg}); the module must be importable "
                    "(set PYTHONPATH to its folder) and define the function") from None
    if not callable(obj):
        raise error(f"{head} is not callable; name a function (golden, npu, model) -> dict")
    return obj


def run_tasks(zoo_name: str | None, extra: list[str], golden: dict, npu: dict, model: onnx.ModelProto) -> list[dict]:
    fns = ([TASKS[zoo_name]] if zoo_name in TASKS else []) + [load_task(s) for s in extra]
    out = []
    for fn in fns:
        try:
            res = dict(fn(golden, npu, model))
        except Exception as exc:
            res = {"name": getattr(fn, "__name__", str(fn)), "passed": False, "value": None,
                   "detail": f"task check raised {type(exc).__name__}: {exc}"}
        res.setdefault("name", getattr(fn, "__name__", "task"))
        res.setdefault("value", None)
        res.setdefault("detail", "")
        res["passed"] = bool(res.get("passed"))
        out.append(res)
    return out
