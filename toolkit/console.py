"""The ``npuscope`` console entry point (and ``python -m toolkit``).

A Ctrl-C or SIGTERM that arrives while the command's modules are still being imported (numpy, onnxruntime,
pandas: a second or more, longer on a loaded machine) ends the process at once with the shell's code, 130 or
143, and one line, instead of a KeyboardInterrupt traceback from inside an import. Once they are imported,
:func:`toolkit.cli.main` sets its own handlers (its output folders are then removed on the way out).
"""

from __future__ import annotations

import os
import signal
import sys


def _while_importing(signum, _frame) -> None:
    try:
        sys.stderr.write("npuscope: interrupted" + (" (SIGTERM)" if signum == signal.SIGTERM else "") + "\n")
        sys.stderr.flush()
    finally:
        os._exit(128 + signum)


signal.signal(signal.SIGINT, _while_importing)
signal.signal(signal.SIGTERM, _while_importing)

from toolkit.cli import main as _cli_main  # after the handlers above: they cover this import

signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv=None) -> None:
    """Run the command line (toolkit.cli.main)."""
    _cli_main(argv)
