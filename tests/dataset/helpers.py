"""Helpers of the dataset-run tests (not a test module): a tiny model, input folders and cosines computed here."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
import pandas as pd

from tests.graphs import N, make_model
from toolkit.config.schema import Config

FP16 = {"precision_mode": "force_fp16"}


# ------------------------------------------------------------------------------------------------- helpers
def tiny_model(path: Path) -> Path:
    """Conv(3→16) → Relu → Conv(16→8) → GlobalAveragePool → Flatten on a 1x3x64x64 input: 65,536-element
    intermediates (large enough for threaded BLAS dot products in the metric sums)."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.normal(0, 0.3, (16, 3, 3, 3)).astype(np.float32), "b1": rng.normal(0, 0.1, 16).astype(np.float32),
             "w2": rng.normal(0, 0.3, (8, 16, 3, 3)).astype(np.float32), "b2": rng.normal(0, 0.1, 8).astype(np.float32)}
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], "conv1", pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"], "relu1"),
             N("Conv", ["r1", "w2", "b2"], ["c2"], "conv2", pads=[1, 1, 1, 1]),
             N("GlobalAveragePool", ["c2"], ["g"], "gap"), N("Flatten", ["g"], ["y"], "flat")]
    model = make_model(nodes, [("x", [1, 3, 64, 64])], ["y"], inits)
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8]))
    onnx.save(model, path)
    return path


def write_inputs(folder: Path, n: int, seed: int = 0) -> list[np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    xs = []
    for i in range(n):
        x = np.random.default_rng(seed + i).normal(0, 1 + 0.5 * (i % 5), (1, 3, 64, 64)).astype(np.float32)
        np.savez(folder / f"in{i:03d}.npz", x=x)
        xs.append(x)
    return xs


def api_compare(model, inputs, out, **kw):
    from toolkit import api

    cfg = Config.from_dict(kw.pop("config", FP16))
    return api.diagnose_command(str(model), cfg, inputs=str(inputs), out=str(out), html=kw.pop("html", False), **kw)


def inputs_csv(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "inputs.csv").drop(columns=["RunMs"])


def finite_cosine(x, y) -> float:
    """Σxy / (‖x‖‖y‖) over the positions where both are finite (the compare tool's masking)."""
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    both = np.isfinite(x) & np.isfinite(y)
    x, y = x[both], y[both]
    return float(np.sum(x * y) / (np.sqrt(np.sum(x * x)) * np.sqrt(np.sum(y * y))))


# ------------------------------------------------------------------------ workers die with their parent
def _session_members(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live (not zombie) processes of session ``sid``, from /proc/<pid>/stat."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append((int(d), cmd[:120]))
    return out


def _wait_until_gone(sid: int, deadline_s: float = 60.0) -> list[tuple[int, str]]:
    end = time.monotonic() + deadline_s
    while (left := _session_members(sid)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


_ORPHAN = """
import os, sys, time
from toolkit.dataset import lifeline
lifeline._set_pdeathsig = lambda: False  # the portable watchdog alone
lifeline.exit_with_parent(int(sys.argv[1]), poll_s=0.05)
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(300)
"""
_PARENT = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]])
while not os.path.exists(sys.argv[2]) or not open(sys.argv[2]).read():
    time.sleep(0.01)
os._exit(0)  # dies without waiting for its child
"""


def _corrupt(path: Path, kind: str, other: Path) -> None:
    data = path.read_bytes()
    if kind == "truncated":
        path.write_bytes(data[:100])
    elif kind == "zero_bytes":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    elif kind == "wrong_keys":
        np.savez(path, a=np.zeros(3))
    elif kind == "single_array":
        with open(path, "wb") as fh:
            np.save(fh, np.zeros(3))
    elif kind == "directory":
        path.unlink()
        path.mkdir()
        (path / "inside.txt").write_text("x")
    elif kind == "other_inputs_result":
        path.write_bytes(other.read_bytes())
    elif kind == "values_wrong_shape":
        with np.load(path) as z:
            meta, rows, values = z["meta"], z["rows"], z["values"]
        np.savez(path, meta=meta, rows=rows, values=values[:, :3])
    elif kind == "meta_not_json":
        with np.load(path) as z:
            rows, values = z["rows"], z["values"]
        np.savez(path, meta=np.array("{not json"), rows=rows, values=values)
    else:
        raise AssertionError(kind)


# ------------------------------------------------------------------ mistakes found before the output folder
_GEARS = '{"input_shape": "x:1,3,-1,-1", "dynamic_dims": "64,64;128,128"}'
