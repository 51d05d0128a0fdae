"""Helpers of the compile-cache tests (not a test module): a small model, its config and compile, and a fresh
cache folder."""

from __future__ import annotations

import dataclasses
import os
import textwrap

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from toolkit.cache import keys, store
from toolkit.cache.store import LAYOUT
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.runtime import kernels
from toolkit.engine import npu_runtime

RNG = np.random.default_rng(7)
W1 = RNG.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
B1 = RNG.normal(0, 0.1, (4,)).astype(np.float32)
W2 = RNG.normal(0, 0.3, (4, 4, 1, 1)).astype(np.float32)
X = RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)


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
    rt = npu_runtime(cr)
    store.flush()
    return cr, rt


def n_sessions(rt) -> int:
    return sum(1 for ek in rt.kernels if ek.session is not None)


def plan_dict(cr) -> dict:
    d = cr.plan.to_dict()
    d["config"] = {k: v for k, v in d["config"].items() if k not in keys.NON_CODE_FIELDS}
    return d


def run(rt, shape=(1, 3, 8, 8)):
    x = np.resize(X, shape).astype(np.float32)
    return rt.run({"x": x}).outputs["y"]


def fresh(model, config, shape=(1, 3, 8, 8)):
    """A compile with the cache disabled (what every cached result must equal)."""
    return build(model, dataclasses.replace(config, op_compiler_cache_mode="disable"), shape)


# ---------------------------------------------------------------------------------------------- key ingredients
def _orig_versions():
    return dict(keys._versions())


INGREDIENTS = {
    "weights": lambda: (make_model(w1=W1 * 1.5), {}, (1, 3, 8, 8), None),
    "attribute": lambda: (make_model(alpha=0.25), {}, (1, 3, 8, 8), None),
    "shape": lambda: (make_model(), {}, (1, 3, 16, 16), None),
    "precision_mode": lambda: (make_model(), {"precision_mode": "force_fp32"}, (1, 3, 8, 8), None),
    "op_select_implmode": lambda: (make_model(), {"op_select_implmode": "high_precision"}, (1, 3, 8, 8), None),
    "overflow_mode": lambda: (make_model(), {"overflow_mode": "saturation"}, (1, 3, 8, 8), None),
    "fusion_level": lambda: (make_model(), {"fusion_level": 0}, (1, 3, 8, 8), None),
    "fusion_switch_file": lambda: (make_model(), {"fusion_switch_file": {"Switch": {"UBFusion": {
        "TbeCubeElemwiseFusionPass": "off"}}}}, (1, 3, 8, 8), None),
    "toolkit_version": lambda: (make_model(), {}, (1, 3, 8, 8), {"npuscope": "9.9.9+other"}),
    "onnxruntime_version": lambda: (make_model(), {}, (1, 3, 8, 8), {"onnxruntime": "0.0.1"}),
}


# ---------------------------------------------------------------------------------------------- one-node edits
#: a value edit that makes a weight overflow FP16 (and one that flushes every weight to zero) must give the
#: findings a fresh compile gives (only check_constants reads values after a value-only patch)
_OVER = W1.copy()
_OVER[0, 0, 0, 0] = 7e4


# ---------------------------------------------------------------------------------------------- corruption
def _entry(tmp_path, ns) -> list:
    return sorted((tmp_path / LAYOUT / ns).iterdir())


# ---------------------------------------------------------------------------------------------- concurrency
WORKER = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np, onnx
    from toolkit.engine import compile_model
    from toolkit.config.schema import Config
    from toolkit.engine import npu_runtime
    model = onnx.load(sys.argv[1])
    c = Config(precision_mode="force_fp16", op_compiler_cache_mode="enable", op_compiler_cache_dir=sys.argv[2])
    x = np.load(sys.argv[3])
    outs = []
    for _ in range(3):
        cr = compile_model(model, c, input_shapes={"x": x.shape})
        y = npu_runtime(cr).run({"x": x}).outputs["y"]
        outs.append(hashlib.sha256(y.tobytes()).hexdigest())
    print(json.dumps({"status": cr.cache["status"], "out": outs}))
""")


def _foreign_tree(root):
    """Files a user keeps under a folder mistaken for a cache: names that are not keys, keys outside the kind
    folders, a key-named folder and symlink, an upper-case key. Returns their paths."""
    v1 = root / LAYOUT
    (v1 / "compile").mkdir(parents=True, exist_ok=True)
    (v1 / "other").mkdir(parents=True, exist_ok=True)
    (v1 / "kernel" / ("d" * 64)).mkdir(parents=True)           # a folder named like a key
    target = root / "outside.txt"
    target.write_text("keep me")
    files = [v1 / "compile" / "notes.txt", v1 / "other" / "c.txt", v1 / "other" / ("e" * 64),
             v1 / "compile" / ("F" * 64), v1 / "compile" / (("0" * 63) + ".bak"), v1 / "kernel" / ("d" * 64) / "x",
             v1 / "readme", target]
    for f in files:
        f.write_text("user data")
    (v1 / "bundle").mkdir(exist_ok=True)
    os.symlink(target, v1 / "bundle" / ("9" * 64))               # a key-named symlink to a user file
    return files
