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

    row = {"NodeName": "n", "OpType": "Relu", "DataType": "float32", "NPUDump": "float16", "Abnormal": False,
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
