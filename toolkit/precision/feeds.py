"""Several input sets for one model: an ``.npz``, a folder of ``.npz`` files, or a data-loader script.

A loader script is a Python file defining ``inputs()`` (or the function named after a colon:
``loader.py:make_feeds``) that returns or yields feed dicts {input name: array}. Every feed is checked
against the model's inputs (toolkit.inputs.check_feed). Without ``--inputs`` the model's default input
(realistic / sample generator / seeded random, as for diagnose) is the one set.
"""

from __future__ import annotations

import importlib.util
import reprlib
from pathlib import Path

import numpy as np
import onnx

from toolkit.errors import InputError
from toolkit.inputs import check_feed, input_specs, load_npz

MAX_SETS = 64


def _from_script(spec_text: str, specs) -> list[tuple[str, dict]]:
    path_text, _, fn_name = spec_text.partition(".py:")
    path = Path(path_text + ".py" if fn_name or not path_text.endswith(".py") else path_text)
    fn_name = fn_name or "inputs"
    if not path.is_file():
        raise InputError(f"--inputs loader script '{path}' does not exist")
    mod_spec = importlib.util.spec_from_file_location(f"_npuscope_loader_{path.stem}", path)
    mod = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(mod)
    except Exception as exc:
        raise InputError(f"--inputs loader script '{path}' raised {type(exc).__name__}: {exc}") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise InputError(f"--inputs loader script '{path}' defines no function '{fn_name}()' returning feed dicts")
    out = []
    for i, feed in enumerate(_call_loader(fn, path, fn_name)):
        if not isinstance(feed, dict):
            raise InputError(f"--inputs loader '{path}:{fn_name}' gave a {type(feed).__name__} as set {i}; "
                             "yield dicts {input name: array}")
        feed = _as_arrays(feed, path, fn_name, i)
        check_feed(feed, specs, f"loader '{path.name}' set {i}")
        out.append((f"{path.name}[{i}]", feed))
    return out


def _call_loader(fn, path: Path, fn_name: str):
    """Yield at most :data:`MAX_SETS` items of ``fn()``; any exception while calling ``fn`` (e.g. it takes
    arguments), taking its result as an iterable (e.g. it returns 5) or iterating it (e.g. the generator
    raises after the first feed) becomes a one-line InputError naming the script and function."""
    where = f"--inputs loader script '{path}'"
    try:
        result = fn()
    except Exception as exc:
        raise InputError(f"{where}: calling {fn_name}() raised {type(exc).__name__}: {_one_line(exc)}; it must "
                         "take no arguments and return or yield feed dicts {input name: array}") from None
    if isinstance(result, dict):
        raise InputError(f"{where}: {fn_name}() returned one dict; return a list of feed dicts or yield them")
    try:
        it = iter(result)
    except Exception:
        raise InputError(f"{where}: {fn_name}() returned {reprlib.repr(result)} ({type(result).__name__}), not a "
                         "list or generator of feed dicts {input name: array}") from None
    for i in range(MAX_SETS):
        try:
            item = next(it)
        except StopIteration:
            return
        except Exception as exc:
            raise InputError(f"{where}: {fn_name}() raised {type(exc).__name__}: {_one_line(exc)} while producing "
                             f"set {i}") from None
        yield item


def _one_line(exc: BaseException) -> str:
    """``str(exc)`` on one line (a user's exception text may hold newlines)."""
    return " ".join(str(exc).split())


def _as_arrays(feed: dict, path: Path, fn_name: str, i: int) -> dict:
    """{name: np.ndarray} of one loader feed; a value numpy cannot turn into an array is an InputError."""
    out = {}
    for k, v in feed.items():
        try:
            out[k] = np.asarray(v)
        except Exception as exc:
            raise InputError(f"--inputs loader '{path}:{fn_name}' set {i}: input {k!r} is not an array "
                             f"({type(exc).__name__}: {_one_line(exc)})") from None
    return out


def load_feed_sets(model: onnx.ModelProto, src, inputs: str | None, seed: int = 0,
                   input_shapes: dict | None = None) -> list[tuple[str, dict]]:
    """[(label, feed)] for ``--inputs`` (see module docstring); at most :data:`MAX_SETS`. ``input_shapes``
    ({name: dims}, the config's input_shape) sets the shapes of generated data. Raises InputError."""
    from toolkit.source import prepare_inputs

    specs = input_specs(model)
    if not inputs:
        feed = prepare_inputs(model, src, None, seed, None, input_shapes)
        return [(feed.origin, feed.arrays)]
    if ".py" in inputs and (inputs.endswith(".py") or ".py:" in inputs):
        sets = _from_script(inputs, specs)
    else:
        p = Path(inputs)
        if p.is_dir():
            files = sorted(p.glob("*.npz"))[:MAX_SETS]
            if not files:
                raise InputError(f"--inputs directory '{p}' holds no .npz files; write one per input set")
            sets = [(f.name, load_npz(f, specs)) for f in files]
        else:
            sets = [(p.name, load_npz(p, specs))]
    if not sets:
        raise InputError(f"--inputs '{inputs}' gave no input sets")
    return sets
