"""`npuscope memcheck` and `npuscope run --plan` on a plan.json edited by hand (exit codes, files, fix)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.test_memcheck import FP32, N, make_model

REPO = Path(__file__).resolve().parents[1]


def _call(argv) -> int:
    """Exit code of ``npuscope ARGV`` in a subprocess (the CLI sets up onnxruntime's global thread pool, which
    must not leak into the test process)."""
    return subprocess.run([sys.executable, "-m", "toolkit", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=300).returncode


_exit = _call


@pytest.fixture()
def model_and_plan(tmp_path):
    model = make_model([N("Mul", ["x", "two"], ["a"], "mul_a"), N("Mul", ["x", "three"], ["b"], "mul_b"),
                        N("Add", ["a", "b"], ["y"], "add")], [("x", [16, 64])], ["y"],
                       {"two": np.float32(2.0), "three": np.float32(3.0)})
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 16  # the loader's checker wants a shape
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 64
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(FP32))
    assert _call(["-q", "compile", str(path), "--config", str(cfg), "--out", str(tmp_path / "c")]) == 0
    return path, tmp_path / "c" / "plan.json"


def test_clean_plan_exits_0(model_and_plan, tmp_path):
    path, plan = model_and_plan
    assert _call(["-q", "memcheck", str(path), "--plan", str(plan), "--out", str(tmp_path / "ok")]) == 0
    data = json.loads((tmp_path / "ok" / "memcheck.json").read_text())
    assert data["clean"] and data["conflicts"] == []
    assert (tmp_path / "ok" / "memory.html").is_file()


def test_hand_edited_plan_exits_1_with_writer_victim_reader(model_and_plan, tmp_path):
    path, plan = model_and_plan
    d = json.loads(plan.read_text())
    t = {x["name"]: x for x in d["tensors"]}
    t["b"]["offset"] = t["a"]["offset"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    assert _exit(["-q", "memcheck", str(path), "--plan", str(bad), "--out", str(tmp_path / "mc")]) == 1
    rows = list(csv.DictReader(open(tmp_path / "mc" / "conflicts.csv")))
    assert [(r["Writer"], r["Victim"], r["Reader"], r["SeenDynamically"]) for r in rows] == [("mul_b", "a", "add", "True")]
    # round 8: the CSV holds the text as written (a cell starting with ' gets a second one from the formula
    # guard, so messages start with a word)
    assert all(not v.startswith("'") for r in rows for v in r.values()), rows
    data = json.loads((tmp_path / "mc" / "memcheck.json").read_text())
    assert data["fix"]["disable_reuse"] == ["a"] and data["fix"]["verified"] is True
    html = (tmp_path / "mc" / "memory.html").read_text()
    assert "mul_b" in html and "CONFLICTS FOUND" in html
    # the fixed plan is clean and runs
    fixed = tmp_path / "mc" / "plan_fixed.json"
    assert _call(["-q", "memcheck", str(path), "--plan", str(fixed), "--out", str(tmp_path / "mc2")]) == 0
    assert _call(["-q", "run", str(path), "--config", str(tmp_path / "cfg.json"), "--plan", str(fixed),
                  "--out", str(tmp_path / "run")]) == 0


def test_plan_for_another_model_is_refused(model_and_plan, tmp_path):
    path, plan = model_and_plan
    d = json.loads(plan.read_text())
    d["kernels"][0]["name"] = "other"
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps(d))
    assert _exit(["-q", "memcheck", str(path), "--plan", str(bad), "--out", str(tmp_path / "x")]) == 2  # bad input, not a finding


def test_capacity_error_names_peak_and_options(tmp_path):
    from toolkit.config.schema import Config
    from toolkit.engine import Session
    from toolkit.memory.capacity import CapacityError

    model = make_model([N("Relu", ["x"], ["r"], "relu"), N("Mul", ["r", "x"], ["y"], "mul")], [("x", [16, 64])], ["y"])
    with pytest.raises(CapacityError) as exc:
        Session(model, Config(device_memory_bytes=4096, memory_reuse="off", **FP32))
    msg = str(exc.value)
    assert "peak at step" in msg and "'x'" in msg and "aggressive" in msg and "--input-shape" in msg
    Session(model, Config(device_memory_bytes=1 << 20, **FP32))  # fits
