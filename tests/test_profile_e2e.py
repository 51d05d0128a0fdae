"""End to end: loading --pre/--post callables, serial vs pipelined schedules by hand, findings, the CLI."""

from __future__ import annotations

import csv
import json
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


# ---------------------------------------------------------------- loading user code
@pytest.mark.parametrize("source, spec, needle", [
    (None, "missing.py:pre", "does not exist"),
    ("def pre(i):\n    return {}\n", "{p}:other", "defines no function 'other'"),
    ("raise RuntimeError('boom')\n", "{p}:pre", "raised RuntimeError on import: boom"),
    ("pre = 3\n", "{p}:pre", "is a int, not a function"),
    ("def pre(i):\n    return {}\n", "{p}.txt", "is not file.py:function"),
    (None, "  ", "is empty"),
])
def test_load_callable_errors_are_one_line(tmp_path, source, spec, needle):
    p = tmp_path / "user.py"
    if source is not None:
        p.write_text(source)
    spec = spec.format(p=p) if "{p}" in spec else str(tmp_path / spec) if spec.strip() else spec
    with pytest.raises(InputError) as ei:
        e2e.load_callable(spec, "--pre", "pre")
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_load_callable_default_name_and_call(tmp_path):
    p = tmp_path / "user.py"
    p.write_text("import numpy as np\ndef post(outputs):\n    return sorted(outputs)\n")
    fn = e2e.load_callable(str(p), "--post", "post")
    assert fn({"b": 1, "a": 2}) == ["a", "b"]


def test_callable_errors_at_run_time():
    def bad(i):
        raise ValueError(f"no frame {i}")
    with pytest.raises(InputError, match="--pre raised ValueError on request 0: no frame 0"):
        e2e.time_calls(bad, [(0,), (1,)], "--pre")
    with pytest.raises(InputError, match="returned list; expected a dict"):
        e2e.as_feed([1, 2], ["x", "y"])
    with pytest.raises(InputError, match=r"needs \['y'\]"):
        e2e.as_feed({"x": np.zeros(2)}, ["x", "y"])
    assert set(e2e.as_feed(np.zeros(3), ["x"])) == {"x"}


# ---------------------------------------------------------------- schedules by hand
def _device():
    # H2D 1 ms on the copy engine, then 2 ms on the NPU
    return [Task("h2d", "copy", 1000.0, stage="h2d"), Task("k", "npu", 2000.0, [0])]


def test_serial_vs_pipelined_by_hand():
    pre, post = [3.0] * 3, [1.0] * 3
    serial = e2e.run_e2e(_device(), pre, post, "serial")
    piped = e2e.run_e2e(_device(), pre, post, "pipelined")
    # serial: 3 + 1 + 2 + 1 = 7 ms per request, one after the other: 21 ms
    assert e2e.request_latencies_ms(serial).tolist() == pytest.approx([7.0] * 3)
    assert e2e.throughput(serial) == pytest.approx(3 / 0.021)
    # pipelined: pre(i+1) starts when H2D(i) ends: pre at 0, 4, 8; posts end at 7, 11, 15
    starts = piped[piped["Stage"] == "pre"]["StartUs"].tolist()
    assert starts == pytest.approx([0.0, 4000.0, 8000.0])
    assert e2e.request_latencies_ms(piped).tolist() == pytest.approx([7.0] * 3)
    assert e2e.throughput(piped) == pytest.approx(3 / 0.015)
    table = e2e.latency_table({"serial": serial, "pipelined": piped}).set_index("Schedule")
    assert list(table.reset_index().columns) == e2e.LATENCY_COLUMNS
    assert table.loc["pipelined", "Throughput(req/s)"] == pytest.approx(200.0)


def test_pipelined_pre_waits_for_the_hand_over_when_the_device_is_slower():
    pre, post = [1.0] * 4, [0.0] * 4
    ev = e2e.run_e2e(_device(), pre, post, "pipelined")
    # pre(i+1) starts when H2D(i) ends: pre at 0, 2, 4, 6; NPU(i) at 2 + 2i .. 4 + 2i; the device sets the pace
    assert ev[ev["Stage"] == "pre"]["StartUs"].tolist() == pytest.approx([0.0, 2000.0, 4000.0, 6000.0])
    lat = e2e.request_latencies_ms(ev)
    assert lat.tolist() == pytest.approx([4.0] * 4)
    assert e2e.throughput(ev) == pytest.approx(4 / 0.010)
    pcts = e2e.latency_table({"p": ev}).iloc[0]
    assert pcts["p90(ms)"] == pytest.approx(np.percentile(lat, 90))


def test_breakdown_labels_time_kinds():
    events = e2e.run_e2e(_device(), [0.0], [0.0], "serial")
    bd = e2e.breakdown(events[events["Stage"].isin(["h2d", "device"])], [3.0, 5.0], [1.0, 1.0])
    assert bd.values.tolist() == [["pre-processing", 4.0, "measured"], ["host-to-device", 1.0, "simulated"],
                                  ["device", 2.0, "simulated"], ["post-processing", 1.0, "measured"]]


# ---------------------------------------------------------------- findings
def _costs(rows):
    base = {"Stream": "npu", "Fusion": "none", "Precision": "fp16", "Nodes": "n", "OpType": "Add",
            "ComputeUs": 0.0, "MemoryUs": 0.1, "LaunchUs": 4.0, "Bound": "launch"}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_findings_launch_overhead_and_prepost_bottleneck():
    costs = _costs([{"Kernel": f"k{i}", "DurationUs": 4.1} for i in range(10)]
                   + [{"Kernel": "big", "DurationUs": 100.0, "Bound": "compute", "LaunchUs": 4.0}])
    events = pd.DataFrame({"Task": [0], "Stream": ["npu"], "StartUs": [0.0], "EndUs": [141.0], "DurationUs": [141.0],
                           "Kernel": ["big"], "Deps": [""], "Name": ["big"]})
    kinds = {f.kind: f for f in run_rules(ProfileData(costs, events, load_device(), pre_ms=[0.1], post_ms=[0.1]))}
    # launches: 10 x 4 µs of 141 µs device time = 28% >= 10%; pre + post 0.2 ms > 0.141 ms
    assert kinds["launch_overhead"].evidence["share"] == pytest.approx(40.0 / 141.0, abs=1e-4)
    assert kinds["prepost_bottleneck"].evidence["device_ms_simulated"] == pytest.approx(0.141)
    quiet = run_rules(ProfileData(costs.iloc[-1:], events, load_device(), pre_ms=[0.01], post_ms=[0.01]))
    assert not [f for f in quiet if f.kind in ("launch_overhead", "prepost_bottleneck")]


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


# ---------------------------------------------------------------- PP-OCRv4 det with real pre/post
@pytest.mark.slow
def test_example_prepost_finds_the_rendered_lines():
    import importlib.util

    import onnxruntime as ort

    from toolkit import zoo

    spec = importlib.util.spec_from_file_location("ppocr_det_prepost", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    feed = mod.pre(0)
    assert feed["x"].shape == (1, 3, 640, 640) and feed["x"].dtype == np.float32
    sess = ort.InferenceSession(str(zoo.fetch("ppocr_det")), providers=["CPUExecutionProvider"])
    boxes = mod.post({"y": sess.run(None, feed)[0]})
    # three lines rendered with centres at (i + 1) * 720 / 4 px and horizontally centred in the 1280 px frame
    assert len(boxes) == 3
    for i, (x0, y0, x1, y1, score) in enumerate(boxes):
        assert abs((y0 + y1) / 2 - (i + 1) * 720 / 4) < 20 and abs((x0 + x1) / 2 - 640) < 40 and score > 0.6


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
