"""``npuscope profile MODEL --device-profile FILE`` end to end in a subprocess, on the bundled resnet_small: a device
profile written from a hidden device through our cost model (msprof op_summary and torch_npu kernel_details),
the calibrated device JSON and attribution.csv in the output folder, and one-line errors for bad input."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from toolkit.config.schema import Config
from toolkit.engine import compile_model
from toolkit.ir.load import load_model
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import load_device
from toolkit.source import resolve_model

ENV = dict(os.environ, PYTHONWARNINGS="default")
HIDDEN = {"cube_fp16_tflops": 9.0, "memory_bandwidth_gbps": 60.0, "launch_overhead_us": 7.5}


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV, timeout=600)


def one_line_error(res: subprocess.CompletedProcess, code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.fixture(scope="module")
def hidden_costs():
    m = load_model(resolve_model("resnet_small").path)
    c = compile_model(m, Config())
    return kernel_costs(c.plan, c.model, dataclasses.replace(load_device("atlas300i_pro"), **HIDDEN))


def _timed(costs):
    return [k for k in costs.itertuples(index=False) if k.Stream != "copy" and not k.IsView]


def write_op_summary(path, costs):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Model Name", "Task ID", "Stream ID", "Op Name", "OP Type", "Task Type", "Task Start Time(us)",
                    "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes", "Output Shapes"])
        for i, k in enumerate(_timed(costs)):
            w.writerow(["resnet_small", i, 1, k.Kernel, k.OpType, k.TaskType, 10.0 * i, k.DurationUs, 0, 8,
                        k.InputShapes, k.OutputShapes])
        w.writerow(["resnet_small", 99, 1, "trans_1", "TransData", "AI_CORE", 999, 2.0, 0, 8, "", "1,1,32,32,16"])


def write_kernel_details(path, costs):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Device_id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
                    "Wait Time(us)", "Block Num", "Input Shapes", "Output Shapes"])
        for i, k in enumerate(_timed(costs)):
            core = "AI Core" if k.TaskType == "AI_CORE" else k.TaskType
            w.writerow([0, k.Kernel, k.OpType, core, 10.0 * i, k.DurationUs, 0, 8, k.InputShapes, k.OutputShapes])


@pytest.mark.parametrize("writer, name", [(write_op_summary, "op_summary_0_1.csv"),
                                          (write_kernel_details, "kernel_details.csv")])
def test_profile_with_a_device_profile_runs_end_to_end(tmp_path, hidden_costs, writer, name):
    writer(tmp_path / name, hidden_costs)
    res = cli("profile", "resnet_small", "--device-profile", name, "--requests", "2", "--out", "out", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    for f in ("calibrated_device.json", "attribution.csv", "attribution_unmatched.csv", "calibration.csv",
              "calibration_errors.csv", "whatif.csv", "profile.html", "profile.json"):
        assert (out / f).is_file(), f
    attr = pd.read_csv(out / "attribution.csv")
    timed = {k.Kernel: k.DurationUs for k in _timed(hidden_costs)}
    got = attr.set_index("Kernel").loc[list(timed), "DeviceUs"]
    assert got.to_numpy() == pytest.approx(list(timed.values()), rel=1e-6)  # exact device times, by name
    dev = load_device(str(out / "calibrated_device.json"))
    cal = pd.read_csv(out / "calibration.csv").set_index("Field")
    assert cal.at["launch_overhead_us", "Status"] == "calibrated"
    assert abs(dev.launch_overhead_us / HIDDEN["launch_overhead_us"] - 1) < 0.05
    errors = pd.read_csv(out / "calibration_errors.csv").set_index("Set")
    assert errors.at["held-out", "MdAPE after(%)"] < errors.at["held-out", "MdAPE before(%)"]
    assert "calibration (atlas300i_pro-calibrated): held-out error" in res.stdout
    summary = json.loads((out / "profile.json").read_text())
    assert summary["device_fit"]["calibrated_device"] == "atlas300i_pro-calibrated"
    html = (out / "profile.html").read_text()
    assert 'id="calibration"' in html and 'id="fig-calibration"' in html and "Worst-predicted kernels" in html
    if name.startswith("op_summary"):
        unmatched = pd.read_csv(out / "attribution_unmatched.csv")
        assert list(unmatched["Op Name"]) == ["trans_1"]
    # the calibrated profile is a --device file
    res2 = cli("profile", "resnet_small", "--device", out / "calibrated_device.json", "--requests", "1",
               "--no-advise", "--no-html", "--out", "again", cwd=tmp_path)
    assert res2.returncode == 0, res2.stderr
    assert "calibrated_device.json" in res2.stdout


def test_bad_device_profiles_are_one_line_errors(tmp_path):
    (tmp_path / "wrong.csv").write_text("Kernel,Time\nk,1\n")
    line = one_line_error(cli("profile", "resnet_small", "--device-profile", "wrong.csv", "--out", "o1",
                              cwd=tmp_path), 2)
    assert "neither an op_summary CSV" in line
    line = one_line_error(cli("profile", "resnet_small", "--device-profile", "missing.csv", "--out", "o2",
                              cwd=tmp_path), 2)
    assert "does not exist" in line
    (tmp_path / "few.csv").write_text("Op Name,Task Duration(us)\nstem_conv,5\nnot_ours,3\n")
    line = one_line_error(cli("profile", "resnet_small", "--device-profile", "few.csv", "--out", "o3",
                              cwd=tmp_path), 2)
    assert "only 1 matched device unit(s) usable for calibration" in line
    # no report folder is written then: the line itself names the unmatched rows and why
    assert "1 device row(s) unmatched, e.g. 'not_ours': no plan kernel named 'not_ours'" in line
    line = one_line_error(cli("profile", "resnet_small", "--fusion-ops", "f.csv", "--out", "o4", cwd=tmp_path), 2)
    assert "--fusion-ops needs --device-profile" in line
    line = one_line_error(cli("profile", "resnet_small", "--holdout", "0.5", "--out", "o5", cwd=tmp_path), 2)
    assert "--holdout 0.5" in line and "give --device-profile too" in line  # it had been ignored
    assert not any((tmp_path / d).exists() for d in ("o1", "o2", "o3", "o4", "o5"))
