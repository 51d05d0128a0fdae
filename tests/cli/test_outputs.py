"""Every command that writes files: a user's files in the folder (or at the file) it is told to write are never
overwritten or deleted. The writing options are read from the CLI's own definition (every ``--out``, ``--dump``,
``--output`` and the cache's ``--dir``), so a new command or option that writes must be added to CASES.

All cases run in one child process (the CLI's command group called in-process, one import), each on a target
holding the user's files: notes.txt, a manifest.json that is not JSON, results/mine.npz, log.jsonl, index.html
and summary.json; dataset runs also on a manifest.json that is JSON but not ours, and on folders holding only
files named as a dataset run names its own (manifest.json, log.jsonl, results/). The refused cases must say so
on one line (exit 1 or 2); ``cache clear`` must succeed and leave the user's files.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from toolkit import cli

USER_FILES = {"notes.txt": b"my notes\n", "manifest.json": b"not json at all", "results/mine.npz": b"PK\x03\x04mine",
              "log.jsonl": b"my log\n", "index.html": b"<p>mine</p>", "summary.json": b'{"mine": true}'}
FOREIGN_MANIFEST = {"format": 2, "command": "diagnose", "mine": True}

#: (case id, command line with {T} for the target, {IN} for the inputs folder...) -> (command, option) it covers
CASES = {
    "compile-out": (["compile", "resnet_small", "--out", "{T}"], ("compile", "out")),
    "run-out": (["run", "resnet_small", "--out", "{T}"], ("run", "out")),
    "run-dump": (["run", "resnet_small", "--dump", "{T}", "--out", "{FRESH}"], ("run", "dump_dir")),
    "run-output": (["run", "resnet_small", "--output", "{TF}", "--out", "{FRESH}"], ("run", "output")),
    "memcheck-out": (["memcheck", "resnet_small", "--out", "{T}"], ("memcheck", "out")),
    "diagnose-out": (["diagnose", "resnet_small", "--out", "{T}"], ("diagnose", "out")),
    "diagnose-dataset-out": (["diagnose", "{M}", "--inputs", "{IN}", "--out", "{T}"], ("diagnose", "out")),
    "diagnose-dataset-foreign-manifest": (["diagnose", "{M}", "--inputs", "{IN}", "--out", "{TJ}"], ("diagnose", "out")),
    "diagnose-dataset-store-shaped": (["diagnose", "{M}", "--inputs", "{IN}", "--out", "{TS}"], ("diagnose", "out")),
    "diagnose-dataset-store-shaped-foreign-manifest": (["diagnose", "{M}", "--inputs", "{IN}", "--out", "{TSJ}"],
                                                       ("diagnose", "out")),
    "compare-out": (["compare", "resnet_small", "--out", "{T}"], ("compare", "out")),
    "compare-dataset-out": (["compare", "{M}", "--inputs", "{IN}", "--out", "{T}"], ("compare", "out")),
    "signoff-out": (["signoff", "resnet_small", "--policy", "{P}", "--out", "{T}"], ("signoff", "out")),
    "signoff-dataset-out": (["signoff", "{M}", "--policy", "{P}", "--inputs", "{IN}", "--out", "{TJ}"],
                            ("signoff", "out")),
    "regress-out": (["regress", "{A}", "{A}", "--out", "{T}"], ("regress", "out")),
    "tune-out": (["tune", "resnet_small", "--out", "{T}"], ("tune", "out")),
    "gears-out": (["gears", "--lengths", "{L}", "-k", "2", "--out", "{T}"], ("gears", "out")),
    "compare-dumps-out": (["compare-dumps", "{D}", "{D}", "--out", "{T}"], ("compare-dumps", "out")),
    "profile-out": (["profile", "resnet_small", "--out", "{T}"], ("profile", "out")),
    "parse-log-out": (["parse-log", "{K}", "--out", "{T}"], ("parse-log", "out")),
    "cache-clear-dir": (["cache", "clear", "--dir", "{T}"], ("cache", "folder")),
    "cache-info-dir": (["cache", "info", "--dir", "{T}"], ("cache", "folder")),
}
WRITING_OPTIONS = {"out", "dump_dir", "output", "folder"}
#: cases that must succeed (the folder is the cache's: only its own entries are cleared)
SUCCEED = {"cache-clear-dir", "cache-info-dir"}

DRIVER = textwrap.dedent("""
    import json, sys
    import click
    from toolkit import cli
    from toolkit.core.errors import UserError
    results = {}
    for case, args in json.loads(sys.argv[1]).items():
        try:
            cli.cli.main(args=args, prog_name="npuscope", standalone_mode=False)
            code, line = 0, ""
        except UserError as exc:
            code, line = exc.exit_code, str(exc)
        except click.ClickException as exc:
            code, line = (2 if isinstance(exc, click.UsageError) else exc.exit_code), exc.format_message()
        except SystemExit as exc:
            code, line = exc.code, ""
        except Exception as exc:  # an internal error: reported to the test
            code, line = 3, f"{type(exc).__name__}: {exc}"
        results[case] = {"code": code, "line": line}
    print(json.dumps(results))
""")


def _tree(root: Path) -> dict:
    if root.is_file():
        return {"": hashlib.sha256(root.read_bytes()).hexdigest()}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


STORE_SHAPED = ("manifest.json", "log.jsonl", "results/mine.npz")  # only names a dataset run writes itself


def _plant(folder: Path, manifest: bytes | None = None, only=None) -> Path:
    for rel, data in USER_FILES.items():
        if only is not None and rel not in only:
            continue
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    if manifest is not None:
        (folder / "manifest.json").write_bytes(manifest)
    return folder


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("outputs")
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), tmp / "m.onnx")
    (tmp / "in").mkdir()
    np.savez(tmp / "in" / "a.npz", x=np.ones((1, 4), np.float32))
    (tmp / "policy.toml").write_text('[policy]\nname = "p"\n[outputs."*"]\nCosineSimilarity = 0.99\n')
    (tmp / "lengths.txt").write_text("3\n5\n7\n9\n")
    (tmp / "dumps").mkdir()
    np.save(tmp / "dumps" / "y.npy", np.ones(4, np.float32))
    (tmp / "kernel_times.csv").write_text("kernel,op_type,time_ms\nk0,Relu,0.5\n")
    (tmp / "A").mkdir()  # a results folder regress would read: its --out is checked first
    (tmp / "A" / "summary.json").write_text("{}")
    subs, targets = {}, {}
    for case, (args, _) in CASES.items():
        target = tmp / f"t-{case}"
        target.mkdir()
        _plant(target, json.dumps(FOREIGN_MANIFEST).encode() if "{TJ}" in args or "{TSJ}" in args else None,
               STORE_SHAPED if "{TS}" in args or "{TSJ}" in args else None)
        tfile = tmp / f"f-{case}.npz"
        tfile.write_bytes(b"my own outputs")
        targets[case] = tfile if "{TF}" in args else target
        subs[case] = [a.format(T=target, TJ=target, TS=target, TSJ=target, TF=tfile, FRESH=tmp / f"fresh-{case}", M=tmp / "m.onnx",
                               IN=tmp / "in", P=tmp / "policy.toml", A=tmp / "A", L=tmp / "lengths.txt",
                               D=tmp / "dumps", K=tmp / "kernel_times.csv") for a in args]
    before = {case: _tree(t) for case, t in targets.items()}
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("NPUSCOPE_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(subs)], cwd=tmp, capture_output=True, text=True,
                          timeout=1800, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return {case: (results[case], before[case], _tree(targets[case])) for case in CASES}


def test_cases_cover_every_writing_option_of_every_command():
    found = {(name, p.name) for name, cmd in cli.cli.commands.items() for p in cmd.params if p.name in WRITING_OPTIONS}
    assert found == {cover for _, cover in CASES.values()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_users_files_at_the_target_survive(outcomes, case):
    result, before, after = outcomes[case]
    assert after == before, (case, result)
    if case in SUCCEED:
        assert result["code"] == 0, result
    else:
        assert result["code"] in (1, 2), result
        assert result["line"] and "\n" not in result["line"].strip(), result
