"""Round-4 fixes to `npuscope profile`, one test per fault kind:

1. --pre feeds whose shape changes between requests: each request runs (and is post-processed) with its own
   feed on a plan compiled for its shapes, plans are reused per shape, requests.csv says which shape each had,
   too many distinct shapes are refused; post-processing gets a fresh copy of its own outputs;
2. the cast_islands recommendation matches its evidence (no "drop the islands" advice without islands);
3. integer columns of op_summary.csv / op_statistic.csv are written as integers;
4. device profile JSON: duplicate keys and non-ONNX op names in unsupported_ops are refused.

Expected values are computed here: onnxruntime for the outputs, FLOPs and latencies by hand.
"""

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

from toolkit.core.errors import ConfigError
from toolkit.profile import e2e
from toolkit.profile.device import load_device
from toolkit.profile.findings import ProfileData, cast_islands
from toolkit.profile.optable import integer_columns
from toolkit.profile.schedule import Task

ROOT = Path(__file__).resolve().parents[1]


def _convrelu(path: Path) -> Path:
    """Conv(3->4, 3x3, pad 1) + Relu on x: float32[N, 3, 8, 8] (dynamic batch)."""
    from graphs import conv_relu

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


# ---------------------------------------------------------------- 1. feeds whose shape changes per request
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


# ---------------------------------------------------------------- 2. cast_islands advice follows its evidence
def _cast_data(island: bool) -> ProfileData:
    """Kernels: Cast of graph input x -> a (fp16) [-> Cast -> b (fp32) -> Cast] -> c (fp16), 10 µs each."""
    chain = [("cast_x", "cast", "fp16", ["x"], ["x16"]), ("a", "none", "fp16", ["x16"], ["t1"])]
    if island:
        chain += [("cast1", "cast", "fp32", ["t1"], ["t1_32"]), ("b", "none", "fp32", ["t1_32"], ["t2"]),
                  ("cast2", "cast", "fp16", ["t2"], ["t2_16"]), ("c", "none", "fp16", ["t2_16"], ["y"])]
    else:
        chain += [("c", "none", "fp16", ["t1"], ["y"])]
    costs = pd.DataFrame([{"Kernel": k, "Stream": "npu", "Fusion": f, "Precision": p, "DurationUs": 10.0,
                           "OpType": "Cast" if f == "cast" else "Relu"} for k, f, p, _i, _o in chain])
    producers = {t: k for k, _f, _p, _i, outs in chain for t in outs}
    readers: dict[str, list[str]] = {}
    for k, _f, _p, ins, _o in chain:
        for t in ins:
            readers.setdefault(t, []).append(k)
    return ProfileData(costs, pd.DataFrame(), load_device(), producers=producers, readers=readers,
                       kernel_io={k: (i, o) for k, _f, _p, i, o in chain})


def test_cast_islands_without_islands_talks_about_the_input_cast():
    [f] = cast_islands(_cast_data(island=False))
    assert f.evidence["fp32_islands"] == [] and f.evidence["input_casts"] == ["x"]
    assert "black list" not in f.recommendation and "island" not in f.recommendation.lower()
    assert "FP16 inputs" in f.recommendation and "x" in f.recommendation


def test_cast_islands_with_an_island_names_it_and_the_input_cast():
    [f] = cast_islands(_cast_data(island=True))
    assert f.evidence["fp32_islands"] == ["b"] and f.evidence["input_casts"] == ["x"]
    assert f.evidence["casts"] == 3 and f.evidence["other_casts"] == 2
    assert "black list" in f.recommendation and "FP16 inputs" in f.recommendation


def test_cli_cast_finding_on_input_cast_only_model(varying):
    tmp, _model, _res = varying
    found = [f for f in json.loads((tmp / "out" / "findings.json").read_text()) if f["kind"] == "cast_islands"]
    # the only Cast converts graph input x (Conv+Relu fuse into one FP16 kernel): no FP32 island
    assert found and all(f["evidence"]["fp32_islands"] == [] for f in found)
    assert all("black list" not in f["recommendation"] for f in found)


# ---------------------------------------------------------------- 3. integer columns are integers
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


def test_integer_columns_keeps_fractional_values():
    df = pd.DataFrame({"Task ID": [0.0, 2.0, np.nan], "Stream ID": [1.0, 1.5, 2.0], "Task Duration(us)": [1.0] * 3})
    out = integer_columns(df)
    assert out.to_csv(index=False).splitlines()[1:] == ["0,1.0,1.0", "2,1.5,1.0", ",2.0,1.0"]
    assert df["Task ID"].dtype == float  # the input is not modified


# ---------------------------------------------------------------- 4. device profile JSON
@pytest.mark.parametrize("text, needle", [
    ('{"base": "atlas300i_pro", "base": "ascend910"}', "field 'base' is given twice"),
    ('{"base": "atlas300i_pro", "launch_overhead_us": 5, "launch_overhead_us": 6}',
     "field 'launch_overhead_us' is given twice"),
    ('{"base": "atlas300i_pro", "source": {"a": "x", "a": "y"}}', "field 'a' is given twice"),
    ('{"base": "atlas300i_pro", "unsupported_ops": ["Reluu"]}', "'Reluu', which is not an ONNX op type (did you "
                                                                "mean 'Relu'?)"),
    ('{"base": "atlas300i_pro", "unsupported_ops": ["Softmax", "matmul"]}', "(did you mean 'MatMul'?)"),
])
def test_bad_device_json_is_refused(tmp_path, text, needle):
    p = tmp_path / "dev.json"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_device(p)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg and str(p) in msg


def test_valid_onnx_ops_are_accepted(tmp_path):
    p = tmp_path / "dev.json"
    p.write_text('{"base": "atlas300i_pro", "unsupported_ops": ["NonMaxSuppression", "TopK"]}')
    assert load_device(p).unsupported_ops == ("NonMaxSuppression", "TopK")


def test_cli_duplicate_device_key_exits_2(tmp_path):
    model = _convrelu(tmp_path / "cr.onnx")
    p = tmp_path / "dup.json"
    p.write_text('{"base":"atlas300i_pro","base":"ascend910"}')
    res = _cli(str(model), "--device", str(p), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "'base' is given twice" in res.stderr and not (tmp_path / "out").exists()
