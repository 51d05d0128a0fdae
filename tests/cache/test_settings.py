"""Compile-cache settings (toolkit/cache/settings.py): where the folder is, the size limit from the
environment, and bad cache options as clear errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.cache import store
from toolkit.cache.settings import default_dir, from_config
from toolkit.compiler.pipeline import compile_model
from toolkit.config import Config
from toolkit.errors import ConfigError
from toolkit.runtime import kernels
from toolkit.runtime.npu import NpuRuntime

RNG = np.random.default_rng(7)
W1 = RNG.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
B1 = RNG.normal(0, 0.1, (4,)).astype(np.float32)
W2 = RNG.normal(0, 0.3, (4, 4, 1, 1)).astype(np.float32)


def make_model(w1=W1, w2=W2, alpha=0.2, dil2=(1, 1)) -> onnx.ModelProto:
    """x -> Conv(w1 initializer, pads 1) -> Relu -> Conv(w2 from a Constant node, 1x1) -> HardSigmoid -> y."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Constant", [], ["w2"], name="w2_const", value=numpy_helper.from_array(w2, "w2")),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", dilations=list(dil2)),
             helper.make_node("HardSigmoid", ["c2"], ["y"], name="hsig", alpha=alpha)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(B1, "b1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cfg(folder, **kw) -> Config:
    base = {"precision_mode": "force_fp16", "op_compiler_cache_mode": "enable", "op_compiler_cache_dir": str(folder)}
    base.update(kw)
    return Config(**base)


def build(model, config, shape=(1, 3, 8, 8)):
    """(CompileResult, NpuRuntime) as a new process would get them (in-memory kernel sessions dropped)."""
    kernels._SESSIONS.clear()
    cr = compile_model(model, config, input_shapes={"x": shape})
    rt = NpuRuntime(cr)
    store.flush()
    return cr, rt


def test_cache_size_limit_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MAX_BYTES", "20000")
    build(make_model(), cfg(tmp_path))
    total = sum(f.stat().st_size for f in (tmp_path / "v1").rglob("*") if f.is_file())
    assert total <= 20000


def test_settings_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("NPUSCOPE_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_dir() == tmp_path / "xdg" / "npuscope" / "compile"
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE", str(tmp_path / "moved"))
    assert default_dir() == tmp_path / "moved"
    assert from_config(Config(op_compiler_cache_dir=str(tmp_path / "cfg"))).root == tmp_path / "cfg"
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MODE", "force")
    assert Config().op_compiler_cache_mode == "force"


def test_bad_cache_options_are_clear_errors(monkeypatch):
    with pytest.raises(ConfigError, match="op_compiler_cache_mode = 'enabled'.*did you mean 'enable'"):
        Config.from_dict({"op_compiler_cache_mode": "enabled"})
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ConfigError, match="NPUSCOPE_COMPILE_CACHE_MAX_BYTES = 'lots'"):
        from_config(Config())
