"""Several input sets for one model: an ``.npz``, a folder of ``.npz`` files, or a data-loader script.

A loader script is a Python file defining ``inputs()`` (or the function named after a colon:
``loader.py:make_feeds``) that returns or yields feed dicts {input name: array}. Every feed is conformed
(big-endian arrays made native, str arrays for string inputs: toolkit.inputs.validate.conform_feed) and
checked against the model's inputs (toolkit.inputs.check_feed). Every file of a folder and every set of a
loader is used; more than ``max_sets`` (``tune --max-inputs``) is refused, never cut. The loader is user code:
whatever it raises (sys.exit() included) is a one-line InputError (toolkit.core.usercode). Without ``--inputs``
the model's default input (realistic / sample generator / seeded random, as for diagnose) is the one set.
The loader itself lives in toolkit.inputs.loader, the --inputs forms in toolkit.source.
"""

from __future__ import annotations

import onnx

from toolkit.core.errors import InputError
from toolkit.inputs.npz import npz_files
from toolkit.source import input_kind, input_sets

#: Default for ``max_sets`` (``tune --max-inputs``): every input set is held in memory with its FP32 reference
#: outputs and run by every trial, so a folder or loader giving more sets is refused, never cut.
DEFAULT_MAX_SETS = 1000


def load_feed_sets(model: onnx.ModelProto, src, inputs: str | None, seed: int = 0,
                   input_shapes: dict | None = None, max_sets: int = DEFAULT_MAX_SETS,
                   val_range: str | None = None) -> list[tuple[str, dict]]:
    """[(label, feed)] for ``--inputs`` (see module docstring; toolkit.source.input_sets): every file of a folder
    (sorted by name), every set a loader gives. ``input_shapes`` ({name: dims}, the config's input_shape) and
    ``val_range`` shape and bound generated data. ``max_sets`` (``tune --max-inputs``, default
    :data:`DEFAULT_MAX_SETS`): a folder or loader giving more sets is refused, never silently cut.

    Raises:
        InputError: a bad file, loader or feed; more than ``max_sets`` sets (naming the count and the option).
    """
    if input_kind(inputs) == "folder":
        files = npz_files(inputs)
        if len(files) > max_sets:
            raise InputError(f"--inputs directory '{inputs}' holds {len(files)} .npz files, more than tune's limit "
                             f"of {max_sets} input sets (--max-inputs {max_sets}; each set is kept in memory "
                             f"and run in every trial); pass --max-inputs {len(files)} to use them all, or a "
                             "folder with fewer files")
    too_many = (f"tune's limit (--max-inputs {max_sets}; each set is kept in memory and run in every trial); "
                "make it end after the sets to use (a generator that never ends is refused) or raise --max-inputs")
    sets = input_sets(model, src, inputs, seed, val_range, input_shapes, max_sets, too_many)
    if not sets:
        raise InputError(f"--inputs '{inputs}' gave no input sets")
    return sets
