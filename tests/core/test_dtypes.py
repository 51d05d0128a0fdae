"""dtype classes (toolkit/core/dtypes.py) of every kind of value."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from toolkit.compare.metrics import dtype_class

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.parametrize("dt, cls", [(np.float32, "float"), (ml_dtypes.bfloat16, "float"),
                                     (ml_dtypes.float8_e5m2, "float"), (ml_dtypes.float4_e2m1fn, "float"),
                                     (np.bool_, "integer"), (ml_dtypes.int4, "integer"), (ml_dtypes.uint2, "integer"),
                                     (np.str_, "integer"), (object, "integer"), (np.complex64, "other")])
def test_dtype_class_of_every_kind(dt, cls):
    assert dtype_class(dt) == cls
