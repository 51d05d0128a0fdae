"""Write a device profile (msprof op_summary + fusion_op CSVs) of MODEL as a *hidden* device would measure it.

Used by docs/profile.md's worked example ("Profiles that learn from a real device"): there is no NPU here, so the
"device" is our own cost model on a device JSON the calibration never sees, with multiplicative noise, plus what a
real profile has and our plan does not (device-inserted TransData format conversions, fused ops under their own
names, listed in a fusion_op CSV).

    python docs/examples/hidden_device_profile.py write ppocr_det hidden.json out_dir [--noise 0.05] [--seed 1]
        [--input-shape x:1,3,160,160]
    python docs/examples/hidden_device_profile.py effect ppocr_det hidden.json config.json [--input-shape ...]

``write`` writes out_dir/op_summary_0_1.csv (columns of msprof's op_summary) and out_dir/fusion_op_0_1.csv (Fusion
Op, Original Ops joined with ';'). ``effect`` prints the "device" effect of a config (e.g. the
calibrated_recommended_config.json of ``profile --device-profile``): one request's simulated latency on the
hidden device with the default config and with that one.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
from pathlib import Path

import numpy as np

from toolkit.commands.profile import profile_model
from toolkit.config.schema import Config
from toolkit.profile.device import load_device
from toolkit.profile.whatif import latency_us

CONFIG_FIELDS = {f.name for f in dataclasses.fields(Config)} - {"files"}

DEVICE_OPS = {"Conv": "Conv2D", "MatMul": "MatMulV2", "Gemm": "MatMulV2", "ConvTranspose": "Conv2DTranspose",
              "Div": "RealDiv", "Resize": "ResizeBilinearV2", "Concat": "ConcatD"}
DTYPES = {"float16": "DT_FLOAT16", "float32": "DT_FLOAT", "int64": "INT64", "int32": "INT32", "bool": "BOOL"}
HEADER = ["Model Name", "Task ID", "Stream ID", "Op Name", "OP Type", "Task Type", "Task Start Time(us)",
          "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes", "Input Data Types",
          "Input Formats", "Output Shapes", "Output Data Types", "Output Formats", "aicore_time(us)"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["write", "effect"])
    ap.add_argument("model")
    ap.add_argument("hidden")
    ap.add_argument("out", help="write: output folder; effect: a config JSON")
    ap.add_argument("--noise", type=float, default=0.05, help="sigma of the log-normal noise (default 0.05)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--input-shape", default="", help='as profile\'s --input-shape, e.g. "x:1,3,160,160"')
    a = ap.parse_args()
    if a.mode == "effect":
        effect(a.model, a.hidden, a.out, a.input_shape)
        return
    r = profile_model(a.model, Config(input_shape=a.input_shape), device=a.hidden, requests=1, advise=False)
    rng = np.random.default_rng(a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, fused, t = [], [], 0.0
    for k in r.costs.itertuples(index=False):
        if k.Stream == "copy" or k.IsView:
            continue
        name = k.Kernel
        if k.Fusion in ("ub", "graph"):
            name = f"fused_{len(fused)}_{k.OpType}"
            fused.append([r.model_name, 1, name, k.Nodes])
        dur = float(k.DurationUs) * float(np.exp(rng.normal(0.0, a.noise)))
        dtype = lambda s: ";".join(DTYPES.get(d, d.upper()) for d in str(s).split(";"))  # noqa: E731
        task = "AI_CPU" if k.Stream == "host" else k.TaskType
        op = DEVICE_OPS.get(k.OpType.split("+")[0], k.OpType.split("+")[0])
        rows.append([r.model_name, len(rows), 0, name, op, task, f"{t:.3f}", f"{dur:.3f}", "0", 8,
                     k.InputShapes, dtype(k.InputDtypes), "", k.OutputShapes, dtype(k.OutputDtypes), "", f"{dur:.3f}"])
        t += dur + 1.0
        if len(rows) % 25 == 0:  # the device converts a layout now and then: a row our plan has no kernel for
            rows.append([r.model_name, len(rows), 0, f"trans_TransData_{len(rows)}", "TransData", "AI_CORE",
                         f"{t:.3f}", "3.100", "0", 8, k.OutputShapes, "DT_FLOAT16", "NCHW", k.OutputShapes,
                         "DT_FLOAT16", "NC1HWC0", "3.100"])
            t += 4.1
    with open(out / "op_summary_0_1.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([HEADER] + rows)
    with open(out / "fusion_op_0_1.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([["Model Name", "Model ID", "Fusion Op", "Original Ops"]] + fused)
    print(f"{len(rows)} rows, {len(fused)} fused ops -> {out}")


def effect(model: str, hidden: str, config_path: str, input_shape: str = "") -> None:
    """Print one request's latency on the hidden device before / after the config (no pre/post-processing)."""
    dev = load_device(hidden)
    cfg = Config(**{k: v for k, v in json.loads(Path(config_path).read_text()).items() if k in CONFIG_FIELDS})
    before = latency_us(profile_model(model, Config(input_shape=input_shape), device=hidden, requests=1,
                                      advise=False).compiled, dev)
    after = latency_us(profile_model(model, cfg, device=hidden, requests=1, advise=False).compiled, dev)
    print(f"hidden device: {before / 1e3:.4f} ms -> {after / 1e3:.4f} ms ({(after - before) / 1e3:+.4f} ms, "
          f"{(after - before) / before * 100:+.1f}%)")


if __name__ == "__main__":
    main()
