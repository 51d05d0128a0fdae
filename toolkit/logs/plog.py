"""npuscope's logger: plog-style lines, levels and destination chosen by environment variables.

Line format (GUIDE §4, the device toolchain's plog format)::

    [LEVEL] MODULE(PID,PROCESS):YYYY-MM-DD-HH:MM:SS.mmm.uuu [file:line]message

LEVEL is DEBUG, INFO, WARNING or ERROR (Python's CRITICAL is written as ERROR, as plog has no such level);
MODULE is the logger name below ``npuscope.`` in upper case (``npuscope.compiler`` → ``COMPILER``, dots become
``_``); PID the process id; PROCESS ``npuscope``; the time is local time with milliseconds and microseconds;
file:line is the Python source that logged. A record is always one line: newlines inside the message or a
traceback are written as the two characters ``\\n``.

Environment (read by :func:`setup_logging`, which the CLI calls once per command):

- ``NPUSCOPE_LOG_LEVEL``: 0 debug, 1 info, 2 warning, 3 error (default), 4 none. Any other value raises
  :class:`toolkit.core.errors.ConfigError` (exit code 2).
- ``NPUSCOPE_LOG_TO_STDOUT``: ``1``/``true``/``yes``/``on`` writes log lines to stdout; ``0``/``false``/``no``/``off``
  or unset (or empty) to stderr (case-insensitive). Any other value raises :class:`toolkit.core.errors.ConfigError`.
- ``NPUSCOPE_LOG_FILE``: a path; when set, lines are appended to that file instead (ours, for ``parse-log``);
  a name ending like a file npuscope reads (:data:`INPUT_SUFFIXES`: .onnx, .npz, .json, ...) or an existing
  file that is not text is refused (ConfigError), so log lines never land in a model or a config.

A closed stdout or stderr (``npuscope ... | head -1``) stops the handler silently (no ``--- Logging error ---``
blocks); :func:`stdout_closed` tells the CLI, which then exits with :data:`SIGPIPE_EXIT` (141).
"""

from __future__ import annotations

import logging
import os
import re
import stat
import sys
import time
from pathlib import Path

from toolkit.core.errors import ConfigError
from toolkit.core.text import printable

ENV_LEVEL = "NPUSCOPE_LOG_LEVEL"
ENV_STDOUT = "NPUSCOPE_LOG_TO_STDOUT"
ENV_FILE = "NPUSCOPE_LOG_FILE"
ROOT = "npuscope"
DEFAULT_LEVEL = 3
#: NPUSCOPE_LOG_LEVEL value -> Python logging level (4: nothing is written).
LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR, 4: logging.CRITICAL + 10}
LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING", logging.ERROR: "ERROR",
               logging.CRITICAL: "ERROR"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_MODULE_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")

#: One plog line; groups level, module, pid, process, time, file, line, message. Also reads the device
#: toolchain's own plog lines (any upper-case level such as EVENT or TRACE).
LINE_PATTERN = (r"\[(?P<level>[A-Z]+)\] (?P<module>[^(\n]+?)\((?P<pid>\d+),(?P<process>[^)\n]*)\):"
                r"(?P<time>\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d\.\d{3}\.\d{3}) \[(?P<file>[^\]\n:]*):(?P<line>\d+)\]"
                r"(?P<message>[^\n]*)")
LINE_RE = re.compile(LINE_PATTERN + r"$")


def plog_time(created: float) -> str:
    """``YYYY-MM-DD-HH:MM:SS.mmm.uuu`` (local time) of a POSIX timestamp in seconds."""
    micros = round(created * 1_000_000) % 1_000_000
    return time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(int(created))) + f".{micros // 1000:03d}.{micros % 1000:03d}"


def module_name(logger_name: str) -> str:
    """MODULE of a logger name: the part below ``npuscope.``, upper case, unsafe characters as '_'."""
    name = logger_name[len(ROOT) + 1:] if logger_name.startswith(ROOT + ".") else logger_name
    return _MODULE_UNSAFE.sub("_", name).strip("_").upper() or "NPUSCOPE"


class PlogFormatter(logging.Formatter):
    """Formats a LogRecord as one plog line (module docstring); ``process`` is the PROCESS field."""

    def __init__(self, process: str = "npuscope"):
        super().__init__()
        self.process = _MODULE_UNSAFE.sub("_", process) or "npuscope"

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.exc_info:
            msg = f"{msg}\n{self.formatException(record.exc_info)}"
        if record.stack_info:
            msg = f"{msg}\n{self.formatStack(record.stack_info)}"
        msg = msg.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
        msg = printable(msg)  # names from a model: no escape sequence or bidi override reaches the terminal
        level = LEVEL_NAMES.get(record.levelno, "ERROR" if record.levelno > logging.ERROR else "DEBUG")
        return (f"[{level}] {module_name(record.name)}({record.process},{self.process}):{plog_time(record.created)} "
                f"[{record.filename}:{record.lineno}]{msg}")


def level_from_env(environ=None) -> int:
    """The Python logging level NPUSCOPE_LOG_LEVEL asks for (default 3: errors only).

    Raises:
        ConfigError: the value is not one of 0, 1, 2, 3, 4.
    """
    raw = (environ if environ is not None else os.environ).get(ENV_LEVEL, "").strip()
    if not raw:
        return LEVELS[DEFAULT_LEVEL]
    if raw not in {str(k) for k in LEVELS}:
        raise ConfigError(f"{ENV_LEVEL}={raw!r} is not a log level; use 0 debug, 1 info, 2 warning, 3 error "
                          "(default) or 4 none, or unset it")
    return LEVELS[int(raw)]


def to_stdout_from_env(environ=None) -> bool:
    """Whether NPUSCOPE_LOG_TO_STDOUT asks for stdout (module docstring; default False: stderr).

    Raises:
        ConfigError: the value is not one of 1/true/yes/on, 0/false/no/off (any case) or empty.
    """
    raw = (environ if environ is not None else os.environ).get(ENV_STDOUT, "").strip()
    if raw.lower() in _TRUE | _FALSE:
        return raw.lower() in _TRUE
    raise ConfigError(f"{ENV_STDOUT}={raw[:40]!r} is not a boolean; use 1/true/yes/on (log to stdout) or "
                      "0/false/no/off (stderr, the default), or unset it")


#: Set when a log line could not be written to stdout because the reader closed it (EPIPE).
_STDOUT_CLOSED = {"closed": False}
#: Exit code of a command whose output could not be written (128 + SIGPIPE, as a shell reports a process
#: killed by SIGPIPE).
SIGPIPE_EXIT = 141


class _PipeSafeStreamHandler(logging.StreamHandler):
    """A StreamHandler that stops writing, silently, once its stream's reader has gone away (BrokenPipeError,
    e.g. ``npuscope ... | head -1``), instead of printing a ``--- Logging error ---`` block per record."""

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(self, "_closed_pipe", False):
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError):
            self._closed_pipe = True
            if self.stream is sys.stdout:
                _STDOUT_CLOSED["closed"] = True
            return
        super().handleError(record)


def stdout_closed(stdout_at_start=None) -> bool:
    """Whether output to stdout was lost because its reader closed it: a log line hit BrokenPipeError, or
    click replaced ``sys.stdout`` (it does so, and exits 1, when ``click.echo`` hits EPIPE) since
    ``stdout_at_start`` (the ``sys.stdout`` the caller saw before running the command)."""
    return _STDOUT_CLOSED["closed"] or (stdout_at_start is not None and sys.stdout is not stdout_at_start)


def silence_stdout() -> None:
    """Point file descriptor 1 at os.devnull, so that flushing stdout at interpreter exit does not print
    ``Exception ignored ... BrokenPipeError`` (the recipe of the Python docs, signal module, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
    except (OSError, AttributeError, ValueError):
        pass


#: endings of the files npuscope reads (models, external data, arrays, configs, policies, scripts, tables): a
#: log file with one of them would append log lines to such a file (the model under test, for instance)
INPUT_SUFFIXES = (".onnx", ".onnx.data", ".data", ".pb", ".npz", ".npy", ".bin", ".json", ".toml", ".py", ".csv",
                  ".txt.gz", ".zip")


def _log_file_problem(path: str) -> str:
    """Why ``path`` may not take log lines ('' when it may): a name ending like a file npuscope reads, a FIFO,
    or an existing file whose first 4 KiB is not text (NUL bytes or not UTF-8)."""
    if path.lower().endswith(INPUT_SUFFIXES):
        return f"its name ends like a file npuscope reads ({Path(path).suffix})"
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            return "it is a FIFO, which opening would wait on until a reader comes"
    except OSError:
        pass
    if not os.path.isfile(path):
        return ""  # not there yet, or a device such as /dev/null: FileHandler opens it or says why not
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return ""  # not readable: opening it for appending says what is wrong
    if b"\0" in head:
        return "it exists and holds binary data, not log lines"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not a character cut at the 4 KiB boundary
            return "it exists and holds binary data, not log lines"
    return ""


def _handler(environ) -> logging.Handler:
    path = environ.get(ENV_FILE, "").strip()
    if path:
        why = _log_file_problem(path)
        if why:
            raise ConfigError(f"{ENV_FILE}={path!r}: not used as the log file: {why}; give a new or an existing "
                              "log file, e.g. npuscope.log")
        try:
            return logging.FileHandler(path, mode="a", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{ENV_FILE}={path!r}: cannot open the log file ({exc.strerror}); "
                              "give a writable path or unset it") from None
    to_stdout = to_stdout_from_env(environ)
    return _PipeSafeStreamHandler(sys.stdout if to_stdout else sys.stderr)


def setup_logging(environ=None, process: str = "npuscope") -> logging.Logger:
    """Configure the ``npuscope`` logger from the environment (module docstring) and return it.

    Idempotent: a handler installed by an earlier call is replaced. Records do not propagate to the root
    logger. ``environ`` defaults to ``os.environ``.

    Raises:
        ConfigError: NPUSCOPE_LOG_LEVEL or NPUSCOPE_LOG_TO_STDOUT has an invalid value, or NPUSCOPE_LOG_FILE
            cannot be opened.
    """
    environ = os.environ if environ is None else environ
    level = level_from_env(environ)
    to_stdout_from_env(environ)  # a bad value is refused even when nothing will be logged
    logger = logging.getLogger(ROOT)
    for h in [h for h in logger.handlers if getattr(h, "_npuscope", False)]:
        logger.removeHandler(h)
        h.close()
    logger.setLevel(level)
    logger.propagate = False
    if level <= logging.CRITICAL:
        handler = _handler(environ)
        handler._npuscope = True
        handler.setFormatter(PlogFormatter(process))
        logger.addHandler(handler)
    return logger


def get_logger(module: str) -> logging.Logger:
    """The logger of one npuscope module, e.g. ``get_logger("compiler")`` → ``npuscope.compiler``
    (MODULE ``COMPILER`` in the lines)."""
    module = module[len(ROOT) + 1:] if module.startswith(ROOT + ".") else module
    return logging.getLogger(f"{ROOT}.{module}" if module and module != ROOT else ROOT)
