"""``npuscope profile`` in a subprocess: several requests of varying shape (each post-processed with its own
outputs, its own plan and costs), the profiler tables, device files, --pre / --post errors, and trace.json
read back by parse-log."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest

from toolkit.profile.device import load_device
from toolkit.profile.optable import OP_STATISTIC_COLUMNS, OP_SUMMARY_COLUMNS

ROOT = Path(__file__).resolve().parents[2]


def _convrelu(path: Path) -> Path:
    """Conv(3->4, 3x3, pad 1) + Relu on x: float32[N, 3, 8, 8] (dynamic batch)."""
    from tests.graphs import conv_relu

    onnx.save(conv_relu("N"), path)
    return path


def _feed(i: int, batch: int) -> np.ndarray:
    return np.random.default_rng(100 + i).standard_normal((batch, 3, 8, 8)).astype(np.float32)


PREPOST = """
import numpy as np
from pathlib import Path
OUT = Path({out!r})
BATCH = {batch!r}
CALLS = []

def pre(i):
    return {{"x": np.random.default_rng(100 + i).standard_normal((BATCH[i % len(BATCH)], 3, 8, 8)).astype(np.float32)}}

def post(outputs):
    np.save(OUT / f"post_{{len(CALLS)}}.npy", outputs["y"])
    CALLS.append(1)

def post_zeroes(outputs):
    np.save(OUT / f"post_{{len(CALLS)}}.npy", outputs["y"].copy())
    CALLS.append(1)
    for v in outputs.values():
        v[...] = 0
"""


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "toolkit", "profile", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def _prepost(tmp_path: Path, batch) -> Path:
    calls = tmp_path / "calls"
    calls.mkdir()
    f = tmp_path / "prepost.py"
    f.write_text(PREPOST.format(out=str(calls), batch=list(batch)))
    return f


def _ort(model: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.fixture(scope="module")
def varying(tmp_path_factory):
    """`profile --pre` with batch 1, 4, 1, 4 (requests 0 and 2 share a shape but not their data)."""
    tmp = tmp_path_factory.mktemp("vary")
    model = _convrelu(tmp / "cr.onnx")
    pp = _prepost(tmp, [1, 4])
    res = _cli(str(model), "--pre", f"{pp}:pre", "--post", f"{pp}:post", "--requests", "4", "--no-html",
               "--out", str(tmp / "out"))
    return tmp, model, res


def test_each_request_is_post_processed_with_its_own_outputs(varying):
    tmp, model, res = varying
    assert res.returncode == 0, res.stderr
    for i, batch in enumerate([1, 4, 1, 4]):
        got = np.load(tmp / "calls" / f"post_{i}.npy")
        want = _ort(model, _feed(i, batch))  # FP32 reference of request i's own feed
        assert got.shape == (batch, 4, 8, 8)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)  # the simulated run computes in FP16


def test_requests_csv_names_each_requests_shape_and_plan(varying):
    tmp, _model, res = varying
    req = pd.read_csv(tmp / "out" / "requests.csv")
    assert req["Request"].tolist() == [0, 1, 2, 3]
    assert req["FeedShapes"].tolist() == ["x:1,3,8,8", "x:4,3,8,8", "x:1,3,8,8", "x:4,3,8,8"]
    assert req["Plan"].tolist() == [0, 1, 0, 1]  # two plans, each reused
    prof = json.loads((tmp / "out" / "profile.json").read_text())
    assert [(s["feed_shapes"], s["requests"], s["first_request"]) for s in prof["feed_shapes"]] == \
        [("x:1,3,8,8", 2, 0), ("x:4,3,8,8", 2, 1)]
    assert "x:4,3,8,8: 2 request(s)" in res.stdout and "x:1,3,8,8: 2 request(s)" in res.stdout


def test_kernel_costs_hold_one_table_per_shape_with_flops_by_hand(varying):
    tmp, _model, _res = varying
    costs = pd.read_csv(tmp / "out" / "kernel_costs.csv")
    conv = costs[costs["OpType"].str.startswith("Conv")].set_index("FeedShapes")
    for batch in (1, 4):
        # Conv FLOPs: 2 * numel(Y) * Cin/g * kH * kW, Y = (batch, 4, 8, 8), Cin 3, 3x3
        assert conv.loc[f"x:{batch},3,8,8", "Flops"] == 2 * (batch * 4 * 8 * 8) * 3 * 9
        assert conv.loc[f"x:{batch},3,8,8", "InputShapes"] == f"{batch},3,8,8"
    sched = pd.read_csv(tmp / "out" / "schedule.csv")
    assert set(sched["FeedShapes"]) == {"x:1,3,8,8", "x:4,3,8,8"}
    # the N-request schedule: request i runs the kernels of its own plan (H2D bytes = its feed's bytes)
    e2e_ev = pd.read_csv(tmp / "out" / "e2e_schedule.csv")
    h2d = e2e_ev[e2e_ev["Stage"] == "h2d"].sort_values("Request")
    assert h2d["Bytes"].tolist() == [b * 3 * 8 * 8 * 4 for b in (1, 4, 1, 4)]


def test_too_many_distinct_shapes_is_a_one_line_error(tmp_path):
    model = _convrelu(tmp_path / "cr.onnx")
    pp = _prepost(tmp_path, list(range(1, 11)))  # batch 1..10: a 9th distinct shape on request 8
    res = _cli(str(model), "--pre", f"{pp}:pre", "--requests", "10", "--no-html", "--no-advise",
               "--out", str(tmp_path / "out"))
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "x:9,3,8,8" in res.stderr and "request 8" in res.stderr and "at most 8" in res.stderr
    assert not (tmp_path / "out").exists()


def test_post_that_edits_its_outputs_cannot_change_the_next_requests(tmp_path):
    model = _convrelu(tmp_path / "cr.onnx")
    pp = _prepost(tmp_path, [2])
    x = _feed(0, 2)
    np.savez(tmp_path / "x.npz", x=x)
    res = _cli(str(model), "--inputs", str(tmp_path / "x.npz"), "--post", f"{pp}:post_zeroes", "--requests", "3",
               "--no-html", "--no-advise", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    want = _ort(model, x)
    assert np.abs(want).sum() > 0
    for i in range(3):
        np.testing.assert_allclose(np.load(tmp_path / "calls" / f"post_{i}.npy"), want, rtol=2e-2, atol=2e-2)


def test_cli_cast_finding_on_input_cast_only_model(varying):
    tmp, _model, _res = varying
    found = [f for f in json.loads((tmp / "out" / "findings.json").read_text()) if f["kind"] == "cast_islands"]
    # the only Cast converts graph input x (Conv+Relu fuse into one FP16 kernel): no FP32 island
    assert found and all(f["evidence"]["fp32_islands"] == [] for f in found)
    assert all("black list" not in f["recommendation"] for f in found)


INT_CELL = re.compile(r"^-?\d+$")


def _column(path: Path, name: str) -> list[str]:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    i = rows[0].index(name)
    return [r[i] for r in rows[1:]]


def test_op_tables_write_integer_ids(varying):
    tmp, _model, _res = varying
    out = tmp / "out"
    for col in ("Task ID", "Stream ID"):
        cells = _column(out / "op_summary.csv", col)
        assert cells and all(INT_CELL.match(c) for c in cells), (col, cells[:5])
    assert set(_column(out / "op_summary.csv", "Block Dim")) == {""}  # unknown: empty, not "nan"
    assert all(INT_CELL.match(c) for c in _column(out / "op_statistic.csv", "Count"))
    # 4 pre-processing rows with Task IDs 0..3 on the pre stream (0)
    s = pd.read_csv(out / "op_summary.csv")
    pre = s[s["OP Type"] == "PreProcess"]
    assert pre["Task ID"].tolist() == [0, 1, 2, 3] and set(pre["Stream ID"]) == {0}


def test_cli_duplicate_device_key_exits_2(tmp_path):
    model = _convrelu(tmp_path / "cr.onnx")
    p = tmp_path / "dup.json"
    p.write_text('{"base":"atlas300i_pro","base":"ascend910"}')
    res = _cli(str(model), "--device", str(p), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "'base' is given twice" in res.stderr and not (tmp_path / "out").exists()


X_4_8 = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


def _cli_user_path(*args, cwd, env_path: Path | None = None, timeout=300):
    import os

    env = dict(os.environ)
    if env_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(env_path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


def _error_line(res, code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("npuscope: error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def _m1(path: Path) -> Path:
    """y = 3x + 1, z = exp(x) on x float32[4, 8] (two float outputs)."""
    from tests.graphs import affine_and

    m = affine_and("Exp")
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


@pytest.fixture()
def m1(tmp_path) -> Path:
    _m1(tmp_path / "m1.onnx")
    np.savez(tmp_path / "in.npz", x=X_4_8)
    return tmp_path


PRE = """
import numpy as np
X = np.load("x.npy")
def extra(i):
    return {"x": X, "bogus": np.ones(1, np.float32)}
def missing(i):
    return {"nope": X}
def f64(i):
    return {"x": X.astype(np.float64)}
def shape(i):
    return {"x": X[:2]}
"""


@pytest.mark.parametrize("kind", ["extra", "missing", "f64", "shape"])
def test_cli_pre_result_is_refused_as_the_same_npz_is(m1, kind):
    np.save(m1 / "x.npy", X_4_8)
    (m1 / "pp.py").write_text(PRE)
    bad = {"extra": {"x": X_4_8, "bogus": np.ones(1, np.float32)}, "missing": {"nope": X_4_8},
           "f64": {"x": X_4_8.astype(np.float64)}, "shape": {"x": X_4_8[:2]}}[kind]
    np.savez(m1 / "bad.npz", **bad)
    pre = _error_line(_cli_user_path("profile", "m1.onnx", "--pre", f"pp.py:{kind}", "--requests", "2", "--out", "o",
                           cwd=m1), 2)
    npz = _error_line(_cli_user_path("compare", "m1.onnx", "--inputs", "bad.npz", "--out", "o2", cwd=m1), 2)
    assert pre.startswith("npuscope: error: --pre result of request 0: ")
    assert npz.startswith("npuscope: error: npz file 'bad.npz': ")
    assert pre.split(": ", 3)[3] == npz.split(": ", 3)[3]  # same message after the source
    assert not (m1 / "o").exists()


EXAMPLE = ROOT / "docs" / "examples" / "ppocr_det_prepost.py"


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
