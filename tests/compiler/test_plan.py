"""toolkit/compiler/plan.py: KernelSpec.copy gives what copy.deepcopy gives, sharing nothing mutable."""

from __future__ import annotations

import copy
import dataclasses

from toolkit.compiler.plan import KernelSpec


def _spec() -> KernelSpec:
    values = {}
    for i, f in enumerate(dataclasses.fields(KernelSpec)):
        values[f.name] = [f"{f.name}{j}" for j in range(3)] if "list" in str(f.type) else f"{f.name}-{i}"
    return KernelSpec(**values)


def test_copy_equals_deepcopy_and_shares_no_field_that_can_change():
    k = _spec()
    c = k.copy()
    assert c == copy.deepcopy(k) and c is not k
    for f in dataclasses.fields(KernelSpec):  # every field, so that a list field added later is covered
        v = getattr(c, f.name)
        if isinstance(v, (list, dict, set)):
            assert v is not getattr(k, f.name), f.name
            v.append("changed") if isinstance(v, list) else None
            assert getattr(k, f.name) == getattr(_spec(), f.name), f.name
        else:
            assert isinstance(v, (str, type(None))), f"{f.name}: {type(v)} is not copied by KernelSpec.copy"
