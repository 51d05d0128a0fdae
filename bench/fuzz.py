"""Fuzz npuscope at scale (issue 20): N mutants (default 5000) of the sample models and the shared fault cases
(tests.fuzz.mutate, fixed --seed) through ``compile`` and ``diagnose``, in --workers child processes
(tests.fuzz.drive: one interpreter per slice of mutants, the CLI in-process, a SIGALRM per run after
--timeout s; a child that does not end within its slice's budget is killed and counted as a hang), then SIGTERM
checks: --sigterm-checks mutants whose diagnose ran (not refused at once) and a model whose Loop never ends, each
run as the real CLI in its own process and sent SIGTERM 0.3 s after its first progress line: each must exit 143
(or end by itself first) within --sigterm-bound s (the issue's bar is 2 s).

Prints counts by (command, outcome) and by mutation kind, the SIGTERM results and the wall time. The peer
measured in the same run: the seed models unmutated through the same driver (time per run), so the mutants'
mean time per run is printed as a ratio to it. Run from the repository root: ``python bench/fuzz.py -n 5000``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.cli.helpers import loop_forever_model  # noqa: E402
from tests.fuzz.mutate import mutants  # noqa: E402
from tests.fuzz.seeds import seed_models  # noqa: E402


def _env() -> dict:
    env = dict(os.environ, PYTHONWARNINGS="ignore", NPUSCOPE_COMPILE_CACHE_MODE="disable")
    env.pop("NPUSCOPE_THREADS", None)
    return env


def _slice(seed: int, start: int, count: int, timeout: float, budget: float) -> list[dict]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.drive", str(seed), str(start), str(count), str(timeout),
                             "compile,diagnose"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=_env())
    try:
        out, _ = proc.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        rows = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        return rows + [{"label": f"slice-{start}", "kind": "?", "command": "?", "outcome": "hang", "seconds": budget}]
    rows = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    if proc.returncode != 0:
        rows.append({"label": f"slice-{start}", "kind": "?", "command": "?", "outcome": f"driver-exit-{proc.returncode}",
                     "seconds": 0})
    return rows


def _sigterm_check(data: bytes, label: str, bound: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="npuscope-sigterm-") as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(data)
        proc = subprocess.Popen([sys.executable, "-m", "toolkit", "-v", "diagnose", str(path), "--out",
                                 str(Path(tmp) / "o")], cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=_env())
        for line in proc.stderr:  # wait for its work to start (after the imports, which take seconds here)
            if "] loading" in line:
                break
        time.sleep(0.3)
        sent = time.perf_counter()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=max(bound, 60))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return {"label": label, "result": "ignored SIGTERM", "seconds": None}
        took = time.perf_counter() - sent
        ended = "143" if proc.returncode == 143 else f"ended by itself ({proc.returncode})"
        return {"label": label, "result": ended if took <= bound else f"slow ({took:.1f} s)", "seconds": round(took, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5000, help="mutants (default 5000)")
    ap.add_argument("--seed", type=int, default=5000)
    ap.add_argument("--start", type=int, default=0, help="first mutant of the stream (to continue a run in parts)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--slice", type=int, default=100, help="mutants per child process")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per command run")
    ap.add_argument("--sigterm-checks", type=int, default=20)
    ap.add_argument("--sigterm-bound", type=float, default=10.0, help="seconds from SIGTERM to the exit (issue: 2)")
    args = ap.parse_args()
    seeds = seed_models()
    peer = _slice(-1, 0, len(seeds), args.timeout, len(seeds) * 2 * args.timeout + 300)  # the unmutated seeds
    peer_s = [r["seconds"] for r in peer if r["outcome"] in ("ok", "refused")]
    t0 = time.perf_counter()
    budget = args.slice * 2 * args.timeout + 300
    end = args.start + args.n
    starts = list(range(args.start, end, args.slice))
    with ThreadPoolExecutor(args.workers) as pool:
        parts = pool.map(lambda s: _slice(args.seed, s, min(args.slice, end - s), args.timeout, budget), starts)
        rows = [r for part in parts for r in part]
    fuzz_s = time.perf_counter() - t0
    by_outcome = Counter((r["command"], r["outcome"]) for r in rows)
    print(f"mutants: {args.n} (seed {args.seed}, from {args.start}), runs: {len(rows)}, wall {fuzz_s:.0f} s, workers {args.workers}")
    for (cmd, outcome), n in sorted(by_outcome.items()):
        print(f"  {cmd:9} {outcome:9} {n}")
    print("by kind (runs: ok / refused / timeout / internal):")
    kinds = sorted({r["kind"] for r in rows})
    for k in kinds:
        c = Counter(r["outcome"] for r in rows if r["kind"] == k)
        print(f"  {k:24} {c['ok']:5} {c['refused']:5} {c['timeout']:5} {c['internal']:5}")
    for r in rows:
        if r["outcome"] not in ("ok", "refused", "timeout"):
            print(f"  !! {r['label']} {r['command']} {r['outcome']}: {r.get('line', '')[:300]}")
    # SIGTERM while working: mutants whose diagnose ran (not refused at once), and a model that never ends
    ran = sorted({r["label"] for r in rows if r["command"] == "diagnose" and r["outcome"] == "ok"})
    wanted = set(ran[::max(1, len(ran) // max(1, args.sigterm_checks))][:args.sigterm_checks])
    picks = [(m.label, m.data) for m in mutants(seeds, end, args.seed) if m.label in wanted]
    picks.append(("loop_forever", loop_forever_model().SerializeToString()))
    checks = [_sigterm_check(data, label, args.sigterm_bound) for label, data in picks]
    for c in checks:
        if c["label"] == "loop_forever" or c["result"] != "143":
            print(f"  SIGTERM {c['label']}: {c['result']} {c['seconds']} s")
    print(f"SIGTERM checks: {Counter(c['result'].split(' (')[0] for c in checks)}; "
          f"max {max((c['seconds'] or 0) for c in checks):.2f} s from SIGTERM to the exit")
    ok_runs = [r["seconds"] for r in rows if r["outcome"] in ("ok", "refused")]
    mean, peer_mean = sum(ok_runs) / max(1, len(ok_runs)), sum(peer_s) / max(1, len(peer_s))
    print(f"seconds per run: mutants {mean:.3f} (ok + refused), unmutated seeds {peer_mean:.3f} "
          f"({Counter(r['outcome'] for r in peer)}); ratio {mean / max(peer_mean, 1e-9):.2f}. The machine is shared "
          "and loaded: absolute times are not comparable across runs")


if __name__ == "__main__":
    main()
