"""Compile the toolkit's Python bytecode before a bench starts child processes, as ``pip install .`` does.

A regular install (the README's ``pip install .``) writes every module's ``.pyc`` at install time, and so did
the installs of the peers (Polygraphy, onnxconverter-common, onnxruntime). A development checkout installed
in editable mode on a machine with ``PYTHONDONTWRITEBYTECODE=1`` (as these bench machines are) never writes
them, so every child process would recompile the toolkit's ~200 modules from source (~0.1-0.3 s) — a cost
no user of an installed npuscope pays. :func:`compile_toolkit` removes that bias; it writes only into the
package's own ``__pycache__`` folders (git-ignored).
"""

from __future__ import annotations

import compileall
from pathlib import Path


def compile_toolkit() -> bool:
    """Byte-compile every module of the imported ``toolkit`` package (quietly); True when all compiled."""
    import toolkit

    return bool(compileall.compile_dir(str(Path(toolkit.__file__).parent), quiet=1))
