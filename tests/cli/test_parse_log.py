"""``npuscope parse-log`` in a subprocess: exit codes and log lines, folders and special files, nothing read,
shifted rows, non-finite numbers, capped text, and the profiler's integer columns."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.logs.helpers import COMPILE_LOG, chrome_events, ort_events, plog_line, write_csv, write_events_per_line
from tests.cli.helpers import TIMEOUT_S, TIMEOUT, KINDS, SAID, make_special, run, cli_unblocked, npuscope_errors_only


def error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


GOOD_SUMMARY = "Op Name,OP Type,Task Duration(us)\nconv1,Conv,5\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("kind", KINDS)
def test_parse_log_folder_lists_special_entries_as_skipped(tmp_path, kind):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.csv").write_text(GOOD_SUMMARY)
    keep = make_special(tmp_path / "logs" / "b.csv", kind)
    proc = cli_unblocked("parse-log", "logs", "--out", "o", "--no-html", cwd=tmp_path)
    del keep
    assert proc.returncode == 0, proc.stderr
    files = {Path(f["path"]).name: f for f in json.loads((tmp_path / "o" / "parse_summary.json").read_text())["files"]}
    assert files["a.csv"]["status"] == "parsed"
    assert files["b.csv"]["status"] == "skipped" and files["b.csv"]["reason"].startswith(SAID[kind])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
@pytest.mark.parametrize("kind", ["fifo", "devzero"])
def test_parse_log_of_a_special_file_alone_is_an_error_naming_why(tmp_path, kind):
    make_special(tmp_path / "x.csv", kind)
    proc = cli_unblocked("parse-log", "x.csv", "--out", "o", "--no-html", cwd=tmp_path)
    assert proc.returncode == 2
    assert SAID[kind] in error_line(proc)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_parse_log_profile_json_that_is_a_fifo_does_not_block(tmp_path):
    (tmp_path / "pf").mkdir()
    (tmp_path / "pf" / "op_summary.csv").write_text(GOOD_SUMMARY)
    os.mkfifo(tmp_path / "pf" / "profile.json")
    proc = cli_unblocked("parse-log", "pf/op_summary.csv", "--out", "o", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_all_rows_shifted_is_an_error_not_a_shifted_report(tmp_path):
    (tmp_path / "shift.csv").write_text("Op Name,OP Type,Task Duration(us)\nconv1,Conv,5,1\nrelu1,Relu,7,2\n")
    proc = cli_unblocked("parse-log", "shift.csv", "--out", "o", "--no-html", cwd=tmp_path)
    assert proc.returncode == 2 and "2 malformed" in error_line(proc)
    assert not (tmp_path / "o").exists()


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True, cwd=cwd)


def test_parse_log_writes_the_profilers_integer_columns_as_integers(tmp_path):
    """Fault kind: integer columns of the profiler's op_summary format (Task ID, Stream ID, Block Dim) written
    as 2.0 by our CSVs; scripts parse them as int. parse-log's own op_summary.csv keeps them integers."""
    import csv

    cols = ["Device_id", "Model Name", "Task ID", "Stream ID", "Op Name", "OP Type", "Task Type",
            "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes",
            "aicore_time(us)"]
    rows = [[0, "m", 1, 3, "conv1", "Conv2D", "AI_CORE", "100.5", "12.5", "0", 8, "1,3,8,8", 11.0],
            [0, "m", 2, 4, "cast1", "Cast", "AI_VECTOR_CORE", "120.0", "3.25", "1.5", 1, "", 2.0]]
    src = tmp_path / "op_summary_0_1.csv"
    with open(src, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        w.writerows(rows)
    proc = _cli("parse-log", src, "--no-html", "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-500:]
    with open(tmp_path / "out" / "op_summary.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert [r["Task ID"] for r in got] == ["1", "2"] and [r["Stream ID"] for r in got] == ["3", "4"]
    assert [r["Block Dim"] for r in got] == ["8", "1"]


NOTHING = {
    "ort_no_kernel_event.json": '[{"cat":"Node","name":"relu_fence_before","dur":-5,"ph":"X","ts":0,"args":{}}]',
    "empty_trace.json": '{"traceEvents": []}',
}


@pytest.mark.parametrize("name", sorted(NOTHING))
def test_parse_log_of_nothing_exits_1_without_a_report(tmp_path, name):
    """Kind: a recognised file of which nothing was read (no record, no row, no table) is not parsed; when
    nothing was parsed, one line, exit 1, no report folder — for the file and for a folder of it."""
    folder = tmp_path / "logs"
    folder.mkdir()
    f = folder / name
    f.write_text(NOTHING[name])
    (folder / "empty.log").write_text("")
    for arg in (f, folder):
        out = tmp_path / "r"
        proc = npuscope_errors_only("parse-log", arg, "--out", out, cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "nothing could be parsed" in lines[0] and name in lines[0]
        assert not out.exists() and "report:" not in proc.stdout


def test_parse_log_with_one_kernel_event_still_parses(tmp_path):
    f = tmp_path / "prof.json"
    f.write_text('[{"cat":"Node","name":"relu_kernel_time","dur":5,"ph":"X","ts":10,"args":{"op_name":"Relu"}}]')
    proc = npuscope_errors_only("parse-log", f, "--out", tmp_path / "r", "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = pd.read_csv(tmp_path / "r" / "op_summary.csv")
    assert len(rows) == 1 and rows["Task Duration(us)"].iloc[0] == 5


ROOT = Path(__file__).resolve().parents[2]


def _inputs(tmp_path: Path) -> list[Path]:
    d = tmp_path / "in"
    d.mkdir()
    (d / "compile.log").write_text(COMPILE_LOG)
    write_events_per_line(d / "ort.json", ort_events())
    (d / "trace.json").write_text(json.dumps(chrome_events()))
    lines = [plog_line("ERROR" if i == 3 else "INFO", "GE", 1, "p", 1.7e9 + i, "a.cc", i, f"m{i}") for i in range(10)]
    (d / "plog.log").write_text("\n".join(lines[:5] + ["garbage", "more garbage"] + lines[5:]) + "\n")
    (d / "unknown.txt").write_text("hello\n")
    (d / "empty.csv").write_text("")
    return sorted(d.iterdir())


def _cli_in_repo(*args, env=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, cwd=ROOT, check=False,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_cli_parse_log_exit_codes_and_log_lines(tmp_path):
    files = [str(p) for p in _inputs(tmp_path)]
    ok = _cli_in_repo("parse-log", *files, "--out", str(tmp_path / "ok"),
              env={"NPUSCOPE_LOG_LEVEL": "1", "NPUSCOPE_LOG_TO_STDOUT": "1"})
    assert ok.returncode == 0, ok.stderr
    logged = [ln for ln in ok.stdout.splitlines() if ln.startswith("[INFO] LOGS(")]
    assert len(logged) == 4 and (tmp_path / "ok" / "profile.html").is_file()
    assert "unknown.txt: skipped (unknown format)" in ok.stdout
    quiet = _cli_in_repo("parse-log", files[0], "--out", str(tmp_path / "q"), "--no-html")
    assert quiet.returncode == 0 and "[INFO]" not in quiet.stdout + quiet.stderr
    assert not (tmp_path / "q" / "profile.html").exists()
    bad = _cli_in_repo("parse-log", str(tmp_path / "in" / "unknown.txt"), "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "unknown format" in bad.stderr
    missing = _cli_in_repo("parse-log", str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    env_bad = _cli_in_repo("parse-log", files[0], env={"NPUSCOPE_LOG_LEVEL": "verbose"})
    assert env_bad.returncode == 2 and "NPUSCOPE_LOG_LEVEL" in env_bad.stderr
    no_args = _cli_in_repo("parse-log")
    assert no_args.returncode == 2


@pytest.mark.parametrize("layout, says", [
    ({}, "it has nothing"),
    ({"sub/a.log": "x"}, "it has 1 subfolder(s)"),
    ({".hidden.log": "x", "d1/x": "", "d2/y": ""}, "it has 2 subfolder(s), 1 hidden file(s)"),
])
def test_folder_without_files_is_a_clear_error(tmp_path, layout, says):
    folder = tmp_path / "emptydir"
    folder.mkdir()
    for rel, text in layout.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    res = _cli_in_repo("parse-log", str(folder), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert f"folder '{folder}' holds no files to read ({says})" in res.stderr
    assert "directly inside a folder, not its subfolders" in res.stderr and not (tmp_path / "o").exists()


def test_cli_non_finite_numbers_are_malformed_without_warnings(tmp_path):
    path = tmp_path / "op_summary.csv"
    write_csv(path, ["Op Name", "OP Type", "Task Type", "Task Duration(us)"],
              [["a", "Conv", "AI_CORE", "1e309"], ["b", "Add", "AI_CORE", "3"], ["c", "Add", "AI_CORE", "-inf"]])
    res = _cli_in_repo("parse-log", str(path), "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    assert "Warning" not in res.stderr and res.stderr.strip() == ""
    assert "1 record(s), 2 malformed" in res.stdout
    stat = pd.read_csv(tmp_path / "o" / "op_statistic.csv")
    assert stat["OP Type"].tolist() == ["Add"] and stat["Total Time(us)"].tolist() == [3.0]
    assert stat["Ratio(%)"].tolist() == [100.0]


def test_cli_caps_stored_text_of_every_parser(tmp_path):
    n = 30 * 1024 * 1024
    inp = tmp_path / "in"
    inp.mkdir()
    with open(inp / "big.log", "w") as fh:
        fh.write(plog_line("ERROR", "GE", 1, "p", 1.7e9, "a.cc", 2, "x" * n) + "\n")
    write_csv(inp / "op_summary.csv", ["Op Name", "OP Type", "Task Duration(us)"], [["n" * 10000, "Add", "2"]])
    res = _cli_in_repo("parse-log", str(inp), "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    out = tmp_path / "o"
    msgs = pd.read_csv(out / "log_messages.csv")
    assert msgs["Message"].iloc[0] == "x" * 2000 + f" … [truncated: {n:,} characters]"
    ops = pd.read_csv(out / "op_summary.csv")
    assert ops["Op Name"].iloc[0] == "n" * 2000 + " … [truncated: 10,000 characters]"
    for name in ("log_messages.csv", "profile.html", "findings.json", "parse_summary.json", "op_summary.csv"):
        assert (out / name).stat().st_size < 5_000_000, name
    assert "2 text value(s) longer than 2,000 characters were truncated" in res.stdout  # the message, the name
    assert json.loads((out / "parse_summary.json").read_text())["truncated_texts"] == 2


def test_parse_log_renders_compare_results_with_the_advisor_on_top(tmp_path):
    """A compare tool result CSV in, our report out: findings and table rows in the advisor's order."""
    import csv as _csv
    import json as _json

    from tests.logs.parsers.test_msaccucmp_csv import header, row

    head = header()
    path = tmp_path / "result_1.csv"
    with open(path, "w", newline="") as fh:
        w = _csv.writer(fh)
        w.writerow(head)
        w.writerows([row(head, 0, "Relu", "r0", "r0", "1"), row(head, 1, "MatMul", "mm", "mm", "0.9"),
                     row(head, 2, "Exp", "exp", "exp", "NaN", overflow="YES")])
    out = tmp_path / "rep"
    p = subprocess.run([sys.executable, "-m", "toolkit", "parse-log", str(path), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    kinds = [f["kind"] for f in _json.loads((out / "findings.json").read_text())]
    assert kinds[:2] == ["fp16_overflow", "first_divergence"]
    with open(out / "compare_results.csv", newline="") as fh:
        rows = list(_csv.DictReader(fh))
    assert [r["NPUDump"] for r in rows] == ["exp", "mm", "r0"] and rows[0]["Advice"] == "fp16_overflow"
    assert "mm" in (out / "profile.html").read_text()
