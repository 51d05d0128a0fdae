"""Paths the user names, on every command: names whose bytes are not UTF-8 (legal on Linux) work and are written
escaped; paths the file system refuses (a name too long, a symbolic link loop, a file where a folder should be)
are one-line errors (exit 2) that leave no output folder behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper

from tests.cli.helpers import assert_one_line_error, npuscope

ODD = b"\xff\xfe"  # bytes that are not UTF-8
ODD_SHOWN = r"\xff\xfe"  # as os.fsencode(name).decode("utf-8", "backslashreplace") shows them


def odd(text: str) -> str:
    """``text`` with '@' replaced by the bytes :data:`ODD`, as os.fsdecode gives such a name (lone surrogates)."""
    return os.fsdecode(text.encode("ascii").replace(b"@", ODD))


def relu_onnx(path: Path) -> Path:
    """y = Relu(x), x float32[1, 4], opset 17."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.fspath(path))
    return path


@pytest.fixture
def work(tmp_path) -> Path:
    relu_onnx(tmp_path / "relu.onnx")
    np.savez(tmp_path / "x.npz", x=np.array([[-1, 0.5, 2, -3]], np.float32))
    return tmp_path


def _strings(obj) -> list[str]:
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (k, *_strings(v))]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return [obj] if isinstance(obj, str) else []


def written_text(folder: Path) -> dict[str, str]:
    """{file name: text} of every text file in ``folder`` (recursively); each must be UTF-8, each JSON strict
    (for JSON files: the strings it holds, one a line, as a parser reads them)."""
    out = {}
    for p in folder.rglob("*"):
        if p.suffix not in (".json", ".jsonl", ".csv", ".html", ".log", ".xml", ".txt") or not p.is_file():
            continue
        text = p.read_bytes().decode("utf-8")  # strict: a lone surrogate or a raw undecodable byte fails
        if p.suffix == ".json":
            text = "\n".join(_strings(json.loads(text)))
        if p.suffix == ".jsonl":
            text = "\n".join(s for line in text.splitlines() for s in _strings(json.loads(line)))
        out[str(p.relative_to(folder))] = text
    return out


# ------------------------------------------------------------------------------ names that are not UTF-8
@pytest.mark.parametrize("command", ["compare", "diagnose"])
def test_an_input_file_whose_name_is_not_utf8_is_an_ordinary_row(work, command):
    """docs/datasets.md: a file of an --inputs folder is a row of inputs.csv, never a crash. One whose name is
    not UTF-8 runs like the others; its row (and summary.json, the report) shows the name escaped."""
    folder = work / "nu"
    folder.mkdir()
    np.savez(folder / odd("@.npz"), x=np.ones((1, 4), np.float32))
    np.savez(folder / "good.npz", x=-np.ones((1, 4), np.float32))
    p = npuscope(command, "relu.onnx", "--inputs", "nu", "--out", "o", cwd=work)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    rows = pd.read_csv(work / "o" / "inputs.csv", encoding="utf-8")
    assert rows["Input"].tolist() == ["good.npz", ODD_SHOWN + ".npz"] and set(rows["Status"]) == {"ok"}
    texts = written_text(work / "o")
    assert ODD_SHOWN + ".npz" in texts["summary.json"]
    again = npuscope(command, "relu.onnx", "--inputs", "nu", "--out", "o", cwd=work)  # resumed: nothing re-run
    assert again.returncode == 0 and "0 evaluated now, 2 reused" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize("args", [
    ("compile", "@.onnx", "--out", "o@"),
    ("run", "@.onnx", "--inputs", "x@.npz", "--out", "o@", "--dump", "d@", "--save-outputs", "y@.npz"),
    ("diagnose", "@.onnx", "--inputs", "x@.npz", "--out", "o@"),
    ("compare", "@.onnx", "--inputs", "n@", "--out", "o@"),
    ("signoff", "@.onnx", "--policy", "p@.toml", "--inputs", "x@.npz", "--config", "c@.toml", "--out", "o@"),
], ids=["compile", "run", "diagnose", "compare-folder", "signoff"])
def test_paths_that_are_not_utf8_work_and_are_written_escaped(work, args):
    """Kind: MODEL, --inputs (a file, a folder), --out, --dump, --save-outputs, --config, --policy named with bytes
    that are not UTF-8: the command runs; every file it writes is UTF-8 (strict JSON) and names them escaped."""
    os.rename(work / "relu.onnx", work / odd("@.onnx"))
    os.rename(work / "x.npz", work / odd("x@.npz"))
    (work / odd("n@")).mkdir()
    np.savez(work / odd("n@") / odd("a@.npz"), x=np.ones((1, 4), np.float32))
    Path(work / odd("p@.toml")).write_text('[policy]\nname = "p"\n[outputs."*"]\nCosineSimilarity = 0.99\n')
    Path(work / odd("c@.toml")).write_text('precision_mode = "force_fp32"\n')
    p = npuscope(*map(odd, args), cwd=work)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    texts = written_text(work / odd("o@"))
    if args[0] == "run":  # its files name no path
        assert (work / odd("y@.npz")).is_file() and written_text(work / odd("d@"))["index.json"]
    else:
        assert any(ODD_SHOWN in t for t in texts.values()), texts


# ------------------------------------------------------------------------ paths the file system refuses
LONG = "a" * 300  # one name over the 255 bytes file systems allow


@pytest.mark.parametrize("args,option", [
    (("compile", "out/{L}.onnx", "--out", "o"), "model path"),  # handled before: the same kind of message now
    (("compile", "x.npz/m.onnx", "--out", "o"), "model path"),
    (("compile", "relu.onnx", "--out", "out/{L}"), "--out"),
    (("compile", "relu.onnx", "--out", "new/{L}"), "--out"),  # below a folder that does not exist yet
    (("compile", "relu.onnx", "--config", "out/{L}.toml", "--out", "o"), "config file"),
    (("compile", "relu.onnx", "--config", "loop/c.toml", "--out", "o"), "config file"),  # ELOOP
    (("run", "relu.onnx", "--save-outputs", "out/{L}.npz", "--out", "o"), "--save-outputs"),
    (("run", "relu.onnx", "--dump", "out/{L}", "--out", "o"), "--dump"),
    (("run", "relu.onnx", "--inputs", "out/{L}.npz", "--out", "o"), "--inputs"),
    (("run", "relu.onnx", "--inputs", "x.npz/y.npz", "--out", "o"), "--inputs"),  # ENOTDIR
    (("run", "relu.onnx", "--plan", "out/{L}.json", "--out", "o"), "plan file"),
    (("compare", "relu.onnx", "--inputs", "out/{L}", "--out", "o"), "--inputs"),
    (("compare", "relu.onnx", "--inputs", "nu", "--out", "out/{L}"), "--out"),  # a dataset run's --out
    (("compare", "relu.onnx", "--inputs", "out/{L}.py:make", "--out", "o"), "--inputs loader script"),
    (("diagnose", "relu.onnx", "--inputs", "out/{L}.npz", "--out", "o"), "--inputs"),
    (("diagnose", "relu.onnx", "--out", "loop/x"), "--out"),
    (("diagnose", "relu.onnx", "--inputs", "x.npz", "--device-dumps", "out/{L}", "--out", "o"), "DEVICE-DUMPS"),
    (("signoff", "relu.onnx", "--policy", "out/{L}.toml", "--out", "o"), "policy file"),
    (("memcheck", "relu.onnx", "--plan", "out/{L}.json", "--out", "o"), "plan file"),
    (("tune", "relu.onnx", "--inputs", "out/{L}", "--out", "o"), "--inputs"),
    (("profile", "relu.onnx", "--device", "out/{L}.json", "--out", "o"), "device file"),
    (("profile", "relu.onnx", "--pre", "out/{L}.py:pre", "--out", "o"), "--pre file"),
    (("gears", "-k", "2", "--lengths", "out/{L}.txt", "--out", "o"), "lengths file"),
    (("compare-dumps", "out/{L}", "d", "--out", "o"), "GOLDEN"),
    (("parse-log", "out/{L}.log", "--out", "o"), "FILE"),
    (("regress", "out/{L}", "out/{L}", "--out", "o"), "report folder"),
], ids=lambda v: v if isinstance(v, str) else "-".join(a.replace("{L}", "L")[:12] for a in v[:1] + v[-3:-2]))
def test_paths_the_file_system_refuses_are_one_line_errors(work, args, option):
    """Kind: a user path the file system refuses to look at — a name too long (ENAMETOOLONG), a symbolic link
    loop (ELOOP), a file where a folder should be (ENOTDIR) — on every command and path option: exit 2, one line
    naming the option and the reason, no traceback, nothing created (no output folder, nor a folder above it)."""
    (work / "loop").symlink_to(work / "loop")
    (work / "out").mkdir()
    (work / "nu").mkdir()
    np.savez(work / "nu" / "a.npz", x=np.ones((1, 4), np.float32))
    before = sorted(os.listdir(work))
    p = npuscope(*(a.replace("{L}", LONG) for a in args), cwd=work)
    line = assert_one_line_error(p, 2, f"{option} '", "cannot be used: ")
    assert ("bytes long, more than the 255 a file name may have" in line) == ("{L}" in " ".join(args)), line
    assert sorted(os.listdir(work)) == before and not os.listdir(work / "out")  # nothing left behind
