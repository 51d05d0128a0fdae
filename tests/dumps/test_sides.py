"""A GOLDEN dumped in lower float precision than the TARGET looks swapped (toolkit.dumps.sides)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from toolkit.dumps.sides import KIND, float_bits, lower_precision_golden


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64", "int32", "bool", "", "nan"])
def test_float_bits_are_the_dtypes_bits_for_floats_only(name):
    want = 0 if name in ("", "nan") or not name.startswith(("float", "bfloat")) else \
        {"bfloat16": 16}.get(name, np.dtype(name).itemsize * 8 if name.startswith("float") else 0)
    assert float_bits(name) == want


def _table(golden, target):
    return pd.DataFrame({"TensorName": [f"t{i}" for i in range(len(golden))], "GroundTruthDataType": golden,
                         "DataType": target})


@pytest.mark.parametrize("golden,target,warned", [
    (["float16"] * 3, ["float32"] * 3, True),           # device dumps given as GOLDEN
    (["float32"] * 2, ["float64"] * 2, True),           # an fp64 target
    (["float32"] * 3, ["float16"] * 3, False),          # the usual order
    (["float32", "float16", "float32"], ["float16", "float32", "float16"], False),  # a minority: no claim
    (["int64", "float32"], ["int64", "float32"], False)])
def test_a_lower_precision_golden_is_a_warning(golden, target, warned):
    f = lower_precision_golden(_table(golden, target))
    assert (f is not None) is warned
    if warned:
        lower = sum(float_bits(g) < float_bits(x) for g, x in zip(golden, target))
        assert (f.kind, f.severity, f.evidence["rows"]) == (KIND, "warning", lower)
        assert "swapped" in f.recommendation
