"""``npuscope gears`` in a subprocess: lengths files (empty cells, ambiguous columns, bad numbers, form feeds),
the --dim name, huge lengths, a single length and too many gears."""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toolkit.core.errors import UsageError
from toolkit.commands.gears import check_dim, read_lengths

MAX_LENGTH_DOC = 2147483647  # docs/gears.md: "Lengths are whole numbers from 1 to 2147483647"


def _cli_with_env(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


def _one_error_line(r) -> str:
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_empty_csv_cell_is_refused_with_its_line(tmp_path):
    f = tmp_path / "e.csv"
    f.write_text("id,len\n1,10\n2,20\n3,\n4,30\n")
    r = _cli_with_env("gears", "--lengths", f, "--column", "len", "-k", "2", "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 2
    err = _one_error_line(r)
    assert "line 4" in err and "'len'" in err and "empty" in err


def test_ambiguous_column_is_refused_and_unique_column_is_read(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("id,len,len\n1,10,11\n")
    r = _cli_with_env("gears", "--lengths", f, "--column", "len", "-k", "2", "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 2
    assert "'len'" in _one_error_line(r) and "2 columns" in r.stderr
    g = tmp_path / "g.csv"
    g.write_text("len,id,id\n3,1,2\n5,7,8\n")  # the duplicated column is not the one asked for
    assert read_lengths(g, "len").tolist() == [3, 5]


@pytest.mark.parametrize("dim", ["", "a;b", "../x", "seq len", "1seq", "séq"])
def test_bad_dim_is_a_usage_error(tmp_path, dim):
    with pytest.raises(UsageError, match="is not a dim name"):
        check_dim(dim)
    f = tmp_path / "l.txt"
    f.write_text("3\n5\n")
    r = _cli_with_env("gears", "--lengths", f, "-k", "2", "--dim", dim, "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 2 and "is not a dim name" in _one_error_line(r)


def test_identifier_dim_is_accepted(tmp_path):
    f = tmp_path / "l.txt"
    f.write_text("3\n5\n")
    r = _cli_with_env("gears", "--lengths", f, "-k", "2", "--dim", "seq_len", "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    assert "seq_len" in r.stdout


def test_huge_lengths_power_of_two_and_optimal_plan_line(tmp_path):
    f = tmp_path / "big.txt"
    f.write_text(f"1\n5\n{MAX_LENGTH_DOC}\n")
    out = tmp_path / "o"
    r = _cli_with_env("gears", "--lengths", f, "-k", "2", "--no-html", "--out", out)
    assert r.returncode == 0, r.stderr
    assert str(MAX_LENGTH_DOC + 1) not in r.stdout
    table = list(csv.DictReader(open(out / "gears.csv")))
    for row in table:
        assert max(json.loads(row["Gears"])) <= MAX_LENGTH_DOC
    pow2 = json.loads(next(x for x in table if x["Strategy"] == "power_of_two")["Gears"])
    assert pow2 == [2 ** p for p in range(31)] + [MAX_LENGTH_DOC]
    line = next(x for x in r.stdout.splitlines() if x.startswith("optimal with"))
    m = re.match(r"optimal with (\d+) plans[^:]*: \[([^\]]*)\]", line)
    gears = [int(v) for v in m.group(2).split(",")]
    assert int(m.group(1)) == len(gears) == 3 and gears == [1, 5, MAX_LENGTH_DOC]
    assert "3 distinct lengths" in line and f"power of two uses {len(pow2)}" in line


TIMEOUT = 60


def run(args: list, cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                              timeout=TIMEOUT, check=False, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"blocked reading a non-regular file: {args}")


def cli_unblocked(*args, cwd: Path) -> subprocess.CompletedProcess:
    return run(["-m", "toolkit", *args], cwd)


def error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_gears_cli_form_feed_line_is_one_line_error(tmp_path):
    (tmp_path / "ln.txt").write_bytes(b"5\n6\x0c7\nabc\n")
    proc = cli_unblocked("gears", "--lengths", "ln.txt", "-k", "2", "--out", "g", "--no-html", cwd=tmp_path)
    assert proc.returncode == 2 and "line 2:" in error_line(proc)


def _brute_force(lengths, k, cost):
    """Least Σ cost(smallest gear >= l) over every set of k gears drawn from 1..max(lengths) (any integers, not
    only observed lengths: this does not rely on the DP's lemma)."""
    top = max(lengths)
    best = np.inf
    for gears in itertools.combinations(range(1, top + 1), k):
        if gears[-1] < top:
            continue
        work = sum(cost(min(g for g in gears if g >= v)) for v in lengths)
        best = min(best, work)
    return best


def test_gears_cli(tmp_path):
    rs = np.random.RandomState(3)
    lengths = np.clip(rs.lognormal(3, 0.5, 300).astype(int), 1, 60)
    f = tmp_path / "lengths.txt"
    f.write_text("\n".join(map(str, lengths)))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "toolkit", "gears", "--lengths", str(f), "-k", "3", "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import json

    import pandas as pd
    data = json.loads((out / "gears.json").read_text())
    opt = data["optimal"]["Gears"]
    work = sum(min(g for g in opt if g >= v) for v in lengths)
    assert work == _brute_force(list(lengths), 3, lambda g: g)
    assert data["config_snippet"] == {"dynamic_dims": ";".join(map(str, opt))}
    table = pd.read_csv(out / "gears.csv")
    assert set(table["Strategy"]) >= {"optimal", "power_of_two"}
    html = (out / "gears.html").read_text()
    assert "Padding waste vs plans compiled" in html
    # opens offline: the one script file is the plotly.js bundle written beside the page
    assert re.findall(r"<script[^>]*\bsrc\s*=\s*\"([^\"]*)\"", html, re.I) == ["plotly.min.js"]
    assert (out / "plotly.min.js").is_file()
    bad = subprocess.run([sys.executable, "-m", "toolkit", "gears", "--lengths", str(tmp_path / "nope.txt"), "-k", "2"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    usage = subprocess.run([sys.executable, "-m", "toolkit", "gears", "--lengths", str(f), "-k", "0"],
                           capture_output=True, text=True)
    assert usage.returncode == 2


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def _error_line(r) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("npuscope: ")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_gears_cli_bad_number_exit_1(tmp_path):
    (tmp_path / "l.txt").write_text("5\n99999999999999999999999\n")
    r = _cli("gears", "--lengths", tmp_path / "l.txt", "-k", "2", "--out", tmp_path / "o")
    assert r.returncode == 2 and "line 2" in _error_line(r) and not (tmp_path / "o").exists()


def test_gears_cli_single_length_and_too_many_gears(tmp_path):
    (tmp_path / "five.txt").write_text("5\n5\n5\n")
    r = _cli("gears", "--lengths", tmp_path / "five.txt", "-k", "3", "--no-html", "--input-shape",
             "x:1,-1,64;mask:1,-1", "--out", tmp_path / "g")
    assert r.returncode == 0, r.stderr
    assert "no gears needed" in r.stdout and 'config: input_shape = "x:1,5,64;mask:1,5"' in r.stdout
    snip = json.loads((tmp_path / "g" / "gears.json").read_text())["config_snippet"]
    (tmp_path / "c.json").write_text(json.dumps(snip))
    r = _cli("compile", "transformer_seq_masked", "--config", tmp_path / "c.json", "--out", tmp_path / "c")
    assert r.returncode == 0, r.stderr  # compile takes the snippet
    (tmp_path / "many.txt").write_text("\n".join(str(i) for i in range(1, 160)))
    r = _cli("gears", "--lengths", tmp_path / "many.txt", "-k", "200", "--no-html", "--out", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    assert "-k 200 is above the 100 gears the converter takes; chose 100" in r.stdout
    data = json.loads((tmp_path / "m" / "gears.json").read_text())
    assert len(data["config_snippet"]["dynamic_dims"].split(";")) == 100 and data["k_used"] == 100
