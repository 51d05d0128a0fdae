"""What the CLI tests share: the command line in a fresh process (it switches onnxruntime to a global thread
pool, so never in the test process), its one error line, and two tiny models (not a test module)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.graphs import N, affine_and

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def npuscope(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """``python -m toolkit ARGS`` (stdout/stderr captured as text, no terminal)."""
    full = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=full, timeout=TIMEOUT_S)


def error_line(proc) -> str:
    """The single ``npuscope: error:`` line of a failed run (no traceback, nothing else on stderr)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error: "), proc.stderr
    return lines[0]


def m1(folder: Path) -> Path:
    """y = 3x + 1, z = exp(x), x float32[4, 8] (tests.graphs.affine_and) saved as folder/m1.onnx, with
    folder/x.npz (seeded x in [0, 1))."""
    onnx.save(affine_and(), folder / "m1.onnx")
    np.savez(folder / "x.npz", x=np.random.default_rng(0).random((4, 8), dtype=np.float32))
    return folder / "m1.onnx"


#: the scale of :func:`overflow`: x in [1, 2) times it is above FP16's largest finite value (65504)
BIG = 1e5


def overflow(folder: Path) -> Path:
    """y = x * 1e5, x float32[2, 4] in [1, 2) (folder/big.npz): in FP16 every y overflows to inf, a FAIL verdict
    in force_fp16; exact in force_fp32."""
    graph = helper.make_graph([N("Mul", ["x", "s"], ["y"], "mul")], "big",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(np.array(BIG, np.float32), "s")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), folder / "big.onnx")
    np.savez(folder / "big.npz", x=(1 + np.random.default_rng(1).random((2, 4))).astype(np.float32))
    return folder / "big.onnx"


LOADER = '''import numpy as np


def make():
    """Two seeded input sets."""
    rng = np.random.default_rng(0)
    for _ in range(2):
        yield {"x": rng.random((4, 8), dtype=np.float32)}


def one():
    return [{"x": np.full((4, 8), 0.5, np.float32)}]


def broken():
    raise ValueError("no data today")
'''


def loader(folder: Path) -> Path:
    """folder/loader.py with make() (2 sets), one() (1 set of 0.5s) and broken() (raises) for m1's x."""
    (folder / "loader.py").write_text(LOADER)
    return folder / "loader.py"


def loader_sets() -> list[np.ndarray]:
    """The x arrays make() yields, computed here the same way."""
    rng = np.random.default_rng(0)
    return [rng.random((4, 8), dtype=np.float32) for _ in range(2)]
