"""Dataset runs of PP-OCRv4 rec: peak memory against the number of inputs, and --jobs 1 against --jobs 2.

Inputs: rendered text lines (toolkit.inputs.realistic_inputs("ppocr_rec", text=...)) with different text per
input plus seeded Gaussian noise (sigma 0.02 on the [-1, 1] pixels), written once into a temporary folder; the
smaller sets are symlinks to its first files.

Each measurement is one ``npuscope compare ppocr_rec --inputs DIR --out NEW`` child process (the CLI exactly as
a user runs it: streaming, per-input results, aggregation, full diagnosis of the worst input). Peak RSS is the
child's ``ru_maxrss`` from ``os.wait4`` (the largest resident set of the child, or of any of its pool workers
it waited for), in MiB; wall time is the child's, in s.

Printed: for 10, 100 and 1,000 inputs (the peer: the 10-input run) wall time, s per input, peak RSS and its
ratio to the 10-input run (flat = within 10%); then the 100-input run with --jobs 1 against --jobs 2 (wall
time ratio). Counts below the largest run ``--repeats`` times (median): the peak RSS of one and the same run
varies by up to ~15% between repeats (onnxruntime and glibc allocation patterns with a thread pool), and on a
shared machine wall times are noisy too. The peak is reached in the final full diagnosis of the worst input;
the streaming phase stays below it.

Usage: python bench/bench_dataset.py [--counts 10,100,1000] [--jobs-inputs 100] [--repeats 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WORDS = ("invoice", "total", "npuscope", "mixed", "precision", "receipt", "FP16", "tax", "order", "2026")


def make_inputs(folder: Path, n: int) -> None:
    from toolkit.inputs import realistic_inputs

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        words = " ".join(WORDS[j] for j in rng.choice(len(WORDS), size=2, replace=False))
        feed = realistic_inputs("ppocr_rec", text=f"{words} {i:04d}")
        x = feed["x"] + rng.normal(0, 0.02, feed["x"].shape).astype(np.float32)
        np.savez(folder / f"{i:05d}.npz", x=np.clip(x, -1, 1).astype(np.float32))


def subset(full: Path, folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for p in sorted(full.glob("*.npz"))[:n]:
        (folder / p.name).symlink_to(p)
    return folder


def run(inputs: Path, out: Path, jobs: int) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, exit code) of one CLI compare child."""
    cmd = [sys.executable, "-m", "toolkit", "compare", "ppocr_rec", "--inputs", str(inputs), "--out", str(out),
           "--jobs", str(jobs)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="10,100,1000")
    ap.add_argument("--jobs-inputs", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3, help="runs per count below the largest (median reported)")
    ap.add_argument("--keep", help="write inputs and reports here instead of a temporary folder")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-dataset-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        full = root / "inputs"
        t0 = time.perf_counter()
        make_inputs(full, max(counts + [args.jobs_inputs]))
        print(f"generated {max(counts + [args.jobs_inputs])} PP-OCRv4 rec inputs in {time.perf_counter() - t0:.1f} s")
        rows = []
        for n in counts:
            folder = subset(full, root / f"set{n}", n)
            reps = [run(folder, root / f"out{n}" if r == 0 else root / f"out{n}-r{r}", 1)
                    for r in range(args.repeats if n < max(counts) else 1)]
            wall, rss = float(np.median([w for w, _, _ in reps])), float(np.median([m for _, m, _ in reps]))
            rows.append((n, wall, rss))
            print(f"  {n:5d} inputs (--jobs 1, median of {len(reps)}): {wall:7.1f} s, {wall / n:.3f} s/input, "
                  f"peak RSS {rss:7.1f} MiB (runs: {', '.join(f'{m:.0f}' for _, m, _ in reps)}), exit {reps[0][2]}",
                  flush=True)
        base = rows[0][2]
        print(f"\npeak RSS vs the {rows[0][0]}-input run (peer):")
        for n, _, rss in rows:
            print(f"  {n:5d} inputs: {rss:7.1f} MiB = {rss / base:.3f}x {'(flat, within 10%)' if abs(rss / base - 1) <= 0.10 else '(NOT flat)'}")
        n = args.jobs_inputs
        one = next((w for c, w, _ in rows if c == n), None)
        folder = root / f"set{n}" if (root / f"set{n}").exists() else subset(full, root / f"set{n}", n)
        if one is None:
            one, _, _ = run(folder, root / f"out{n}-j1", 1)
        two, rss2, _ = run(folder, root / f"out{n}-j2", 2)
        print(f"\n{n} inputs: --jobs 1 {one:.1f} s, --jobs 2 {two:.1f} s (peak RSS of the parent or one worker "
              f"{rss2:.1f} MiB); speed-up --jobs 2 / --jobs 1 = {one / two:.2f}x on {os.cpu_count()} CPU(s)")
        same = (root / f"out{n}" / "dataset.csv").read_bytes() == (root / f"out{n}-j2" / "dataset.csv").read_bytes() \
            if (root / f"out{n}").exists() else None
        if same is not None:
            print(f"dataset.csv identical between --jobs 1 and --jobs 2: {same}")


if __name__ == "__main__":
    main()
