"""Run fuzzer mutants through npuscope commands in this process: ``python -m tests.fuzz.drive SEED START COUNT
TIMEOUT COMMANDS`` regenerates mutants START..START+COUNT-1 of the stream of ``SEED`` (tests.fuzz.mutate over
tests.fuzz.seeds; a negative SEED: the seed models themselves, unmutated, kind "none"), writes each to a temporary folder and calls the CLI's command group in-process
(``toolkit.cli.cli``, not ``main``, which ends the process) for each command of COMMANDS (comma-separated, e.g.
``compile,diagnose``), with the CLI's own signal set-up: a SIGALRM after TIMEOUT seconds stops a run, also inside
onnxruntime (toolkit.ort.terminate). Prints one JSON line per (mutant, command):

    {"label", "kind", "seed", "command", "outcome", "code", "line", "seconds"}

``outcome``: ``ok`` (exit 0 or a FAIL verdict, 1 without an error), ``refused`` (a one-line error, exit 1 / 2),
``timeout`` (stopped after TIMEOUT s), ``internal`` (any other exception: exit 3 in the CLI; ``line`` holds the
exception and the innermost frame of ours).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import click

from tests.fuzz.mutate import Mutant, mutants
from tests.fuzz.seeds import seed_models
from toolkit import cli
from toolkit.core.errors import UserError
from toolkit.ort import terminate


def _alarm(signum, frame):
    raise KeyboardInterrupt


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/toolkit/" in f.filename]
    f = frames[-1] if frames else None
    return f" at {f.filename.split('/toolkit/')[-1]}:{f.lineno}" if f else ""


def run_one(args: list[str], timeout: float) -> tuple[str, int, str]:
    """(outcome, exit code as the CLI would give it, one line) of ``npuscope ARGS`` in this process."""
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):  # the commands' summaries
            cli.cli.main(args=args, prog_name="npuscope", standalone_mode=False)
        return "ok", 0, ""
    except KeyboardInterrupt:
        return "timeout", 124, f"stopped after {timeout:g} s"
    except click.exceptions.Abort:  # click's form of KeyboardInterrupt
        return "timeout", 124, f"stopped after {timeout:g} s"
    except UserError as exc:
        return "refused", exc.exit_code, str(exc)
    except click.ClickException as exc:
        return "refused", 2, exc.format_message()
    except SystemExit as exc:
        return ("ok" if exc.code in (0, 1, None) else "internal"), exc.code or 0, ""
    except Exception as exc:  # noqa: BLE001 - the internal errors the fuzzer looks for
        return "internal", 3, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}{_where(exc)}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for t in threading.enumerate():  # a diagnose reference thread, terminated with the run
            if t.name == "npuscope-background":
                t.join(30)
        terminate.reset()


def main(argv: list[str]) -> None:
    seed, start, count, timeout, commands = int(argv[0]), int(argv[1]), int(argv[2]), float(argv[3]), argv[4].split(",")
    signal.signal(signal.SIGALRM, _alarm)
    terminate.watch_signals()
    root = Path(tempfile.mkdtemp(prefix="npuscope-fuzz-"))
    try:
        stream = mutants(seed_models(), start + count, seed) if seed >= 0 else \
            (Mutant(i, name, "none", model.SerializeToString()) for i, (name, model) in enumerate(seed_models()))
        for m in stream:
            if m.index < start:
                continue
            folder = root / m.label
            folder.mkdir()
            path = folder / "model.onnx"
            path.write_bytes(m.data)
            for command in commands:
                t0 = time.perf_counter()
                outcome, code, line = run_one([command, str(path), "--out", str(folder / f"out-{command}")], timeout)
                print(json.dumps({"label": m.label, "kind": m.kind, "seed": m.seed, "command": command,
                                  "outcome": outcome, "code": code, "line": line,
                                  "seconds": round(time.perf_counter() - t0, 3)}), flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
