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
