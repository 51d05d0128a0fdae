"""Signoff runs (toolkit/signoff/run.py): the worst case keeps an input set where a tensor was not comparable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

C08 = Path("/work/shared/cases/fp16/c08_softplus_exp_overflow")


pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")]


def test_worst_case_keeps_an_input_set_where_the_tensor_was_not_comparable():
    import pandas as pd

    from toolkit.signoff.run import _worst_case, dataset_evidence

    row = {"NodeName": "n", "OpType": "Relu", "GroundTruthDataType": "float32", "DataType": "float16", "Abnormal": False,
           "OverFlow": False}
    a = pd.DataFrame([{**row, "TensorName": "t", "CosineSimilarity": 0.999, "CompareFailReason": ""}])
    b = pd.DataFrame([{**row, "TensorName": "t", "CosineSimilarity": float("nan"),
                       "CompareFailReason": "no position where both tensors are finite"}])
    for tables in ([a, b], [b, a]):
        worst = _worst_case(tables)
        assert np.isnan(worst.loc[0, "CosineSimilarity"])
        assert worst.loc[0, "CompareFailReason"] == "no position where both tensors are finite"
    # dataset: the aggregate skips NaN, so a tensor compared on 2 of 3 inputs is marked from its Inputs count
    layers = a.assign(Inputs=2)
    metas = [{"input": f"i{k}", "outputs": {}, "tasks": [], "run_ms": 1.0, "shapes": {"x": [1]}} for k in range(3)]
    ev = dataset_evidence(["y"], metas, layers, None)
    assert np.isnan(ev.layers.loc[0, "CosineSimilarity"])
    assert ev.layers.loc[0, "CompareFailReason"] == "not compared on 1 of 3 input(s)"
    assert ev.shapes == [{"x": [1]}] * 3


def _one_input_model(tmp_path: Path, kind: str) -> Path:
    """y = relu(x) on x float32[N, 4] ("relu"), y = x passed through ("pass"), or a constant output ("const")."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    if kind == "pass":
        g = helper.make_graph([], "g", [x], [x])
    elif kind == "const":
        c = helper.make_node("Constant", [], ["y"], name="c", value=numpy_helper.from_array(np.float32([1.0, 2.0])))
        g = helper.make_graph([c], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    else:
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="n0")], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / f"{kind}.onnx")
    return tmp_path / f"{kind}.onnx"


@pytest.mark.parametrize("kind, rows, words", [
    ("relu", [0], "no element was compared: the output is empty on all 1 input set"),
    ("relu", [0, 0], "no element was compared: the output is empty on all 2 input set"),
    ("pass", [2], "no kernel runs"),
    ("const", [2], "no kernel runs"),
])
def test_an_output_criterion_checked_on_nothing_fails(tmp_path, kind, rows, words):
    """Every input set gives an empty output (a dimension of size 0), or no kernel computes the output (a graph
    input passed through, a constant): every metric would hold on nothing, so the criterion fails as not
    computable and prints no value."""
    from toolkit.config.schema import Config
    from toolkit.signoff.policy import policy_from_dict
    from toolkit.signoff.run import run_signoff

    folder = tmp_path / "in"
    folder.mkdir()
    for i, n in enumerate(rows):
        np.savez(folder / f"s{i}.npz", x=np.ones((n, 4), np.float32))
    run = run_signoff(str(_one_input_model(tmp_path, kind)),
                      policy_from_dict({"outputs": {"*": "CosineSimilarity>=0.99,MaxAbsoluteError<=0.01"}}),
                      Config(), inputs=str(folder))
    assert run.results and all(not r.passed and "not computable" in r.message and words in r.message
                               and "worst" not in r.message for r in run.results), [r.message for r in run.results]


def test_an_empty_output_on_some_input_sets_is_judged_on_the_others(tmp_path):
    from toolkit.config.schema import Config
    from toolkit.signoff.policy import policy_from_dict
    from toolkit.signoff.run import run_signoff

    folder = tmp_path / "in"
    folder.mkdir()
    np.savez(folder / "a.npz", x=np.zeros((0, 4), np.float32))
    np.savez(folder / "b.npz", x=np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    run = run_signoff(str(_one_input_model(tmp_path, "relu")), policy_from_dict(
        {"outputs": {"*": "CosineSimilarity>=0.99"}}), Config(), inputs=str(folder))
    (r,) = run.results
    assert r.passed and "not computable" not in r.message, r.message
