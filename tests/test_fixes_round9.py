"""Fault kinds of round 9:

- compare-dumps: model nodes whose names share one dump file-name form ('a/b' and 'a.b' both dump as 'a_b')
  are never paired by that name (one node compared against the other's dump, the real one dropped as
  "superseded"); their rows say why and a note names the clash;
- regress: a tensor compared in only one of the two runs (fused into a kernel in the other) is listed as such,
  never as a metric regression ("nan -> 1"), in either direction;
- cache clear / info never follow a namespace folder that is a symbolic link out of the cache folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=300)


def _clash_model():
    nodes = [h.make_node("Relu", ["x"], ["t1"], name="blk/relu.1"), h.make_node("Mul", ["t1", "half"], ["t3"], name="a/b"),
             h.make_node("Mul", ["t3", "c"], ["y"], name="a.b")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8])],
                     [nh.from_array(np.array(0.5, np.float32), "half"), nh.from_array(np.array(1.5, np.float32), "c")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_dump_names_shared_by_two_nodes_are_never_paired_by_name(tmp_path):
    model = _clash_model()
    onnx.save(model, tmp_path / "m.onnx")
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    t1 = np.maximum(x, 0)
    t3, y = t1 * 0.5, t1 * 0.5 * 1.5
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], y)
    gold, dev = tmp_path / "gold", tmp_path / "dev"
    gold.mkdir()
    dev.mkdir()
    for node, arr in (("blk_relu_1", t1), ("a_b", t3)):  # ONNX golden names: <node>.<index>.<timestamp>.npy
        np.save(gold / f"{node}.0.1700000000000001.npy", arr)
    bad = t3.copy()
    bad[0, 7] += 5.0  # the device op of node 'a/b' is wrong
    np.save(dev / "Relu.blk_relu_1.1.0.1700000000000100.output.0.1x8.npy", t1)
    np.save(dev / "Mul.a_b.2.0.1700000000000101.output.0.1x8.npy", bad)   # node 'a/b'
    np.save(dev / "Mul.a_b.3.0.1700000000000102.output.0.1x8.npy", y)     # node 'a.b'
    proc = _cli("compare-dumps", gold, dev, "--model", tmp_path / "m.onnx", "--no-html", "--out", tmp_path / "o")
    assert proc.returncode in (0, 1), proc.stderr
    rows = {r["NodeName"]: r for r in __import__("csv").DictReader(open(tmp_path / "o" / "result.csv"))}
    for node in ("a/b", "a.b"):
        assert "ambiguous" in rows[node]["CompareFailReason"], rows[node]
    # no node was compared against a dump of the other: nothing reports y's values as t3's error (0.5·t3)
    assert rows["blk/relu.1"]["CompareFailReason"] == ""
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert "'a/b' / 'a.b' -> 'a_b'" in json.dumps(summary)  # the note names the clash


def test_regress_lists_tensors_compared_in_one_run_only(tmp_path):
    cfg = tmp_path / "fl0.toml"
    cfg.write_text("fusion_level = 0\n")
    for name, extra in (("fused", []), ("unfused", ["--config", cfg])):
        r = _cli("compare", "transformer_block", *extra, "--out", tmp_path / name)
        assert r.returncode in (0, 1), r.stderr
    import pandas as pd

    fused = pd.read_csv(tmp_path / "fused" / "result.csv", keep_default_na=False).set_index("TensorName")
    unfused = pd.read_csv(tmp_path / "unfused" / "result.csv", keep_default_na=False).set_index("TensorName")
    only_new = {t for t in fused.index if t in unfused.index and fused.at[t, "CompareFailReason"]
                and not unfused.at[t, "CompareFailReason"]}
    assert only_new  # fusion off makes tensors comparable (computed here from the two tables)
    for a, b, side in (("fused", "unfused", "new"), ("unfused", "fused", "baseline")):
        r = _cli("regress", tmp_path / a, tmp_path / b, "--out", tmp_path / f"rg_{a}")
        rep = json.loads((tmp_path / f"rg_{a}" / "regress.json").read_text())
        assert not {d["TensorName"] for d in rep["layer_deltas"]} & only_new, rep["layer_deltas"][:3]
        listed = {c["TensorName"] for c in rep["tensor_changes"] if c["change"].startswith(f"compared only in {side}")}
        assert listed == only_new
        assert r.returncode == (1 if rep["regressed"] else 0)


def test_cache_clear_does_not_follow_a_linked_namespace_folder(tmp_path):
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    (cache / "v2").mkdir(parents=True)
    outside.mkdir()
    precious = outside / ("a" * 64)
    precious.write_text("precious")
    (cache / "v2" / "recipes").symlink_to(outside)
    env = {"NPUSCOPE_COMPILE_CACHE": str(cache)}
    info = _cli("cache", "info", env=env)
    assert info.returncode == 0 and "recipes" not in info.stdout.split("entries:")[1].split("\n")[0], info.stdout
    clear = _cli("cache", "clear", env=env)
    assert clear.returncode == 0, clear.stderr
    assert precious.read_text() == "precious"
