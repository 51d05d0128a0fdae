"""End to end: loading --pre/--post callables, serial vs pipelined schedules by hand, findings, the CLI."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toolkit.errors import InputError
from toolkit.profile import e2e
from toolkit.profile.device import load_device
from toolkit.profile.findings import ProfileData, run_rules
from toolkit.profile.optable import OP_STATISTIC_COLUMNS, OP_SUMMARY_COLUMNS
from toolkit.profile.schedule import Task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "ppocr_det_prepost.py"


# ---------------------------------------------------------------- schedules by hand
def _device():
    # H2D 1 ms on the copy engine, then 2 ms on the NPU
    return [Task("h2d", "copy", 1000.0, stage="h2d"), Task("k", "npu", 2000.0, [0])]


def _three_stage_by_hand(p, d, q, n):
    """Start/end (ms) of a 3-stage line with hand-over queues of depth one, written as the recurrences
    (a stage starts request i once it has finished i-1 and the next stage has taken i-1, i.e. started it: the
    device takes i-1 once device(i-2) and post(i-3) have ended)."""
    pe, de, qe = {}, {}, {}
    lat = []
    for i in range(n):
        ps = max(pe.get(i - 1, 0.0), de.get(i - 2, 0.0), qe.get(i - 3, 0.0))
        pe[i] = ps + p
        ds = max(pe[i], de.get(i - 1, 0.0), qe.get(i - 2, 0.0))
        de[i] = ds + d
        qe[i] = max(de[i], qe.get(i - 1, 0.0)) + q
        lat.append(qe[i] - ps)
    return lat, n / (qe[n - 1] / 1e3)


def _waiting(ev: pd.DataFrame, done_stage: str, next_stage: str) -> int:
    """Most requests at once that finished ``done_stage`` and wait for ``next_stage`` to start them."""
    done = ev[ev["Stage"].isin(done_stage.split("|"))].groupby("Request")["EndUs"].max()
    start = ev[ev["Stage"].isin(next_stage.split("|"))].groupby("Request")["StartUs"].min()
    times = sorted(set(done) | set(start))
    return max(int(((done <= t) & (start > t)).sum()) for t in times)


# ---------------------------------------------------------------- findings
def _costs(rows):
    base = {"Stream": "npu", "Fusion": "none", "Precision": "fp16", "Nodes": "n", "OpType": "Add",
            "ComputeUs": 0.0, "MemoryUs": 0.1, "LaunchUs": 4.0, "Bound": "launch"}
    return pd.DataFrame([{**base, **r} for r in rows])


def _host_costs(op_type="Softmax", nodes="attn_softmax", kernel="attn_softmax"):
    return _costs([{"Kernel": "big", "DurationUs": 100.0, "Bound": "compute"},
                   {"Kernel": kernel, "Stream": "host", "OpType": op_type, "Nodes": nodes, "DurationUs": 30.0,
                    "Bound": "host", "Precision": "fp32"}])


def _events():
    return pd.DataFrame({"Task": [0, 1], "Stream": ["npu", "host"], "StartUs": [0.0, 100.0], "EndUs": [100.0, 130.0],
                         "DurationUs": [100.0, 30.0], "Kernel": ["big", "attn_softmax"], "Deps": ["", "0"],
                         "Name": ["big", "attn_softmax"]})


# ---------------------------------------------------------------- the command (subprocess: the CLI owns threads)
def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "toolkit", "profile", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def test_cli_profile_sample_writes_the_profiler_tables(tmp_path):
    pre = tmp_path / "prepost.py"
    pre.write_text("import numpy as np\n"
                   "def pre(i):\n    return {'feat': np.full((1, 16, 20, 20), 0.5, np.float32)}\n"
                   "def post(outputs):\n    return {k: float(np.asarray(v).sum()) for k, v in outputs.items()}\n")
    res = _cli("detector_head", "--pre", f"{pre}:pre", "--post", f"{pre}:post", "--requests", "4",
               "--no-html", "--out", str(tmp_path / "out"), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    with open(out / "op_summary.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert header == OP_SUMMARY_COLUMNS
    summary = pd.read_csv(out / "op_summary.csv")
    assert set(summary["Time Kind"]) == {"simulated", "measured"}
    assert (summary["OP Type"] == "PreProcess").sum() == 4
    assert list(pd.read_csv(out / "op_statistic.csv").columns) == OP_STATISTIC_COLUMNS
    trace = json.loads((out / "trace.json").read_text())
    assert any(e.get("ph") == "s" for e in trace["traceEvents"])
    lat = pd.read_csv(out / "latency.csv").set_index("Schedule")
    assert lat.loc["pipelined", "Throughput(req/s)"] >= lat.loc["serial", "Throughput(req/s)"]
    assert "simulated" in res.stdout and "measured" in res.stdout


def test_cli_profile_bad_inputs(tmp_path):
    res = _cli("detector_head", "--pre", str(tmp_path / "nope.py:pre"), "--out", str(tmp_path / "o1"), cwd=ROOT)
    assert res.returncode == 1 and "--pre file" in res.stderr and "does not exist" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "o1").exists()
    res = _cli("detector_head", "--device", "atlas", "--out", str(tmp_path / "o2"), cwd=ROOT)
    assert res.returncode == 2 and "did you mean" in res.stderr
    res = _cli("detector_head", "--requests", "0", cwd=ROOT)
    assert res.returncode == 2
    res = _cli("detector_head", "--pre", "", "--out", str(tmp_path / "o3"), cwd=ROOT)
    assert res.returncode == 2 and "--pre is empty" in res.stderr and not (tmp_path / "o3").exists()


@pytest.mark.parametrize("option, body", [("--pre", "def pre(i):\n    sys.exit(0)\n"),
                                          ("--post", "def post(outputs):\n    sys.exit(0)\n")])
def test_cli_user_sys_exit_is_an_error(tmp_path, option, body):
    f = tmp_path / "quits.py"
    f.write_text("import sys\n" + body)
    res = _cli("detector_head", option, str(f), "--no-advise", "--out", str(tmp_path / "o"), cwd=ROOT)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert f"{option} raised SystemExit(0) on request 0" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_cli_profile_ppocr_det_end_to_end(tmp_path):
    res = _cli("ppocr_det", "--pre", f"{EXAMPLE}:pre", "--post", f"{EXAMPLE}:post", "--requests", "8",
               "--out", str(tmp_path / "out"), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    bd = pd.read_csv(out / "breakdown.csv").set_index("Stage")
    assert list(bd.index) == ["pre-processing", "host-to-device", "device", "device-to-host", "post-processing"]
    assert bd.loc["pre-processing", "TimeKind"] == "measured" and bd.loc["device", "TimeKind"] == "simulated"
    # H2D of the (1, 3, 640, 640) float32 input on the default device: latency + bytes / bandwidth
    dev = load_device()
    h2d_ms = (dev.host_device_latency_us + 3 * 640 * 640 * 4 / (dev.h2d_bandwidth_gbps * 1e3)) / 1e3
    assert bd.loc["host-to-device", "Ms"] == pytest.approx(h2d_ms)
    lat = pd.read_csv(out / "latency.csv").set_index("Schedule")
    assert lat.loc["pipelined", "Throughput(req/s)"] > lat.loc["serial", "Throughput(req/s)"]
    assert (out / "profile.html").is_file() and (out / "trace.json").is_file()
    print(bd.to_string(), lat.to_string(), sep="\n")


# ---------------------------------------------------------------- trace.json -> parse-log round trip
def _key_rows(df):
    return sorted(zip(df["Op Name"], df["OP Type"], df["Task Type"], df["Stream ID"].astype(int),
                      df["Task Duration(us)"].round(9)))


@pytest.mark.parametrize("with_prepost", [True, False])
def test_trace_json_round_trips_through_parse_log(tmp_path, with_prepost):
    from collections import Counter

    from toolkit.logs.workflow import collect
    from toolkit.profile.summary import MEASURED_STREAM_ID

    n = 3
    args = []
    if with_prepost:
        pp = tmp_path / "prepost.py"
        pp.write_text("import numpy as np\n"
                      "def pre(i):\n    return {'feat': np.full((1, 16, 20, 20), 0.5, np.float32)}\n"
                      "def post(outputs):\n    return len(outputs)\n")
        args = ["--pre", f"{pp}:pre", "--post", f"{pp}:post"]
    res = _cli("detector_head", *args, "--requests", str(n), "--no-advise", "--no-html", "--out",
               str(tmp_path / "out"), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    summary = pd.read_csv(out / "op_summary.csv", keep_default_na=False, na_values=[""])
    data = collect([out / "trace.json"])
    assert [e["format"] for e in data["entries"]] == ["chrome_trace"] and data["entries"][0]["malformed"] == 0
    back = data["summary"]

    # measured kernel wall times: same rows, same order, on their own stream (not a simulated one)
    is_kernel = (summary["Time Kind"] == "measured") & ~summary["OP Type"].isin(["PreProcess", "PostProcess"])
    mine, theirs = summary[is_kernel], back[(back["Time Kind"] == "measured") & (back["Stream ID"] == MEASURED_STREAM_ID)]
    assert list(zip(mine["Op Name"], mine["OP Type"], mine["Task Type"])) == \
        list(zip(theirs["Op Name"], theirs["OP Type"], theirs["Task Type"]))
    assert theirs["Task Duration(us)"].tolist() == pytest.approx(mine["Task Duration(us)"].tolist(), rel=1e-12)
    assert set(mine["Stream ID"].astype(int)) == {MEASURED_STREAM_ID}
    sim = back[back["Time Kind"] == "simulated"]
    assert MEASURED_STREAM_ID not in set(sim["Stream ID"].astype(int))

    # simulated rows: the trace holds n requests of the one-request rows of op_summary.csv (views left out)
    one = Counter(_key_rows(summary[summary["Time Kind"] == "simulated"]))
    assert Counter(_key_rows(sim)) == Counter({k: v * n for k, v in one.items()})

    # pre/post: one measured row per request, same durations in request order; none when not given
    for op_type in ("PreProcess", "PostProcess"):
        mine = summary[summary["OP Type"] == op_type]
        theirs = back[back["OP Type"] == op_type].sort_values("Task Start Time(us)", kind="stable")
        assert len(mine) == len(theirs) == (n if with_prepost else 0)
        assert theirs["Task Duration(us)"].tolist() == pytest.approx(mine["Task Duration(us)"].tolist(), rel=1e-12)
        assert list(theirs["Stream ID"].astype(int)) == list(mine["Stream ID"].astype(int))
        assert set(theirs["Time Kind"]) <= {"measured"}
