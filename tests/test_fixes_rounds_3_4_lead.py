"""Fault kinds from the third and fourth adversarial rounds fixed by the lead: commands that generate their own
input data ignored --input-shape (tune, signoff; the other commands are covered in
tests/test_fixes_round3_inputs.py); junit.xml with control characters; the formula-safety prefix of our CSVs
read back exactly; the profiler's integer columns written as integers by parse-log."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

POLICY = """
[policy]
name = "dyn"
[outputs."*"]
CosineSimilarity = 0.999
"""


def _model(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])])
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("command", ["tune", "signoff"])
def test_generated_inputs_take_the_given_input_shape(tmp_path, command):
    model = _model(tmp_path)
    extra = ["--policy", tmp_path / "p.toml"] if command == "signoff" else []
    (tmp_path / "p.toml").write_text(POLICY)
    without = _cli(command, model, *extra, "--out", tmp_path / "a", cwd=tmp_path)
    assert without.returncode != 0 and "--input-shape" in without.stderr  # the dims really are dynamic
    got = _cli(command, model, *extra, "--input-shape", "x:3,8", "--out", tmp_path / "b", cwd=tmp_path)
    assert got.returncode == 0, got.stderr[-500:]
    assert "dynamic dims" not in got.stdout + got.stderr


def test_formula_safe_csv_reads_back_exactly():
    """Our readers (regress, parse-log) undo the spreadsheet-safety prefix: every name reads back as the model
    spells it, a name's own leading quote included; numbers stay numbers."""
    import io

    import pandas as pd

    from toolkit.report.csvjson import formula_safe, to_csv_safe, undo_formula_safe

    names = ["=HYPERLINK(\"x\")", "+cmd", "-n", "@at", "\tt", "'quoted", "''two", "'=q", "plain", "a=b"]
    df = pd.DataFrame({"TensorName": names, "Value": np.arange(len(names)) - 3.5})
    safe = formula_safe(df)
    assert all(not v.startswith(("=", "+", "-", "@", "\t")) for v in safe["TensorName"])
    back = undo_formula_safe(pd.read_csv(io.StringIO(to_csv_safe(df, index=False)), keep_default_na=False))
    assert back["TensorName"].tolist() == names
    np.testing.assert_array_equal(back["Value"].to_numpy(), df["Value"].to_numpy())


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
