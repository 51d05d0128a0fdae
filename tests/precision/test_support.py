"""Unsupported ops (toolkit/precision/support.py): every control-class op is declared unsupported."""

from __future__ import annotations

from toolkit.precision.contract import CONTROL
from toolkit.precision.support import UNSUPPORTED


def test_every_control_class_op_is_declared_unsupported():
    assert CONTROL.ops <= set(UNSUPPORTED)
    assert all(u.reason and u.fix for u in UNSUPPORTED.values())
