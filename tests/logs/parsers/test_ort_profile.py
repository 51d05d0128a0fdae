"""The onnxruntime profile parser (toolkit/logs/parsers/ort_profile.py): fixtures, pretty-printed and truncated
files, and a real onnxruntime profile whose per-node times sum to the event total."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.logs.helpers import ort_events, write_events_per_line
from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import ort_profile


def test_ort_profile_parser(tmp_path):
    path = tmp_path / "onnxruntime_profile__2024.json"
    write_events_per_line(path, ort_events())
    assert detect_format(path).parser.name == "ort_profile"
    res = ort_profile.parse(path)
    s = res.op_summary
    assert s["Op Name"].tolist() == ["conv", "relu", "copy"] and s["OP Type"].tolist() == ["Conv", "Relu", "MemcpyToHost"]
    assert s["Task Type"].tolist() == ["HOST_CPU", "HOST_CPU", "MEMCPY"] and s["Stream ID"].tolist() == [5, 5, 6]
    assert s["Task Duration(us)"].tolist() == [30, 4, 6] and s["Task Start Time(us)"].tolist() == [200, 231, 236]
    assert s["Input Shapes"].iloc[0] == "1,3,8,8;4,3,3,3" and s["Input Data Types"].iloc[0] == "FLOAT;FLOAT"
    assert res.malformed == 2
    sess = res.tables["ort_sessions"].set_index("Name")
    assert sess.loc["model_run", "Total(us)"] == 50
    assert [f.kind for f in res.findings] == []                  # kernels 40 us of a 50 us run: >= half


def test_pretty_printed_ort_profile_is_still_detected(tmp_path):
    path = tmp_path / "prof.json"
    path.write_text(json.dumps(ort_events(), indent=2))
    assert detect_format(path).parser.name == "ort_profile"
    assert ort_profile.parse(path).op_summary["Op Name"].tolist() == ["conv", "relu", "copy"]


def test_truncated_ort_profile_is_recovered_event_by_event(tmp_path):
    path = tmp_path / "prof.json"
    write_events_per_line(path, ort_events(), close=False)
    text = path.read_text()
    path.write_text(text[:-25])                                 # cut inside the last event
    res = ort_profile.parse(path)
    assert res.op_summary["Op Name"].tolist() == ["conv", "relu", "copy"]
    assert res.malformed == 3 and any("truncated" in n for n in res.notes)


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((8 * 30 * 30, 16)).astype(np.float32), "m")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "m"], ["y0"], name="fc"),
             helper.make_node("Softmax", ["y0"], ["y"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [w, m, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ort_profile(tmp_path: Path, runs: int = 5) -> Path:
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "ortprof")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.use_per_session_threads = True
    sess = ort.InferenceSession(_model().SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.ones((1, 3, 32, 32), np.float32)
    for _ in range(runs):
        sess.run(None, {"x": x})
    return Path(sess.end_profiling())


def test_real_onnxruntime_profile_per_node_times_sum_to_the_event_total(tmp_path):
    path = _ort_profile(tmp_path, runs=5)
    events = json.loads(path.read_text())
    nodes = [e for e in events if e.get("cat") == "Node"]
    total = sum(e["dur"] for e in nodes)                               # the events' total, read independently
    per_node: dict[str, float] = {}
    for e in nodes:
        if e["name"].endswith("_kernel_time"):
            per_node[e["name"][:-len("_kernel_time")]] = per_node.get(e["name"][:-len("_kernel_time")], 0) + e["dur"]
    res = ort_profile.parse(path)
    got = res.op_summary.groupby("Op Name")["Task Duration(us)"].sum()
    assert set(got.index) == {"conv", "relu", "flatten", "fc", "softmax"} == set(per_node)
    assert got.sum() == pytest.approx(total, rel=0.05)
    for name, us in per_node.items():
        assert got[name] == pytest.approx(us)
    assert (res.op_summary["OP Type"].value_counts() == 5).all() and res.malformed == 0
    runs = res.tables["ort_sessions"].set_index("Name").loc["model_run"]
    assert runs["Count"] == 5 and got.sum() <= runs["Total(us)"]
