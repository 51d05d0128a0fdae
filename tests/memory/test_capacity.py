"""Arena capacity errors (toolkit/memory/capacity.py) name the peak and the options."""

from __future__ import annotations

import pytest

from tests.graphs import N, make_model

FP32_UNFUSED = dict(precision_mode="force_fp32", fusion_level=0)


def test_capacity_error_names_peak_and_options(tmp_path):
    from toolkit.config.schema import Config
    from toolkit.engine import Session
    from toolkit.memory.capacity import CapacityError

    model = make_model([N("Relu", ["x"], ["r"], "relu"), N("Mul", ["r", "x"], ["y"], "mul")], [("x", [16, 64])], ["y"])
    with pytest.raises(CapacityError) as exc:
        Session(model, Config(device_memory_bytes=4096, memory_reuse="off", **FP32_UNFUSED))
    msg = str(exc.value)
    assert "peak at step" in msg and "'x'" in msg and "aggressive" in msg and "--input-shape" in msg
    Session(model, Config(device_memory_bytes=1 << 20, **FP32_UNFUSED))  # fits
