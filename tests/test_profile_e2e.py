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

from toolkit.core.errors import InputError
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
    ("import sys\nsys.exit(3)\n", "{p}:pre", "raised SystemExit(3) on import"),
])
def test_load_callable_errors_are_one_line(tmp_path, source, spec, needle):
    p = tmp_path / "user.py"
    if source is not None:
        p.write_text(source)
    spec = spec.format(p=p) if "{p}" in spec else str(tmp_path / spec) if spec.strip() else spec
    with pytest.raises(InputError) as ei:
        e2e.load_callable(spec, "--pre", "pre")
    assert needle in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize("spec", ["", "  "])
def test_load_callable_empty_spec_is_a_usage_error(spec):
    from toolkit.core.errors import UsageError

    with pytest.raises(UsageError, match="--post is empty") as ei:
        e2e.load_callable(spec, "--post", "post")
    assert "\n" not in str(ei.value)


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
    with pytest.raises(InputError, match=r"missing \['y'\]"):
        e2e.as_feed({"x": np.zeros(2)}, ["x", "y"])
    assert set(e2e.as_feed(np.zeros(3), ["x"])) == {"x"}


@pytest.mark.parametrize("exit_arg, shown", [(0, "SystemExit(0)"), (None, "SystemExit(None)"),
                                             ("bye", "SystemExit('bye')")])
def test_sys_exit_in_user_code_is_an_error_not_an_exit(exit_arg, shown):
    def quits(i):
        if i == 1:
            sys.exit(exit_arg)
    with pytest.raises(InputError, match=rf"--post raised {re.escape(shown)} on request 1") as ei:
        e2e.time_calls(quits, [(0,), (1,)], "--post")
    assert "\n" not in str(ei.value)


def test_keyboard_interrupt_in_user_code_still_interrupts():
    def interrupted(i):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        e2e.time_calls(interrupted, [(0,)], "--pre")


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
    # pipelined, stages pre 3 | device work (H2D 1 + NPU 2) 3 | post 1:
    # pre 0-3, 3-6, 6-9; device work 3-6, 6-9, 9-12; post 6-7, 9-10, 12-13
    starts = piped[piped["Stage"] == "pre"]["StartUs"].tolist()
    assert starts == pytest.approx([0.0, 3000.0, 6000.0])
    assert piped[piped["Stage"] == "h2d"]["StartUs"].tolist() == pytest.approx([3000.0, 6000.0, 9000.0])
    assert e2e.request_latencies_ms(piped).tolist() == pytest.approx([7.0] * 3)
    assert e2e.throughput(piped) == pytest.approx(3 / 0.013)
    table = e2e.latency_table({"serial": serial, "pipelined": piped}).set_index("Schedule")
    assert list(table.reset_index().columns) == e2e.LATENCY_COLUMNS
    assert table.loc["pipelined", "Throughput(req/s)"] == pytest.approx(3 / 0.013)


def test_pipelined_pre_waits_for_the_hand_over_when_the_device_is_slower():
    pre, post = [1.0] * 4, [0.0] * 4
    ev = e2e.run_e2e(_device(), pre, post, "pipelined")
    # device work = H2D 1 + NPU 2 = 3 ms sets the pace; pre(i+1) waits for the device work of request i-1:
    # pre at 0, 1, 4, 7; device work 1-4, 4-7, 7-10, 10-13
    assert ev[ev["Stage"] == "pre"]["StartUs"].tolist() == pytest.approx([0.0, 1000.0, 4000.0, 7000.0])
    lat = e2e.request_latencies_ms(ev)
    assert lat.tolist() == pytest.approx([4.0, 6.0, 6.0, 6.0])
    assert e2e.throughput(ev) == pytest.approx(4 / 0.013)
    pcts = e2e.latency_table({"p": ev}).iloc[0]
    assert pcts["p90(ms)"] == pytest.approx(np.percentile(lat, 90))


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


@pytest.mark.parametrize("p, d, q, steady", [
    (1.0, 3.0, 2.0, 8.0),    # device-bound: 2 * device + post (pre(i) starts when i-1 goes onto the device)
    (3.0, 1.0, 2.0, 6.0),    # pre-bound: no waiting, latency = 3 + 1 + 2
    (1.0, 1.0, 3.0, 9.0),    # post-bound: 3 * post (pre(i) starts when post(i-3) ends)
    (0.0, 1.0, 3.0, 9.0),    # post-bound without --pre: 3 * post as well
    (2.0, 2.0, 2.0, 6.0),    # balanced: no waiting
])
def test_pipelined_three_stages_latency_is_bounded_and_throughput_is_the_slowest_stage(p, d, q, steady):
    device = [Task("k", "npu", d * 1e3)]
    by_n = {}
    for n in (20, 200):
        ev = e2e.run_e2e(device, [p] * n, [q] * n, "pipelined")
        lat = e2e.request_latencies_ms(ev)
        want_lat, want_tp = _three_stage_by_hand(p, d, q, n)
        assert lat.tolist() == pytest.approx(want_lat)
        assert e2e.throughput(ev) == pytest.approx(want_tp)
        assert lat[-5:].tolist() == pytest.approx([steady] * 5)   # hand-computed steady state
        post_end = ev[ev["Stage"] == "post"]["EndUs"].to_numpy()
        assert np.diff(post_end)[-10:].tolist() == pytest.approx([max(p, d, q) * 1e3] * 10)
        by_n[n] = e2e.latency_table({"pipelined": ev}).iloc[0]
    assert by_n[200]["p50(ms)"] == pytest.approx(by_n[20]["p50(ms)"], rel=1e-9)
    # throughput converges to 1 / slowest stage: span = fill + N * max(stage), within the fill of 1/max
    assert by_n[200]["Throughput(req/s)"] == pytest.approx(1e3 / max(p, d, q), rel=0.05)


def test_pipelined_at_most_one_request_pre_processed_ahead_of_the_device():
    # instant pre-processing, slow device: pre must not run ahead (the defect: all pre + H2D at t=0)
    ev = e2e.run_e2e(_device(), [0.0] * 50, [0.5] * 50, "pipelined")
    pre = ev[ev["Stage"] == "pre"].set_index("Request")["StartUs"]
    dev = ev[ev["Stage"] == "device"].set_index("Request")
    for i in range(2, 50):
        # pre(i) starts only after request i-2's device work ended, i.e. while i-1 is on the device
        assert pre[i] >= dev.loc[i - 2, "EndUs"]
        assert pre[i] >= dev.loc[i - 1, "StartUs"] - 1000.0 - 1e-9  # its H2D (1 ms) had started
    lat = e2e.request_latencies_ms(ev)
    assert lat.max() == pytest.approx(3.0 + 3.0 + 0.5)  # own device work + one in front + post


def test_post_only_pipelined_latency_by_hand():
    """No --pre, device 1 ms, post 2 ms (the tester's case: pipelined far above serial). By hand, ms:
    r0: pre 0, device 0-1, post 1-3            -> 3
    r1: pre 0, device 1-2, post 3-5            -> 5
    r2: pre at 1 (device took r1), device 3-4 (after post(r0)), post 5-7 -> 6
    r3: pre at 3 (device took r2: post(r0) ended at 3), device 5-6, post 7-9 -> 6
    r4: pre at 5, device 7-8, post 9-11        -> 6 = 3 x post; serial: 3 each."""
    device = [Task("k", "npu", 1000.0)]
    piped = e2e.run_e2e(device, [0.0] * 5, [2.0] * 5, "pipelined")
    assert e2e.request_latencies_ms(piped).tolist() == pytest.approx([3.0, 5.0, 6.0, 6.0, 6.0])
    assert piped[piped["Stage"] == "pre"]["StartUs"].tolist() == pytest.approx([0.0, 0.0, 1000.0, 3000.0, 5000.0])
    serial = e2e.run_e2e(device, [0.0] * 5, [2.0] * 5, "serial")
    assert e2e.request_latencies_ms(serial).tolist() == pytest.approx([3.0] * 5)


def _waiting(ev: pd.DataFrame, done_stage: str, next_stage: str) -> int:
    """Most requests at once that finished ``done_stage`` and wait for ``next_stage`` to start them."""
    done = ev[ev["Stage"].isin(done_stage.split("|"))].groupby("Request")["EndUs"].max()
    start = ev[ev["Stage"].isin(next_stage.split("|"))].groupby("Request")["StartUs"].min()
    times = sorted(set(done) | set(start))
    return max(int(((done <= t) & (start > t)).sum()) for t in times)


@pytest.mark.parametrize("p, d, q", [(0.0, 1.0, 2.0), (1.0, 3.0, 2.0), (3.0, 1.0, 2.0), (1.0, 1.0, 3.0),
                                     (0.0, 0.5, 5.0), (2.0, 2.0, 2.0), (0.0, 3.0, 0.5), (0.2, 0.1, 0.3)])
def test_pipelined_at_most_one_finished_request_waits_between_two_stages(p, d, q):
    """The documented queue depth of one, checked on the events (the defect: with a slow post-processing,
    pre-processing ran two requests ahead of a blocked device)."""
    ev = e2e.run_e2e(_device() if d == 3.0 else [Task("k", "npu", d * 1e3)], [p] * 30, [q] * 30, "pipelined")
    assert _waiting(ev, "pre", "h2d|device") <= 1
    assert _waiting(ev, "h2d|device", "post") <= 1


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


def _host_costs(op_type="Softmax", nodes="attn_softmax", kernel="attn_softmax"):
    return _costs([{"Kernel": "big", "DurationUs": 100.0, "Bound": "compute"},
                   {"Kernel": kernel, "Stream": "host", "OpType": op_type, "Nodes": nodes, "DurationUs": 30.0,
                    "Bound": "host", "Precision": "fp32"}])


def _events():
    return pd.DataFrame({"Task": [0, 1], "Stream": ["npu", "host"], "StartUs": [0.0, 100.0], "EndUs": [100.0, 130.0],
                         "DurationUs": [100.0, 30.0], "Kernel": ["big", "attn_softmax"], "Deps": ["", "0"],
                         "Name": ["big", "attn_softmax"]})


@pytest.mark.parametrize("case, kind, words", [
    ("user_op_type", "cpu_placement", ["placed on the CPU by op_placement['Softmax']"]),
    ("user_node", "cpu_placement", ["placed on the CPU by op_placement['attn_softmax']"]),
    ("unsupported_by_compiler", "cpu_fallback", ["runs on the host CPU", "not supported: data-dependent"]),
    ("device_unsupported", "cpu_fallback", ["lists Softmax in unsupported_ops"]),
    ("unexplained", "cpu_fallback", ["placed on the CPU by the compiler"]),
])
def test_cpu_kernels_tell_user_placement_from_fallback(case, kind, words):
    """The defect: a Softmax the user put on the CPU was reported as a missing device feature."""
    dev = load_device()
    user = {"user_op_type": {"Softmax"}, "user_node": {"attn_softmax"}, "unsupported_by_compiler": {"Softmax"},
            "device_unsupported": {"Softmax"}, "unexplained": set()}[case]
    reasons = {"attn_softmax": "not supported: data-dependent output shape"} if case == "unsupported_by_compiler" else {}
    if case == "device_unsupported":
        dev = dataclasses.replace(dev, unsupported_ops=("Softmax",))
    found = [f for f in run_rules(ProfileData(_host_costs(), _events(), dev, user_placed=user, reasons=reasons))
             if f.kind in ("cpu_fallback", "cpu_placement")]
    assert [(f.kind, f.subject) for f in found] == [(kind, "attn_softmax")]
    assert all(w in found[0].recommendation for w in words), found[0].recommendation
    assert ("does not run it" in found[0].recommendation) is False
    assert found[0].severity == ("info" if kind == "cpu_placement" else "warning")


def test_profile_reports_op_placement_as_user_placement_and_unsupported_ops_as_fallback():
    from toolkit.config.schema import Config
    from toolkit.commands.profile import profile_model

    placed = profile_model("transformer_block", Config(op_placement={"Softmax": "CPU"}), requests=2, advise=False)
    kinds = {(f.kind, f.subject) for f in placed.findings if f.kind in ("cpu_fallback", "cpu_placement")}
    assert kinds == {("cpu_placement", "attn_softmax")}
    nms = profile_model("detector_head", Config(), requests=2, advise=False)  # NonMaxSuppression: data-dependent
    kinds = {(f.kind, f.subject) for f in nms.findings if f.kind in ("cpu_fallback", "cpu_placement")}
    assert ("cpu_fallback", "nms") in kinds and not any(k == "cpu_placement" for k, _ in kinds)


@pytest.mark.parametrize("cfg, says, never", [
    ({"fusion_level": 0}, ["raise fusion_level from 0 to 2"], []),
    ({"fusion_level": 1}, ["raise fusion_level from 1 to 2"], []),
    ({"fusion_level": 2}, ["fusion is fully on (fusion_level 2", "batch requests"], ["raise fusion_level", "enable fusion"]),
    ({"fusion_level": 2, "fusion_switch_file": {"Switch": {"UBFusion": {"ConvBiasReluFusion": "off"}}}},
     ["switch back on", "UBFusion.ConvBiasReluFusion"], ["raise fusion_level", "enable fusion"]),
])
def test_launch_overhead_advice_follows_the_config(cfg, says, never):
    """The defect: "enable fusion (fusion_level 2)" was advised when the level already was 2."""
    from toolkit.config.schema import Config

    costs = _costs([{"Kernel": f"k{i}", "DurationUs": 4.1} for i in range(10)]
                   + [{"Kernel": "big", "DurationUs": 100.0, "Bound": "compute", "LaunchUs": 4.0}])
    events = pd.DataFrame({"Task": [0], "Stream": ["npu"], "StartUs": [0.0], "EndUs": [141.0], "DurationUs": [141.0],
                           "Kernel": ["big"], "Deps": [""], "Name": ["big"]})
    (f,) = [f for f in run_rules(ProfileData(costs, events, load_device(), config=Config(**cfg)))
            if f.kind == "launch_overhead"]
    assert all(w in f.recommendation for w in says) and not any(w in f.recommendation for w in never), f.recommendation
    assert f.evidence["fusion_level"] == cfg["fusion_level"]


def test_op_statistic_is_per_time_kind():
    """Ratio(%) within each Time Kind, computed here by hand; the Time Kind column comes after the profiler's."""
    from toolkit.profile.optable import PROFILER_STATISTIC_COLUMNS, op_statistic, op_summary_frame

    rows = [{"Op Name": "c1", "OP Type": "Conv", "Task Type": "AI_CORE", "Task Duration(us)": 30.0, "Time Kind": "simulated"},
            {"Op Name": "c2", "OP Type": "Conv", "Task Type": "AI_CORE", "Task Duration(us)": 10.0, "Time Kind": "simulated"},
            {"Op Name": "r", "OP Type": "Relu", "Task Type": "AI_VECTOR_CORE", "Task Duration(us)": 60.0, "Time Kind": "simulated"},
            {"Op Name": "c1", "OP Type": "Conv", "Task Type": "HOST_CPU", "Task Duration(us)": 900.0, "Time Kind": "measured"},
            {"Op Name": "pp", "OP Type": "PostProcess", "Task Type": "HOST_CPU", "Task Duration(us)": 100.0, "Time Kind": "measured"},
            {"Op Name": "d", "OP Type": "Conv", "Task Type": "AI_CORE", "Task Duration(us)": 5.0, "Time Kind": ""}]
    stat = op_statistic(op_summary_frame(rows))
    assert list(stat.columns) == PROFILER_STATISTIC_COLUMNS + ["Time Kind"] == OP_STATISTIC_COLUMNS
    got = {(r["Time Kind"], r["OP Type"]): (r["Count"], r["Total Time(us)"], r["Ratio(%)"]) for r in stat.to_dict("records")}
    assert got == {("simulated", "Relu"): (1, 60.0, 60.0), ("simulated", "Conv"): (2, 40.0, 40.0),
                   ("measured", "Conv"): (1, 900.0, 90.0), ("measured", "PostProcess"): (1, 100.0, 10.0),
                   ("device", "Conv"): (1, 5.0, 100.0)}
    assert stat["Time Kind"].tolist() == ["simulated", "simulated", "measured", "measured", "device"]


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
    assert res.returncode == 2 and "--pre file" in res.stderr and "does not exist" in res.stderr
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
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"{option} raised SystemExit(0) on request 0" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


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


# ---------------------------------------------------------------- trace.json -> parse-log round trip
def _key_rows(df):
    return sorted(zip(df["Op Name"], df["OP Type"], df["Task Type"], df["Stream ID"].astype(int),
                      df["Task Duration(us)"].round(9)))


@pytest.mark.parametrize("with_prepost", [True, False])
def test_trace_json_round_trips_through_parse_log(tmp_path, with_prepost):
    from collections import Counter

    from toolkit.commands.parse_log import collect
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
