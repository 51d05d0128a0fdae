"""Minimal reproducer: the origin kernel's original ONNX nodes as a standalone model with its reference
inputs and expected outputs — what a user attaches to a bug report.

Files written into ``<report>/repro/``: ``model.onnx``, ``inputs.npz`` (reference values of the subgraph's
inputs), ``expected.npz`` (reference values of its outputs), ``config.json`` (the diagnosing config, with
keep_dtype limited to the subgraph's nodes) and ``README.txt`` (the command that reproduces it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from toolkit.artifacts import write_json, write_text
from toolkit.ir.graph import node_reads
from toolkit.report.console import printable


def extract_subgraph(model: onnx.ModelProto, node_names: list[str], golden: dict) -> tuple[onnx.ModelProto, dict, dict]:
    """(model, inputs, expected) for the nodes named, inputs and outputs taken from ``golden``.

    Raises:
        KeyError: a boundary tensor has no reference value.
    """
    wanted = set(node_names)
    nodes = [n for n in model.graph.node if n.name in wanted]
    inits = {i.name: i for i in model.graph.initializer}
    produced = {o for n in nodes for o in n.output if o}
    reads = []
    for n in nodes:
        for i in node_reads(n):
            if i not in produced and i not in reads:
                reads.append(i)
    consumers_outside = {i for n in model.graph.node if n.name not in wanted for i in node_reads(n)}
    graph_outs = {o.name for o in model.graph.output}
    outs = [o for n in nodes for o in n.output if o and (o in consumers_outside or o in graph_outs)] or \
        [nodes[-1].output[0]]
    feeds = {i: np.asarray(golden[i]) for i in reads if i not in inits}
    expected = {o: np.asarray(golden[o]) for o in outs}

    def vi(name, arr):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape))

    graph = helper.make_graph(nodes, "repro", [vi(k, v) for k, v in feeds.items()],
                              [vi(k, v) for k, v in expected.items()], [inits[i] for i in reads if i in inits])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    sub.functions.extend(model.functions)
    return sub, feeds, expected


def write_repro(model, node_names, golden, config: dict, folder: Path) -> Path:
    """Write the reproducer files (module docstring) and return the folder."""
    sub, feeds, expected = extract_subgraph(model, node_names, golden)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(sub, folder / "model.onnx")
    np.savez(folder / "inputs.npz", **feeds)
    np.savez(folder / "expected.npz", **expected)
    cfg = dict(config)
    cfg["keep_dtype"] = [k for k in cfg.get("keep_dtype", []) if k.startswith("OpType::") or k in set(node_names)]
    cfg.pop("input_shape", None)
    write_json(folder / "config.json", cfg)
    write_text(folder / "README.txt",
               f"Minimal reproducer of the divergence at {printable(', '.join(node_names))}.\n"
               "Run:  npuscope diagnose model.onnx --inputs inputs.npz --config config.json\n")
    return folder
