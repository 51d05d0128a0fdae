"""End-to-end requests (toolkit/profile/e2e.py): loading --pre/--post callables, serial vs pipelined schedules by
hand, each request on its own device tasks, and the PP-OCR example pre/post (slow)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toolkit.core.errors import InputError
from toolkit.profile import e2e
from toolkit.profile.schedule import Task


def test_e2e_runs_each_request_on_its_own_device_tasks():
    a, b = [Task("k", "npu", 1000.0)], [Task("k", "npu", 3000.0)]
    pre, post = [1.0] * 3, [0.0] * 3
    serial = e2e.run_e2e(a, pre, post, "serial", devices=[a, b, a])
    # serial, by hand: pre 1 + device (1, 3, 1) + post 0
    assert e2e.request_latencies_ms(serial).tolist() == pytest.approx([2.0, 4.0, 2.0])
    piped = e2e.run_e2e(a, pre, post, "pipelined", devices=[a, b, a])
    # pipelined, by hand: pre 0-1, 1-2, 2-3; device 1-2, 2-5, 5-6 (one request on the device at a time)
    assert e2e.request_latencies_ms(piped).tolist() == pytest.approx([2.0, 4.0, 4.0])
    # breakdown over the 3 requests of the serial schedule: device mean (1 + 3 + 1) / 3 ms
    bd = e2e.breakdown(serial[serial["Stage"] == "device"], pre, None, requests=3).set_index("Stage")
    assert bd.loc["device", "Ms"] == pytest.approx(5.0 / 3)


ROOT = Path(__file__).resolve().parents[2]
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
