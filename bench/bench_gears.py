"""Padding waste of the recommended gears (exact DP, toolkit.gears.dp) against power-of-two gears, side by side.

Length distributions (seeded, skewed as real traffic is: many short inputs, a long tail):

- ``lognormal``: round(exp(N(4.0, 0.7))), clipped to [1, 512], 20000 inputs (median ~55);
- ``chat``: 85% round(N(24, 8)) clipped to >= 1, 15% uniform in [128, 512], 20000 inputs.

For each, cost linear (padded tokens) and quadratic (attention scores): the power-of-two set (P plans), the DP
at the same P plans and the DP at K = 4 plans. Printed: gears, waste share (waste / padded work) and padded
work relative to power of two (lower is better).

Measured part (``--run``, default on): the ``transformer_seq_masked`` sample in simulated NPU mode
(allow_mix_precision) over 64 lengths drawn from the lognormal distribution divided by 3, clipped to [1, 128], once with the
power-of-two gears and once with the DP gears with as many plans; every plan compiled up front, then the host
wall time of running all 64 inputs (median of 15 interleaved passes, after a warm-up build) and the padded tokens. Host time on a shared machine is
noisy: trust ratios far from 1 only.

Usage: python bench/bench_gears.py [--no-run]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def distributions(n: int = 20000) -> dict[str, np.ndarray]:
    rs = np.random.RandomState(0)
    logn = np.clip(np.round(np.exp(rs.normal(4.0, 0.7, n))), 1, 512).astype(np.int64)
    short = np.clip(np.round(rs.normal(24, 8, int(n * 0.85))), 1, None)
    long_ = rs.randint(128, 513, n - short.size)
    chat = rs.permutation(np.concatenate([short, long_])).astype(np.int64)
    return {"lognormal": logn, "chat": chat}


def waste_table(name: str, lengths: np.ndarray) -> None:
    from toolkit.gears import dp

    print(f"\n{name}: {lengths.size} inputs, {np.unique(lengths).size} distinct lengths, "
          f"median {int(np.median(lengths))}, max {int(lengths.max())}")
    for cost in ("linear", "quadratic"):
        pow2 = dp.power_of_two_gears(lengths)
        t0 = time.perf_counter()
        same = dp.optimal_gears(lengths, len(pow2), cost)
        dp_ms = (time.perf_counter() - t0) * 1e3
        four = dp.optimal_gears(lengths, 4, cost)
        base = dp.gear_metrics(lengths, pow2, cost)
        print(f"  cost {cost} (DP with {len(pow2)} plans: {dp_ms:.0f} ms)")
        print(f"    {'strategy':<16}{'plans':>6}{'waste':>9}{'padded work vs pow2':>22}  gears")
        for label, gears in (("power_of_two", pow2), (f"optimal@{len(pow2)}", same), ("optimal@4", four)):
            m = dp.gear_metrics(lengths, gears, cost)
            print(f"    {label:<16}{m['Plans']:>6}{m['WasteShare']:>9.1%}{m['PaddedWork'] / base['PaddedWork']:>22.3f}  "
                  f"{m['Gears']}")
        opt = dp.gear_metrics(lengths, same, cost)
        print(f"    waste ratio optimal@{len(pow2)} / power_of_two = {opt['Waste'] / base['Waste']:.3f}")


PASSES = 15


def measured_run() -> None:
    from toolkit import samples
    from toolkit.config.schema import Config
    from toolkit.gears import dp
    from toolkit.gears.session import GearSession
    from toolkit.ort.ort_env import enable_global_thread_pool

    enable_global_thread_pool()
    rs = np.random.RandomState(1)
    lengths = np.clip(np.round(np.exp(rs.normal(4.0, 0.7, 64)) / 3), 1, 128).astype(np.int64)
    pow2 = dp.power_of_two_gears(lengths)
    best = dp.optimal_gears(lengths, len(pow2))
    model = samples.build_transformer_seq_masked()
    feeds = [samples.transformer_seq_masked_inputs(i, int(n)) for i, n in enumerate(lengths)]
    print(f"\nmeasured: transformer_seq_masked, {lengths.size} inputs, lengths {int(lengths.min())}..{int(lengths.max())}")
    warm = Config.from_dict({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "2,2;3,3"})
    GearSession(model, warm, eager=True).run(feeds[0] if lengths[0] <= 3 else
                                             samples.transformer_seq_masked_inputs(0, 2))  # warm-up, not timed
    sessions, builds = {}, {}
    for label, gears in (("power_of_two", pow2), ("optimal", best)):
        dims = ";".join(f"{g},{g}" for g in gears)
        cfg = Config.from_dict({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": dims})
        t0 = time.perf_counter()
        sessions[label] = GearSession(model, cfg, eager=True)
        builds[label] = time.perf_counter() - t0
    times = {label: [] for label in sessions}
    tokens = {}
    for _ in range(PASSES):  # interleaved passes, so machine load drifts hit both sides alike
        for label, gs in sessions.items():
            t0 = time.perf_counter()
            runs = [gs.run(f) for f in feeds]
            times[label].append((time.perf_counter() - t0) * 1e3)
            tokens[label] = sum(r.gear[0] for r in runs)
    results = {}
    for label, gs in sessions.items():
        med = float(np.median(times[label]))
        results[label] = (med, tokens[label], builds[label], gs.spec.gears)
        print(f"  {label:<13} gears {[g[0] for g in gs.spec.gears]}: compile+build {builds[label]:.2f} s, run all "
              f"{med:.1f} ms (median of {PASSES}), padded tokens {tokens[label]} (valid {int(lengths.sum())})")
    (t_p, k_p, _, _), (t_o, k_o, _, _) = results["power_of_two"], results["optimal"]
    print(f"  ratio optimal / power_of_two: host time {t_o / t_p:.3f}, padded tokens {k_o / k_p:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-run", action="store_true", help="skip the measured simulated-NPU part")
    args = ap.parse_args()
    for name, lengths in distributions().items():
        waste_table(name, lengths)
    if not args.no_run:
        measured_run()


if __name__ == "__main__":
    main()
