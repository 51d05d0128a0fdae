"""Patched cache hits (toolkit/cache/patch.py): a value edit of a patchable op rebuilds one kernel; an edit
outside the patchable ops recompiles and reuses the kernels."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.cache.helpers import _OVER, W1, W2, build, cfg, fresh, make_model, n_sessions, plan_dict, run


@pytest.mark.parametrize("edit", ["initializer", "constant_node", "conv_attribute", "fp16_overflow",
                                  "fp16_underflow", "overflow_fixed"])
def test_value_edit_is_patched_and_rebuilds_one_kernel(tmp_path, edit):
    c = cfg(tmp_path)
    build(make_model(w1=_OVER) if edit == "overflow_fixed" else make_model(), c)
    model = {"initializer": lambda: make_model(w1=W1 * 1.01), "constant_node": lambda: make_model(w2=W2 * 1.01),
             "conv_attribute": lambda: make_model(dil2=(2, 2)),  # 1x1 kernel: dilation keeps shapes
             "fp16_overflow": lambda: make_model(w1=_OVER), "fp16_underflow": lambda: make_model(w2=W2 * 1e-9),
             "overflow_fixed": lambda: make_model()}[edit]()
    got, rt = build(model, c)
    assert got.cache["status"] == "patched"
    assert (got.cache["kernel_hits"], got.cache["kernel_misses"]) == (n_sessions(rt) - 1, 1)
    ref, rt_ref = fresh(model, c)
    assert plan_dict(got) == plan_dict(ref)
    assert [f.to_dict() for f in got.findings] == [f.to_dict() for f in ref.findings]
    weights = {"w1": {"fp16_overflow": _OVER}.get(edit, W1 * 1.01 if edit == "initializer" else W1),
               "w2": {"fp16_underflow": W2 * 1e-9}.get(edit, W2 * 1.01 if edit == "constant_node" else W2)}
    with np.errstate(over="ignore"):  # expected from numpy: a value overflows or a non-zero value flushes to 0
        expected = {n for n, w in weights.items()
                    if np.isinf(w.astype(np.float16)).any() or ((w != 0) & (w.astype(np.float16) == 0)).any()}
    assert expected == {"fp16_overflow": {"w1"}, "fp16_underflow": {"w2"}}.get(edit, set())
    assert {f.subject for f in got.findings if f.kind == "fp16_constant"} == expected
    log = {p.name: p.log for p in got.passes}["check_constants"]
    assert log == {p.name: p.log for p in ref.passes}["check_constants"]
    assert onnx.load_from_string(got.model.SerializeToString()) == onnx.load_from_string(ref.model.SerializeToString())
    np.testing.assert_array_equal(run(rt), run(rt_ref))
    again, _ = build(model, c)  # the patched compile is an entry of its own
    assert again.cache["status"] == "hit"


def test_edit_outside_patchable_ops_recompiles_and_reuses_kernels(tmp_path):
    c = cfg(tmp_path)
    build(make_model(), c)
    got, rt = build(make_model(alpha=0.3), c)
    assert got.cache["status"] == "miss"
    assert got.cache["kernel_hits"] == n_sessions(rt) - 1 and got.cache["kernel_misses"] == 1
    np.testing.assert_array_equal(run(rt), run(fresh(make_model(alpha=0.3), c)[1]))
