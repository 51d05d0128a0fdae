"""diagnose on models whose control flow (If/Loop/Scan) nests, and on graphs with nothing left to simulate."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from toolkit.config.schema import Config
from toolkit.diagnose import diagnose, prepare
from toolkit.zoo import cache_dir


def _branch(name: str, nodes: list, out: str, rank: int) -> onnx.GraphProto:
    return h.make_graph(nodes, name, [], [h.make_tensor_value_info(out, T.FLOAT, [None] * rank)])


def _nested_if(depth: int, width: int) -> onnx.ModelProto:
    """``depth`` Ifs nested in each other's then-branch. The else-branch of every level reshapes ``x`` to a fixed
    [2, width // 2] and then to rank 3 [2, 1, width // 2]: taken for no input here, and impossible for a frame of
    another width, so a kernel that infers every branch from static input shapes is refused (silero-vad's
    8 kHz path). The taken path computes relu(x * 2 + 1) in the innermost then-branch."""
    inner = _branch("then_0", [h.make_node("Mul", ["x", "two"], ["m0"]), h.make_node("Add", ["m0", "one"], ["t0"])],
                    "t0", 2)
    out = "t0"
    for level in range(depth):
        other = _branch(f"else_{level}", [h.make_node("Reshape", ["x", "fixed"], [f"r{level}"]),
                                          h.make_node("Reshape", [f"r{level}", "back"], [f"e{level}"])],
                        f"e{level}", 2)
        node = h.make_node("If", ["c"], [f"o{level}"], then_branch=inner, else_branch=other, name=f"if_{level}")
        out = f"o{level}"
        inner = _branch(f"then_{level + 1}", [node], out, 2)
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0), h.make_node("Greater", ["s", "lo"], ["c"]),
             *inner.node, h.make_node("Relu", [out], ["y"])]
    inits = [h.make_tensor("two", T.FLOAT, [], [2.0]), h.make_tensor("one", T.FLOAT, [], [1.0]),
             h.make_tensor("lo", T.FLOAT, [], [-1e9]),
             h.make_tensor("fixed", T.INT64, [3], [2, 1, width // 2]), h.make_tensor("back", T.INT64, [2], [1, -1])]
    g = h.make_graph(nodes, "nested_if", [h.make_tensor_value_info("x", T.FLOAT, ["n", "w"])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["n", "w"])], initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("fusion_level", [0, 2])
@pytest.mark.parametrize("precision_mode", ["allow_mix_precision", "force_fp16"])
def test_nested_control_flow_runs_on_the_host_and_its_output_is_compared(tmp_path, depth, fusion_level,
                                                                         precision_mode):
    width = 12 * (depth + 1)
    model = _nested_if(depth, width)
    path = tmp_path / "nested.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(depth).uniform(-2, 2, (1, width + 2)).astype(np.float32)  # not the else path's width
    np.savez(tmp_path / "x.npz", x=x)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(expected, np.maximum(x * 2 + 1, 0), rtol=1e-6)
    diag, extra = diagnose(prepare(str(path), str(tmp_path / "x.npz")),
                           Config(fusion_level=fusion_level, precision_mode=precision_mode,
                                  op_compiler_cache_mode="disable"))
    row = diag.table[diag.table["TensorName"] == "y"].iloc[0]
    assert row["CosineSimilarity"] > 0.9999
    assert diag.summary["verdict"] in ("PASS", "WARN")
    assert [f for f in diag.findings if f.kind == "cpu_fallback" and f.subject.startswith("if_")]
    host = [k for k in extra["compiled"].plan.kernels if k.op_type == "If"]
    assert host and all(k.precision == "fp32" for k in host)


@pytest.mark.parametrize("build", ["add", "matmul_concat", "shape_of_constant"])
def test_a_graph_folded_entirely_at_compile_time_says_no_kernel_ran(tmp_path, build):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    inits = [onnx.numpy_helper.from_array(a, "a"), onnx.numpy_helper.from_array(b, "b")]
    if build == "add":
        nodes, expected = [h.make_node("Add", ["a", "b"], ["y"])], a + b
    elif build == "matmul_concat":
        nodes = [h.make_node("MatMul", ["a", "bt"], ["m"]), h.make_node("Concat", ["m", "m"], ["y"], axis=0)]
        inits.append(onnx.numpy_helper.from_array(b.T.copy(), "bt"))
        expected = np.concatenate([a @ b.T, a @ b.T], axis=0)
    else:
        nodes = [h.make_node("Shape", ["a"], ["s"]), h.make_node("Cast", ["s"], ["y"], to=T.FLOAT)]
        expected = np.array(a.shape, np.float32)
    g = h.make_graph(nodes, "folded", [], [h.make_tensor_value_info("y", T.FLOAT, expected.shape)], initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "folded.onnx"
    onnx.save(m, path)
    diag, extra = diagnose(prepare(str(path)), Config(op_compiler_cache_mode="disable"))
    assert extra["compiled"].plan.kernels == []
    assert diag.summary["verdict"] == "WARN"
    assert any("no kernel ran" in r for r in diag.summary["reasons"])
    np.testing.assert_allclose(extra["golden"]["y"], expected, rtol=1e-6)


SILERO_WHEEL = "silero-vad==6.2.3"
SILERO_WHEEL_SHA256 = "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"
SILERO_MODEL_SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"


def _silero_vad(cache: Path) -> Path:
    """silero_vad.onnx from PyPI's silero-vad 6.2.3 wheel (downloaded once into ``cache``, sha256-checked)."""
    model = cache / "silero_vad.onnx"
    if model.is_file() and hashlib.sha256(model.read_bytes()).hexdigest() == SILERO_MODEL_SHA256:
        return model
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                    "--dest", str(cache), SILERO_WHEEL], check=True, capture_output=True, timeout=600)
    wheel = next(cache.glob("silero_vad-6.2.3-*.whl"))
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == SILERO_WHEEL_SHA256
    with zipfile.ZipFile(wheel) as zf:
        data = zf.read("silero_vad/data/silero_vad.onnx")
    assert hashlib.sha256(data).hexdigest() == SILERO_MODEL_SHA256
    model.write_bytes(data)
    return model


@pytest.mark.slow
def test_silero_vad_with_if_nested_in_an_if_branch_runs_end_to_end(tmp_path):
    path = _silero_vad(cache_dir() / "silero-vad")
    rng = np.random.default_rng(0)
    feeds = {"input": rng.uniform(-0.5, 0.5, (1, 512)).astype(np.float32),
             "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}
    np.savez(tmp_path / "frame.npz", **feeds)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    diag, extra = diagnose(prepare(str(path), str(tmp_path / "frame.npz")), Config(op_compiler_cache_mode="disable"))
    outputs = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
    for name, want in zip(outputs, expected):
        np.testing.assert_allclose(extra["golden"][name], want, rtol=1e-5, atol=1e-6)
        row = diag.table[diag.table["TensorName"] == name].iloc[0]
        assert row["CosineSimilarity"] > 0.999, (name, row["CosineSimilarity"])
    assert diag.summary["verdict"] in ("PASS", "WARN")
    assert any(f.kind == "cpu_fallback" for f in diag.findings)
