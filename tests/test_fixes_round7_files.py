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


@pytest.mark.parametrize("kind", KINDS)
def test_device_folder_member_is_a_row_when_named_like_a_dump_and_ignored_otherwise(tmp_path, kind):
    """Node-keyed (ONNX golden naming) folders: a special entry named like a dump becomes an unreadable row; one
    named like nothing is counted in ignored_files, never silently dropped."""
    from toolkit.dumps.readers import SideSpec, read_side

    for side in ("G", "T"):
        (tmp_path / side).mkdir()
        np.save(tmp_path / side / "add.0.100.npy", np.ones(4, np.float32))
    keep = make_special(tmp_path / "T" / "mul.0.100.npy", kind)
    keep += make_special(tmp_path / "T" / "notes.bin", "fifo" if kind == "socket" else kind)
    t = read_side(SideSpec(str(tmp_path / "T"), "target", "onnx"))  # listing only: nothing is opened
    assert sorted(e.source for e in t.entries) == ["add.0.100.npy", "mul.0.100.npy"]
    assert t.ignored == ["notes.bin"]
    code = ("from toolkit.dumps.readers import SideSpec, read_side\nfrom toolkit.dumps.entry import DumpReadError\n"
            f"t = read_side(SideSpec({str(tmp_path / 'T')!r}, 'target', 'onnx'))\n"
            "e = next(e for e in t.entries if e.source == 'mul.0.100.npy')\n"
            "try:\n    e.load()\nexcept DumpReadError as exc:\n    print('REASON', exc)\n")
    if kind == "socket":  # a fresh bound socket for the reading process
        (tmp_path / "T" / "mul.0.100.npy").unlink()
        keep = make_special(tmp_path / "T" / "mul.0.100.npy", kind)
    proc = py(code, tmp_path)
    for obj in keep:
        obj.close()
    assert f"REASON {SAID[kind]}" in proc.stdout, proc.stdout + proc.stderr


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
    assert proc.returncode == 2
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
    assert proc.returncode == 2
    assert SAID[kind] in error_line(proc)


def test_parse_log_profile_json_that_is_a_fifo_does_not_block(tmp_path):
    (tmp_path / "pf").mkdir()
    (tmp_path / "pf" / "op_summary.csv").write_text(GOOD_SUMMARY)
    os.mkfifo(tmp_path / "pf" / "profile.json")
    proc = cli("parse-log", "pf/op_summary.csv", "--out", "o", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


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


@pytest.mark.parametrize("module", list(WIDTH_CASES))
def test_rows_wider_or_narrower_than_the_header_are_malformed_never_shifted(tmp_path, module):
    head, good, bad = WIDTH_CASES[module]
    p = tmp_path / "t.csv"
    p.write_text(head + bad[0] + good + bad[1] + "\n" + bad[0])
    res = _parse(p, module)
    assert (res.records, res.malformed) == (1, 3)
    assert any("3 row(s) with a number of fields other than the header's" in n for n in res.notes), res.notes
    if module == "op_statistic_csv":
        row = res.tables["op_statistic"].iloc[0]
        assert (row["OP Type"], row["Count"], row["Total Time(us)"]) == ("Conv", 2.0, 10.0)
    elif module == "op_summary_csv":
        row = res.op_summary.iloc[0]
        assert (row["Op Name"], row["OP Type"], row["Task Duration(us)"]) == ("good", "Conv", 5.0)
    else:
        row = res.op_summary.iloc[0]
        assert (row["Op Name"], row["OP Type"], row["Task Duration(us)"]) == ("k1", "Conv", 500.0)


def test_all_rows_shifted_is_an_error_not_a_shifted_report(tmp_path):
    (tmp_path / "shift.csv").write_text("Op Name,OP Type,Task Duration(us)\nconv1,Conv,5,1\nrelu1,Relu,7,2\n")
    proc = cli("parse-log", "shift.csv", "--out", "o", "--no-html", cwd=tmp_path)
    assert proc.returncode == 2 and "2 malformed" in error_line(proc)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("module, head, row", [
    ("op_summary_csv", "Op Name,OP Type,Task Duration(us),Task Duration(us)", "conv,Conv,5,7"),
    ("op_statistic_csv", "OP Type,Count,Count,Total Time(us)", "Conv,1,2,5"),
    ("kernel_times_csv", "Kernel,OpType,HostMs,HostMs", "k,Conv,1,2"),
])
def test_a_read_column_named_twice_is_refused(tmp_path, module, head, row):
    p = tmp_path / "d.csv"
    p.write_text(f"{head}\n{row}\n")
    with pytest.raises(ValueError, match="names column .* 2 times .*ambiguous"):
        _parse(p, module)


def test_an_unread_column_named_twice_is_noted(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("Op Name,OP Type,Task Duration(us),extra,extra\nconv,Conv,5,1,2\n")
    res = _parse(p, "op_summary_csv")
    assert res.records == 1 and res.op_summary["Task Duration(us)"].tolist() == [5.0]
    assert any("'extra' 2 times" in n for n in res.notes)


def test_impossible_op_statistic_values_are_malformed_with_a_note(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("OP Type,Count,Total Time(us),Avg Time(us),Min Time(us),Max Time(us)\n"
                 "Conv,0,5,,,\nAdd,2.5,4,,,\nMul,3,6,-2,1,3\nSub,2,6,3,4,2\nOk,0,0,0,0,0\nRelu,2,6,3,2,4\n")
    res = _parse(p, "op_statistic_csv")
    table = res.tables["op_statistic"]
    assert table["OP Type"].tolist() == ["Ok", "Relu"] and res.malformed == 4
    notes = " | ".join(res.notes)
    for why in ("Count 0 with a time above 0", "Count not a whole number", "negative Avg Time(us)",
                "Min Time(us) above Max Time(us)"):
        assert f"1 row(s) malformed: {why}" in notes, notes


def test_impossible_op_summary_values_are_malformed_with_a_note(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("Op Name,OP Type,Task ID,Task Start Time(us),Task Duration(us),Task Wait Time(us)\n"
                 "a,Conv,1.5,0,5,0\nb,Conv,2,0,-1,0\nc,Conv,3,0,5,-4\nd,Conv,4,-7,5,0\ne,Conv,5,10,5,0\n")
    res = _parse(p, "op_summary_csv")
    assert res.op_summary["Op Name"].tolist() == ["e"] and res.malformed == 4
    notes = " | ".join(res.notes)
    for why in ("Task ID negative or not a whole number", "negative Task Duration(us)", "negative Task Wait Time(us)",
                "negative Task Start Time(us)"):
        assert f"1 row(s) malformed: {why}" in notes, notes


# ----------------------------------------------------------------------------------- D: lengths files
@pytest.mark.parametrize("text, line", [
    ("5\n6\f7\nabc\n", 2), ("6\f7\n9\n", 1), ("5\n6\v7\n", 2), ("5\r\n6\r7\n", 2), ("5\n6\u20287\n", 2),
    ("5\n# c\n\n5.000000000000000001\n", 4), ("5\n4.5\n", 2), ("1\n2\n3\n0.999999999999999999999\n", 4),
])
def test_lengths_lines_split_only_at_newline_and_errors_name_the_line(tmp_path, text, line):
    from toolkit.core.errors import InputError
    from toolkit.commands.gears import read_lengths

    p = tmp_path / "l.txt"
    p.write_bytes(text.encode())
    with pytest.raises(InputError, match=f"line {line}: "):
        read_lengths(p)


def test_lengths_crlf_and_documented_whole_forms(tmp_path):
    from toolkit.commands.gears import read_lengths

    p = tmp_path / "l.txt"
    p.write_bytes(b"5\r\n12.0\r\n1e3\r\n+7\r\n")
    assert read_lengths(p).tolist() == [5, 12, 1000, 7]  # docs/gears.md: `12`, `12.0`, `1e3` are whole numbers


@pytest.mark.parametrize("text, line", [
    ('len,note\n5,"two\nlines"\nx,c\n', 4), ("len\n5\n6\f7\n", 3), ("len,n\n5,a\r6,b\n", 2), ("len,n\n5,a\n6\n", 3),
    ("len\n5\n5.000000000000000001\n", 3),
])
def test_lengths_csv_errors_name_the_line_where_the_row_starts(tmp_path, text, line):
    from toolkit.core.errors import InputError
    from toolkit.commands.gears import read_lengths

    p = tmp_path / "l.csv"
    p.write_bytes(text.encode())
    with pytest.raises(InputError, match=f"line {line}"):
        read_lengths(p, "len")


def test_gears_cli_form_feed_line_is_one_line_error(tmp_path):
    (tmp_path / "ln.txt").write_bytes(b"5\n6\x0c7\nabc\n")
    proc = cli("gears", "--lengths", "ln.txt", "-k", "2", "--out", "g", "--no-html", cwd=tmp_path)
    assert proc.returncode == 2 and "line 2:" in error_line(proc)
