"""Test builders shared by test_textfile.py, test_readers.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError

TIMEOUT = 60

#: what each kind is called in the messages (toolkit.core.textfile.not_regular_reason)
SAID = {"fifo": "not a regular file but a FIFO", "devzero": "not a regular file but a character device",
        "socket": "not a regular file but a socket", "broken": "a broken symbolic link"}

def make_special(path: Path, kind: str) -> list:
    """Create ``path`` as a non-regular entry; returns objects to keep alive (the bound socket)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "devzero":
        os.symlink("/dev/zero", path)
    elif kind == "broken":
        os.symlink(path.parent / "nowhere-at-all", path)
    else:
        if len(str(path)) > 100:
            pytest.skip("socket path too long for AF_UNIX")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        return [s]
    return []

def run(args: list, cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                              timeout=TIMEOUT, check=False, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"blocked reading a non-regular file: {args}")

def py(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return run(["-c", code], cwd)
