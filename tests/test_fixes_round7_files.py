"""Round 7 fixes: user files that are not regular files (A), parse-log CSV rows of the wrong width, duplicate
header columns and impossible values (B, C), lengths-file lines and non-whole numbers (D).

Every read of a FIFO / socket / /dev/zero link runs in a subprocess with a timeout, so a hang fails the test
instead of blocking the suite."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")

TIMEOUT = 60
KINDS = ["fifo", "devzero", "socket", "broken"]
#: what each kind is called in the messages (toolkit.textfile.not_regular_reason)
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


def cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    return run(["-m", "toolkit", *args], cwd)


def py(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return run(["-c", code], cwd)


def error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ----------------------------------------------------------------------------------- A: dump folders
def _npuscope_dump(folder: Path, arrays: dict) -> None:
    folder.mkdir()
    index = {}
    for name, arr in arrays.items():
        np.save(folder / f"{name}.npy", arr)
        index[f"{name}.npy"] = {"tensor": name, "kernel": name, "dtype": "float32", "shape": list(arr.shape)}
    (folder / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("kind", KINDS)
def test_npuscope_dump_member_that_is_not_a_regular_file_is_an_unreadable_row(tmp_path, kind):
    a, b = np.arange(8, dtype=np.float32), np.linspace(-1, 1, 8, dtype=np.float32)
    _npuscope_dump(tmp_path / "G", {"a": a, "b": b})
    _npuscope_dump(tmp_path / "T", {"a": a, "b": b})
    (tmp_path / "T" / "b.npy").unlink()
    keep = make_special(tmp_path / "T" / "b.npy", kind)
    proc = cli("compare-dumps", "G", "T", "--out", "cd", "--no-html", cwd=tmp_path)
    del keep
    assert proc.returncode in (0, 1), proc.stderr
    df = pd.read_csv(tmp_path / "cd" / "result.csv", keep_default_na=False)
    reasons = dict(zip(df["TensorName"] if "TensorName" in df else df.iloc[:, 2], df["CompareFailReason"]))
    assert reasons["b"].startswith(f"target dump unreadable (b.npy): {SAID[kind]}"), reasons
    assert reasons["a"] == ""


@pytest.mark.parametrize("what", ["side", "index"])
def test_side_path_or_index_json_that_is_a_fifo_is_a_one_line_error(tmp_path, what):
    _npuscope_dump(tmp_path / "G", {"a": np.zeros(3, np.float32)})
    if what == "side":
        os.mkfifo(tmp_path / "T")
    else:
        _npuscope_dump(tmp_path / "T", {"a": np.zeros(3, np.float32)})
        (tmp_path / "T" / "index.json").unlink()
        os.mkfifo(tmp_path / "T" / "index.json")
    proc = cli("compare-dumps", "G", "T", "--out", "cd", "--no-html", cwd=tmp_path)
    assert proc.returncode == 1
    assert "not a regular file but a FIFO" in error_line(proc)
    assert not (tmp_path / "cd").exists()


# ----------------------------------------------------------------------------------- A: other readers
GOOD_SUMMARY = "Op Name,OP Type,Task Duration(us)\nconv1,Conv,5\n"


@pytest.mark.parametrize("kind", KINDS)
def test_parse_log_folder_lists_special_entries_as_skipped(tmp_path, kind):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.csv").write_text(GOOD_SUMMARY)
    keep = make_special(tmp_path / "logs" / "b.csv", kind)
    proc = cli("parse-log", "logs", "--out", "o", "--no-html", cwd=tmp_path)
    del keep
    assert proc.returncode == 0, proc.stderr
    files = {Path(f["path"]).name: f for f in json.loads((tmp_path / "o" / "parse_summary.json").read_text())["files"]}
    assert files["a.csv"]["status"] == "parsed"
    assert files["b.csv"]["status"] == "skipped" and files["b.csv"]["reason"].startswith(SAID[kind])


@pytest.mark.parametrize("kind", ["fifo", "devzero"])
def test_parse_log_of_a_special_file_alone_is_an_error_naming_why(tmp_path, kind):
    make_special(tmp_path / "x.csv", kind)
    proc = cli("parse-log", "x.csv", "--out", "o", "--no-html", cwd=tmp_path)
    assert proc.returncode == 1
    assert SAID[kind] in error_line(proc)


def test_parse_log_profile_json_that_is_a_fifo_does_not_block(tmp_path):
    (tmp_path / "pf").mkdir()
    (tmp_path / "pf" / "op_summary.csv").write_text(GOOD_SUMMARY)
    os.mkfifo(tmp_path / "pf" / "profile.json")
    proc = cli("parse-log", "pf/op_summary.csv", "--out", "o", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


# ----------------------------------------------------------------------------------- B, C: parse-log CSVs
def _parse(path: Path, module: str):
    import importlib

    return importlib.import_module(f"toolkit.logs.parsers.{module}").parse(path)


WIDTH_CASES = {
    "op_summary_csv": ("Op Name,OP Type,Task Duration(us)\n", "good,Conv,5\n", ["x,Relu,7,2\n", "y,Relu\n"]),
    "op_statistic_csv": ("OP Type,Count,Total Time(us)\n", "Conv,2,10\n", ["Relu,1,3,4\n", "Add,1\n"]),
    "kernel_times_csv": ("Kernel,OpType,Precision,Nodes,HostMs\n", "k1,Conv,fp16,c,0.5\n",
                         ["k2,Relu,fp16,r,0.25,9\n", "k3,Relu,fp16,0.25\n"]),
}


def test_all_rows_shifted_is_an_error_not_a_shifted_report(tmp_path):
    (tmp_path / "shift.csv").write_text("Op Name,OP Type,Task Duration(us)\nconv1,Conv,5,1\nrelu1,Relu,7,2\n")
    proc = cli("parse-log", "shift.csv", "--out", "o", "--no-html", cwd=tmp_path)
    assert proc.returncode == 1 and "2 malformed" in error_line(proc)
    assert not (tmp_path / "o").exists()


def test_gears_cli_form_feed_line_is_one_line_error(tmp_path):
    (tmp_path / "ln.txt").write_bytes(b"5\n6\x0c7\nabc\n")
    proc = cli("gears", "--lengths", "ln.txt", "-k", "2", "--out", "g", "--no-html", cwd=tmp_path)
    assert proc.returncode == 1 and "line 2:" in error_line(proc)
