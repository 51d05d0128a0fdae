"""Arena size of each memory-reuse policy against the lower bound, per model.

Models: the sample models (toolkit.samples), the three PP-OCRv4 models (toolkit.zoo, at their default input
shapes) and onnx's "light" model zoo (onnx/backend/test/data/light, as tests/conformance/cases.py locates it). Each
model is compiled once (default config: allow_mix_precision, fusion level 2); the plan's tensors are then
re-placed under every policy (toolkit.compiler.passes.plan_memory.place), and the plan of each policy is checked
by the static checker (0 conflicts expected).

Lower bound ("LB"): the peak of bytes live at one step with every tensor in its own buffer and the
aggressive policy's views and in-place outputs sharing their input's buffer (the smallest the aggressive plan
could be); "LB no-alias": the classic per-tensor peak. Target (issue 6): aggressive <= 1.05 x LB everywhere.

Usage: python bench/bench_memory.py [--no-zoo] [--no-light]
"""

from __future__ import annotations

import argparse
import copy
import glob
import os
import sys
import time

import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def models(zoo: bool, light: bool):
    from toolkit import samples
    for name in samples.SAMPLES:
        spec = samples.sample(name)
        feeds = spec.make_inputs(0)
        yield name, spec.build(), {k: v.shape for k, v in feeds.items()}
    if zoo:
        from toolkit import zoo as z
        for name, info in z.MODELS.items():
            yield name, onnx.load(str(z.fetch(name))), {info.input_name: info.input_shape}
    if light:
        light_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
        for path in sorted(glob.glob(os.path.join(light_dir, "light_*.onnx"))):
            if path.endswith("_output_0.pb"):
                continue
            yield os.path.basename(path)[len("light_"):-len(".onnx")], onnx.load(path), None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-zoo", action="store_true")
    ap.add_argument("--no-light", action="store_true")
    args = ap.parse_args()
    from toolkit.compiler.passes.plan_memory import place
    from toolkit.engine import compile_model
    from toolkit.config.schema import Config
    from toolkit.memcheck.static_check import static_conflicts
    from toolkit.ort.ort_env import enable_global_thread_pool

    enable_global_thread_pool()
    mib = 2 ** 20
    print(f"{'model':20} {'tensors':>7} {'LB MiB':>9} {'LB no-alias':>11} {'off':>7} {'conserv.':>8} "
          f"{'aggr.':>7}  {'aggr. MiB':>9} conflicts  compile s")
    worst = 0.0
    for name, model, shapes in models(not args.no_zoo, not args.no_light):
        t0 = time.perf_counter()
        cr = compile_model(model, Config(), input_shapes=shapes)
        dt = time.perf_counter() - t0
        plan = cr.plan
        res, conflicts = {}, 0
        for policy in ("off", "conservative", "aggressive"):
            p = copy.deepcopy(plan)
            arena, lb, _ = place(p.tensors, p.kernels, p.graph_inputs, p.graph_outputs, policy, p.alignment)
            p.arena_bytes, p.lower_bound_bytes = arena, lb
            conflicts += len(static_conflicts(p))
            res[policy] = (arena, lb)
        lb = res["aggressive"][1]
        lb_plain = res["off"][1]
        ratios = {k: v[0] / lb if lb else 1.0 for k, v in res.items()}
        worst = max(worst, ratios["aggressive"])
        n = sum(1 for t in plan.tensors.values() if t.storage == "arena")
        print(f"{name:20} {n:7d} {lb / mib:9.3f} {lb_plain / mib:11.3f} {ratios['off']:7.3f} "
              f"{ratios['conservative']:8.3f} {ratios['aggressive']:7.3f}  {res['aggressive'][0] / mib:9.3f} "
              f"{conflicts:9d}  {dt:8.1f}", flush=True)
    print(f"worst aggressive / LB: {worst:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
