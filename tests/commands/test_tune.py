"""The tune command's summary wording (toolkit/commands/tune.py)."""

from __future__ import annotations


def test_count_change_wording():
    from toolkit.commands.common import count_change

    assert count_change("Casts", 2) == "Casts added 2"
    assert count_change("Casts", -1) == "Casts removed 1"
    assert count_change("Casts", 0) == "Casts unchanged"
