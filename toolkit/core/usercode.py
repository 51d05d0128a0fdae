"""Calling code the user gave us, without letting it end npuscope.

The hooks that run user code: task checks (``--task-metric module:function``, a policy's ``[tasks] metrics``,
``tune --task-metric``), tune's loader scripts (``--inputs file.py[:function]``) and profile's ``--pre`` /
``--post`` callables — their import, their call and, for generators, every step of the iteration.

Python's ``sys.exit()`` raises :class:`SystemExit`, which is not an :class:`Exception`: a ``try/except
Exception`` around user code lets it through and the command ends with the user's exit code (0 for
``sys.exit()``) and no report. Every call site therefore goes through :func:`call` (or :func:`capture`,
:func:`import_file`), which turns ``SystemExit`` (any code) and every other
``BaseException`` that is not :class:`KeyboardInterrupt` (GeneratorExit, a custom BaseException subclass,
an exception group of them) into one line naming the hook: ``<what> raised SystemExit(0): sys.exit() would
end npuscope; ...`` (a :class:`toolkit.core.errors.UserError`, exit 2, or the subclass the caller names).
KeyboardInterrupt (Ctrl-C) keeps its meaning. Ordinary exceptions are the caller's business: each hook has
its own contract for them (a task check that raises is a failing check; a loader that raises is an error),
unless the caller passes ``exceptions=True``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from toolkit.core.errors import UserError


def describe(exc: BaseException) -> str:
    """``SystemExit(0)`` for sys.exit (its code matters), else the exception's type name."""
    return f"SystemExit({exc.code!r})" if isinstance(exc, SystemExit) else type(exc).__name__


def one_line(exc: BaseException, limit: int = 200) -> str:
    """The exception's text on one line (at most ``limit`` characters; the type name when it has none); for
    SystemExit the fix instead, since its text is only the exit code."""
    if isinstance(exc, SystemExit):
        return "sys.exit() would end npuscope; return a value (or raise an exception) instead"
    return " ".join(str(exc).split())[:limit] or type(exc).__name__


def message(what: str, exc: BaseException, when: str = "") -> str:
    """``"<what> raised <describe(exc)>[ <when>]: <one_line(exc)>"``."""
    return f"{what} raised {describe(exc)}{' ' + when if when else ''}: {one_line(exc)}"


def call(fn: Callable, *args, what: str, error: type[UserError] = UserError, exceptions: bool = False,
         when: str = ""):
    """``fn(*args)``, the user's code.

    Args:
        what: how the message names the hook, e.g. ``"task check mod:fn"`` or ``"--pre"``.
        error: the UserError subclass raised (default UserError, exit 2).
        exceptions: also turn an ordinary Exception into ``error`` (default False: it propagates unchanged).
        when: placed after the exception's name, e.g. ``"on request 3"``.

    Raises:
        ``error``: fn raised SystemExit or another non-KeyboardInterrupt BaseException (:func:`message`).
        KeyboardInterrupt: unchanged. Exception: unchanged unless ``exceptions``.
    """
    try:
        return fn(*args)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        if not exceptions:
            raise
        raise error(message(what, exc, when)) from None
    except BaseException as exc:  # noqa: BLE001 - SystemExit & co. from user code are errors, not our exit
        raise error(message(what, exc, when)) from None


def capture(fn: Callable, *args, what: str, error: type[UserError] = UserError, when: str = ""):
    """``(fn(*args), None)``, or ``(None, exc)`` when ``fn`` raised an ordinary Exception (for hooks whose
    contract turns it into a result, e.g. a failing task check); anything else as in :func:`call`."""
    def run():
        try:
            return fn(*args), None
        except Exception as exc:  # noqa: BLE001 - handed back to the caller
            return None, exc
    return call(run, what=what, error=error, when=when)


def import_file(path: Path, module_name: str, what: str, error: type[UserError] = UserError,
                when: str = "on import"):
    """Execute the Python file ``path`` as module ``module_name`` (registered in ``sys.modules`` while and
    after it runs, so dataclasses and pickling inside it find themselves; removed again if it raises).

    Raises:
        ``error``: the file raised anything but KeyboardInterrupt on import, ordinary exceptions included:
            ``<what> raised <type> on import: <text>``.
    """
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        call(spec.loader.exec_module, module, what=what, error=error, exceptions=True, when=when)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
