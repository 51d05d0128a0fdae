"""Minimal reproducer: the origin kernel's original ONNX nodes as a standalone model with its reference
inputs and expected outputs — what a user attaches to a bug report.

Files written into ``<report>/repro/``: ``model.onnx``, ``inputs.npz`` (reference values of the subgraph's
inputs), ``expected.npz`` (reference values of its outputs), ``config.json`` (the diagnosing config, with
keep_dtype limited to the subgraph's nodes) and ``README.txt`` (the command that reproduces it).

The subgraph reads its inputs in the storage precision the full model's plan gives them: an input the plan
stores in FP16 (the output of an FP16 kernel) enters as an FP16 graph input ``<name>__fp16`` (its reference
value rounded to FP16, as the device stores it) followed by a ``Cast`` to FP32 named ``<name>`` again; the
compiler stores a graph input in its declared dtype, so the origin kernel reads FP16 data and takes the
precision it took in the full plan (a gray op follows its FP16 input, an FP32 kernel reads FP16-rounded
values). Only inputs a kernel of the reproducer would otherwise read in FP32 get this treatment; an input read
only by FP16 kernels is rounded by them anyway. Which inputs the full plan stores in FP16, and how the
reproducer reads them, comes from compiling the full model again and the subgraph with the same config
(toolkit.compiler.pipeline.compile_model; deterministic, no kernels are built).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from toolkit.compare.layerwise import kernel_inputs
from toolkit.compare.metrics.thresholds import Thresholds, thresholds_text
from toolkit.config.schema import Config
from toolkit.core.artifacts import save_npz, write_json, write_text
from toolkit.core.text import printable
from toolkit.engine import compile_model
from toolkit.ir.graph import node_reads
from toolkit.ir.weights import array_of, is_mapped
from toolkit.ort.ort_env import make_session
from toolkit.ort.terminate import run_options


def extract_subgraph(model: onnx.ModelProto, node_names: list[str], golden: dict,
                     stored_fp16=(), extra_outputs=()) -> tuple[onnx.ModelProto, dict, dict]:
    """(model, inputs, expected) for the nodes named, inputs and outputs taken from ``golden``.

    ``stored_fp16``: tensors the full plan stores in FP16; a float32 subgraph input among them enters as an
    FP16 graph input ``<name>__fp16`` (reference rounded to FP16) and a Cast to FP32 (module docstring).
    ``extra_outputs``: tensors of the nodes named to expose as outputs too (default: only those read outside
    the nodes, or graph outputs).

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
    outs += [o for o in extra_outputs if o in produced and o not in outs]
    feeds = {i: np.asarray(golden[i]) for i in reads if i not in inits}
    expected = {o: np.asarray(golden[o]) for o in outs}
    casts = []
    for i in [i for i in feeds if i in set(stored_fp16) and feeds[i].dtype == np.float32]:
        name = _free_name(f"{i}__fp16", model)
        with np.errstate(over="ignore"):  # beyond 65504 the device stores inf, as here
            feeds = {(name if k == i else k): (v.astype(np.float16) if k == i else v) for k, v in feeds.items()}
        casts.append(helper.make_node("Cast", [name], [i], name=_free_name(f"Cast_{name}", model),
                                      to=onnx.TensorProto.FLOAT))
    nodes = casts + nodes

    def vi(name, arr):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape))

    graph = helper.make_graph(nodes, "repro", [vi(k, v) for k, v in feeds.items()],
                              [vi(k, v) for k, v in expected.items()], [_held(inits[i]) for i in reads if i in inits])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    sub.functions.extend(model.functions)
    return sub, feeds, expected


def _held(t: onnx.TensorProto) -> onnx.TensorProto:
    """``t`` with its values inside: a weight the loader left on disk (toolkit.ir.weights) is read into the
    subgraph, which is run or saved away from the model's folder."""
    return numpy_helper.from_array(np.asarray(array_of(t)), t.name) if is_mapped(t) else t


#: A reproducer model whose weights exceed this many bytes keeps them as external data beside it (1 GiB;
#: protobuf refuses a model over 2 GiB).
REPRO_INLINE_MAX = 1 << 30


def run_subgraph(model: onnx.ModelProto, node_names: list[str], golden: dict, stored_fp16=(),
                 outputs=()) -> dict[str, np.ndarray]:
    """{tensor: array} of the nodes named run alone in FP32 by onnxruntime (the FP32 reference's own engine)
    on the reference values of their inputs, those in ``stored_fp16`` rounded to FP16 first (as the plan
    stores them; see :func:`extract_subgraph`). What keeping those nodes in FP32 (keep_dtype) would compute
    while the rest of the plan stays as it is. ``outputs``: tensors of the nodes to return besides the
    subgraph's own outputs.

    Raises:
        KeyError: a boundary tensor has no reference value; onnxruntime errors for nodes it cannot run.
    """
    sub, feeds, expected = extract_subgraph(model, node_names, golden, stored_fp16, outputs)
    sess = make_session(sub.SerializeToString(), optimize=True)
    names = list(expected)
    return dict(zip(names, (np.asarray(v) for v in sess.run(names, feeds, run_options()))))


def _free_name(name: str, model: onnx.ModelProto) -> str:
    """``name``, or ``name_1``, ``name_2`` ... if a tensor or node of ``model`` already has it."""
    taken = {n.name for n in model.graph.node} | {t for n in model.graph.node for t in list(n.input) + list(n.output)} \
        | {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer}
    out, k = name, 0
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    return out


def _plan(model: onnx.ModelProto, config: dict, shapes: dict):
    cfg = Config.from_dict({k: v for k, v in config.items() if k != "input_shape"})
    return compile_model(model, cfg, input_shapes=shapes).plan


def _input_shapes(model: onnx.ModelProto, values: dict) -> dict:
    names = {i.name for i in model.graph.input}
    return {k: tuple(np.shape(v)) for k, v in values.items() if k in names and isinstance(v, np.ndarray)}


def fp16_tensors_of(plan, model: onnx.ModelProto) -> set[str]:
    """Tensors ``plan`` (the compiled plan of ``model``) stores in FP16, graph inputs left out (they enter as
    declared)."""
    graph_inputs = {i.name for i in model.graph.input}
    return {t.name for t in plan.tensors.values() if t.dtype == "float16" and t.name not in graph_inputs}


def fp16_stored_tensors(model: onnx.ModelProto, config: dict, golden: dict) -> set[str]:
    """Tensors the plan of the full ``model`` under ``config`` (Config.to_dict()) stores in FP16, graph inputs
    left out (they enter as declared). Input shapes are bound from the graph inputs' reference values. Compiles
    ``model``: a caller holding its plan passes :func:`fp16_tensors_of` to :func:`write_repro` instead."""
    return fp16_tensors_of(_plan(model, config, _input_shapes(model, golden)), model)


def read_wider(sub: onnx.ModelProto, config: dict, feeds: dict, candidates) -> set[str]:
    """The ``candidates`` (FP32 graph inputs of ``sub``) that a kernel of ``sub``'s own plan under ``config``
    reads in FP32: those need the FP16 input + Cast to be read as the full plan read them. An input only FP16
    kernels read is rounded to FP16 by them anyway (no Cast needed: the reproducer stays minimal)."""
    plan = _plan(sub, config, _input_shapes(sub, feeds))
    ins = kernel_inputs(plan)
    readers = [(k, ins[k.name]) for k in plan.kernels if not k.cast_of]
    return {i for i in candidates if any(k.precision != "fp16" for k, reads in readers if i in reads)}


def write_repro(model, node_names, golden, config: dict, folder: Path, stored_fp16=None,
                thresholds=None) -> Path:
    """Write the reproducer files (module docstring) and return the folder.

    ``stored_fp16``: tensors the full plan stores in FP16; None: found by :func:`fp16_stored_tensors`. Of the
    subgraph's inputs among them, those a kernel of the reproducer would read in FP32 (:func:`read_wider`)
    enter as FP16 graph inputs and a Cast. ``thresholds``: the diagnosis' own lines (a Thresholds; None: the
    defaults), written into README.txt's command as ``--thresholds`` text (thresholds_text) so that the
    reproducer judges with them; lines of tensors the subgraph does not hold are left out.
    """
    cfg = dict(config)
    cfg["keep_dtype"] = [k for k in cfg.get("keep_dtype", []) if k.startswith("OpType::") or k in set(node_names)]
    cfg.pop("input_shape", None)
    if stored_fp16 is None:
        stored_fp16 = fp16_stored_tensors(model, config, golden)
    sub, feeds, expected = extract_subgraph(model, node_names, golden)
    cands = [i for i in feeds if i in set(stored_fp16) and feeds[i].dtype == np.float32]
    if cands:
        sub, feeds, expected = extract_subgraph(model, node_names, golden, read_wider(sub, cfg, feeds, cands))
    text = ""
    if thresholds is not None:
        held = {o for n in sub.graph.node for o in n.output}
        text = thresholds_text(Thresholds(dict(thresholds), getattr(thresholds, "explicit", ()),
                                          {t: v for t, v in (getattr(thresholds, "per_tensor", None) or {}).items()
                                           if t in held}))
    folder.mkdir(parents=True, exist_ok=True)
    big = sum(len(t.raw_data) for t in sub.graph.initializer) > REPRO_INLINE_MAX
    onnx.save(sub, folder / "model.onnx", save_as_external_data=big, location="model.onnx.data")
    save_npz(folder / "inputs.npz", feeds)  # no pickle: strings as <U, ml_dtypes exact (docs/array-files.md)
    save_npz(folder / "expected.npz", expected)
    write_json(folder / "config.json", cfg)
    write_text(folder / "README.txt",
               f"Minimal reproducer of the divergence at {printable(', '.join(node_names))}.\n"
               + "".join(f"Input '{printable(c.input[0])}' is FP16 (as the full plan stores '{printable(c.output[0])}'),"
                         " cast to FP32 by node '" + printable(c.name) + "'.\n"
                         for c in sub.graph.node if c.op_type == "Cast" and c.input[0] in feeds
                         and feeds[c.input[0]].dtype == np.float16)
               + "Run:  npuscope diagnose model.onnx --inputs inputs.npz --config config.json"
               + (f" --thresholds {shlex.quote(text)}" if text else "") + "\n")
    return folder
