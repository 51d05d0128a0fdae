"""Input shapes (toolkit/compiler/passes/bind_shapes.py): the dynamic-dims message, and a symbolic dim shared by
several inputs given two sizes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.commands.common import config_from_dict, load_config
from toolkit.compiler.passes.bind_shapes import check_input_shapes
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError
from toolkit.gears.session import GearSession


def test_dynamic_dims_message_format():
    from toolkit.compiler.passes.bind_shapes import dynamic_dims_message

    fix = 'give its shape with --input-shape "{example}"'
    assert dynamic_dims_message("x", [None, "seq", 8], fix) == (
        "input 'x' has dynamic dims: declared shape (?, seq, 8) (? = unnamed); "
        'give its shape with --input-shape "x:N,N,8"')
    assert dynamic_dims_message("m", ["b", 16], fix) == (
        "input 'm' has dynamic dims: declared shape (b, 16); give its shape with --input-shape \"m:N,16\"")
    assert dynamic_dims_message("z", None, fix).startswith("input 'z' has no declared rank; ")


FP32 = {"precision_mode": "force_fp32"}


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def _float_model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# ------------------------------------------------------------------------------ shared symbolic dims (kind)
def _random_shared_model(rs):
    """2-3 inputs of rank 2-3 whose dims are static ints or the symbols 's'/'t' (one Relu per input), with one
    symbol used at least twice; returns (model, {input: declared dims}, the shared symbol)."""
    while True:
        choices = ["s", "t", 3, 1, 2]
        decl = {f"in{i}": [choices[rs.randint(5)] for _ in range(rs.randint(2, 4))] for i in range(rs.randint(2, 4))}
        uses = [d for v in decl.values() for d in v if isinstance(d, str)]
        shared = [s for s in ("s", "t") if uses.count(s) >= 2 and sum(s in v for v in decl.values()) >= 2]
        if shared:
            break
    nodes = [helper.make_node("Relu", [k], [f"out_{k}"], name=f"relu_{k}") for k in decl]
    m = _float_model(nodes, list(decl.items()), [(f"out_{k}", v) for k, v in decl.items()])
    return m, decl, shared[0]


@pytest.mark.parametrize("seed", range(8))
def test_shared_symbol_given_two_sizes_is_refused_everywhere(seed):
    rs = np.random.RandomState(seed)
    m, decl, sym = _random_shared_model(rs)
    size = {"s": int(rs.randint(2, 6)), "t": int(rs.randint(6, 9))}
    good = {k: tuple(size[d] if isinstance(d, str) else d for d in v) for k, v in decl.items()}
    # consistent sizes compile and run (independent check: Relu by numpy)
    text = ";".join(f"{k}:{','.join(map(str, v))}" for k, v in good.items())
    feeds = {k: rs.randn(*v).astype(np.float32) for k, v in good.items()}
    from toolkit.engine import Session
    out = Session(m, Config.from_dict({"input_shape": text, **FP32})).run(feeds).outputs
    for k in decl:
        np.testing.assert_array_equal(out[f"out_{k}"], np.maximum(feeds[k], 0))
    # the last use of the shared symbol gets another size
    holders = [k for k, v in decl.items() if sym in v]
    first, last = holders[0], holders[-1]
    bad = {k: list(v) for k, v in good.items()}
    bad[last][max(i for i, d in enumerate(decl[last]) if d == sym)] = size[sym] + 1
    text = ";".join(f"{k}:{','.join(map(str, v))}" for k, v in bad.items())
    want = f"dim '{sym}' is {size[sym]} in {first} but {size[sym] + 1} in {last}; give every input the same size"
    with pytest.raises(ConfigError, match=want) as exc:  # compile (input_shape / --input-shape)
        compile_model(m, config_from_dict({"input_shape": text}))
    _one_line(exc)
    with pytest.raises(InputError, match=want):  # data given by the user
        check_input_shapes(m, {k: tuple(v) for k, v in bad.items()}, where="inputs", error=InputError)
    # gears: -1 on every use of the symbol, one gear gives them two sizes -> refused before compiling anything
    tmpl = ";".join(f"{k}:{','.join('-1' if d == sym else str(x) for d, x in zip(decl[k], good[k]))}"
                    for k in decl)
    n_slots = sum(d == sym for v in decl.values() for d in v)
    ok = ",".join(["4"] * n_slots)
    skew = ",".join(["5"] * (n_slots - 1) + ["6"])
    with pytest.raises(ConfigError, match=f"dynamic_dims gear 2 '{skew}': dim '{sym}' is 5 in {first} but 6 in "
                                          f"{last}") as exc:
        GearSession(m, config_from_dict({"input_shape": tmpl, "dynamic_dims": f"{ok};{skew}"}))
    _one_line(exc)
    gs = GearSession(m, Config.from_dict({"input_shape": tmpl, "dynamic_dims": f"{ok};{ok.replace('4', '8')}"}))
    skewed = {k: np.zeros([3 if d == sym and k == last else 2 if d == sym else x for d, x in zip(decl[k], good[k])],
                          np.float32) for k in decl}
    with pytest.raises(InputError, match=f"dim '{sym}' is 2 in {first} but 3 in {last}"):
        gs.run(skewed)
    assert not gs.sessions


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_an_index_input_out_of_range_names_val_range(dtype):
    """Generated ids that onnxruntime refuses too (a Gather past the table): the one-line error names the
    integer input and --val-range, and the values that run (checked with onnxruntime) are in that range."""
    import onnxruntime as ort

    from toolkit.compiler.passes.bind_shapes import raise_if_reference_fails
    from toolkit.core.errors import ModelError

    g = helper.make_graph([helper.make_node("Gather", ["E", "ids"], ["y"], name="g")], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64 if dtype == np.int64 else
                                                         TensorProto.INT32, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3])],
                          [numpy_helper.from_array(np.ones((5, 3), np.float32), "E")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    bad = {"ids": np.array([[0, 1, 5, 9]], dtype)}
    with pytest.raises(ModelError) as err:
        raise_if_reference_fails(m, bad, RuntimeError("kernel failed"))
    msg = str(err.value)
    assert "\n" not in msg and "--val-range \"ids:[0,N]\"" in msg and "(ids)" in msg
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    good = {"ids": np.array([[0, 1, 4, 3]], dtype)}
    assert sess.run(None, good)[0].shape == (1, 4, 3)
    assert raise_if_reference_fails(m, good, RuntimeError("ours")) is None  # the model runs them: not its inputs
