"""ONNX shape inference without carrying the weights through it.

``onnx.shape_inference.infer_shapes`` serialises the whole model, parses it in C++, serialises the result and
parses that back: four passes over every weight byte, although inference never reads the values of large
floating-point tensors (data propagation follows integer shape tensors; the float values it reads, Resize
``scales`` and the like, hold one number per axis). On PP-OCRv4 rec (10.8 MB of weights) one call took
~20 ms, of which the weights were most.

:func:`infer_light` runs inference on a copy in which every floating-point initializer of more than
:data:`LIGHT_MIN_ELEMENTS` elements is a graph input of the same dtype and dims instead (no bytes); the types
and shapes it infers are those a full inference infers (tests/test_shape_inference_light.py checks this on the
ONNX backend test models, the bundled samples and the PP-OCRv4 models). :func:`infer_into` writes them into
the full model. Models with subgraphs (If, Loop, Scan: inference writes into their bodies) go through
``onnx.shape_inference.infer_shapes`` whole.
"""

from __future__ import annotations

import onnx

from toolkit.ir.proto import copy_fields

#: floating-point initializers with more elements than this are left out of the inferred copy
LIGHT_MIN_ELEMENTS = 1024

_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                          onnx.TensorProto.BFLOAT16})


def _elements(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= int(d)
    return n


def _has_subgraphs(model: onnx.ModelProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for n in model.graph.node for a in n.attribute)


def light_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its large floating-point initializers (see module docstring) turned into graph inputs of
    the same name, dtype and dims; ``model`` itself is not changed. Returns ``model`` itself when nothing is
    left out."""
    inputs = {i.name for i in model.graph.input}
    heavy = [t for t in model.graph.initializer
             if t.data_type in _FLOAT_TYPES and t.name not in inputs and _elements(t) > LIGHT_MIN_ELEMENTS]
    if not heavy:
        return model
    names = {t.name for t in heavy}
    light = copy_fields(model, onnx.ModelProto(), skip=("graph",))
    g = copy_fields(model.graph, light.graph, skip=("initializer",))
    g.initializer.extend(t for t in model.graph.initializer if t.name not in names)
    g.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in heavy)
    return light


def infer_light(model: onnx.ModelProto, **kwargs) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(light_copy(model), **kwargs)``: the inferred types and shapes
    (``graph.value_info``, ``graph.output``) without the large initializers, which appear as graph inputs
    instead. Raises what infer_shapes raises (strict mode: InferenceError / ValidationError)."""
    if _has_subgraphs(model):
        return onnx.shape_inference.infer_shapes(model, **kwargs)
    return onnx.shape_inference.infer_shapes(light_copy(model), **kwargs)


def infer_into(model: onnx.ModelProto, **kwargs) -> onnx.ModelProto:
    """The model ``infer_shapes(model, **kwargs)`` returns, made by writing the inferred ``value_info`` and
    graph output types of :func:`infer_light` into ``model`` itself (in place; ``model`` is returned). Raises
    what infer_shapes raises."""
    if _has_subgraphs(model):
        return onnx.shape_inference.infer_shapes(model, **kwargs)
    inferred = infer_light(model, **kwargs)
    if inferred is model:
        return model
    g = model.graph
    del g.value_info[:]
    g.value_info.extend(inferred.graph.value_info)
    for mine, got in zip(g.output, inferred.graph.output):
        mine.type.CopyFrom(got.type)
    return model
