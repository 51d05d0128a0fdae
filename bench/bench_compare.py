"""`npuscope diagnose` against Polygraphy's layer-wise FP32-vs-FP16 workflow on PP-OCRv4 rec (1x3x48x320).

Both run side by side from this one process, each as a child process timed by wall clock, with its peak RSS
read from the child's own rusage (os.wait4), on the same rendered-text input:

  npuscope:  npuscope diagnose ppocr_rec --inputs rec.npz --out <tmp>     (report included)
  peer:      1. polygraphy run rec.onnx --onnxrt --onnx-outputs mark all --save-outputs ref.json
             2. the model converted by onnxconverter-common's convert_float_to_float16 (keep_io_types)
             3. polygraphy run rec_fp16.onnx --onnxrt --onnx-outputs mark all --load-outputs ref.json

Target (issue 3): diagnose at least 10x faster than the peer workflow. npuscope is timed twice per round:
with an empty compile cache (cold: every pass runs, every kernel session is built from scratch) and with the
cache the cold run filled (warm: what a user re-diagnosing the same model gets). Needs the `bench` extra.
Usage: python bench/bench_compare.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_toolkit

LOADER = """
import numpy as np
def load_data():
    yield dict(np.load({path!r}))
"""

CONVERT = """
import sys, warnings, onnx
warnings.simplefilter("ignore")
from onnxconverter_common import float16
m = onnx.load(sys.argv[1])
onnx.save(float16.convert_float_to_float16(m, keep_io_types=True), sys.argv[2])
"""


def timed(cmd: list[str], cwd: Path) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes, exit code) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr.read().decode(errors="replace")[-2000:])
    return wall, usage.ru_maxrss * 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import numpy as np
    from toolkit import zoo
    from toolkit.inputs import realistic_inputs

    compile_toolkit()  # .pyc files, as after `pip install .` (bench/bytecode.py)
    model = zoo.fetch("ppocr_rec")
    bindir = Path(sys.executable).parent
    work = Path(tempfile.mkdtemp(prefix="bench_compare_"))
    np.savez(work / "rec.npz", **realistic_inputs("ppocr_rec"))
    (work / "loader.py").write_text(LOADER.format(path=str(work / "rec.npz")))
    poly = [str(bindir / "polygraphy"), "run"]
    ours_t, ours_rss, peer_t, peer_rss, warm_t = [], [], [], [], []
    for i in range(args.repeat):
        cache = work / f"cache_{i}"  # empty: cold; the same folder again: warm
        for kind, times in (("cold", ours_t), ("warm", warm_t)):
            out = work / f"npuscope_{i}_{kind}"
            os.environ["NPUSCOPE_COMPILE_CACHE"] = str(cache)
            w, rss, rc = timed([str(bindir / "npuscope"), "--quiet", "diagnose", str(model), "--inputs",
                                str(work / "rec.npz"), "--out", str(out)], work)
            assert rc in (0, 1) and (out / "index.html").exists(), "npuscope diagnose failed"
            times.append(w); ours_rss.append(rss)
        steps = [
            poly + [str(model), "--onnxrt", "--onnx-outputs", "mark", "all", "--data-loader-script",
                    str(work / "loader.py"), "--save-outputs", str(work / "ref.json")],
            [sys.executable, "-c", CONVERT, str(model), str(work / "rec16.onnx")],
            poly + [str(work / "rec16.onnx"), "--onnxrt", "--onnx-outputs", "mark", "all", "--data-loader-script",
                    str(work / "loader.py"), "--load-outputs", str(work / "ref.json")],
        ]
        tot, peak, codes = 0.0, 0, []
        for cmd in steps:
            w, rss, rc = timed(cmd, work)
            tot += w; peak = max(peak, rss); codes.append(rc)
        peer_t.append(tot); peer_rss.append(peak)
        print(f"run {i}: npuscope cold {ours_t[-1]:.2f} s, warm {warm_t[-1]:.2f} s, peer {tot:.2f} s "
              f"(exit codes {codes})")
    a, aw, b = statistics.median(ours_t), statistics.median(warm_t), statistics.median(peer_t)
    print(f"npuscope diagnose (report included): cold cache {a:.2f} s, warm cache {aw:.2f} s, "
          f"peak RSS {max(ours_rss) / 2**20:.0f} MiB")
    print(f"Polygraphy + onnxconverter-common workflow: {b:.2f} s, peak RSS {max(peer_rss) / 2**20:.0f} MiB")
    print(f"speed-up: cold {b / a:.2f}x, warm {b / aw:.2f}x (target >= 10x; median of {args.repeat})")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
