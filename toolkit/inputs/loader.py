"""``--inputs loader.py:function``: input sets made by a Python function of the user's.

A loader script is a Python file defining ``inputs()`` (or the function named after a colon:
``loader.py:make_feeds``) that takes no arguments and returns or yields feed dicts {input name: array}. Every
feed is conformed (big-endian arrays made native, str arrays for string inputs: toolkit.inputs.validate.conform_feed)
and checked against the model's inputs (toolkit.inputs.check_feed). The loader is user code: whatever it raises
(sys.exit() included) is a one-line InputError (toolkit.core.usercode). More sets than the caller's limit are
refused, never cut (a generator that never ends is refused after ``max_sets + 1`` items).
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from pathlib import Path

from toolkit.core import usercode
from toolkit.core.errors import InputError
from toolkit.core.userpaths import check_path
from toolkit.inputs.spec import InputSpec
from toolkit.inputs.validate import check_feed, conform_feed, feed_arrays

#: The function a loader script is asked for when ``--inputs`` names no function.
DEFAULT_FUNCTION = "inputs"


def is_loader(spec) -> bool:
    """True when an ``--inputs`` value names a loader script: ``file.py`` or ``file.py:function``."""
    text = str(spec or "")
    return text.endswith(".py") or ".py:" in text


def split_spec(spec: str) -> tuple[Path, str]:
    """(script path, function name) of ``file.py[:function]``; the function defaults to :data:`DEFAULT_FUNCTION`.
    The path ends at the last ``.py:`` (a folder name may hold ``.py:`` too)."""
    text = str(spec)
    if text.endswith(".py"):
        return Path(text), DEFAULT_FUNCTION
    path_text, _, fn_name = text.rpartition(".py:")
    return Path(path_text + ".py"), fn_name or DEFAULT_FUNCTION


def load_sets(spec: str, specs: Sequence[InputSpec], max_sets: int, too_many: str) -> list[tuple[str, dict]]:
    """[(label, feed)] of every set the loader ``spec`` gives, each checked against the model's ``specs``; labels
    ``script.py[i]``. ``too_many``: what the message for more than ``max_sets`` sets says to do (it names the
    limit first).

    Raises:
        InputError: the script is missing or fails to import, defines no such function, the function raises or
            returns something that is not feed dicts, a feed does not fit the model, or more than ``max_sets``;
            its path is one the file system refuses (toolkit.core.userpaths.check_path: a name too long, a
            symbolic link loop, a file on the way, permission denied).
    """
    path, fn_name = split_spec(spec)
    where = f"--inputs loader script '{path}'"
    check_path(path, "--inputs loader script", InputError, "give an existing file.py[:function]")
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise InputError(f"{where} {what}; give an existing file.py[:function] whose function returns or yields "
                         "feed dicts {input name: array}")
    mod = usercode.import_file(path, f"_npuscope_loader_{path.stem}", where, InputError)
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise InputError(f"{where} defines no function '{fn_name}()' returning feed dicts; define it or name the "
                         f"function after a colon, e.g. --inputs {path}:make_feeds")
    out = []
    for i, feed in enumerate(_call(fn, path, fn_name, max_sets, too_many)):
        source = f"--inputs loader '{path}:{fn_name}' set {i}"
        if not isinstance(feed, dict):
            raise InputError(f"--inputs loader '{path}:{fn_name}' gave a {type(feed).__name__} as set {i}; "
                             "yield dicts {input name: array}")
        feed = conform_feed(feed_arrays(feed, source), specs)
        check_feed(feed, specs, f"loader '{path.name}' set {i}")
        out.append((f"{path.name}[{i}]", feed))
    if not out:
        raise InputError(f"{where}: {fn_name}() gave no input sets; return or yield at least one feed dict")
    return out


def _call(fn, path: Path, fn_name: str, max_sets: int, too_many: str):
    """Yield the items of ``fn()``, at most ``max_sets``: one more is an InputError naming the limit (so a
    generator that never ends is refused after ``max_sets + 1`` items, not cut). Any exception while calling
    ``fn`` (e.g. it takes arguments), taking its result as an iterable (e.g. it returns 5) or iterating it (e.g.
    the generator raises after the first feed) becomes a one-line InputError naming the script and function;
    so does sys.exit() (SystemExit, any code) or another BaseException but KeyboardInterrupt there
    (toolkit.core.usercode)."""
    where = f"--inputs loader script '{path}'"
    what = f"{where}: {fn_name}()"
    result, exc = usercode.capture(fn, what=what, error=InputError)
    if exc is not None:
        raise InputError(f"{where}: calling {fn_name}() raised {type(exc).__name__}: {usercode.one_line(exc)}; "
                         "it must take no arguments and return or yield feed dicts {input name: array}") from None
    if isinstance(result, dict):
        raise InputError(f"{where}: {fn_name}() returned one dict; return a list of feed dicts or yield them")
    it, exc = usercode.capture(iter, result, what=what, error=InputError)
    if exc is not None:
        raise InputError(f"{where}: {fn_name}() returned {reprlib.repr(result)} ({type(result).__name__}), not a "
                         "list or generator of feed dicts {input name: array}") from None
    for i in range(max_sets + 1):
        step, exc = usercode.capture(_next, it, what=what, error=InputError, when=f"while producing set {i}")
        if exc is not None:
            raise InputError(f"{where}: {fn_name}() raised {type(exc).__name__}: {usercode.one_line(exc)} while "
                             f"producing set {i}") from None
        more, item = step
        if not more:
            return
        if i == max_sets:
            raise InputError(f"{where}: {fn_name}() gives more than {max_sets} input sets, {too_many}")
        yield item


def _next(it) -> tuple[bool, object]:
    """(True, next item) or (False, None) at the end."""
    try:
        return True, next(it)
    except StopIteration:
        return False, None
