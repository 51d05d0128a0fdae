"""The metric registry (toolkit/compare/metrics/registry.py): every entry is documented."""

from __future__ import annotations

from toolkit.compare.metrics import METRICS


# ----------------------------------------------------------------------------- registry shape
def test_registry_entries_are_documented():
    for name, spec in METRICS.items():
        assert spec.name == name
        assert spec.direction in {"higher_is_better", "lower_is_better", "informational"}
        assert spec.formula and spec.source and spec.unit and callable(spec.fn)
    assert "AccumulatedRelativeError" in METRICS["AccumulatedRelativeError"].source
