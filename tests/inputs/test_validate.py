"""Feed validation (toolkit/inputs/validate.py): dtype advice names only what numpy has."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import helper

ONNX_TYPES = [t for t in onnx.TensorProto.DataType.values() if t not in (0,)]


@pytest.mark.parametrize("elem", ONNX_TYPES)
def test_dtype_advice_names_only_what_numpy_has(elem):
    from toolkit.inputs.validate import cast_hint

    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    except (KeyError, TypeError, ValueError):
        pytest.skip("no numpy dtype for this ONNX type")
    hint = cast_hint(dtype)
    for name in re.findall(r"\bnp\.(\w+)", hint):
        assert callable(getattr(np, name, None)), (elem, hint)  # exists in the installed numpy
    assert "np.object" not in hint


@pytest.mark.parametrize("n_defaults", [1, 2])
def test_a_feed_naming_a_graph_input_with_an_initializer_is_refused_with_that_reason(n_defaults, tmp_path):
    from onnx import TensorProto, numpy_helper

    from toolkit.core.errors import InputError
    from toolkit.inputs import load_npz
    from toolkit.inputs.spec import input_specs

    names = ["a", "b"][:n_defaults]
    inits = [numpy_helper.from_array(np.ones((2, 3), np.float32), n) for n in names]
    node = helper.make_node("Sum", ["x", *names], ["y"], name="sum")
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ["x", *names]]
    g = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    specs = input_specs(model)
    assert [s.name for s in specs] == ["x"] and list(specs.defaults) == names
    feed = {n: np.zeros((2, 3), np.float32) for n in ["x", *names]}
    np.savez(tmp_path / "f.npz", **feed)
    with pytest.raises(InputError) as err:
        load_npz(tmp_path / "f.npz", specs)
    msg = str(err.value)
    assert "initializer" in msg and str(names) in msg and "\n" not in msg
    np.savez(tmp_path / "g.npz", x=feed["x"], other=feed["x"])  # an unknown name keeps the general message
    with pytest.raises(InputError, match=r"unexpected \['other'\]; the model's inputs are \['x'\]"):
        load_npz(tmp_path / "g.npz", specs)
