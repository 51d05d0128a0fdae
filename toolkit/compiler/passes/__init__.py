"""Compiler passes, one per module; importing this package registers them (order: pipeline.PASS_ORDER)."""

from toolkit.compiler.passes import (  # noqa: F401
    fold_constants,
    infer_shapes,
    fold_batchnorm,
    graph_fusion,
    buffer_fusion,
    partition,
    place_ops,
    assign_precision,
    insert_casts,
    insert_copies,
    check_constants,
    plan_memory,
)
