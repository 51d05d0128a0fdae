"""onnxruntime settings (toolkit/runtime/ort_env.py): NPUSCOPE_THREADS."""

from __future__ import annotations

import os

import pytest

from toolkit.core.errors import ConfigError


# -------------------------------------------------------------------------------------- NPUSCOPE_THREADS
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("value, expected", [(None, 0), ("", 0), ("0", 0), ("3", 3), (" 2 ", 2), ("abc", None),
                                             ("-2", None), ("1.5", None), ("+3", None), ("\u0663", None)])
def test_npuscope_threads_is_a_non_negative_integer(monkeypatch, value, expected):
    from toolkit.core.errors import ConfigError
    from toolkit.ort.ort_env import intra_op_threads

    if value is None:
        monkeypatch.delenv("NPUSCOPE_THREADS", raising=False)
    else:
        monkeypatch.setenv("NPUSCOPE_THREADS", value)
    if expected is None:
        with pytest.raises(ConfigError, match="NPUSCOPE_THREADS=.*non-negative integer") as err:
            intra_op_threads()
        assert err.value.exit_code == 2 and "\n" not in str(err.value)
    else:
        assert intra_op_threads() == expected


def test_threads_upper_bound_is_four_per_cpu(monkeypatch):
    from toolkit.ort.ort_env import intra_op_threads

    limit = 4 * (os.cpu_count() or 1)
    monkeypatch.setenv("NPUSCOPE_THREADS", str(limit))
    assert intra_op_threads() == limit
    for bad in (limit + 1, 99999, 10**40):
        monkeypatch.setenv("NPUSCOPE_THREADS", str(bad))
        with pytest.raises(ConfigError, match=rf"0\.\.{limit}\b"):
            intra_op_threads()
