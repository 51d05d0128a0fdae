"""`tune` against onnxconverter-common's auto_convert_mixed_precision, side by side, at the same target.

Models: the shared FP16 cases (/work/shared/cases/fp16/c01..c10, each under the precision/fusion condition its
expected.json states) and the three PP-OCRv4 models (toolkit.zoo, rendered-text inputs). Target on every final
output: CosineSimilarity >= 0.9999 and MaxAbsoluteError <= 1e-2 (the peer gets the same test as its
``validate_fn``). Both start from "everything in FP16" (tune: force_fp16; the peer converts every node).

For each model it prints wall time (the search call only, model already loaded), the nodes kept in FP32, the
final worst cosine / max abs error over the outputs (each tool's own final model against FP32 onnxruntime), or
the peer's error message where it fails. The peer runs in a child process with a time limit (it rebuilds an
onnxruntime session per try); tune runs in this process.

Usage: python bench/bench_tune.py [--timeout 900] [--only c01,ppocr_rec]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

CASES = Path("/work/shared/cases/fp16")
COS, MAE = 0.9999, 1e-2
CONDITIONS = {"c01": dict(fusion_level=0), "c02": dict(fusion_level=0), "c03": dict(op_select_implmode="high_performance"),
              "c05": dict(fusion_level=0), "c07": dict(precision_mode="force_fp32"), "c09": dict(fusion_level=0),
              "c10": dict(memory_alignment=1)}

PEER = r"""
import json, sys, time, io, contextlib, warnings
import numpy as np, onnx, onnxruntime as ort
warnings.simplefilter("ignore")
from onnxconverter_common import auto_mixed_precision as amp
model_path, feed_path, out_path, cos_min, mae_max = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
feed = dict(np.load(feed_path))
model = onnx.load(model_path)
calls = []
orig = amp.float16.convert_float_to_float16
def spy(*a, **k):
    calls.append(list(k.get("node_block_list") or []))
    return orig(*a, **k)
amp.float16.convert_float_to_float16 = spy
def worst(a, b):
    cos, mae = 1.0, 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            return -1.0, float("inf")
        n = np.linalg.norm(x) * np.linalg.norm(y)
        cos = min(cos, float(x @ y / n) if n else float(np.array_equal(x, y)))
        mae = max(mae, float(np.abs(x - y).max()))
    return cos, mae
def validate(res0, res1):
    c, m = worst(res0, res1)
    return c >= cos_min and m <= mae_max
res = {}
t = time.perf_counter()
try:
    with contextlib.redirect_stdout(io.StringIO()):
        fp16 = amp.auto_convert_mixed_precision(model, feed, validate_fn=validate, keep_io_types=True)
    res["seconds"] = time.perf_counter() - t
    res["kept"] = len(calls[-1]) if calls else 0
    res["tries"] = len(calls)
    s0 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    s1 = ort.InferenceSession(fp16.SerializeToString(), providers=["CPUExecutionProvider"])
    res["cos"], res["mae"] = worst(s0.run(None, feed), s1.run(None, feed))
except Exception as exc:
    res["seconds"] = time.perf_counter() - t
    res["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
json.dump(res, open(out_path, "w"))
"""


def models(only: set[str] | None):
    import onnx

    from toolkit import zoo
    from toolkit.inputs import input_specs, load_npz, realistic_inputs

    for d in sorted(CASES.glob("c*")):
        key = d.name[:3]
        if only and key not in only:
            continue
        m = onnx.load(d / "model.onnx")
        yield key, d / "model.onnx", m, load_npz(d / "inputs.npz", input_specs(m)), CONDITIONS.get(key, {})
    for name in ("ppocr_det", "ppocr_rec", "ppocr_cls"):
        if only and name not in only:
            continue
        p = zoo.fetch(name)
        yield name, p, onnx.load(p), realistic_inputs(name), {}


def load_libraries() -> None:
    """Import, before any timing, the libraries tune loads lazily (the onnxscript constant folder pulls in
    onnx_ir and sympy, ~0.4 s): the peer's timing likewise starts after its imports."""
    import onnxscript.optimizer  # noqa: F401

    import toolkit.compiler.passes  # noqa: F401
    import toolkit.precision.tune  # noqa: F401


def run_tune(model, feed, cond: dict) -> dict:
    from toolkit.config import Config
    from toolkit.precision.tune import tune

    cfg = Config(**{"precision_mode": "force_fp16", **cond})
    t = time.perf_counter()
    res = tune(model, [("in", feed)], cfg, f"CosineSimilarity>={COS},MaxAbsoluteError<={MAE}")
    sec = time.perf_counter() - t
    after = res.after
    return {"seconds": sec, "kept": len(res.chosen), "met": res.met, "trials": res.trials,
            "cos": float(after["CosineSimilarity"].min()), "mae": float(after["MaxAbsoluteError"].max())}


def run_peer(path: Path, feed: dict, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        fp, op = Path(tmp) / "feed.npz", Path(tmp) / "out.json"
        np.savez(fp, **feed)
        t = time.perf_counter()
        try:
            subprocess.run([sys.executable, "-c", PEER, str(path), str(fp), str(op), str(COS), str(MAE)],
                           timeout=timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return {"seconds": time.perf_counter() - t, "error": f"timed out after {timeout:.0f} s"}
        if not op.is_file():
            return {"seconds": time.perf_counter() - t, "error": "the peer process died without a result"}
        return json.loads(op.read_text())


def fmt(r: dict) -> str:
    if "error" in r:
        return f"{r['seconds']:8.2f} s  FAILED: {r['error']}"
    return f"{r['seconds']:8.2f} s  kept {r['kept']:3d}  cos {r['cos']:.7f}  maxabs {r['mae']:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=900.0, help="peer time limit per model, seconds")
    ap.add_argument("--only", help="comma-separated model keys (c01..c10, ppocr_det, ppocr_rec, ppocr_cls)")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    from toolkit.runtime.ort_env import enable_global_thread_pool

    enable_global_thread_pool()  # as the npuscope CLI does (per-session pools make kernel builds ~8x slower)
    load_libraries()
    only = set(a.only.split(",")) if a.only else None
    print(f"target: CosineSimilarity>={COS}, MaxAbsoluteError<={MAE} on every output; start: all FP16")
    print(f"{'model':10} | {'npuscope tune':55} | {'onnxconverter-common auto_convert_mixed_precision':60} | speed-up")
    rows = []
    for key, path, model, feed, cond in models(only):
        with np.errstate(all="ignore"):
            t = run_tune(model, feed, cond)
        p = run_peer(path, feed, a.timeout)
        ratio = p["seconds"] / t["seconds"] if "error" not in p else float("nan")
        note = "" if t["met"] else "  (tune: target NOT met)"
        print(f"{key:10} | {fmt(t):55} | {fmt(p):60} | {ratio:6.1f}x{note}", flush=True)
        rows.append({"model": key, "tune": t, "peer": p, "speedup": ratio})
    both = [r for r in rows if "error" not in r["peer"]]
    if both:
        print(f"geometric-mean speed-up where both work: "
              f"{np.exp(np.mean([np.log(r['speedup']) for r in both])):.1f}x over {len(both)} models; "
              f"tune kept fewer-or-equal FP32 nodes on {sum(r['tune']['kept'] <= r['peer']['kept'] for r in both)}"
              f"/{len(both)}")


if __name__ == "__main__":
    main()
