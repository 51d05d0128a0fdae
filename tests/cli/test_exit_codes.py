"""Exit codes CI can use (toolkit.core.errors): 1 the check failed (verdict FAIL, regression, target not met),
2 usage error or bad input, 3 internal error; the global options before or after the command; the closing
summary line of a run without a terminal; the codes documented in --help and the README."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.cli.clirun import ROOT, error_line, m1, npuscope, overflow
from toolkit.core.errors import EXIT_CODES_TEXT, EXIT_FAIL, EXIT_INTERNAL, EXIT_USAGE

CLOSING = re.compile(r"^\[npuscope \d\d:\d\d:\d\d\] (?P<cmd>[\w-]+): (?P<status>.+) in \d+\.\d s \(exit (?P<code>\d)\)$")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("codes")
    m1(folder)
    overflow(folder)
    return folder


def test_the_codes_are_distinct():
    assert (EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL) == (1, 2, 3)


def test_a_fail_verdict_a_bad_input_and_a_usage_error_differ(work):
    fail = npuscope("compare", "big.onnx", "--inputs", "big.npz", "--precision-mode", "force_fp16", "--out", "f",
                    cwd=work)
    assert fail.returncode == 1, fail.stdout + fail.stderr
    assert fail.stdout.startswith("verdict: FAIL") and (work / "f" / "summary.json").is_file()
    ok = npuscope("compare", "big.onnx", "--inputs", "big.npz", "--precision-mode", "force_fp32", "--out", "ok",
                  cwd=work)
    assert ok.returncode == 0 and ok.stdout.startswith("verdict: PASS"), ok.stdout + ok.stderr
    bad_input = npuscope("compare", "big.onnx", "--inputs", "missing.npz", "--out", "b", cwd=work)
    assert bad_input.returncode == 2 and "missing.npz" in error_line(bad_input) and not (work / "b").exists()
    bad_model = npuscope("compare", "nothere.onnx", "--out", "b", cwd=work)
    assert bad_model.returncode == 2 and "nothere.onnx" in error_line(bad_model)
    usage = npuscope("compare", "big.onnx", "--no-such-option", cwd=work)
    assert usage.returncode == 2 and "No such option" in error_line(usage)


def test_regress_and_tune_fail_with_1_and_refuse_bad_input_with_2(work):
    assert npuscope("compare", "big.onnx", "--inputs", "big.npz", "--precision-mode", "force_fp32", "--out", "base",
                    cwd=work).returncode == 0
    assert npuscope("compare", "big.onnx", "--inputs", "big.npz", "--precision-mode", "force_fp16", "--out", "worse",
                    cwd=work).returncode == 1
    regressed = npuscope("regress", "base", "worse", "--no-html", "--out", "g1", cwd=work)
    assert regressed.returncode == 1 and "regress: REGRESSION" in regressed.stdout, regressed.stderr
    not_a_run = npuscope("regress", "base", "nowhere", "--no-html", "--out", "g2", cwd=work)
    assert not_a_run.returncode == 2 and "nowhere" in error_line(not_a_run)
    unmet = npuscope("tune", "big.onnx", "--inputs", "big.npz", "--precision-mode", "force_fp16", "--target",
                     "CosineSimilarity>1", "--no-html", "--out", "t1", cwd=work)  # no cosine is above 1
    assert unmet.returncode == 1 and "NOT MET" in unmet.stdout, unmet.stderr
    bad_target = npuscope("tune", "big.onnx", "--target", "Cosin>=0.9", "--out", "t2", cwd=work)
    assert bad_target.returncode == 2 and "CosineSimilarity" in error_line(bad_target)


def test_an_internal_error_exits_3_with_a_traceback(tmp_path):
    script = ("import sys\nimport toolkit.cli as cli\n"
              "def boom(*a, **k):\n    raise RuntimeError('planted bug')\n"
              "cli.compile_command = boom\ncli.main(['compile', 'resnet_small', '--out', sys.argv[1]])\n")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "o")], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" in proc.stderr and "internal error (RuntimeError: planted bug)" in proc.stderr


@pytest.mark.parametrize("flags, progress", [(["-v"], True), (["-q"], False)])
def test_global_options_work_after_the_command(work, flags, progress):
    after = npuscope("compare", "m1.onnx", "--inputs", "x.npz", *flags, "--out", f"after{flags[0]}", cwd=work)
    before = npuscope(*flags, "compare", "m1.onnx", "--inputs", "x.npz", "--out", f"before{flags[0]}", cwd=work)
    for proc in (after, before):
        assert proc.returncode == 0, proc.stderr
        assert ("loading m1.onnx" in proc.stderr) is progress  # a progress line (not a terminal: only with -v)
        assert (proc.stderr == "") is (not progress)  # -q: neither progress nor the closing line


def test_diagnose_verbose_after_the_command_and_contradictions(work):
    proc = npuscope("diagnose", "-v", "m1.onnx", "--inputs", "x.npz", "--out", "dv", cwd=work)
    assert proc.returncode == 0 and "loading m1.onnx" in proc.stderr, proc.stderr  # was "No such option: -v"
    for args in (["-q", "compare", "-v"], ["compare", "-v", "-q"]):
        both = npuscope(*args, "m1.onnx", "--out", "x", cwd=work)
        assert both.returncode == 2 and "contradict" in error_line(both)


def test_a_run_without_a_terminal_ends_with_one_summary_line(work):
    fail = npuscope("compare", "big.onnx", "--inputs", "big.npz", "--precision-mode", "force_fp16", "--out", "s1",
                    cwd=work)
    ok = npuscope("tune", "m1.onnx", "--inputs", "x.npz", "--no-html", "--out", "s2", cwd=work)
    for proc, cmd, status, code in ((fail, "compare", "verdict FAIL", 1), (ok, "tune", "target MET", 0)):
        lines = proc.stderr.splitlines()
        assert proc.returncode == code and len(lines) == 1, proc.stderr  # no progress without a terminal
        m = CLOSING.match(lines[0])
        assert m and m["cmd"] == cmd and m["status"].startswith(status) and int(m["code"]) == code, lines[0]


def test_the_codes_are_documented_in_help_and_readme():
    help_text = " ".join(npuscope("--help").stdout.split())
    assert " ".join(EXIT_CODES_TEXT.split()) in help_text
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert EXIT_CODES_TEXT in readme
    for code, meaning in (("1", "the check failed"), ("2", "usage error or bad input"), ("3", "internal error")):
        assert f"{code} {meaning}" in EXIT_CODES_TEXT
