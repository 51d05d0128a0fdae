"""Engine speed against onnxruntime, measured side by side in one process.

Prints, for PP-OCRv4 det (1x3x640x640) and rec (1x3x48x320):
  - NPU-mode latency (force_fp16, fusion level 2; median of N runs) / onnxruntime FP32 latency of the whole
    model (ORT_ENABLE_ALL, same global thread pool; median of N runs, interleaved with ours), measured with its
    own arena and with the shared arena our kernels use: the faster of the two is the peer;
  - cold compile time of det: load + compile + kernel build in a fresh process (no session cache, an empty
    compile cache), with the import time of the toolkit shown separately.
Targets (issue 2): ratio <= 1.5, cold compile <= 3 s on a 2-core machine.

Usage: python bench/bench_engine.py [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from bytecode import compile_toolkit

COLD = r"""
import time, json, sys
t0 = time.perf_counter()
from toolkit.ort.ort_env import enable_global_thread_pool
enable_global_thread_pool()
from toolkit.config.schema import Config
from toolkit.ir.load import load_model
from toolkit.engine import compile_model
from toolkit.runtime.npu import NpuRuntime
t1 = time.perf_counter()
m = load_model(sys.argv[1])
t2 = time.perf_counter()
cr = compile_model(m, Config(precision_mode="force_fp16", fusion_level=2), input_shapes={"x": (1, 3, 640, 640)})
t3 = time.perf_counter()
rt = NpuRuntime(cr)
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "compile_s": t3 - t2, "build_s": t4 - t3,
                  "kernels": len(cr.plan.kernels)}))
"""


def cold_compile(path: str) -> dict:
    """In a fresh process with an empty compile cache (toolkit.cache), so nothing is reused."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=cache)
        out = subprocess.run([sys.executable, "-c", COLD, path], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    compile_toolkit()  # .pyc files, as after `pip install .` (bench/bytecode.py)
    from toolkit.ort.ort_env import enable_global_thread_pool, session_options
    enable_global_thread_pool()
    import onnxruntime as ort
    from toolkit import zoo
    from toolkit.config.schema import Config
    from toolkit.engine import Session
    from toolkit.inputs import realistic_inputs

    results = {}
    for name in ("ppocr_det", "ppocr_rec"):
        path = str(zoo.fetch(name))
        feeds = realistic_inputs(name)
        peers = {}
        for alloc in ("shared arena", "own arena"):  # the peer's faster allocator setting is the one compared
            so = session_options() if alloc == "shared arena" else ort.SessionOptions()  # (first: global pool)
            so.use_per_session_threads = False  # the same global thread pool as ours
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            peers[alloc] = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        sess = Session(path, Config(precision_mode="force_fp16", fusion_level=2),
                       input_shapes={k: v.shape for k, v in feeds.items()})
        sess.run(feeds)
        ours, theirs = [], {k: [] for k in peers}
        for p in peers.values():
            p.run(None, feeds)
        for _ in range(args.runs):  # interleaved: a load change hits both sides
            t = time.perf_counter(); sess.run(feeds); ours.append(time.perf_counter() - t)
            for k, p in peers.items():
                t = time.perf_counter(); p.run(None, feeds); theirs[k].append(time.perf_counter() - t)
        med = {k: statistics.median(v) * 1e3 for k, v in theirs.items()}
        best = min(med, key=med.get)
        a, b = statistics.median(ours) * 1e3, med[best]
        results[name] = (a, b)
        print(f"{name}: npuscope force_fp16 {a:.1f} ms, onnxruntime FP32 {b:.1f} ms ({best}; "
              + ", ".join(f"{k} {v:.1f} ms" for k, v in med.items())
              + f"), ratio {a / b:.2f} (target <= 1.5; median of {args.runs}; {len(sess.plan.kernels)} kernels)")
    cold = cold_compile(str(zoo.fetch("ppocr_det")))
    total = cold["load_s"] + cold["compile_s"] + cold["build_s"]
    print(f"ppocr_det cold compile: {total:.2f} s (load {cold['load_s']:.2f} + compile {cold['compile_s']:.2f} "
          f"+ kernel build {cold['build_s']:.2f}; {cold['kernels']} kernels; toolkit import {cold['import_s']:.2f} s "
          "not counted) (target <= 3 s)")


if __name__ == "__main__":
    main()
