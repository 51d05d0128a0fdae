"""The activation rules' numeric probe is memoised by region signature: equal regions under other tensor
names are probed once and fused alike; a region that differs only in a constant is probed on its own (and a
wrong constant is refused)."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from toolkit.compiler.rules import activation
from toolkit.config.schema import Config
from toolkit.engine import Session


def hardswish_chain(divisors):
    """x -> HardSwish-like regions in sequence, each `t * clip(t + 3, 0, 6) / d` with its own tensor names."""
    nodes, inits, t = [], [], "x"
    for k, d in enumerate(divisors):
        nodes += [helper.make_node("Add", [t, f"three{k}"], [f"a{k}"], name=f"add{k}"),
                  helper.make_node("Clip", [f"a{k}", f"lo{k}", f"hi{k}"], [f"c{k}"], name=f"clip{k}"),
                  helper.make_node("Mul", [t, f"c{k}"], [f"m{k}"], name=f"mul{k}"),
                  helper.make_node("Div", [f"m{k}", f"d{k}"], [f"h{k}"], name=f"div{k}"),
                  helper.make_node("Sin", [f"h{k}"], [f"s{k}"], name=f"sin{k}")]
        inits += [numpy_helper.from_array(np.array(v, np.float32), f"{n}{k}")
                  for n, v in (("three", 3.0), ("lo", 0.0), ("hi", 6.0), ("d", d))]
        t = f"s{k}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info(t, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def probes_for(monkeypatch, divisors):
    calls = []
    real = activation._evaluate_probe
    monkeypatch.setattr(activation, "_evaluate_probe", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(activation, "_PROBED", {})
    sess = Session(hardswish_chain(divisors), Config(precision_mode="force_fp32"))
    return len(calls), sess


def test_equal_regions_are_probed_once_and_a_different_constant_separately(monkeypatch):
    one, _ = probes_for(monkeypatch, [6.0, 7.0])
    three, sess = probes_for(monkeypatch, [6.0, 6.0, 6.0, 7.0])
    assert three == one  # two more equal regions under other names: no more probes
    fused = [k for k in sess.plan.kernels if k.rule == "HardSwishFusionPass"]
    assert sorted(k.nodes[0] for k in fused) == ["add0", "add1", "add2"]  # /7 is not HardSwish
    x = np.random.default_rng(0).uniform(-6, 6, (4, 8)).astype(np.float32)
    want = x
    for d in (6.0, 6.0, 6.0, 7.0):
        want = np.sin(want * np.clip(want + 3, 0, 6) / np.float32(d))
    np.testing.assert_allclose(sess.run({"x": x}).outputs["s3"], want, rtol=1e-5, atol=1e-6)
