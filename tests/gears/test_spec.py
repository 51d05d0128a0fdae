"""Gear specs (toolkit/gears/spec.py): parsing dims and batch gears, bad gear configs, and commands that take a
single shape."""

from __future__ import annotations

import pytest

from toolkit.commands.common import config_from_dict, load_config
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError
from toolkit.gears.spec import parse_gears

MASKED_CFG = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32;64,64"}


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# ----------------------------------------------------------------------------------------------- config
def test_parse_dims_and_batch_gears():
    spec = parse_gears(Config.from_dict({**MASKED_CFG, "pad_value": "mask:0;x:-1.5"}))
    assert spec.kind == "dims" and spec.slots == (("x", 1), ("mask", 1))
    assert spec.gears == ((16, 16), (32, 32), (64, 64))
    assert spec.shapes((32, 32)) == {"x": (1, 32, 64), "mask": (1, 32)}
    assert spec.pad_values == {"x": -1.5, "mask": 0.0}
    b = parse_gears(Config.from_dict({"input_shape": "x:-1,3,8,8", "dynamic_batch_size": "1,2,4,8",
                                      "pad_value": {"x": 2}}))
    assert b.kind == "batch" and b.gears == ((1,), (2,), (4,), (8,)) and b.pad_values == {"x": 2.0}
    assert parse_gears(Config()) is None


@pytest.mark.parametrize("data,msg", [
    ({"input_shape": "x:1,-1;m:1,-1", "dynamic_dims": "16;32"}, "gear 1 '16' has 1 value\\(s\\) but input_shape has 2"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "16;0"}, "'0' is not a positive integer"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "16;abc"}, "'abc' is not a positive integer"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "16"}, "gives 1 gear\\(s\\); the converter takes 2 to 100"),
    ({"input_shape": "x:1,-1", "dynamic_dims": ";".join(str(i) for i in range(1, 102))}, "gives 101 gear"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "16;16"}, "repeats gear 16"),
    ({"input_shape": "x:-1,-1", "dynamic_dims": "1,2;2,4", "dynamic_batch_size": "1,2"}, "exclusive"),
    ({"input_shape": "x:1,-1"}, "has -1 dims but no gears"),
    ({"input_shape": "x:1,16", "dynamic_dims": "16;32"}, "needs input_shape with -1"),
    ({"input_shape": "x:1,-1", "dynamic_batch_size": "1,2"}, "batch dim \\(dim 0\\) only.*x dim 1"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8;16", "pad_value": "y:0"}, "names 'y', which is not an input"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8;16", "pad_value": "x:abc"}, "expected a number"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8;16", "pad_value": "x:nan"}, "NaN"),
    ({"input_shape": "x:1,16", "pad_value": "x:0"}, "no gears pad anything"),
    ({"input_shape": "x:1,-2", "dynamic_dims": "8;16"}, "sizes >= 1 \\(or -1 for a gear dim\\)"),
    ({"input_shape": "x:-1,3", "dynamic_batch_size": [1, 2]}, "expected a string like \"1,2,4,8\""),
])
def test_bad_gear_configs_are_one_line_errors(data, msg):
    with pytest.raises(ConfigError, match=msg) as exc:
        config_from_dict(data)
    _one_line(exc)


def test_single_shape_commands_refuse_gear_dims():
    cfg = Config.from_dict(MASKED_CFG)
    with pytest.raises(ConfigError, match="only 'compile' and 'run' choose a gear") as exc:
        cfg.input_shapes()
    _one_line(exc)
