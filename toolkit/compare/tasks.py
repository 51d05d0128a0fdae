"""Task-level checks: does the NPU run still do the model's job? A small registry a user can extend.

A task check is ``fn(golden_outputs, npu_outputs, model) -> dict(name, passed, value, detail)`` where the
outputs are {graph output name: array} and the returned dict holds (:data:`RESULT_KEYS`):

- ``name``: str, non-empty; ``passed``: a Python ``bool`` or a numpy bool scalar (``numpy.bool_``; a string
  such as ``"false"``, a number, None or an array is refused: its truth value is not a verdict);
- ``value``: the measured value (any JSON-able value, None allowed); ``detail``: str, shown next to the verdict.

A check whose return value breaks these rules (not a dict, a key missing, a wrong type) is reported as a
*failing* task check whose detail names the function and what was wrong (:func:`validate_result`); a check that
raises is a failing task check "raised <Exception>: ...". Neither ends the run; a check (or its module's
import) that calls ``sys.exit()`` or raises another BaseException but KeyboardInterrupt is a one-line error
(exit 2, :mod:`toolkit.core.usercode`). Built-ins (selected by zoo name):

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

from toolkit.core import usercode
from toolkit.core.errors import UsageError
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
    entry is malformed, cannot be imported (its module raises, sys.exit() included: toolkit.core.usercode) or is
    not callable."""
    head = label or f"--task-metric '{spec}'"
    mod, sep, fn = spec.partition(":")
    if not sep or not mod or not fn:
        raise error(f"{head} is not 'module:function', e.g. 'mypkg.checks:my_check'")
    obj, exc = usercode.capture(lambda: getattr(importlib.import_module(mod), fn), what=head, error=error,
                                when=f"importing module '{mod}'")  # sys.exit() at its top level: error
    if exc is not None:  # ImportError, AttributeError, SyntaxError in the user's module, ...
        msg = " ".join(str(exc).split())
        raise error(f"{head} cannot be loaded ({type(exc).__name__}: {msg}); the module must be importable "
                    "(set PYTHONPATH to its folder) and define the function") from None
    if not callable(obj):
        raise error(f"{head} is not callable; name a function (golden, npu, model) -> dict")
    return obj


#: The keys a task check's result must hold (see the module docstring for their types).
RESULT_KEYS = ("name", "passed", "value", "detail")


def check_label(fn: Callable) -> str:
    """How messages name a task check: ``module:qualname`` of a function, else its repr."""
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    return f"{mod}:{qual}" if mod and qual else repr(fn)


def _short(value, limit: int = 80) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _type_name(value) -> str:
    t = type(value)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def result_problem(res) -> str | None:
    """What is wrong with ``res``, a task check's return value (None: it follows the contract of the module
    docstring). Pure: reads ``res`` only."""
    if not isinstance(res, dict):
        return f"returned {_short(res)} ({_type_name(res)}), not a dict with keys {', '.join(RESULT_KEYS)}"
    missing = [k for k in RESULT_KEYS if k not in res]
    if missing:
        return (f"returned a dict without key(s) {', '.join(repr(k) for k in missing)} (it holds "
                f"{', '.join(repr(k) for k in res) or 'no keys'}); a result needs {', '.join(RESULT_KEYS)}")
    passed = res["passed"]
    if not isinstance(passed, (bool, np.bool_)):
        shape = f" of shape {tuple(np.shape(passed))}" if isinstance(passed, np.ndarray) else ""
        return (f"returned 'passed' = {_short(passed)} ({_type_name(passed)}{shape}); it must be a Python bool "
                "or a numpy bool scalar (True/False)")
    if not isinstance(res["name"], str) or not res["name"].strip():
        return f"returned 'name' = {_short(res['name'])} ({_type_name(res['name'])}); it must be a non-empty str"
    if not isinstance(res["detail"], str):
        return f"returned 'detail' = {_short(res['detail'])} ({_type_name(res['detail'])}); it must be a str"
    return None


def validate_result(fn: Callable, res) -> dict:
    """``res`` (what ``fn`` returned) as a result dict with ``passed`` a Python bool; a return value that
    breaks the contract becomes a failing result {name: the function's label, passed: False, value: None,
    detail: "task check <label> returned ...: ..."} (:func:`result_problem`)."""
    problem = result_problem(res)
    if problem is None:
        return {**res, "passed": bool(res["passed"])}
    label = check_label(fn)
    return {"name": label, "passed": False, "value": None,
            "detail": f"task check {label} {problem}: fix what the check returns"}


def _copies(values: dict) -> dict:
    """A copy of {name: array or list of arrays} a check may change freely (its caller's arrays stay as
    they were)."""
    out = {}
    for k, v in values.items():
        if isinstance(v, np.ndarray):
            out[k] = v.copy()
        elif isinstance(v, list):
            out[k] = [x.copy() if isinstance(x, np.ndarray) else x for x in v]
        else:
            out[k] = v
    return out


def _call(fn: Callable, label: str, golden: dict, npu: dict, model) -> tuple[dict | None, str]:
    """(the validated result, "") of one call of ``fn`` on copies of ``golden`` / ``npu``, or (None, the
    detail of the failing result that stands for it) when it raised ("task check <label> raised <Exception>:
    <message>") or broke the contract (:func:`validate_result`'s "task check <label> returned ...")."""
    res, exc = usercode.capture(fn, _copies(golden), _copies(npu), model, what=f"task check {label}")
    if exc is not None:
        return None, f"task check {label} raised {type(exc).__name__}: {' '.join(str(exc).split())}"
    if result_problem(res) is not None:
        return None, validate_result(fn, res)["detail"]
    return {**res, "passed": bool(res["passed"])}, ""


def run_check(fn: Callable, golden: dict, npu: dict, model: onnx.ModelProto) -> dict:
    """One task check's result (:func:`validate_result`), the check given copies of ``golden`` and ``npu`` (a
    check that changes its arguments changes nothing of ours).

    A check that fails (raises, returns something else than a result, or passes=False) is asked again with the
    FP32 reference as the device outputs, to tell the device's fault from the check's:
    - it cannot judge the reference either (raises, or no result): UsageError;
    - it fails the reference too: a failing result with ``fails_on_reference`` True and a detail that says so
      (no precision setting can pass it: diagnose and tune search no keep set for it);
    - it passes the reference: the failing result as is (a check that raised: detail "task check <label>
      raised <Exception>: <message>"; a result that breaks the contract: "task check <label> returned ...").

    Raises:
        UsageError: the check cannot judge this input's FP32 reference given as both sides (exit 2).
        UserError: the check raised SystemExit (sys.exit(), any code) or another BaseException that is not
            KeyboardInterrupt: "task check <label> raised SystemExit(0): ..." (toolkit.core.usercode), exit 2.
    """
    label = check_label(fn)
    res, detail = _call(fn, label, golden, npu, model)
    if res is not None and res["passed"]:
        return res
    failed = res if res is not None else {"name": label, "passed": False, "value": None, "detail": detail}
    if npu is not golden:
        ref, ref_detail = _call(fn, label, golden, golden, model)
        if ref is None:  # a contract break's detail already says how to fix it
            fix = "" if ref_detail.endswith("fix what the check returns") else (
                "; fix the check (it receives golden, npu: {output name: array}, model and returns a dict with "
                f"keys {', '.join(RESULT_KEYS)})")
            raise UsageError(f"{ref_detail[:300]} (also when given this input's FP32 reference as the device "
                             f"outputs, so it cannot judge the run){fix}")
        if not ref["passed"]:
            why = f"{failed['detail']}; " if failed.get("detail") else ""
            return {**failed, "fails_on_reference": True,
                    "detail": f"{why}it fails the FP32 reference too: the check, not the device precision, "
                              f"decides it (task check {label})"}
    return failed


def run_tasks(zoo_name: str | None, extra: list[str], golden: dict, npu: dict, model: onnx.ModelProto) -> list[dict]:
    """Results of the built-in check of ``zoo_name`` (if any) and of each ``module:function`` in ``extra``
    (:func:`run_check`), in that order. Raises UsageError when an ``extra`` entry cannot be loaded."""
    fns = ([TASKS[zoo_name]] if zoo_name in TASKS else []) + [load_task(s) for s in extra]
    return [run_check(fn, golden, npu, model) for fn in fns]
