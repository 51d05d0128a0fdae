"""Where the constants a compile pass computed come from in the user's model.

A folding pass that puts a constant of its own into the compiled graph (fold_batchnorm's
``<node>__bnfold_W`` / ``<node>__bnfold_B``) records its source here: the node whose input it became, the
initializers it was computed from and how. The record lives in the compiled model itself (one
``metadata_props`` entry, :data:`KEY`, a JSON object {constant name: source}), so it travels with the graph
through snapshots, the compile cache and toolkit.compiler.passes.check_constants.recheck, and findings
about such a constant can name what to change in the model instead of a name the model does not hold.
"""

from __future__ import annotations

import json

import onnx

from toolkit.ir.proto import metadata_json

#: The compiled model's metadata_props key holding {constant name: source dict}.
KEY = "npuscope.folded_from"


def sources(model: onnx.ModelProto) -> dict:
    """{constant name: source dict} recorded in ``model`` ({} when none, or the entry is not a JSON object)."""
    return metadata_json(model, KEY)


def record(model: onnx.ModelProto, records: dict) -> None:
    """Record that each constant of ``records`` ({constant name: source}, JSON-able: node, initializer names,
    ...) was computed from its source, replacing earlier records of the same names. The metadata entry is read
    and written once per call, so a pass records all its constants in one call."""
    if not records:
        return
    data = sources(model)
    data.update(records)
    for p in model.metadata_props:
        if p.key == KEY:
            p.value = json.dumps(data, allow_nan=False)
            return
    model.metadata_props.add(key=KEY, value=json.dumps(data, allow_nan=False))
