"""toolkit.dumps.to_device: the forward layouts equal the numpy references written from the CANN layout
definitions (tests/dumps/layout_refs.py), and the reader (toolkit.dumps.layouts) inverts them for every rank the
writer lays out."""

from __future__ import annotations

import numpy as np
import pytest

from tests.dumps.layout_refs import ref_fractal_nz, ref_fractal_z, ref_nc1hwc0, ref_ndc1hwc0, ref_nhwc, values

from toolkit.dumps import layouts
from toolkit.dumps.to_device import TO_DEVICE, default_c0, lay_out

REFS = {"NC1HWC0": ref_nc1hwc0, "NDC1HWC0": ref_ndc1hwc0, "FRACTAL_Z": ref_fractal_z,
        "FRACTAL_NZ": ref_fractal_nz, "NHWC": lambda x, c0: ref_nhwc(x)}
NATIVE = [("NC1HWC0", (2, 19, 3, 5)), ("NC1HWC0", (1, 32, 2, 2)), ("NDC1HWC0", (2, 5, 3, 2, 3)),
          ("FRACTAL_Z", (20, 3, 3, 3)), ("FRACTAL_Z", (16, 17, 1, 1)), ("FRACTAL_NZ", (2, 21, 35)),
          ("FRACTAL_NZ", (5, 16)), ("FRACTAL_NZ", (7,)), ("NHWC", (2, 3, 4, 5))]


@pytest.mark.parametrize("dtype,c0", [(np.float16, 16), (np.float32, 8), (np.float32, 16)])
@pytest.mark.parametrize("fmt,shape", NATIVE)
def test_native_ranks_equal_the_references(fmt, shape, dtype, c0):
    x = values(shape, dtype)
    written, stored = lay_out(fmt, x, c0)
    assert written == fmt
    np.testing.assert_array_equal(stored, REFS[fmt](x, c0))


SHAPES = [(3, 40), (2, 5, 7), (1, 17, 3, 4), (2, 3, 2, 2, 5), (9,), (), (2, 2, 2, 2, 2, 2)]


@pytest.mark.parametrize("fmt", sorted(TO_DEVICE))
@pytest.mark.parametrize("shape", SHAPES)
def test_the_reader_inverts_every_rank_or_it_stays_nd(fmt, shape):
    x = values(shape, np.float16)
    written, stored = lay_out(fmt, x)
    got = layouts.convert(written, stored, shape).array
    assert got.shape == shape
    np.testing.assert_array_equal(got, x)
    assert written == "ND" or stored.ndim >= 4  # every device format stores at least 4 dims


def test_default_c0_follows_the_item_size():
    assert (default_c0(np.float16), default_c0(np.float32), default_c0(np.int8)) == (16, 16, 32)
