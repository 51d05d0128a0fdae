"""The in-suite fuzzer (issue 20): a fixed-seed stream of mutants of the sample models and the shared fault cases
(tests.fuzz.mutate, every mutation kind in turn) through ``compile`` and ``diagnose`` in one child process
(tests.fuzz.drive: the CLI's command group in-process, a SIGALRM per run). None may end in an internal error
(exit 3, a traceback); none may hang (each run is stopped after RUN_TIMEOUT_S, and the child as a whole must end).
bench/fuzz.py runs thousands, in subprocesses, with SIGTERM checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.fuzz.mutate import KINDS, mutants
from tests.fuzz.seeds import seed_models

SEED = 20  # the number; fixed: the same mutants every run
COUNT = 200
RUN_TIMEOUT_S = 60
REPO = Path(__file__).resolve().parents[2]


def test_the_generator_is_deterministic_and_covers_every_kind():
    seeds = seed_models()
    a = list(mutants(seeds, 3 * len(KINDS), SEED))
    b = list(mutants(seeds, 3 * len(KINDS), SEED))
    assert [m.data for m in a] == [m.data for m in b]
    assert Counter(m.kind for m in a) == {k: 3 for k in KINDS}
    assert len({m.data for m in a}) == len(a)


@pytest.fixture(scope="module")
def fuzz_rows():
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("NPUSCOPE_THREADS", None)
    proc = subprocess.run([sys.executable, "-m", "tests.fuzz.drive", str(SEED), "0", str(COUNT), str(RUN_TIMEOUT_S),
                           "compile,diagnose"], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=COUNT * 2 * RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    print(Counter((r["command"], r["outcome"]) for r in rows))
    return rows


def test_every_mutant_ran_through_both_commands(fuzz_rows):
    assert Counter(r["command"] for r in fuzz_rows) == {"compile": COUNT, "diagnose": COUNT}
    assert {r["kind"] for r in fuzz_rows} == set(KINDS)


def test_no_mutant_ends_in_an_internal_error(fuzz_rows):
    internal = [f"{r['label']} {r['command']}: {r['line']}" for r in fuzz_rows if r["outcome"] == "internal"]
    assert not internal, "\n".join(internal)


def test_every_refusal_is_one_line(fuzz_rows):
    bad = [r for r in fuzz_rows if r["outcome"] == "refused" and (not r["line"].strip() or "\n" in r["line"].strip()
                                                                   or "Traceback" in r["line"])]
    assert not bad, bad[:5]
