"""Bind dynamic input dims to concrete values before compiling (the converter's ``input_shape``).

Rules (each violation one line): every name is a model input (did-you-mean otherwise), ranks agree, a dim that is
static in the model keeps its size, and a symbolic dim (``dim_param``, e.g. ``"seq"``) shared by several inputs
gets one value in all of them. After binding, strict ONNX shape inference must get through the graph: shapes the
graph cannot take (an Add of ``[.., 16]`` and ``[.., 32]``) would otherwise leave the node's outputs untyped in
the compiler's (non-strict) inference, get them placed as host values and break the kernel builder (a KeyError).
They are a :class:`toolkit.core.errors.ModelError` naming the first failing node, saying whether the given shapes or
the model's own declared shapes are at fault. Shapes that pass inference but fail in onnxruntime (a Reshape to a
fixed size) are caught at run time by :func:`raise_if_reference_fails`.

Errors about the shapes are :class:`toolkit.core.errors.ConfigError` (exit 2) by default, since the shapes come from
``input_shape`` / ``--input-shape`` / gears; callers binding the shapes of data pass ``error=InputError``.
"""

from __future__ import annotations

import re

import onnx

from toolkit.core.errors import ConfigError, ModelError
from toolkit.core.text import suggest

# dim_params exporters write for "unknown" ("", "?"): not symbols that inputs share
from toolkit.inputs.spec import _UNNAMED as UNNAMED
from toolkit.ir.shape_inference import infer_light
from toolkit.ort.reference import ReferenceRunner, cannot_run
from toolkit.ort.terminate import reraise_if_terminated

#: Largest dim a shape may bind (ONNX dims are int64).
MAX_DIM = 2**63 - 1


def _static(d) -> bool:
    """A dim with a known size (exporters write unknown dims as dim_param, no value, or dim_value -1)."""
    return d.HasField("dim_value") and d.dim_value >= 0


def model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (the feeds), in graph order."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def declared_dims(vi: onnx.ValueInfoProto) -> list | None:
    """[int (static) | str (dim_param) | None (unnamed dynamic, also the exporters' "?") per axis], None when the
    rank is unknown or the input is not a tensor. Only a str dim is a symbol that inputs share."""
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if _static(d) else (d.dim_param if d.dim_param not in UNNAMED else None)
            for d in vi.type.tensor_type.shape.dim]


def _model_shape(dims: list) -> str:
    return "(" + ", ".join(str(d) if d is not None else "?" for d in dims) + ")"


def dynamic_dims_message(name: str, dims: list | tuple | None, fix: str) -> str:
    """The one message for an input whose dynamic dims nothing binds, e.g. ``input 'x' has dynamic dims:
    declared shape (?, 3, ?, ?) (? = unnamed); give its shape with --input-shape "x:N,3,N,N"`` (every command uses
    this wording). ``dims``: :func:`declared_dims` (int static, str symbolic, None unnamed; None for an unknown
    rank). ``fix``: the command's own remedy, with ``{example}`` replaced by ``name:d0,d1,...`` (N for each
    dynamic dim)."""
    if dims is None:
        return (f"input '{name}' has no declared rank; "
                + fix.replace("{example}", f"{name}:d0,d1,...").replace(" (N: your sizes)", ""))
    example = f"{name}:" + ",".join(str(d) if isinstance(d, int) and d >= 0 else "N" for d in dims)
    unnamed = " (? = unnamed)" if any(d is None for d in dims) else ""
    shape = _model_shape([d if d is None or isinstance(d, str) or d >= 0 else None for d in dims])
    return f"input '{name}' has dynamic dims: declared shape {shape}{unnamed}; " + fix.replace("{example}", example)


#: How the compiler's own message says to bind unbound dims (compile, run, diagnose, ... all take --input-shape).
BIND_FIX = 'give its shape with --input-shape "{example}" (N: your sizes) or input_shape in the config'


def check_input_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], *, where: str = "input_shape",
                       error: type = ConfigError, gear_dims: bool = False) -> None:
    """Check ``shapes`` ({input name: dims}) against the model's declared inputs, without binding.

    Args:
        model: the model (not modified).
        shapes: dims per input; with ``gear_dims`` a -1 marks a dim a gear binds (it must be dynamic in the model).
        where: what the shapes are called in messages ("input_shape", "npz file 'a.npz'", ...).
        error: the error class (ConfigError for options, InputError for data).

    Raises:
        ``error``: an unknown input (with did-you-mean), a rank or a static dim that disagrees, a -1 on a static
        dim, or one symbolic dim given two sizes ("dim 'seq' is 16 in x but 32 in mask").
    """
    declared = {vi.name: declared_dims(vi) for vi in model_inputs(model)}
    seen: dict[str, tuple[int, str]] = {}
    for name, want in shapes.items():
        if name not in declared:
            raise error(f"{where} names '{name}', which is not a model input{suggest(name, declared)}")
        dims = declared[name]
        if dims is None:
            continue
        if len(dims) != len(want):
            raise error(f"{where}: input '{name}' has rank {len(dims)} in the model {_model_shape(dims)} but "
                        f"{len(want)} dims were given {tuple(want)}; give one size per dim")
        for axis, (d, w) in enumerate(zip(dims, want)):
            if isinstance(d, int) and w == -1 and gear_dims:
                raise error(f"{where}: -1 marks dim {axis} of '{name}' as a gear dim, but that dim is static ({d}) "
                            f"in the model {_model_shape(dims)}; give {d} there (gears bind dynamic dims only)")
            if isinstance(d, int) and d != w:
                raise error(f"{where}: input '{name}' dim {axis} is {d} in the model but {w} was given; the model "
                            f"expects shape {_model_shape(dims)}")
            if isinstance(d, str) and w != -1:
                if d in seen and seen[d][0] != w:
                    raise error(f"{where}: dim '{d}' is {seen[d][0]} in {seen[d][1]} but {w} in {name}; give every "
                                f"input the same size for it")
                seen.setdefault(d, (w, name))


def bind_input_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], *, where: str = "input_shape",
                      error: type = ConfigError, check: bool = True) -> list:
    """Set every graph input's dims from ``shapes`` (in place), then check that shape inference gets through.

    ``check=False`` leaves that check (~4 ms on PP-OCRv4 det) to the caller: call
    ``check_inference(model, <the returned list>, shapes)`` unless the very same bound model was checked
    before (the compiler skips it on an exact compile-cache hit). Returns the inputs as declared (ValueInfoProto
    copies, before binding).

    Raises:
        ``error`` (ConfigError by default): see :func:`check_input_shapes`.
        ModelError: an input keeps a dynamic dim that ``shapes`` does not bind, or strict shape inference fails
        at a node (:func:`check_inference`, module docstring).
    """
    check_input_shapes(model, shapes, where=where, error=error)
    declared = [onnx.ValueInfoProto.FromString(vi.SerializeToString()) for vi in model.graph.input]
    for vi in model_inputs(model):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim)
        want = shapes.get(vi.name)
        if want is None:
            if not tt.HasField("shape") or not all(_static(d) for d in dims):
                raise ModelError(dynamic_dims_message(vi.name, declared_dims(vi), BIND_FIX))
            continue
        if any(not 0 <= int(w) <= MAX_DIM for w in want):
            raise error(f"{where}: input '{vi.name}' shape {tuple(want)} has a dim outside 0..{MAX_DIM}")
        tt.ClearField("shape")
        for w in want:
            tt.shape.dim.add().dim_value = int(w)
    if check:
        check_inference(model, declared, shapes)
    return declared


_NODE = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\): (.*)")


def _strict_inference_error(model: onnx.ModelProto) -> str | None:
    """The error text of strict ONNX shape inference (with data propagation), or None when it gets through.
    Failures that are not inference errors (a model over 2 GB, ...) count as getting through."""
    try:
        infer_light(model, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        return str(exc)
    except Exception:  # noqa: BLE001 - not a verdict on the shapes
        return None
    return None


def _untyped(model: onnx.ModelProto) -> set[str]:
    """Node outputs left without a type by the (non-strict) shape inference the compiler's infer_shapes pass
    runs: the tensors a failed inference would leave for the runtime to trip over."""
    try:
        inferred = infer_light(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - the pass falls back to the model as is
        inferred = model
    g = inferred.graph
    typed = {v.name for v in (*g.value_info, *g.input) if v.type.WhichOneof("value") is not None}
    typed |= {i.name for i in g.initializer} | {i.values.name for i in g.sparse_initializer}  # a sparse one's name
    return {o for node in g.node for o in node.output if o and o not in typed}


def check_inference(bound: onnx.ModelProto, declared_inputs: list, shapes: dict) -> None:
    """Raise ModelError when strict ONNX shape inference fails at a node whose outputs the compiler's
    (non-strict) inference then leaves untyped: the graph cannot take these shapes. The message says whether
    the bound ``shapes`` are the cause (the model's declared inputs ``declared_inputs`` get through) or the
    model's own shapes are inconsistent."""
    err = _strict_inference_error(bound)
    if err is None:
        return
    first = next((m for m in (_NODE.search(ln) for ln in err.splitlines()) if m), None)
    if first is None:
        return
    node = next((n for n in bound.graph.node if n.name == first.group(2)), None)
    if node is None or not set(node.output) & _untyped(bound):
        return
    reason = first.group(3).replace("[ShapeInferenceError] ", "").replace("[TypeInferenceError] ", "")
    at = f"at node '{node.name}' ({node.op_type}): {reason}"
    declared = onnx.ModelProto()
    declared.CopyFrom(bound)
    del declared.graph.input[:]
    declared.graph.input.extend(declared_inputs)
    if shapes and _strict_inference_error(declared) is None:
        given = ", ".join(f"{k}{tuple(v)}" for k, v in shapes.items())
        raise ModelError(f"shape inference fails for input shapes {given} {at}; the model cannot take these "
                         "shapes: check input_shape / the inputs against the model's inputs")
    raise ModelError(f"the model's shapes are inconsistent: ONNX shape inference fails {at}; re-export the model "
                     "(onnx.shape_inference.infer_shapes(model, strict_mode=True) shows the error)")


def raise_if_reference_fails(model: onnx.ModelProto, feeds: dict, exc: Exception) -> None:
    """After a kernel failed at run time (``exc``): when the FP32 onnxruntime reference cannot run ``feeds`` on
    ``model`` either, the inputs' shapes are ones the model cannot take (e.g. a Reshape to a fixed size that shape
    inference does not check): raise a one-line ModelError quoting onnxruntime. Otherwise return (the failure is
    npuscope's own; the caller re-raises ``exc``)."""
    try:
        ReferenceRunner(model, expose=False).run(feeds)
    except Exception as ref_exc:  # noqa: BLE001 - any onnxruntime failure is the verdict we look for
        reraise_if_terminated(ref_exc)
        raise cannot_run(feeds, getattr(ref_exc, "onnxruntime_error", ref_exc), type(exc).__name__) from None
