"""`tune` against onnxconverter-common's auto_convert_mixed_precision, side by side, at the same target.

Models: the shared FP16 cases (/work/shared/cases/fp16/c01..c10, each under the precision/fusion condition its
expected.json states) and the three PP-OCRv4 models (toolkit.zoo, rendered-text inputs). Target on every final
output: CosineSimilarity >= 0.9999 and MaxAbsoluteError <= 1e-2 (the peer gets the same test as its
``validate_fn``). Both start from "everything in FP16" (tune: force_fp16; the peer converts every node).

Each tool runs in a child process per repeat (libraries imported before the clock starts); the time is the search
call only, model already loaded, median of ``--repeat`` runs. tune and diagnose (the tune / diagnose ratio) run in
turn (tune, diagnose, tune, ...), so that a shared machine's load weighs on both alike; the CPU seconds of the
timed call (all threads) are printed next to the wall-time ratio. Per model it prints the nodes kept in FP32, the
final worst cosine / max abs error over the outputs (each tool's own final model against FP32 onnxruntime), or the
peer's error message where it fails.

Like-for-like check of the peer's answer: the peer validates its FP16 model on CPU onnxruntime, which computes
many FP16 ops in FP32 internally, so its "keep nothing" can hide faults our simulated device shows. The peer's
final FP32 set (its last ``node_block_list``, plus the nodes its default ``op_block_list`` never converts) is
therefore compiled for the simulated NPU under the same condition with ``keep_dtype`` = that set, run on the same
feed, and checked against the same target (toolkit.tuning.tune.check_outputs vs the FP32 reference). Where
the peer's set fails that check, comparing FP32-node counts is void for the model.

Usage: python bench/bench_tune.py [--timeout 900] [--repeat 3] [--only c01,ppocr_rec] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

CASES = Path("/work/shared/cases/fp16")
COS, MAE = 0.9999, 1e-2
TARGET = f"CosineSimilarity>={COS},MaxAbsoluteError<={MAE}"
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
    res["blocked"] = calls[-1] if calls else []
    res["op_blocked"] = [n.name for n in model.graph.node if n.op_type in amp.float16.DEFAULT_OP_BLOCK_LIST]
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


#: modules tune imports lazily on its first call (the onnxscript constant folder pulls in onnx_ir and sympy, ~0.4 s;
#: the rest ~20 ms of byte-compiling when PYTHONDONTWRITEBYTECODE is set)
LAZY_MODULES = ("onnxscript.optimizer", "toolkit.compiler.passes", "toolkit.compiler.passes.bind_shapes",
                "toolkit.compiler.rules.activation", "toolkit.compiler.rules.attention", "toolkit.compiler.rules.norm",
                "toolkit.cache.compile_cache", "toolkit.cache.kernel_entries", "toolkit.compare.layerwise",
                "toolkit.reexec.isolate", "toolkit.compare.tasks", "toolkit.tuning.tune")


def load_libraries() -> None:
    """Import, before any timing, the libraries tune loads lazily: the peer's timing likewise starts after its
    imports (onnxconverter_common, onnx, onnxruntime)."""
    import importlib

    for name in LAZY_MODULES:
        importlib.import_module(name)


def start_config(cond: dict):
    from toolkit.config.schema import Config

    return Config(**{"precision_mode": "force_fp16", **cond})


def worst(rows) -> tuple[float, float]:
    """(lowest CosineSimilarity, highest MaxAbsoluteError) over compare rows; NaN when any row has NaN."""
    return (float(np.min([r["CosineSimilarity"] for r in rows])) if rows else float("nan"),
            float(np.max([r["MaxAbsoluteError"] for r in rows])) if rows else float("nan"))


def tune_child(key: str, out: str) -> None:
    """Child-process body: tune one model once and write the result as JSON to ``out``."""
    from toolkit.ort.ort_env import enable_global_thread_pool

    warnings.simplefilter("ignore")
    enable_global_thread_pool()  # as the npuscope CLI does (per-session pools make kernel builds ~8x slower)
    load_libraries()
    from toolkit.tuning.tune import tune

    _, _, model, feed, cond = next(models({key}))
    t, c = time.perf_counter(), time.process_time()
    res = tune(model, [("in", feed)], start_config(cond), TARGET)
    sec, cpu = time.perf_counter() - t, time.process_time() - c
    cos, mae = worst(res.after.to_dict("records"))
    Path(out).write_text(json.dumps({"seconds": sec, "cpu_seconds": cpu, "kept": len(res.chosen), "chosen": list(res.chosen),
                                     "met": bool(res.met), "trials": res.trials, "cos": cos, "mae": mae,
                                     "timings_ms": res.timings_ms}))


def diagnose_child(key: str, out: str) -> None:
    """Child-process body: one diagnose of the model (same start config and feed as tune), timed twice over:
    the diagnosis alone (toolkit.diagnose.diagnose) and with its advice verified
    (toolkit.tuning.advice.verify_advice, diagnose's default), written as JSON to ``out``."""
    import dataclasses as dc
    import tempfile as tf

    from toolkit.ort.ort_env import enable_global_thread_pool

    warnings.simplefilter("ignore")
    enable_global_thread_pool()
    load_libraries()
    from toolkit.diagnose import diagnose, prepare
    from toolkit.tuning.advice import verify_advice

    _, path, model, feed, cond = next(models({key}))
    with tf.TemporaryDirectory() as tmp:
        fp = Path(tmp) / "feed.npz"
        np.savez(fp, **feed)
        prep = prepare(str(path), str(fp))
        prep = dc.replace(prep, model=model, feeds=feed)
        t, c = time.perf_counter(), time.process_time()
        diag, extras = diagnose(prep, start_config(cond))
        sec = time.perf_counter() - t
        fix = verify_advice(prep, start_config(cond), diag.findings, extras, diag.summary["stage"],
                            diag.summary["verdict"], target=TARGET)
        total, cpu = time.perf_counter() - t, time.process_time() - c
    Path(out).write_text(json.dumps({"seconds": sec, "with_fix_seconds": total, "cpu_seconds": cpu,
                                     "verdict": diag.summary["verdict"],
                                     "fix": list(fix.keep_dtype), "fix_met": fix.met, "needed": fix.needed}))


def run_diagnose(key: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "diagnose.json"
        return _child([str(Path(__file__).resolve()), "--diagnose-child", key, str(out)], out, timeout)


def _child(args: list[str], out: Path, timeout: float) -> dict:
    t = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, *args], timeout=timeout, capture_output=True, text=True,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"seconds": time.perf_counter() - t, "error": f"timed out after {timeout:.0f} s"}
    if not out.is_file():
        tail = " ".join(proc.stderr.split()[-30:])
        return {"seconds": time.perf_counter() - t, "error": f"the process died without a result: {tail[-200:]}"}
    res = json.loads(out.read_text())
    out.unlink()
    return res


def run_tune(key: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tune.json"
        return _child([str(Path(__file__).resolve()), "--tune-child", key, str(out)], out, timeout)


def run_peer(path: Path, feed: dict, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        fp, op = Path(tmp) / "feed.npz", Path(tmp) / "out.json"
        np.savez(fp, **feed)
        return _child(["-c", PEER, str(path), str(fp), str(op), str(COS), str(MAE)], op, timeout)


def interleaved(tune_fn, diagnose_fn, repeat: int) -> tuple[dict, dict]:
    """Median-time results of ``repeat`` calls each of ``tune_fn()`` and ``diagnose_fn()``, called in turn
    (tune, diagnose, tune, ...) so that a machine shared with other jobs loads both alike; a failing run wins."""
    runs: tuple[list, list] = ([], [])
    for _ in range(repeat):
        for got, fn in zip(runs, (tune_fn, diagnose_fn)):
            r = fn()
            if "error" in r:
                got[:] = [r]
            elif not got or "error" not in got[0]:
                got.append(r)
    out = []
    for got in runs:
        if "error" in got[0]:
            out.append(got[0])
            continue
        got.sort(key=lambda r: r["seconds"])
        med = dict(got[len(got) // 2])
        med["times"] = [r["seconds"] for r in got]
        out.append(med)
    return out[0], out[1]


def median_run(fn, repeat: int) -> dict:
    """Median-time result of ``repeat`` calls of ``fn()`` (its "times" lists them all); a failing run wins."""
    runs = []
    for _ in range(repeat):
        r = fn()
        if "error" in r:
            return r
        runs.append(r)
    runs.sort(key=lambda r: r["seconds"])
    med = dict(runs[len(runs) // 2])
    med["times"] = [r["seconds"] for r in runs]
    return med


def check_on_device(model, feed: dict, cond: dict, keep: list[str]) -> dict:
    """The peer's FP32 set on OUR simulated NPU: compile ``cond`` (start config) with keep_dtype = ``keep``
    (toolkit.tuning.tune.keep_config, as tune writes its tuned config), run ``feed`` and check the target
    against the FP32 onnxruntime reference with toolkit.tuning.tune.check_outputs."""
    from toolkit.engine import Session, shapes_of
    from toolkit.tuning.tune import check_outputs, keep_config, parse_target
    from toolkit.ort.reference import ReferenceRunner

    cfg = keep_config(start_config(cond), keep)
    with np.errstate(all="ignore"):
        npu = Session(model, cfg, input_shapes=shapes_of(feed)).run(feed).outputs
        golden = ReferenceRunner(model, expose=False).run(feed)
        met, rows, _ = check_outputs(npu, golden, parse_target(TARGET))
    cos, mae = worst(rows)
    return {"met": met, "cos": cos, "mae": mae, "failed": sorted({r["Failed"] for r in rows if r["Failed"]})}


def fmt(r: dict) -> str:
    if "error" in r:
        return f"{r['seconds']:8.2f} s  FAILED: {r['error']}"
    extra = f" (+{len(r['op_blocked'])} op type)" if r.get("op_blocked") else ""
    return f"{r['seconds']:8.3f} s  kept {r['kept']:3d}{extra}  cos {r['cos']:.7f}  maxabs {r['mae']:.3g}"


def fmt_device(d: dict | None) -> str:
    if d is None:
        return "-"
    if "error" in d:
        return f"not checked: {d['error']}"
    why = f" ({'; '.join(d['failed'])})" if d["failed"] else ""
    return f"{'meets' if d['met'] else 'FAILS'}: cos {d['cos']:.7f} maxabs {d['mae']:.3g}{why}"


def geomean(xs) -> float:
    return float(np.exp(np.mean(np.log(xs))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=900.0, help="time limit per child run (each tool), seconds")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and model; the median time is printed")
    ap.add_argument("--only", help="comma-separated model keys (c01..c10, ppocr_det, ppocr_rec, ppocr_cls)")
    ap.add_argument("--json", help="also write every result (chosen sets, the peer's set, device check) here")
    ap.add_argument("--tune-child", nargs=2, metavar=("KEY", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--diagnose-child", nargs=2, metavar=("KEY", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--no-peer", action="store_true", help="only tune against diagnose (skip the peer)")
    a = ap.parse_args()
    if a.tune_child:
        return tune_child(*a.tune_child)
    if a.diagnose_child:
        return diagnose_child(*a.diagnose_child)
    warnings.simplefilter("ignore")
    only = set(a.only.split(",")) if a.only else None
    print(f"target: CosineSimilarity>={COS}, MaxAbsoluteError<={MAE} on every output; start: all FP16; "
          f"median of {a.repeat} run(s) per tool")
    print(f"{'model':10} | {'npuscope tune':52} | {'onnxconverter-common auto_convert_mixed_precision':58} | "
          f"speed-up | peer's FP32 set on the simulated NPU")
    rows = []
    for key, path, model, feed, cond in models(only):
        t, d = interleaved(lambda k=key: run_tune(k, a.timeout), lambda k=key: run_diagnose(k, a.timeout), a.repeat)
        if "error" not in t and "error" not in d:
            same = sorted(d["fix"]) == sorted(t["chosen"]) if d["needed"] else not t["chosen"]
            print(f"{key:10} | tune / diagnose: {t['seconds'] / d['seconds']:.2f} (target <= 3); tune / diagnose "
                  f"with its verified fix: {t['seconds'] / d['with_fix_seconds']:.2f} (CPU seconds: "
                  f"{t['cpu_seconds'] / d['cpu_seconds']:.2f}); tune {t['seconds']:.2f} s, {t['kept']} kept, "
                  f"{t['trials']} trials; diagnose {d['with_fix_seconds']:.2f} s; diagnose's fix "
                  f"{'equals' if same else 'DIFFERS from'} tune's set; load average {os.getloadavg()[0]:.1f}",
                  flush=True)
        else:
            print(f"{key:10} | tune / diagnose: not measured ({t.get('error') or d.get('error')})", flush=True)
        rows.append({"model": key, "tune": t, "diagnose": d})
        if a.no_peer:
            continue
        rows.pop()
        p = median_run(lambda p=path, f=feed: run_peer(p, f, a.timeout), a.repeat)
        dev = None
        if "error" not in p:
            try:
                dev = check_on_device(model, feed, cond, list(p["blocked"]) + list(p["op_blocked"]))
            except Exception as exc:  # noqa: BLE001 - a bench row, not a crash
                dev = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"}
        ok = "error" not in t and "error" not in p
        ratio = p["seconds"] / t["seconds"] if ok else float("nan")
        note = "" if "error" in t or t["met"] else "  (tune: target NOT met)"
        print(f"{key:10} | {fmt(t):52} | {fmt(p):58} | {ratio:7.1f}x | {fmt_device(dev)}{note}", flush=True)
        rows.append({"model": key, "tune": t, "diagnose": d, "peer": p, "peer_on_device": dev, "speedup": ratio})
    both = [r for r in rows if "peer" in r and "error" not in r["peer"] and "error" not in r["tune"]]
    if both:
        print(f"geometric-mean speed-up (peer time / tune time) where both work: "
              f"{geomean([r['speedup'] for r in both]):.2f}x over {len(both)} models "
              f"({', '.join(r['model'] for r in both)})")
        valid = [r for r in both if r["peer_on_device"] and r["peer_on_device"].get("met")]
        void = [r["model"] for r in both if r not in valid]
        fewer = sum(r["tune"]["kept"] <= r["peer"]["kept"] + len(r["peer"]["op_blocked"]) for r in valid)
        print(f"FP32 nodes, counted only where the peer's set meets the target on the simulated NPU: tune kept "
              f"fewer-or-equal on {fewer}/{len(valid)} ({', '.join(r['model'] for r in valid) or 'none'})")
        if void:
            print(f"VOID (the peer's set does not meet the target on the simulated NPU, so its node count is no "
                  f"answer to compare with): {', '.join(void)}")
    failed = [r["model"] for r in rows if "error" in r.get("peer", {})]
    if failed:
        print(f"peer failed on: {', '.join(failed)}; tune met the target on "
              f"{sum(1 for r in rows if r['tune'].get('met'))}/{len(rows)} models")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
