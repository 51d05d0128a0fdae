"""The compile pipeline as data: two stages, each an ordered tuple of registered pass names.

``STRUCTURE`` folds, infers shapes, fuses and partitions the graph into kernels; its end state (the partition
snapshot) is what a precision-only recompile starts from. ``PRECISION`` places, assigns precision, inserts
Casts and copies, checks constants and plans memory. Every pass of a stage must have what it ``requires``
provided by a pass that ran before it (toolkit.compiler.pipeline raises otherwise).
"""

from __future__ import annotations

from toolkit.compiler.passes import (
    assign_precision,
    buffer_fusion,
    check_constants,
    fold_batchnorm,
    fold_constants,
    graph_fusion,
    infer_shapes,
    insert_casts,
    insert_copies,
    partition,
    place_ops,
    plan_memory,
)
from toolkit.compiler.registry import PASSES

#: The modules whose import registers the passes below (toolkit.compiler.registry.PASSES).
MODULES = (fold_constants, infer_shapes, fold_batchnorm, graph_fusion, buffer_fusion, partition, place_ops,
           assign_precision, insert_casts, insert_copies, check_constants, plan_memory)

STRUCTURE = ("fold_constants", "infer_shapes", "fold_batchnorm", "graph_fusion", "buffer_fusion", "partition")
PRECISION = ("place_ops", "assign_precision", "insert_casts", "insert_copies", "check_constants", "plan_memory")
#: (stage name, pass names) in run order; a pass name is looked up in PASSES when the stage runs.
STAGES = (("structure", STRUCTURE), ("precision", PRECISION))
#: Every pass name in run order.
PASS_ORDER = STRUCTURE + PRECISION
assert set(PASS_ORDER) <= set(PASSES), "every staged pass is registered"
