"""Several input sets for one model: an ``.npz``, a folder of ``.npz`` files, or a data-loader script.

A loader script is a Python file defining ``inputs()`` (or the function named after a colon:
``loader.py:make_feeds``) that returns or yields feed dicts {input name: array}. Every feed is conformed
(big-endian arrays made native, str arrays for string inputs: toolkit.inputs.validate.conform_feed) and
checked against the model's inputs (toolkit.inputs.check_feed). Every file of a folder and every set of a
loader is used; more than ``max_sets`` (``tune --max-inputs``) is refused, never cut. The loader is user code:
whatever it raises (sys.exit() included) is a one-line InputError (toolkit.core.usercode). Without ``--inputs``
the model's default input (realistic / sample generator / seeded random, as for diagnose) is the one set.
"""

from __future__ import annotations

import reprlib
from pathlib import Path

import onnx

from toolkit.core import usercode
from toolkit.core.errors import InputError
from toolkit.inputs import check_feed, input_specs, load_npz
from toolkit.inputs.validate import conform_feed, feed_arrays
from toolkit.source import prepare_inputs

#: Default for ``max_sets`` (``tune --max-inputs``): every input set is held in memory with its FP32 reference
#: outputs and run by every trial, so a folder or loader giving more sets is refused, never cut.
DEFAULT_MAX_SETS = 1000


def _from_script(spec_text: str, specs, max_sets: int) -> list[tuple[str, dict]]:
    path_text, _, fn_name = spec_text.partition(".py:")
    path = Path(path_text + ".py" if fn_name or not path_text.endswith(".py") else path_text)
    fn_name = fn_name or "inputs"
    if not path.is_file():
        raise InputError(f"--inputs loader script '{path}' does not exist")
    mod = usercode.import_file(path, f"_npuscope_loader_{path.stem}", f"--inputs loader script '{path}'",
                               InputError)
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise InputError(f"--inputs loader script '{path}' defines no function '{fn_name}()' returning feed dicts")
    out = []
    for i, feed in enumerate(_call_loader(fn, path, fn_name, max_sets)):
        source = f"--inputs loader '{path}:{fn_name}' set {i}"
        if not isinstance(feed, dict):
            raise InputError(f"--inputs loader '{path}:{fn_name}' gave a {type(feed).__name__} as set {i}; "
                             "yield dicts {input name: array}")
        feed = conform_feed(feed_arrays(feed, source), specs)
        check_feed(feed, specs, f"loader '{path.name}' set {i}")
        out.append((f"{path.name}[{i}]", feed))
    return out


def _call_loader(fn, path: Path, fn_name: str, max_sets: int):
    """Yield the items of ``fn()``, at most ``max_sets``: one more is an InputError naming the limit and
    ``--max-inputs`` (so a generator that never ends is refused after ``max_sets + 1`` items, not cut). Any
    exception while calling ``fn`` (e.g. it takes arguments), taking its result as an iterable (e.g. it returns
    5) or iterating it (e.g. the generator raises after the first feed) becomes a one-line InputError naming
    the script and function; so does sys.exit() (SystemExit, any code) or another BaseException but
    KeyboardInterrupt there (toolkit.core.usercode)."""
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
            raise InputError(f"{where}: {fn_name}() gives more than {max_sets} input sets, tune's limit "
                             f"(--max-inputs {max_sets}; each set is kept in memory and run in every trial); "
                             "make it end after the sets to use (a generator that never ends is refused) or raise "
                             "--max-inputs")
        yield item


def _next(it) -> tuple[bool, object]:
    """(True, next item) or (False, None) at the end."""
    try:
        return True, next(it)
    except StopIteration:
        return False, None


def load_feed_sets(model: onnx.ModelProto, src, inputs: str | None, seed: int = 0,
                   input_shapes: dict | None = None, max_sets: int = DEFAULT_MAX_SETS) -> list[tuple[str, dict]]:
    """[(label, feed)] for ``--inputs`` (see module docstring): every file of a folder (sorted by name), every
    set a loader gives. ``input_shapes`` ({name: dims}, the config's input_shape) sets the shapes of generated
    data. ``max_sets`` (``tune --max-inputs``, default :data:`DEFAULT_MAX_SETS`): a folder or loader giving
    more sets is refused, never silently cut.

    Raises:
        InputError: a bad file, loader or feed; more than ``max_sets`` sets (naming the count and the option).
    """
    specs = input_specs(model)
    if not inputs:
        feed = prepare_inputs(model, src, None, seed, None, input_shapes)
        return [(feed.origin, feed.arrays)]
    if ".py" in inputs and (inputs.endswith(".py") or ".py:" in inputs):
        sets = _from_script(inputs, specs, max_sets)
    else:
        p = Path(inputs)
        if p.is_dir():
            files = sorted(p.glob("*.npz"))
            if not files:
                raise InputError(f"--inputs directory '{p}' holds no .npz files; write one per input set")
            if len(files) > max_sets:
                raise InputError(f"--inputs directory '{p}' holds {len(files)} .npz files, more than tune's limit "
                                 f"of {max_sets} input sets (--max-inputs {max_sets}; each set is kept in memory "
                                 f"and run in every trial); pass --max-inputs {len(files)} to use them all, or a "
                                 "folder with fewer files")
            sets = [(f.name, load_npz(f, specs)) for f in files]
        else:
            sets = [(p.name, load_npz(p, specs))]
    if not sets:
        raise InputError(f"--inputs '{inputs}' gave no input sets")
    return sets
