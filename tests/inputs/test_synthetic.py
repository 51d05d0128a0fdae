"""Random inputs and --val-range (toolkit/inputs/synthetic.py): seeded ranges, dtype limits."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

from toolkit.core.errors import InputError
from toolkit.inputs import InputSpec, check_feed, parse_val_range, random_inputs

# finite ranges written out by hand (IEEE 754 binary16: (2 - 2^-10) * 2^15; bfloat16: (2 - 2^-7) * 2^127)
F16_MAX = 65504.0
BF16_MAX = (2 - 2**-7) * 2.0**127
F32_MAX = (2 - 2**-23) * 2.0**127


@pytest.mark.parametrize("dtype, limits", [
    (np.float16, (-F16_MAX, F16_MAX)), (np.float32, (-F32_MAX, F32_MAX)),
    (np.float64, (-1.7976931348623157e308, 1.7976931348623157e308)), (ml_dtypes.bfloat16, (-BF16_MAX, BF16_MAX)),
    (np.complex64, (-F32_MAX, F32_MAX)), (np.int8, (-128, 127)), (np.uint8, (0, 255)), (np.int16, (-32768, 32767)),
    (np.uint16, (0, 65535)), (np.int32, (-2**31, 2**31 - 1)), (np.int64, (-2**63, 2**63 - 1)),
    (np.uint32, (0, 2**32 - 1)), (np.bool_, None)])
def test_finite_limits_of_every_dtype(dtype, limits):
    from toolkit.inputs.synthetic import finite_limits

    assert finite_limits(np.dtype(dtype)) == limits


def _spec(name, dtype, shape=(4, 8)):
    from toolkit.inputs.spec import InputSpec

    return InputSpec(name, np.dtype(dtype), shape)


@pytest.mark.parametrize("dtype, bad", [
    (np.float16, (-1e6, 1e6)), (np.float16, (0.0, 65520.0)), (ml_dtypes.bfloat16, (0.0, 1e39)),
    (np.float32, (-1e39, 0.0)), (np.int8, (-129.0, 0.0)), (np.uint8, (-1.0, 10.0)), (np.uint8, (0.0, 256.0)),
    (np.int16, (0.0, 40000.0))])
def test_random_data_refuses_a_range_outside_the_dtype(dtype, bad):
    from toolkit.inputs.synthetic import random_inputs

    with pytest.raises(InputError) as err:
        random_inputs([_spec("x", dtype)], val_ranges={"x": bad})
    msg = str(err.value)
    assert "'x'" in msg and np.dtype(dtype).name in msg and "\n" not in msg
    with pytest.raises(InputError):  # a bare range (every input) is checked the same way
        random_inputs([_spec("x", dtype)], val_ranges={"*": bad})


@pytest.mark.parametrize("dtype, edge", [
    (np.float16, (-F16_MAX, F16_MAX)), (ml_dtypes.bfloat16, (-BF16_MAX, BF16_MAX)), (np.float32, (-F32_MAX, F32_MAX)),
    (np.float64, (-1e300, 1e300)), (np.int8, (-128.0, 127.0)), (np.uint8, (-0.5, 255.5)), (np.bool_, (-5.0, 5.0))])
def test_random_data_at_the_dtype_limits_is_finite_and_in_range(dtype, edge):
    from toolkit.inputs.synthetic import random_inputs

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow in the cast
        x = random_inputs([_spec("x", dtype, (64, 64))], seed=1, val_ranges={"x": edge})["x"]
    assert x.dtype == np.dtype(dtype)
    wide = x.astype(np.float64)
    assert np.isfinite(wide).all()
    if np.dtype(dtype).kind != "b":
        assert wide.min() >= edge[0] and wide.max() <= edge[1]


SPECS = [InputSpec("x", np.dtype("float32"), ("batch", 3, 4)), InputSpec("ids", np.dtype("int64"), ("batch", None))]


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text
    return text


def test_parse_val_range():
    assert parse_val_range("x:[0,1];y:[-1,1]") == {"x": (0.0, 1.0), "y": (-1.0, 1.0)}
    assert parse_val_range(" in:0 : [ -2.5 , 3e2 ] ;") == {"in:0": (-2.5, 300.0)}
    assert parse_val_range("[0,255]") == {"*": (0.0, 255.0)}


@pytest.mark.parametrize("text", ["", ";", "x[0,1]", "x:0,1", "x:[1,0]", "x:[a,1]", "x:[0,1,2]", "x:[0,inf]",
                                  "x:[0,1];x:[0,2]", ":[0,1]"])
def test_parse_val_range_errors(text):
    with pytest.raises(InputError) as err:
        parse_val_range(text)
    assert err.value.exit_code == 2 and _one_line(err)


def test_random_inputs_seeded_ranges_and_dims():
    specs = SPECS + [InputSpec("flag", np.dtype("bool"), (2,)), InputSpec("h", np.dtype("float16"), (3,))]
    a = random_inputs(specs, seed=3, val_ranges={"x": (-2.0, -1.0), "ids": (5, 7)}, dim_values={"batch": 4})
    b = random_inputs(specs, seed=3, val_ranges={"x": (-2.0, -1.0), "ids": (5, 7)}, dim_values={"batch": 4})
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["x"].shape == (4, 3, 4) and a["x"].dtype == np.float32
    assert a["x"].min() >= -2.0 and a["x"].max() < -1.0
    assert a["ids"].shape == (4, 1) and a["ids"].dtype == np.int64 and set(a["ids"].ravel()) <= {5, 6, 7}
    assert a["flag"].dtype == np.bool_ and a["h"].dtype == np.float16
    assert not np.array_equal(random_inputs(specs, seed=4)["x"], random_inputs(specs, seed=3)["x"])
    check_feed(a, specs)


def test_random_inputs_defaults_and_independence():
    feed = random_inputs(SPECS)
    assert feed["x"].shape == (1, 3, 4) and 0.0 <= feed["x"].min() and feed["x"].max() < 1.0
    assert 0 <= feed["ids"].min() and feed["ids"].max() <= 9
    alone = random_inputs(SPECS[:1])
    np.testing.assert_array_equal(alone["x"], feed["x"])  # one input's data does not depend on the others
    full = random_inputs(SPECS, dim_values={"ids": (2, 6), "batch": 2})
    assert full["ids"].shape == (2, 6) and full["x"].shape == (2, 3, 4)


def test_random_inputs_errors():
    with pytest.raises(InputError, match=r"unknown inputs \['z'\]"):
        random_inputs(SPECS, val_ranges={"z": (0, 1)})
    with pytest.raises(InputError, match="neither inputs"):
        random_inputs(SPECS, dim_values={"nope": 3})
    with pytest.raises(InputError, match="model declares x: float32"):
        random_inputs(SPECS, dim_values={"x": (1, 2, 4)})
    with pytest.raises(InputError, match="holds no int64 value"):
        random_inputs(SPECS, val_ranges={"ids": (0.2, 0.8)})


@pytest.mark.parametrize("shape", [(0, 4), ("batch", 0), (2, 0, 3)])
def test_a_static_zero_dimension_is_named_as_the_models_not_the_users(shape):
    """A model declaring a static dimension of size 0: the message says it is the model's declaration, that
    --input-shape cannot change it, and what can be done (the advice had been to give sizes >= 1 with
    --input-shape, which is then refused for a static dim). A user's own 0 still gets the --input-shape advice."""
    from toolkit.inputs.synthetic import resolve_shape

    spec = InputSpec("a", np.dtype("float32"), shape)
    with pytest.raises(InputError) as err:
        random_inputs([spec])
    msg = str(err.value)
    assert "static dimension of size 0" in msg and "--inputs" in msg and "re-export" in msg
    with pytest.raises(InputError, match="give sizes >= 1 with --input-shape"):
        resolve_shape(InputSpec("b", np.dtype("float32"), ("batch", 4)), {"batch": 0})
