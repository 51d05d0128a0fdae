"""User code (toolkit/core/usercode.py): every hook turns any non-keyboard BaseException into a UserError,
KeyboardInterrupt keeps its meaning, and each hook keeps its contract for ordinary exceptions."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from toolkit.core.errors import InputError, UserError


def _m1(path: Path) -> Path:
    """y = 3x + 1, z = exp(x) on x float32[4, 8] (two float outputs)."""
    from tests.graphs import affine_and

    m = affine_and("Exp")
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


class Custom(BaseException):
    """A BaseException that is neither Exception, SystemExit nor KeyboardInterrupt."""


#: what user code raises -> the text the error shows for it
RAISERS = {"sys.exit(0)": (SystemExit(0), "SystemExit(0)"), "sys.exit(3)": (SystemExit(3), "SystemExit(3)"),
           "sys.exit('bye')": (SystemExit("bye"), "SystemExit('bye')"),
           "GeneratorExit": (GeneratorExit("g"), "GeneratorExit"), "custom BaseException": (Custom("c"), "Custom")}


def _raise(exc):
    raise exc


def _hook_run_check(tmp_path, exc):
    from toolkit.compare.tasks import run_check

    def check(golden, npu, model):
        _raise(exc)
    run_check(check, {}, {}, None)


def _hook_load_task(tmp_path, exc, monkeypatch=None):
    from toolkit.compare.tasks import load_task

    name = f"tm_import_{abs(hash((str(tmp_path), repr(exc))))}"
    (tmp_path / f"{name}.py").write_text(f"from {__name__} import _raise, RAISERS\n_raise(RAISERS[{_key(exc)!r}][0])\n"
                                         "def f(g, n, m):\n    return {}\n")
    load_task(f"{name}:f")


def _hook_loader_call(tmp_path, exc):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text(f"from {__name__} import _raise, RAISERS\n"
                                   f"def inputs():\n    _raise(RAISERS[{_key(exc)!r}][0])\n")
    load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"))


def _hook_loader_iteration(tmp_path, exc):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text(f"import numpy as np\nfrom {__name__} import _raise, RAISERS\n"
                                   "def inputs():\n    yield {'x': np.zeros((4, 8), np.float32)}\n"
                                   f"    _raise(RAISERS[{_key(exc)!r}][0])\n")
    load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"))


def _hook_loader_import(tmp_path, exc):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text(f"from {__name__} import _raise, RAISERS\n_raise(RAISERS[{_key(exc)!r}][0])\n")
    load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"))


def _hook_profile_call(tmp_path, exc):
    from toolkit.profile import e2e

    e2e.time_call(lambda i: _raise(exc), (0,), "--pre", 0)


def _hook_profile_import(tmp_path, exc):
    from toolkit.profile import e2e

    (tmp_path / "pp.py").write_text(f"from {__name__} import _raise, RAISERS\n_raise(RAISERS[{_key(exc)!r}][0])\n")
    e2e.load_callable(str(tmp_path / "pp.py") + ":pre", "--pre", "pre")


def _hook_array_conversion(tmp_path, exc):
    from toolkit.profile import e2e

    class Arr:
        def __array__(self, dtype=None, copy=None):
            _raise(exc)
    e2e.as_feed({"x": Arr()}, ["x"])


def _key(exc) -> str:
    return next(k for k, (e, _) in RAISERS.items() if e is exc)


LIB_HOOKS = {"task check call": _hook_run_check, "task module import": _hook_load_task,
             "loader call": _hook_loader_call, "loader iteration": _hook_loader_iteration,
             "loader import": _hook_loader_import, "profile --pre call": _hook_profile_call,
             "profile --pre import": _hook_profile_import, "feed value conversion": _hook_array_conversion}


@pytest.mark.parametrize("raiser", sorted(RAISERS))
@pytest.mark.parametrize("hook", sorted(LIB_HOOKS))
def test_every_hook_turns_every_non_keyboard_base_exception_into_a_user_error(tmp_path, monkeypatch, hook, raiser):
    monkeypatch.syspath_prepend(str(tmp_path))
    exc, shown = RAISERS[raiser]
    with pytest.raises(UserError) as err:
        LIB_HOOKS[hook](tmp_path, exc)
    msg = str(err.value)
    assert f"raised {shown}" in msg and "\n" not in msg, msg


def test_keyboard_interrupt_in_user_code_keeps_its_meaning():
    from toolkit.core import usercode
    from toolkit.compare.tasks import run_check

    def check(g, n, m):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_check(check, {}, {}, None)
    with pytest.raises(KeyboardInterrupt):
        usercode.call(check, 1, 2, 3, what="x", exceptions=True)


def test_ordinary_exceptions_keep_each_hooks_contract():
    """A task check raising ValueError on the device outputs is a failing check (not an error); one raising on
    the reference itself is a usage error (toolkit/compare/tasks.py); --pre raising one is an error."""
    from toolkit.compare.tasks import run_check
    from toolkit.core.errors import UsageError
    from toolkit.profile import e2e

    def check(g, n, m):
        if n["y"] != g["y"]:
            raise ValueError("boom")
        return {"name": "c", "passed": True, "value": None, "detail": ""}
    res = run_check(check, {"y": 0}, {"y": 1}, None)
    assert res["passed"] is False and "raised ValueError: boom" in res["detail"]

    def broken(g, n, m):
        raise ValueError("boom")
    with pytest.raises(UsageError, match=r"raised ValueError: boom \(also when given this input's FP32 reference"):
        run_check(broken, {}, {}, None)
    with pytest.raises(InputError, match="--pre raised ValueError on request 2: nope"):
        e2e.time_call(lambda i: _raise(ValueError("nope")), (2,), "--pre", 2)
