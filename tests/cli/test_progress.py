"""Long searches show their progress: tune prints each trial with the best set so far (with -v, or on a
terminal); without a terminal the run still ends with its one closing line (tests/cli/test_exit_codes.py)."""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.cli.clirun import BIG, npuscope

TRIAL = re.compile(r"trial (\d+): (\d+) node\(s\) in FP32, target (met|not met) .*; best so far: (.+)$")


def _two_overflows(folder):
    """y = x * 1e5 (node mul1), z = x * 1e5 (mul2): in FP16 both overflow, so both must stay in FP32."""
    nodes = [helper.make_node("Mul", ["x", "s"], [o], name=n) for o, n in (("y", "mul1"), ("z", "mul2"))]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 4]) for o in ("y", "z")],
                              [numpy_helper.from_array(np.array(BIG, np.float32), "s")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), folder / "two.onnx")
    np.savez(folder / "x.npz", x=(1 + np.random.default_rng(2).random((2, 4))).astype(np.float32))
    assert float(np.max(np.load(folder / "x.npz")["x"])) * BIG > 65504  # every output overflows FP16


def test_tune_shows_each_trial_and_the_best_so_far(tmp_path):
    _two_overflows(tmp_path)
    proc = npuscope("tune", "two.onnx", "--inputs", "x.npz", "--precision-mode", "force_fp16", "--no-html", "-v",
                    "--out", "t", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = [m.groups() for m in map(TRIAL.search, proc.stderr.splitlines()) if m]
    assert [int(t[0]) for t in trials] == list(range(1, len(trials) + 1)) and len(trials) >= 2
    met = [t for t in trials if t[2] == "met"]
    assert met and all(int(t[1]) == 2 for t in met)  # one node in FP32 leaves the other output overflowing
    first_met = trials.index(met[0])
    assert all(t[3].startswith("target not met yet") for t in trials[:first_met])
    assert all(t[3] == "2 node(s) in FP32 meet the target" for t in trials[first_met:])
    assert "2 node(s) kept in FP32" in proc.stdout
