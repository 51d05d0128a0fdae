"""The dynamic check (toolkit/memcheck/dynamic_check.py): owner-map intervals, and a D2H source held until the
NPU stream syncs."""

from __future__ import annotations

import copy

import numpy as np

from tests.graphs import N, make_model
from toolkit.config.schema import Config
from toolkit.engine import Session
from toolkit.memcheck.dynamic_check import OwnerMap, dynamic_check
from toolkit.memcheck.planio import attach_plan
from toolkit.memcheck.static_check import static_conflicts
from toolkit.runtime.npu import NpuRuntime


def test_owner_map_intervals():
    m = OwnerMap()
    m.assign(0, 100, "a")
    m.assign(50, 150, "b")
    m.assign(20, 30, None)
    assert m.query(0, 200) == [(0, 20, "a"), (20, 30, None), (30, 50, "a"), (50, 150, "b"), (150, 200, None)]
    assert m.ranges_of("a") == [(0, 20), (30, 50)]


# ------------------------------------------------------------------------------------- memory
def stream_model():
    """exp's output is copied to the host for the CPU tanh; neg/abs run on the NPU meanwhile; 'use' reads the
    CPU result through a MemcpyH2D."""
    return make_model([N("Exp", ["x"], ["e"], "exp"), N("Tanh", ["e"], ["th"], "tanh"),
                       N("Neg", ["x"], ["n"], "neg"), N("Abs", ["n"], ["ab"], "abs"),
                       N("Add", ["th", "ab"], ["y"], "use")], [("x", [16, 64])], ["y"])


XS = np.random.default_rng(12).standard_normal((16, 64)).astype(np.float32)


def test_d2h_source_is_held_until_the_npu_stream_syncs():
    sess = Session(stream_model(), Config(precision_mode="force_fp32", fusion_level=0, op_placement={"Tanh": "CPU"}))
    plan = sess.plan
    names = [k.name for k in plan.kernels]
    assert names == ["exp", "MemcpyD2H_e", "tanh", "neg", "abs", "MemcpyH2D_th", "use"]
    # the D2H copy reads 'e' asynchronously on the CPU stream: the NPU only knows it is done at the H2D
    assert plan.tensors["e"].last == names.index("MemcpyH2D_th")
    bad = copy.deepcopy(plan)  # what a kernel-order planner could do: 'n' reuses e's bytes right after the copy
    bad.tensors["n"].offset = bad.tensors["e"].offset
    found = {(c.writer, c.victim, c.reader, c.kind) for c in static_conflicts(bad)}
    assert ("neg", "e", "MemcpyD2H_e", "stream_read_in_flight") in found
    _, events = dynamic_check(NpuRuntime(attach_plan(sess.compiled, bad)), {"x": XS})
    assert ("neg", "e", "MemcpyD2H_e") in {(e.writer, e.tensor, e.reader) for e in events}
