"""Tensor lifetimes (toolkit/memory/lifetimes.py): kernel-order lifetimes miss a CPU read in flight."""

from __future__ import annotations

import numpy as np

from tests.graphs import N, make_model
from toolkit.config.schema import Config
from toolkit.engine import Session

FP32_UNFUSED = dict(precision_mode="force_fp32", fusion_level=0)


def step_of(plan, kernel):
    return [k.name for k in plan.kernels].index(kernel)


def cpu_model():
    """e = exp(x) is read by an RNN, a CPU-placed (AI_CPU) op, through a MemcpyD2H copy (CPU stream); the copy's
    read of 'e' lasts until the NPU stream syncs with the CPU stream (at MemcpyH2D_h, which brings the RNN's
    result to 'use'), while 'neg' and 'abs' run on the NPU stream in between."""
    r = np.random.default_rng(5)
    return make_model([N("Exp", ["x"], ["e"], "exp"), N("RNN", ["e", "W", "R"], ["Y", "h"], "rnn", hidden_size=8),
                       N("Neg", ["x"], ["n"], "neg"), N("Abs", ["n"], ["ab"], "abs"),
                       N("Add", ["h", "ab"], ["y"], "use")], [("x", [4, 16, 8])], ["y"],
                      {"W": (r.standard_normal((1, 8, 8)) * 0.3).astype(np.float32),
                       "R": (r.standard_normal((1, 8, 8)) * 0.3).astype(np.float32)})


def test_kernel_order_lifetimes_miss_the_cpu_read():
    from toolkit.memory.lifetimes import lifetimes

    plan = Session(cpu_model(), Config(**FP32_UNFUSED)).plan
    aware = lifetimes(plan.kernels, plan.graph_inputs, plan.graph_outputs)
    naive = lifetimes(plan.kernels, plan.graph_inputs, plan.graph_outputs, stream_aware=False)
    assert naive["e"].last == step_of(plan, "MemcpyD2H_e") < aware["e"].last == step_of(plan, "MemcpyH2D_h")
