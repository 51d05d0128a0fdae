"""Round-3 output fixes, one test per fault kind:

1. untrusted names reaching the terminal raw (ANSI/OSC escape sequences, BEL, CR, LF, backspace, C0/C1
   controls, Unicode bidi overrides) — stdout, stderr, README.txt and compile.log of every command that prints
   workflow text; the names stay visible as escapes;
2. CSV formula injection (cells starting with = + - @ TAB CR) in every CSV a diagnose / compare run writes,
   dataset runs included; numbers untouched;
3. metric values printed so that they read as not crossing their line (0.9999999364 under 0.99999999 printed
   as "1"): checked against values computed here with numpy / onnxruntime.

Every CLI call runs in a subprocess (the CLI sets up onnxruntime's global thread pool)."""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.report.console import printable, show_crossed
from toolkit.report.csvjson import csv_text, formula_safe

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------- the names
TITLE = "\x1b]0;PWNED-TITLE\x07\x1b[2J\x1b[31mFAKE verdict: PASS\x1b[0m\r"   # OSC 0 title, CSI clear, colour, CR
OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"                                      # clipboard write
OSC8 = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07"                    # hyperlink
REST = "\nverdict: PASS\x08\x08\x7f\x9b31m\x9d0;t\x9c\t\x00\x0b\x0c"          # LF, BS, DEL, C1 CSI/OSC/ST, TAB, NUL
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

#: Node and tensor names of the evil model; each starts with a spreadsheet formula character as well.
N_MUL = "+cmd|' /C calc'!A0" + TITLE
T_MUL = '=HYPERLINK("http://evil","x")' + OSC52
N_DIV = "-2+3" + OSC8 + BIDI
T_DIV = "@SUM(A1)" + BIDI
N_RELU = "\t=1+1" + REST
OUT = "\r=cmd" + REST + BIDI + TITLE

#: The escapes expected on the terminal, written out by hand (not computed with printable()).
SEEN = {
    N_MUL: r"+cmd|' /C calc'!A0\x1b]0;PWNED-TITLE\x07\x1b[2J\x1b[31mFAKE verdict: PASS\x1b[0m\r",
    N_DIV: r"-2+3\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
    OUT: r"\r=cmd\nverdict: PASS\x08\x08\x7f\x9b31m\x9d0;t\x9c\t\x00\x0b\x0c\u202a\u202b\u202c\u202d\u202e"
         r"\u2066\u2067\u2068\u2069\x1b]0;PWNED-TITLE\x07\x1b[2J\x1b[31mFAKE verdict: PASS\x1b[0m\r",
}

BIDI_CHARS = set(BIDI) | {"\u061c", "\u200e", "\u200f", "\u2028", "\u2029"}
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cli(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONIOENCODING="utf-8", **(env or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=REPO, capture_output=True,
                          timeout=timeout, env=full)


def _bad_chars(text: str) -> list[str]:
    """Characters that must not reach a terminal: C0 controls but LF, DEL and C1, bidi controls, separators."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F or c in BIDI_CHARS]


def _assert_clean(raw: bytes, what: str) -> str:
    text = raw.decode("utf-8")  # strict: a lone surrogate or a broken sequence fails here too
    assert not _bad_chars(text), (what, sorted(set(map(hex, map(ord, _bad_chars(text))))), text[:2000])
    return text


def _evil_model(path: Path) -> Path:
    """x -> Mul(x, 1e5) -> Div(., 1e5) -> Relu -> OUT: every node and tensor named with control characters,
    and the Mul overflows FP16 (|x| * 1e5 > 65504), so force_fp16 fails with findings naming the nodes."""
    big = numpy_helper.from_array(np.full((8,), 1e5, np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], [T_MUL], name=N_MUL),
         helper.make_node("Div", [T_MUL, "w"], [T_DIV], name=N_DIV),
         helper.make_node("Relu", [T_DIV], [OUT], name=N_RELU)], "evil",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8))],
        [helper.make_tensor_value_info(OUT, TensorProto.FLOAT, (1, 8))], [big])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


X_EVIL = np.array([[-0.9, -0.5, -0.1, 0.2, 0.4, 0.7, 0.8, 0.95]], np.float32)  # |x| > 0.655 overflows *1e5


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    d = tmp_path_factory.mktemp("evil")
    _evil_model(d / "evil.onnx")
    np.savez(d / "x.npz", x=X_EVIL)
    return d


@pytest.fixture(scope="module")
def evil_runs(evil):
    """(name -> (process, out folder)) for diagnose, compare and run of the evil model, with progress (-v) and
    every log line (NPUSCOPE_LOG_LEVEL=0) on."""
    runs = {}
    env = {"NPUSCOPE_LOG_LEVEL": "0"}
    common = ["--precision-mode", "force_fp16", "--inputs", evil / "x.npz"]
    for cmd in ("diagnose", "compare", "run"):
        out = evil / f"out_{cmd}"
        runs[cmd] = (_cli("-v", cmd, evil / "evil.onnx", *common, "--out", out, env=env), out)
    return runs


@pytest.mark.parametrize("cmd", ["diagnose", "compare", "run"])
def test_untrusted_names_never_reach_the_terminal_raw(evil_runs, cmd):
    proc, out = evil_runs[cmd]
    stdout = _assert_clean(proc.stdout, f"{cmd} stdout")
    stderr = _assert_clean(proc.stderr, f"{cmd} stderr")
    assert "Traceback" not in stderr, stderr
    assert "[npuscope " in stderr  # our own progress lines still print
    if cmd == "run":
        assert proc.returncode == 0, stderr
        assert f"output {SEEN[OUT]}: float32[1, 8]" in stdout.splitlines()
    else:
        assert proc.returncode == 1, stderr  # the FP16 overflow fails the verdict
        lines = stdout.splitlines()
        assert lines[0] == "verdict: FAIL"
        assert f"  - output '{SEEN[OUT]}' is abnormal (OverFlow True)" in lines
        assert any(ln.startswith(f"first divergence: node '{SEEN[N_MUL]}' (Mul") for ln in lines), stdout
        assert any(ln.startswith("ERROR") and SEEN[N_MUL] in ln for ln in lines), stdout
        # no line of our output was forged by a name: every line is one we print
        starts = ("verdict: ", "  - ", "first divergence: ", "stage: ", "ERROR ", "WARNING ", "INFO ", "task ",
                  "report: ")
        assert all(ln.startswith(starts) for ln in lines), stdout


@pytest.mark.parametrize("cmd", ["diagnose", "compare"])
def test_text_files_in_the_report_folder_hold_no_control_characters(evil_runs, cmd):
    _, out = evil_runs[cmd]
    readme = _assert_clean((out / "repro" / "README.txt").read_bytes(), "README.txt")
    assert SEEN[N_MUL] in readme
    log = _assert_clean((out / "compile.log").read_bytes(), "compile.log")
    assert log.endswith("\n")


def test_error_messages_quoting_model_names_are_escaped(tmp_path):
    """--val-range naming no input of the model: the error lists the model's (evil) input names verbatim."""
    evil_in = "\x1b]0;x\x07in\u202e"
    g = helper.make_graph([helper.make_node("Relu", [evil_in], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info(evil_in, TensorProto.FLOAT, (1, 4))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    proc = _cli("compare", tmp_path / "m.onnx", "--val-range", "nope:[0,1]", "--out", tmp_path / "o")
    err = _assert_clean(proc.stderr, "stderr")
    _assert_clean(proc.stdout, "stdout")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("npuscope: error: "), err  # usage
    assert lines[0].endswith(r"(valid: \x1b]0;x\x07in\u202e)"), lines[0]


def test_doctor_json_is_still_one_valid_json_document():
    import json

    proc = _cli("doctor", "--json")
    data = json.loads(_assert_clean(proc.stdout, "doctor --json"))
    assert set(data) >= {"ok", "checks", "environment"}


# ------------------------------------------------------------------------------ 2. CSV formula injection
def _csv_cells(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _assert_no_formula(path: Path) -> list[list[str]]:
    rows = _csv_cells(path)
    for row in rows:
        for cell in row:
            assert _is_number(cell) or not cell.startswith(FORMULA), (path.name, cell)
    return rows


def test_formula_safe_prefixes_text_cells_and_leaves_numbers():
    df = pd.DataFrame({
        "Name": ['=HYPERLINK("http://evil","x")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\t=1", "\r=1",
                 "ok", None],
        "Value": [-1.5, -2.0, 3.0, -0.0, 5.0, -6e-9, 7.0, np.nan],
        "Count": [-1, 2, -3, 4, 5, 6, 7, 8],
        "Mixed": [-1, "-x", "=a", True, 2.5, None, "", "x"],
    })
    df["Cat"] = pd.Categorical(["=a", "b", "+c", "d", "@e", "f", "-g", "h"])
    before = df.copy()
    rows = list(csv.reader(io.StringIO(csv_text(df))))
    assert rows[0] == ["Name", "Value", "Count", "Mixed", "Cat"]
    names = [r[0] for r in rows[1:]]
    assert names == ["'" + v for v in before["Name"][:6]] + ["ok", ""]
    assert [float(r[1]) for r in rows[1:8]] == [-1.5, -2.0, 3.0, -0.0, 5.0, -6e-9, 7.0]  # numbers stay numbers
    assert [int(r[2]) for r in rows[1:]] == [-1, 2, -3, 4, 5, 6, 7, 8]
    assert [r[3] for r in rows[1:]] == ["-1", "'-x", "'=a", "True", "2.5", "", "", "x"]
    assert [r[4] for r in rows[1:]] == ["'=a", "b", "'+c", "d", "'@e", "f", "'-g", "h"]
    pd.testing.assert_frame_equal(df, before)  # the caller's frame is not modified
    # a header from a model name, duplicate column names, list cells joined first
    dup = pd.DataFrame([["=x", 1, ["=a", "b"]]], columns=["=evil", "a", "a"])
    rows = list(csv.reader(io.StringIO(csv_text(dup))))
    assert rows == [["'=evil", "a", "a"], ["'=x", "1", "'=a;b"]]
    assert list(formula_safe(pd.DataFrame({"s": pd.Series(["=1"], dtype="string")}))["s"]) == ["'=1"]


def test_a_carriage_return_inside_a_cell_cannot_start_a_new_row():
    """A CR mid-cell, unquoted, starts a new row in a spreadsheet, whose first cell would be a formula."""
    df = pd.DataFrame({"Name": ["ok\r=HYPERLINK(\"http://evil\")", "plain"], "Value": [-1.5, 2.0], "Id": [-3, 4]})
    text = csv_text(df)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows == [["Name", "Value", "Id"], ["ok\r=HYPERLINK(\"http://evil\")", "-1.5", "-3"], ["plain", "2.0", "4"]]
    back = pd.read_csv(io.StringIO(text, newline=""))
    assert list(back["Name"]) == list(df["Name"])
    assert back["Value"].tolist() == [-1.5, 2.0] and back["Id"].tolist() == [-3, 4]  # numbers stay numbers
    assert str(back["Id"].dtype) == "int64"
    assert "\r" not in csv_text(pd.DataFrame({"Name": ["plain"], "Value": [1.0]}))


def test_every_csv_of_a_diagnose_or_compare_run_is_formula_safe(evil_runs):
    for cmd in ("diagnose", "compare"):
        _, out = evil_runs[cmd]
        csvs = sorted(out.rglob("*.csv"))
        assert {p.name for p in csvs} >= {"result.csv", "kernel_times.csv"}, csvs
        for p in csvs:
            _assert_no_formula(p)
        rows = _csv_cells(out / "result.csv")
        head = rows[0]
        by_tensor = {r[head.index("TensorName")]: r for r in rows[1:]}
        assert "'" + T_MUL in by_tensor and "'" + OUT in by_tensor, list(by_tensor)
        assert by_tensor["'" + T_MUL][head.index("NodeName")] == "'" + N_MUL
        # x * 1e5 / 1e5 (min -0.9, by hand) keeps a plain negative number
        assert float(by_tensor["'" + T_DIV][head.index("GoldenMin")]) == pytest.approx(float(X_EVIL.min()))
        kernels = [r[0] for r in _csv_cells(out / "kernel_times.csv")[1:]]
        assert kernels and all(not k.startswith(FORMULA) for k in kernels)


def test_dataset_csvs_are_formula_safe(evil):
    folder = evil / "dataset_in"
    folder.mkdir()
    for i, name in enumerate(["=1+2.npz", "-cmd.npz", "@a.npz"]):
        np.savez(folder / name, x=X_EVIL * (0.5 + 0.25 * i))
    out = evil / "out_dataset"
    proc = _cli("compare", evil / "evil.onnx", "--precision-mode", "force_fp16", "--inputs", folder, "--out", out)
    _assert_clean(proc.stdout, "stdout")
    _assert_clean(proc.stderr, "stderr")
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
    csvs = sorted(out.rglob("*.csv"))
    assert {"dataset.csv", "inputs.csv"} <= {p.name for p in csvs}, csvs
    for p in csvs:
        _assert_no_formula(p)


def _matmul_model(path: Path) -> np.ndarray:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((256, 16)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 256))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 16))],
                          [numpy_helper.from_array(w, "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return rng.standard_normal((4, 256)).astype(np.float32)


def test_a_metric_crossing_a_line_is_printed_beyond_it(tmp_path):
    """FP16 MatMul: cosine 1 - ~5e-8 under the line 0.99999999 used to print as 'CosineSimilarity 1'."""
    x = _matmul_model(tmp_path / "mm.onnx")
    np.savez(tmp_path / "x.npz", x=x)
    ran = _cli("run", tmp_path / "mm.onnx", "--precision-mode", "force_fp16", "--inputs", tmp_path / "x.npz",
               "--out", tmp_path / "run")
    assert ran.returncode == 0, ran.stderr.decode()
    device = np.load(tmp_path / "run" / "outputs.npz")["y"].astype(np.float64).ravel()
    golden = ort.InferenceSession(str(tmp_path / "mm.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0].astype(np.float64).ravel()
    cos = float(device @ golden / (np.linalg.norm(device) * np.linalg.norm(golden)))
    line = 0.99999999
    assert 0.9999995 < cos < line  # the case of the bug: 6 significant digits would print 1
    proc = _cli("compare", tmp_path / "mm.onnx", "--precision-mode", "force_fp16", "--inputs", tmp_path / "x.npz",
                "--thresholds", f"CosineSimilarity<{line}", "--out", tmp_path / "cmp")
    stdout = proc.stdout.decode()
    assert proc.returncode == 1, stdout + proc.stderr.decode()
    match = re.search(r"output 'y' is abnormal \(CosineSimilarity ([-+0-9.e]+)", stdout)
    assert match, stdout
    text = match.group(1)
    assert text not in ("1", "0.99999999", "1e+00") and float(text) < line, text
    assert float(text) <= cos and cos - float(text) < 1e-6, (text, cos)


def _table_row(device, golden, lines) -> dict:
    from toolkit.compare.layerwise import golden_range
    from toolkit.compare.metrics import compare_tensors

    row = {"Index": 0, "OpType": "MatMul", "NodeName": "mm", "TensorName": "y", "Kernel": "mm",
           "NPUDump": "float32", **golden_range(golden)}
    row.update(compare_tensors(device, golden, thresholds=lines))
    return row


