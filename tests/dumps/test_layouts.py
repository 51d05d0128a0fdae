"""toolkit.dumps.layouts: each device layout converted back to the ONNX layout.

The device arrays are built by the numpy references of tests/dumps/layout_refs.py (pad, reshape, transpose),
each first checked here element by element against the layout's index formula (CANN "Data Formats"), so a wrong
reference cannot make a wrong conversion pass.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tests.dumps.layout_refs import ref_fractal_nz, ref_fractal_z, ref_nc1hwc0, ref_ndc1hwc0, ref_nhwc, values

from toolkit.dumps.layouts import LAYOUTS, LayoutError, convert


def test_references_follow_the_index_formulas():
    """The references above put each element where the layout definitions say (loops over every index)."""
    x = values((2, 5, 2, 3), np.float32)
    d = ref_nc1hwc0(x, 4)
    assert d.shape == (2, 2, 2, 3, 4)
    for n, c, h, w in itertools.product(*map(range, x.shape)):
        assert d[n, c // 4, h, w, c % 4] == x[n, c, h, w]
    assert d[:, 1, :, :, 1:].sum() == 0  # channels 5..7 are padding
    x5 = values((1, 3, 2, 2, 2), np.float32)
    d5 = ref_ndc1hwc0(x5, 2)
    for n, c, dd, h, w in itertools.product(*map(range, x5.shape)):
        assert d5[n, dd, c // 2, h, w, c % 2] == x5[n, c, dd, h, w]
    wt = values((5, 3, 2, 3), np.float32)
    fz = ref_fractal_z(wt, c0=2, n0=4)
    assert fz.shape == (2 * 2 * 3, 2, 4, 2)
    for n, c, h, w in itertools.product(*map(range, wt.shape)):
        assert fz[(c // 2) * 6 + h * 3 + w, n // 4, n % 4, c % 2] == wt[n, c, h, w]
    m = values((2, 5, 7), np.float32)
    nz = ref_fractal_nz(m, n0=4, m0=2)
    assert nz.shape == (2, 2, 3, 2, 4)
    for b, i, j in itertools.product(*map(range, m.shape)):
        assert nz[b, j // 4, i // 2, i % 2, j % 4] == m[b, i, j]


# ------------------------------------------------------------------------------------------- conversions
DTYPES_C0 = [(np.float16, 16), (np.float32, 8), (np.float32, 16)]  # fp32 C0 is 8 or 16 depending on toolchain


@pytest.mark.parametrize("dtype,c0", DTYPES_C0)
@pytest.mark.parametrize("shape", [(1, 3, 4, 5), (2, 17, 3, 3), (3, 32, 2, 2), (2, 1, 1, 1), (1, 16, 1, 7)])
def test_nc1hwc0(shape, dtype, c0):
    x = values(shape, dtype)
    out = convert("NC1HWC0", ref_nc1hwc0(x, c0), shape)
    assert out.array.dtype == dtype and out.array.shape == shape
    np.testing.assert_array_equal(out.array, x)


@pytest.mark.parametrize("dtype,c0", DTYPES_C0)
@pytest.mark.parametrize("shape", [(1, 3, 2, 4, 5), (2, 20, 3, 2, 2), (1, 16, 1, 1, 3)])
def test_ndc1hwc0(shape, dtype, c0):
    x = values(shape, dtype)
    out = convert("NDC1HWC0", ref_ndc1hwc0(x, c0), shape)
    assert out.array.shape == shape
    np.testing.assert_array_equal(out.array, x)


@pytest.mark.parametrize("dtype,c0", DTYPES_C0)
@pytest.mark.parametrize("shape", [(5, 3, 3, 3), (17, 20, 1, 1), (32, 16, 2, 3), (1, 1, 1, 1), (40, 9, 3, 1)])
def test_fractal_z(shape, dtype, c0):
    x = values(shape, dtype)
    out = convert("FRACTAL_Z", ref_fractal_z(x, c0), shape)
    assert out.array.shape == shape
    np.testing.assert_array_equal(out.array, x)


@pytest.mark.parametrize("dtype,n0", DTYPES_C0)
@pytest.mark.parametrize("shape", [(5, 7), (17, 33), (32, 16), (2, 3, 20, 9), (7,), (1, 1)])
def test_fractal_nz(shape, dtype, n0):
    x = values(shape, dtype)
    out = convert("FRACTAL_NZ", ref_fractal_nz(x, n0), shape)
    assert out.array.shape == shape
    np.testing.assert_array_equal(out.array, x)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 17, 1, 2)])
def test_nhwc(shape):
    x = values(shape, np.float16)
    np.testing.assert_array_equal(convert("NHWC", ref_nhwc(x), shape).array, x)
    np.testing.assert_array_equal(convert("NHWC", ref_nhwc(x), None).array, x)  # a transpose needs no shape


def test_identity_formats_keep_the_data_and_reshape_to_another_rank():
    x = values((2, 3, 4), np.float32)
    assert {"ND", "NCHW", "NCDHW"} <= set(LAYOUTS)
    np.testing.assert_array_equal(convert("ND", x, (2, 3, 4)).array, x)
    np.testing.assert_array_equal(convert("ND", x.reshape(-1), (2, 3, 4)).array, x)


def test_original_of_another_rank_is_reshaped_when_it_holds_the_same_elements():
    """(N, C) stored as NC1HWC0 with H = W = 1."""
    x = values((3, 20), np.float16)
    stored = ref_nc1hwc0(x.reshape(3, 20, 1, 1), 16)
    np.testing.assert_array_equal(convert("NC1HWC0", stored, (3, 20)).array, x)


def test_without_original_shape_the_padding_is_kept_and_said():
    x = values((2, 5, 3, 3), np.float16)
    out = convert("NC1HWC0", ref_nc1hwc0(x, 16), None)
    assert out.array.shape == (2, 16, 3, 3) and "C kept padded to C1*C0=16" in out.note
    np.testing.assert_array_equal(out.array[:, :5], x)
    assert not out.array[:, 5:].any()
    m = values((5, 7), np.float16)
    nz = convert("FRACTAL_NZ", ref_fractal_nz(m, 16), None)
    assert nz.array.shape == (16, 16) and "padded" in nz.note
    np.testing.assert_array_equal(nz.array[:5, :7], m)
    w = values((20, 3, 1, 1), np.float16)  # FRACTAL_Z without a shape: H = W = 1 assumed
    fz = convert("FRACTAL_Z", ref_fractal_z(w, 16), None)
    assert fz.array.shape == (32, 16, 1, 1) and "H=W=1" in fz.note
    np.testing.assert_array_equal(fz.array[:20, :3], w)


@pytest.mark.parametrize("fmt,stored,original,said", [
    ("NC1HWC0", np.zeros((1, 2, 3, 3)), (1, 3, 3, 3), "needs a 5-D stored shape"),
    ("NC1HWC0", np.zeros((1, 2, 3, 3, 16)), (1, 3, 3, 3), "C1=2 blocks of C0=16 do not hold C=3"),
    ("NC1HWC0", np.zeros((1, 1, 3, 4, 16)), (1, 3, 4, 3), "does not hold the original shape (1,3,4,3)"),
    ("NDC1HWC0", np.zeros((1, 2, 1, 3, 3, 16)), (1, 20, 2, 3, 3), "C1=1 blocks of C0=16 do not hold C=20"),
    ("FRACTAL_Z", np.zeros((10, 1, 16, 16)), (5, 3, 3, 3), "stored dim 0 = 10 is not C1*H*W"),
    ("FRACTAL_Z", np.zeros((9, 1, 16, 16)), (20, 3, 3, 3), "N1=1 blocks of N0=16 do not hold N=20"),
    ("FRACTAL_Z", np.zeros((9, 1, 16, 16)), (5, 3, 9), "is not 4-D"),
    ("FRACTAL_NZ", np.zeros((1, 1, 16, 16)), (17, 5), "do not hold (M,N)=(17,5)"),
    ("FRACTAL_NZ", np.zeros((16, 16)), (5, 5), "rank >= 4"),
    ("NHWC", np.zeros((2, 3, 4)), None, "needs a 4-D stored shape"),
    ("FRACTAL_Z_3D", np.zeros((2, 2)), None, "format FRACTAL_Z_3D is not converted"),
])
def test_dims_that_do_not_fit_are_one_line_errors(fmt, stored, original, said):
    with pytest.raises(LayoutError) as info:
        convert(fmt, stored, original)
    assert said in str(info.value) and "\n" not in str(info.value)
