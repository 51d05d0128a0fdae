"""Latency budgets (toolkit/profile/budget.py): a user device's label reaches the signoff evidence."""

from __future__ import annotations

import json

from tests.graphs import N, make_model
from toolkit.config.schema import Config


def test_user_device_label_reaches_the_signoff_evidence(tmp_path):
    from toolkit.engine import compile_model
    from toolkit.profile.budget import device_timing

    p = tmp_path / "slow.json"
    p.write_text(json.dumps({"base": "atlas300i_pro", "launch_overhead_us": 50.0}))
    model = make_model([N("Sigmoid", ["x"], ["y"], "sig")], [("x", [1000])], ["y"])
    t = device_timing(compile_model(model, Config()), str(p))
    assert t["device"] == "slow.json (name 'atlas300i_pro')"
    assert t["latency_ms"] > device_timing(compile_model(model, Config()))["latency_ms"]  # 50 µs launches
