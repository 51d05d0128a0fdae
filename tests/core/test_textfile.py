"""User text files (toolkit/core/textfile.py): BOMs, non-UTF-8 bytes, and files that are not regular refused
without reading them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError
from tests.core.special_files import TIMEOUT, SAID, make_special, run, py

BOM = b"\xef\xbb\xbf"


def _write(path, text, bom=True):
    path.write_bytes((BOM if bom else b"") + text.encode("utf-8"))
    return path


def test_policy_and_lengths_files_with_bom(tmp_path):
    from toolkit.commands.gears import read_lengths
    from toolkit.signoff.policy import load_policy

    text = '[outputs."*"]\nCosineSimilarity = 0.9\n'
    assert load_policy(_write(tmp_path / "p1.toml", text)).data == load_policy(_write(tmp_path / "p2.toml", text, False)).data
    assert read_lengths(_write(tmp_path / "l.txt", "10\n20\n7\n")).tolist() == [10, 20, 7]
    assert read_lengths(_write(tmp_path / "l.csv", "len,x\n5,1\n9,2\n"), column="len").tolist() == [5, 9]


def test_non_utf8_user_files_are_one_line_errors(tmp_path):
    from toolkit.commands.gears import read_lengths
    from toolkit.signoff.policy import load_policy

    bad = "precision_mode = 'caf\xe9'\n".encode("latin-1")
    (tmp_path / "c.toml").write_bytes(bad)
    (tmp_path / "p.toml").write_bytes(bad)
    (tmp_path / "l.txt").write_bytes(b"10\n\xff\n")
    for call, error in ((lambda: Config.load(tmp_path / "c.toml"), ConfigError),
                        (lambda: load_policy(tmp_path / "p.toml"), ConfigError),
                        (lambda: read_lengths(tmp_path / "l.txt"), InputError)):
        with pytest.raises(error, match=r"is not UTF-8 text \(byte 0x[0-9a-f]{2} at offset \d+\)") as info:
            call()
        assert "\n" not in str(info.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("kind", ["fifo", "devzero", "broken"])
@pytest.mark.parametrize("reader", ["lengths", "policy", "plan", "mapping"])
def test_user_files_that_are_not_regular_are_refused_without_reading(tmp_path, kind, reader):
    make_special(tmp_path / "f", kind)
    call = {"lengths": "from toolkit.commands.gears import read_lengths as f",
            "policy": "from toolkit.signoff.policy import load_policy as f",
            "plan": "from toolkit.memcheck.planio import load_plan as f",
            "mapping": "from toolkit.dumps.mapping import load_mapping as f"}[reader]
    proc = py(f"{call}\nfrom toolkit.core.errors import UserError\ntry:\n    f('f')\nexcept UserError as exc:\n"
              "    print('ERR', exc)\n", tmp_path)
    out = proc.stdout
    assert out.startswith("ERR ") and len(out.strip().splitlines()) == 1, out + proc.stderr
    if kind == "broken":
        assert "does not exist" in out or "broken symbolic link" in out
    else:
        assert SAID[kind] in out
